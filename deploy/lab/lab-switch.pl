#!/usr/bin/perl
#
# The lab fabric's switches: one process standing in for two leaf switches and the link
# between them (the trunk), for the VMs of `lab.sh up fabric`.
#
#   lab-switch.pl STATE_FILE SOCKET_DIR HOST:SWITCH...
#
# Each HOST gets a unix stream socket SOCKET_DIR/port-HOST.sock that its qemu connects to
# (-netdev stream, frames as a 4-byte big-endian length and the Ethernet frame). Frames go to
# the port their destination MAC was learned on, broadcast and unknown ones to every other
# port; between ports of different switches only while the trunk is up. SIGUSR1 cuts the
# trunk, SIGUSR2 restores it; STATE_FILE says "up" or "down" once a change is in effect.
#
# Writes block until the receiving qemu takes the frame, so the switch is as lossless as the
# socket between two qemus in two-host mode (rxe retransmits on any drop); qemu reads its
# socket without ever blocking on it, so a blocked write always ends.

use strict;
use warnings;
use IO::Select;
use IO::Socket::UNIX;
use Socket qw(SOCK_STREAM);

my ($state_file, $socket_dir, @port_specs) = @ARGV;
die "usage: lab-switch.pl STATE_FILE SOCKET_DIR HOST:SWITCH...\n" unless @port_specs;

$SIG{PIPE} = 'IGNORE';
my $trunk_up = 1;
my $trunk_changed = 1;
$SIG{USR1} = sub { $trunk_up = 0; $trunk_changed = 1 };
$SIG{USR2} = sub { $trunk_up = 1; $trunk_changed = 1 };
$SIG{TERM} = sub { exit 0 };

my (%switch_of, %listener_of, %connection_of, %pending_of, %port_of_fileno, %port_of_mac);
for my $spec (@port_specs) {
    my ($port, $switch) = $spec =~ /^([A-Za-z0-9]+):([A-Za-z0-9]+)$/ or die "bad port spec '$spec'\n";
    my $path = "$socket_dir/port-$port.sock";
    unlink $path;
    my $listener = IO::Socket::UNIX->new(Type => SOCK_STREAM, Local => $path, Listen => 1)
        or die "cannot listen on $path: $!\n";
    $switch_of{$port} = $switch;
    $listener_of{$port} = $listener;
}

sub write_state {
    my $tmp = "$state_file.tmp";
    open(my $fh, '>', $tmp) or die "cannot write $tmp: $!\n";
    print $fh $trunk_up ? "up\n" : "down\n";
    close $fh;
    rename $tmp, $state_file or die "cannot rename $tmp: $!\n";
}

sub disconnect {
    my ($port) = @_;
    my $connection = delete $connection_of{$port} or return;
    delete $port_of_fileno{fileno $connection};
    delete $pending_of{$port};
    close $connection;
}

sub linked {
    my ($from, $to) = @_;
    return $trunk_up || $switch_of{$from} eq $switch_of{$to};
}

sub send_frame {
    my ($port, $frame) = @_;
    my $connection = $connection_of{$port} or return;
    my $offset = 0;
    while ($offset < length $frame) {
        my $n = syswrite($connection, $frame, length($frame) - $offset, $offset);
        if (!defined $n) {
            next if $!{EINTR};
            disconnect($port);
            return;
        }
        $offset += $n;
    }
}

sub forward {
    my ($from, $frame) = @_;
    return if length $frame < 4 + 14;
    my $destination = substr($frame, 4, 6);
    my $source = substr($frame, 10, 6);
    $port_of_mac{$source} = $from unless ord($source) & 1;
    my $group = ord($destination) & 1;
    my @targets = !$group && exists $port_of_mac{$destination}
        ? ($port_of_mac{$destination})
        : grep { $_ ne $from } sort keys %switch_of;
    for my $to (@targets) {
        next if $to eq $from || !linked($from, $to);
        send_frame($to, $frame);
    }
}

sub receive {
    my ($port) = @_;
    my $connection = $connection_of{$port};
    my $n = sysread($connection, $pending_of{$port}, 65536, length $pending_of{$port});
    if (!defined $n) {
        return if $!{EINTR} || $!{EAGAIN};
        disconnect($port);
        return;
    }
    if ($n == 0) {
        disconnect($port);
        return;
    }
    while (length $pending_of{$port} >= 4) {
        my $size = unpack('N', $pending_of{$port});
        last if length $pending_of{$port} < 4 + $size;
        forward($port, substr($pending_of{$port}, 0, 4 + $size, ''));
        # The sender may have gone while we wrote to others.
        return unless exists $pending_of{$port};
    }
}

my %port_of_listener = map { fileno($listener_of{$_}) => $_ } keys %listener_of;
while (1) {
    if ($trunk_changed) {
        $trunk_changed = 0;
        write_state();
    }
    my $select = IO::Select->new(values %listener_of, values %connection_of);
    for my $ready ($select->can_read(1)) {
        my $fd = fileno $ready;
        if (defined(my $listening = $port_of_listener{$fd})) {
            my $connection = $ready->accept or next;
            disconnect($listening);
            $connection_of{$listening} = $connection;
            $pending_of{$listening} = '';
            $port_of_fileno{fileno $connection} = $listening;
        } elsif (defined(my $port = $port_of_fileno{$fd})) {
            receive($port);
        }
    }
}
