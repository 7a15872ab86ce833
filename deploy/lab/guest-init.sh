#!/bin/busybox sh
# shellcheck shell=sh
#
# /init of the Soft-RoCE lab initramfs (runs as PID 1 under busybox).
#
# Loads the modules listed in /etc/lab/modules, mounts the host root (9p,
# read-only, uncached reads), the host /usr over it (cached: the libraries every
# process loads) and the per-VM exchange share inside it, configures
# the lab network and the rxe device, reports readiness, then hands over to
# busybox init, which keeps the job agent running inside the chroot.
#
# Kernel command line parameters (set by lab.sh):
#   lab.host=A|B         host name inside the lab
#   lab.mode=one|two     one VM (rxe on dummy0) or two VMs (rxe on eth0)
#   lab.addr=IP/PREFIX   address of the RDMA netdev
#   lab.link_mac=MAC     MAC of the inter-VM NIC (two-host mode)
#   lab.mgmt_mac=MAC     MAC of the user-networking NIC (port forwarding)

/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /newroot
/bin/busybox --install -s

NEWROOT=/newroot
XCHG_IN_ROOT=/run/ibprobe-lab
XCHG=$NEWROOT$XCHG_IN_ROOT
MGMT_ADDR=10.0.2.15/24

log() { echo "lab-init: $*" >/dev/console; }

fail() {
    log "FATAL: $*"
    if grep -q " $XCHG 9p " /proc/mounts 2>/dev/null; then
        echo "$*" >"$XCHG/failed"
    fi
    echo "IBPROBE-LAB-FAILED: $*" >/dev/console
    sleep 1
    poweroff -f
}

cmdline_value() {
    # shellcheck disable=SC2013  # the command line is a list of words
    for word in $(cat /proc/cmdline); do
        case $word in
            "$1="*) echo "${word#*=}"; return 0 ;;
        esac
    done
    return 1
}

mount_early() {
    mount -t proc proc /proc
    mount -t sysfs sysfs /sys
    mount -t devtmpfs devtmpfs /dev
}

load_modules() {
    while read -r ko params; do
        [ -n "$ko" ] || continue
        # shellcheck disable=SC2086  # params is a word list by design
        insmod "/lib/modules/$ko" $params || fail "insmod $ko failed"
    done </etc/lab/modules
}

mount_root() {
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro,cache=mmap hostroot "$NEWROOT" \
        || fail "cannot mount the host root (9p tag hostroot)"
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro,cache=loose hostusr "$NEWROOT/usr" \
        || fail "cannot mount the host /usr (9p tag hostusr)"
    for dir in proc sys dev tmp run; do
        [ -d "$NEWROOT/$dir" ] || fail "host root has no /$dir"
    done
    mount -t proc proc "$NEWROOT/proc"
    mount -t sysfs sysfs "$NEWROOT/sys"
    mount -t devtmpfs devtmpfs "$NEWROOT/dev"
    mkdir -p "$NEWROOT/dev/pts" "$NEWROOT/dev/shm"
    mount -t devpts devpts "$NEWROOT/dev/pts"
    mount -t tmpfs -o mode=1777 tmpfs "$NEWROOT/dev/shm"
    # The host's /tmp stays visible (read-only, like the rest of the host root): a checkout or
    # build tree may live there. Jobs get their scratch space under /run (TMPDIR).
    mount -t tmpfs -o mode=755 tmpfs "$NEWROOT/run"
    mkdir -p -m 1777 "$NEWROOT/run/tmp"
    mkdir -p "$XCHG"
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 xchg "$XCHG" \
        || fail "cannot mount the exchange share (9p tag xchg)"
}

# Run a host tool (iproute2, rdma) inside the chroot.
host() { chroot "$NEWROOT" "$@"; }

netdev_by_mac() {
    for dev in /sys/class/net/*; do
        [ "$(cat "$dev/address")" = "$1" ] && { basename "$dev"; return 0; }
    done
    return 1
}

rename_netdev() { # MAC NEWNAME
    cur=$(netdev_by_mac "$1") || fail "no NIC with MAC $1"
    [ "$cur" = "$2" ] && return 0
    if [ -e "/sys/class/net/$2" ]; then
        host ip link set dev "$2" name "tmp-$2"
    fi
    host ip link set dev "$cur" name "$2" || fail "cannot rename $cur to $2"
}

wait_for_nics() {
    i=0
    while :; do
        ok=1
        for mac in "$@"; do netdev_by_mac "$mac" >/dev/null || ok=0; done
        [ $ok = 1 ] && return 0
        i=$((i + 1))
        [ $i -lt 100 ] || fail "NICs $* did not appear"
        sleep 0.1
    done
}

setup_network() {
    host ip link set lo up
    if [ "$MODE" = two ]; then
        wait_for_nics "$LINK_MAC" "$MGMT_MAC"
        rename_netdev "$LINK_MAC" eth0
        RDMA_NETDEV=eth0
    else
        wait_for_nics "$MGMT_MAC"
        host ip link add dummy0 type dummy || fail "cannot create dummy0"
        RDMA_NETDEV=dummy0
    fi
    rename_netdev "$MGMT_MAC" mgmt0
    host ip addr add "$ADDR" dev "$RDMA_NETDEV"
    host ip link set "$RDMA_NETDEV" up
    host ip addr add "$MGMT_ADDR" dev mgmt0
    host ip link set mgmt0 up
}

setup_rxe() {
    host rdma link add rxe0 type rxe netdev "$RDMA_NETDEV" \
        || fail "rdma link add rxe0 on $RDMA_NETDEV failed"
    state=/sys/class/infiniband/rxe0/ports/1/state
    i=0
    until grep -q ACTIVE "$state" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 100 ] || fail "rxe0 port did not become ACTIVE ($(cat "$state" 2>/dev/null))"
        sleep 0.1
    done
}

write_ready() {
    {
        echo "host=$LAB_HOST"
        echo "mode=$MODE"
        echo "addr=$ADDR"
        echo "netdev=$RDMA_NETDEV"
        echo "kernel=$(uname -r)"
        echo "uptime=$(cut -d' ' -f1 /proc/uptime)"
    } >"$XCHG/ready.tmp"
    mv "$XCHG/ready.tmp" "$XCHG/ready"
    echo "IBPROBE-LAB-READY host=$LAB_HOST" >/dev/console
}

write_inittab() {
    cat >/etc/inittab <<EOF
::respawn:/bin/busybox chroot $NEWROOT /bin/bash $XCHG_IN_ROOT/agent.sh $XCHG_IN_ROOT
::ctrlaltdel:/bin/busybox poweroff -f
EOF
}

mount_early
LAB_HOST=$(cmdline_value lab.host) || LAB_HOST=A
MODE=$(cmdline_value lab.mode) || MODE=one
ADDR=$(cmdline_value lab.addr) || ADDR=10.99.0.1/24
LINK_MAC=$(cmdline_value lab.link_mac) || LINK_MAC=
MGMT_MAC=$(cmdline_value lab.mgmt_mac) || fail "lab.mgmt_mac missing on the kernel command line"
hostname "ibprobe-lab-$(echo "$LAB_HOST" | tr 'AB' 'ab')"

load_modules
mount_root
setup_network
setup_rxe
[ -f "$XCHG/agent.sh" ] || fail "agent.sh missing in the exchange share"
write_inittab
write_ready
exec /bin/busybox init
