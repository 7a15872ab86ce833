#!/bin/bash
#
# Every option a probe accepts is applied, and its defaults are perftest's effective ones, shown
# by what only the applied option can produce:
# - post_list: the number of ibv_post_send calls, counted by the kernel as rxe's doorbell writes
#   on the uverbs file (strace), is iterations / post_list, against iterations without a list;
# - CQ moderation: a completion per message above 8 KiB unless -Q is given (perftest's rule),
#   one per 100 below it;
# - inline size, relaxed ordering, outstanding reads: what both sides used, the read depth
#   against what ib_read_bw reports on the same devices;
# - GID index and NUMA node per side: the responder's own choice reaches only the responder;
# - latency in duration mode (-D): perftest's average and round trips per second;
# - the lane: with --tclass 106 every RoCE v2 packet on the lab link (UDP 4791, captured on the
#   host side of VM A's NIC), the initiator's and the responder's ACKs alike, carries IPv4 TOS
#   106, and 0 without it; an SL out of range and a P_Key index the port lacks are refused before
#   anything is allocated;
# - the transport and the atomics, by the BTH opcodes on the same link: -t atomic_bw sends one
#   FETCH_ADD request per message (CMP_SWAP with -A CMP_AND_SWAP), each answered by an ATOMIC
#   ACKNOWLEDGE, and a validating run reads its targets back with one RDMA READ; -c UC sends UC
#   SEND_ONLY / RDMA_WRITE_ONLY packets that the responder acknowledges with nothing, where RC's
#   are answered with ACKs; -c UD sends one UD SEND_ONLY datagram per message, its size cut to
#   the path MTU as perftest cuts it.
# - the receive depth over UC and UD: a send run of 1000 messages posts 1000 receives before the
#   first arrives, as ib_send_bw's RX depth says perftest does; the responder, frozen from the
#   first datagram on, still receives them all (rxe's rdma_recvs), and only 512 + those before the
#   freeze with --rx-depth 512.
# - rdma_cm (-R): the connection manager's REQ, REP and RTU, one each per QP, counted by both
#   ports' CM message counters (and none for a run without -R); its MADs on the link (RoCE v2
#   packets to QP 1); the traffic class routed by: with --tclass 106 every data packet and ACK
#   carries TOS 106; an address that is not on the RDMA device refused with the reason, where
#   the QP exchange connects through it; the knobs the CM decides (-S) refused.
# - rdma_cm over UD (-c UD -R), as perftest: one SIDR_REQ and SIDR_REP per QP, by the CM counters
#   and on the link, datagrams with the TOS routed by, send_lat's round trips; UC refused.
#
# Environment: see lab-common.sh; IBPROBE_PROBE is the ibprobe_probe binary.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

PROBE=${IBPROBE_PROBE:?set IBPROBE_PROBE to the ibprobe_probe binary}
RESPONDER_PORT=18600

field() { # OUTPUT NAME
    sed -n "s/.*\b$2=\(-\?[0-9.]*\).*/\1/p" <<<"$1" | head -n1
}

expect_field() { # OUTPUT NAME VALUE WHAT
    local value
    value=$(field "$1" "$2")
    [[ $value == "$3" ]] || fail "$4: $2=$value, expected $3: $1"
}

run_probe() { # ARGS...
    lab exec --timeout 120 B -- "$PROBE" run -d rxe0 -u "$LAB_QP_TIMEOUT" "$@" \
        "$(lab addr A):$RESPONDER_PORT"
}

# rxe rings its doorbell with one 32-byte IB_USER_VERBS_CMD_POST_SEND (28, octal \34) write per
# ibv_post_send call: the kernel's count of post calls, independent of the probe's own.
doorbells_of() { # ARGS...
    lab exec --timeout 120 B -- sh -c "strace -f -qq -e trace=write -o /run/probe-trace \
        $PROBE run -d rxe0 -u $LAB_QP_TIMEOUT $* $(lab addr A):$RESPONDER_PORT > /run/probe-out \
        && grep -c 'write([0-9]*, \"\\\\34\\\\0\\\\0\\\\0' /run/probe-trace; cat /run/probe-out"
}

check_post_list() {
    local out doorbells
    out=$(doorbells_of -t write_bw -n 2000 -s 4096 -l 10) || fail "post list run failed: $out"
    doorbells=$(head -n1 <<<"$out")
    expect_field "$out" post_calls 200 "post list of 10 over 2000 messages"
    ((doorbells == 200)) || fail "post list of 10: the kernel saw $doorbells post calls: $out"
    # Without -Q a post list sets the CQ moderation to its size (perftest).
    expect_field "$out" cq_moderation 10 "post list of 10"
    expect_field "$out" completions 200 "post list of 10"
    positive_number "$(field "$out" bw_average_MiBps)" || fail "no bandwidth with a post list: $out"
    note "post list 10: $doorbells doorbell writes for 2000 messages, $(grep -o 'bw_average_MiBps=[0-9.]*' <<<"$out")"
    out=$(doorbells_of -t write_bw -n 2000 -s 4096) || fail "plain run failed: $out"
    doorbells=$(head -n1 <<<"$out")
    ((doorbells == 2000)) || fail "without a post list the kernel saw $doorbells post calls: $out"
    note "no post list: $doorbells doorbell writes for 2000 messages"
}

check_cq_moderation() {
    local out
    out=$(run_probe -t write_bw -n 1000) || fail "write_bw failed: $out"
    expect_field "$out" cq_moderation 1 "64 KiB without -Q"
    expect_field "$out" completions 1000 "64 KiB without -Q"
    out=$(run_probe -t write_bw -n 1000 -s 4096) || fail "write_bw 4 KiB failed: $out"
    expect_field "$out" cq_moderation 100 "4 KiB without -Q"
    expect_field "$out" completions 10 "4 KiB without -Q"
    out=$(run_probe -t write_bw -n 1000 -Q 50) || fail "write_bw -Q 50 failed: $out"
    expect_field "$out" cq_moderation 50 "64 KiB with -Q 50"
    expect_field "$out" completions 20 "64 KiB with -Q 50"
    note "CQ moderation: 1000 completions at 64 KiB, 10 at 4 KiB, 20 with -Q 50"
}

check_device_defaults() {
    local out perftest theirs
    out=$(run_probe -t write_lat -n 200) || fail "write_lat failed: $out"
    # rxe is not in perftest's device table: it inlines nothing there.
    expect_field "$out" inline_size 0 "write_lat on rxe"
    expect_field "$out" peer_inline_size 0 "write_lat on rxe (responder)"
    expect_field "$out" relaxed_ordering 1 "buffers"
    expect_field "$out" peer_relaxed_ordering 1 "responder's buffers"
    out=$(run_probe -t write_lat -n 200 -I 2) || fail "write_lat -I 2 failed: $out"
    expect_field "$out" inline_size 2 "write_lat -I 2"
    expect_field "$out" peer_inline_size 2 "write_lat -I 2 (responder)"
    out=$(run_probe -t read_bw -n 200) || fail "read_bw failed: $out"
    perftest=$(lab_perftest_pair A B ib_read_bw -n 200)
    theirs=$(sed -n 's/.*Outstand reads *: *\([0-9]*\).*/\1/p' <<<"$perftest")
    [[ -n $theirs ]] || fail "no outstanding reads in ib_read_bw's output: $perftest"
    expect_field "$out" outstanding_reads "$theirs" "read depth against ib_read_bw"
    note "inline 0 on rxe (2 with -I 2), relaxed ordering on both sides, $theirs reads in flight as ib_read_bw"
}

check_per_side_choices() {
    local out rc=0 gid_a gid_b
    gid_a=$(lab gid A)
    gid_b=$(lab gid B)
    out=$(run_probe -t write_bw -n 100 -x "$gid_b" --peer-gid-index "$gid_a" --peer-numa 0) \
        || fail "per-side GID and NUMA failed: $out"
    expect_field "$out" gid_index "$gid_b" "this side's -x"
    expect_field "$out" peer_gid_index "$gid_a" "--peer-gid-index"
    expect_field "$out" peer_numa_node 0 "--peer-numa 0"
    expect_field "$out" numa_node -1 "this side's NUMA (auto: rxe has no node)"
    out=$(run_probe -t write_bw -n 100 --peer-gid-index 200 2>&1) || rc=$?
    ((rc != 0)) || fail "a responder GID index of 200 was accepted: $out"
    grep -qi 'gid' <<<"$out" || fail "GID index 200 refused without the reason: $out"
    grep -q 'responder\|peer\|10.99.0.1' <<<"$out" || fail "the refusal does not say it is the responder's: $out"
    rc=0
    out=$(run_probe -t write_bw -n 100 --peer-numa 7 2>&1) || rc=$?
    ((rc != 0)) || fail "a responder NUMA node 7 was accepted on a one-node VM: $out"
    grep -q 'NUMA node 7 does not exist' <<<"$out" || fail "--peer-numa 7 refused without the reason: $out"
    note "per side: -x $gid_b here, $gid_a at the responder; --peer-numa 7 refused by the responder: $out"
}

# Latency in duration mode, as perftest's -D: the average and the round trips per second of the
# window between the margins; t_avg is half a round trip for write, so the two agree.
check_latency_duration() {
    local out avg tps
    out=$(run_probe -t write_lat -D 5) || fail "write_lat -D 5 failed: $out"
    avg=$(field "$out" t_avg_usec)
    tps=$(field "$out" transactions_per_second)
    positive_number "$avg" && positive_number "$tps" || fail "write_lat -D 5 without figures: $out"
    positive_number "$(field "$out" iterations)" || fail "write_lat -D 5 counted no round trip: $out"
    python3 -c "import sys; sys.exit(0 if abs($tps * 2 * $avg / 1e6 - 1) < 0.01 else 1)" \
        || fail "write_lat -D 5: $tps round trips/s disagree with t_avg $avg us: $out"
    note "write_lat -D 5: t_avg $avg us, $tps round trips/s"
}

# "SRC TOS DEST_QP OPCODE CM_ATTRIBUTE COUNT" for each source address, IPv4 TOS byte, BTH
# destination QP, BTH opcode and, for a CM MAD (to QP 1, management class 7), its attribute ID
# ("-" for any other packet) of the IPv4 UDP packets to port 4791 (RoCE v2) in a pcap file
# (Ethernet frames, as QEMU's filter-dump writes them).
roce_packets() { # PCAP
    python3 - "$1" <<'PY'
import collections, struct, sys
data = open(sys.argv[1], "rb").read()
order = "<" if struct.unpack_from("<I", data)[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
counts = collections.Counter()
offset = 24
while offset + 16 <= len(data):
    caplen = struct.unpack_from(order + "IIII", data, offset)[2]
    frame = data[offset + 16:offset + 16 + caplen]
    offset += 16 + caplen
    if len(frame) < 14 + 20 + 8 + 12 or frame[12:14] != b"\x08\x00":
        continue
    ip = frame[14:]
    header = (ip[0] & 0x0F) * 4
    if ip[9] != 17 or struct.unpack_from(">H", ip, header + 2)[0] != 4791:
        continue
    bth = ip[header + 8:]
    dest_qp = int.from_bytes(bth[5:8], "big")
    mad = bth[12 + 8:] if dest_qp == 1 else b""  # behind the BTH and the DETH
    attribute = "0x%02x" % struct.unpack_from(">H", mad, 16)[0] if len(mad) >= 18 and mad[1] == 7 else "-"
    counts[(".".join(map(str, ip[12:16])), ip[1], dest_qp, bth[0], attribute)] += 1
for key, n in sorted(counts.items()):
    print(*key, n)
PY
}

# roce_packets' counts by SRC and one other column (2: TOS, 4: opcode), summed over the rest.
roce_counts_by() { # PCAP COLUMN
    roce_packets "$1" | awk -v c="$2" '{ n[$1 " " $c] += $6 } END { for (k in n) print k, n[k] }' | sort
}

# "SRC TOS COUNT" of the RoCE v2 packets in a pcap file.
roce_tos_counts() { # PCAP
    roce_counts_by "$1" 2
}

# Packets from SRC in COUNTS (roce_tos_counts' output) whose TOS is (==) or is not (!=) TOS; 0
# when none.
tos_count() { # COUNTS SRC ==|!= TOS
    awk -v src="$2" -v op="$3" -v tos="$4" '$1 == src && (($2 == tos) == (op == "==")) { n += $3 } END { print n + 0 }' <<<"$1"
}

# "SRC OPCODE COUNT" of the RoCE v2 packets in a pcap file.
roce_opcode_counts() { # PCAP
    roce_counts_by "$1" 4
}

# Packets from SRC with OPCODE in COUNTS (roce_opcode_counts' output), 0 when none.
opcode_count() { # COUNTS SRC OPCODE
    awk -v src="$2" -v op="$3" '$1 == src && $2 == op { n += $3 } END { print n + 0 }' <<<"$1"
}

# Packets from SRC in COUNTS, any opcode.
packets_from() { # COUNTS SRC
    awk -v src="$2" '$1 == src { n += $3 } END { print n + 0 }' <<<"$1"
}

# One run, by RUNNER (run_probe, run_unreliable) with ARGS, captured into PCAP.
captured_by() { # PCAP RUNNER ARGS...
    local pcap=$1 runner=$2 out
    shift 2
    lab capture A start "$pcap" >/dev/null || fail "cannot start the capture on VM A's NIC"
    out=$("$runner" "$@") || { lab capture A stop >/dev/null; fail "probe $* failed: $out"; }
    lab capture A stop >/dev/null || fail "cannot stop the capture on VM A's NIC"
    printf '%s\n' "$out"
}

captured_run() { # PCAP ARGS...
    captured_by "$1" run_probe "${@:2}"
}

check_lane() {
    local dir out counts addr_a addr_b rc=0 which
    dir=$(mktemp -d)
    addr_a=$(lab addr A)
    addr_b=$(lab addr B)
    out=$(captured_run "$dir/tclass.pcap" -t write_bw -n 200 --tclass 106) || exit 1
    grep -q '^lane sl=0 traffic_class=106 pkey_index=0$' <<<"$out" || fail "the run does not report its lane: $out"
    counts=$(roce_tos_counts "$dir/tclass.pcap")
    for which in "initiator (B) $addr_b" "responder (A) $addr_a"; do
        local src=${which##* }
        (($(tos_count "$counts" "$src" == 106) > 0)) || fail "--tclass 106: no RoCE v2 packet from the $which with TOS 106: $counts"
        (($(tos_count "$counts" "$src" != 106) == 0)) || fail "--tclass 106: packets from the $which with another TOS: $counts"
    done
    note "--tclass 106: RoCE v2 packets (source TOS count): $(tr '\n' ';' <<<"$counts")"
    # Which priority the lane moved on is not to be read here: virtio_net counts nothing by
    # priority (its ethtool -S is per queue), and the run says it has no such counter.
    local host stats
    for host in A B; do
        stats=$(lab exec --timeout 60 "$host" -- ethtool -S eth0) || fail "ethtool -S eth0 in VM $host: $stats"
        grep -qE '^ *[a-z_.]*(prio|pri|priority_)[0-7](_[a-z_.]*)?: ' <<<"$stats" \
            && fail "VM $host's eth0 counts by priority, which this check assumes it does not: $stats"
    done
    grep -q '^priority_counters local=0 peer=0$' <<<"$out" \
        || fail "--tclass 106 over virtio_net: per-priority counters are not reported as absent: $out"
    note "--tclass 106: $(grep '^priority_counters' <<<"$out") (virtio_net's ethtool -S has $(grep -c ': ' <<<"$stats") statistics, none per priority)"
    out=$(captured_run "$dir/default.pcap" -t write_bw -n 200) || exit 1
    grep -q '^lane sl=0 traffic_class=0 pkey_index=0$' <<<"$out" || fail "the default lane is not reported: $out"
    counts=$(roce_tos_counts "$dir/default.pcap")
    for src in "$addr_b" "$addr_a"; do
        (($(tos_count "$counts" "$src" == 0) > 0)) || fail "default lane: no RoCE v2 packet from $src with TOS 0: $counts"
        (($(tos_count "$counts" "$src" != 0) == 0)) || fail "default lane: packets from $src with a TOS other than 0: $counts"
    done
    note "default lane: RoCE v2 packets (source TOS count): $(tr '\n' ';' <<<"$counts")"
    rm -rf "$dir"
    # Refused as bad arguments (exit 2) before anything is allocated or the peer is contacted.
    out=$(run_probe -t write_bw -n 200 -S 16 2>&1) || rc=$?
    ((rc == 2)) || fail "-S 16: exit $rc, expected 2: $out"
    grep -q 'sl=16: a service level is 0..15' <<<"$out" || fail "-S 16 refused without the reason: $out"
    rc=0
    out=$(run_probe -t write_bw -n 200 --pkey_index 5 2>&1) || rc=$?
    ((rc == 2)) || fail "--pkey_index 5: exit $rc, expected 2: $out"
    grep -q "rxe0 port 1: pkey_index=5: the port's P_Key table has" <<<"$out" \
        || fail "--pkey_index 5 refused without the reason: $out"
    local pkey_refusal=$out
    rc=0
    out=$(run_probe -t write_bw -n 200 --dlid 5 2>&1) || rc=$?
    ((rc == 2)) || fail "--dlid 5: exit $rc, expected 2: $out"
    grep -q "rxe0 port 1: dlid=5: the port's link layer is Ethernet (RoCE)" <<<"$out" \
        || fail "--dlid 5 refused without the reason: $out"
    [[ -z $(lab_probe_resources B) ]] || fail "refused lanes left resources: $(lab_probe_resources B)"
    note "refused: -S 16, --pkey_index 5 ($pkey_refusal) and --dlid 5 ($out)"
}

# "SRC KIND TOS COUNT" of the RoCE v2 packets in a pcap file: KIND cm for the connection
# manager's MADs (BTH destination QP 1), data for the rest.
roce_cm_counts() { # PCAP
    roce_packets "$1" | awk '{ n[$1 " " ($3 == 1 ? "cm" : "data") " " $2] += $6 } END { for (k in n) print k, n[k] }' | sort
}

# "REQ REP RTU" messages a VM's rxe0 port sent (tx) or received (rx), by its CM counters.
cm_messages() { # A|B tx|rx
    lab exec --timeout 60 "$1" -- sh -c "cd /sys/class/infiniband/rxe0/ports/1/cm_$2_msgs && \
        echo \$(cat req) \$(cat rep) \$(cat rtu)"
}

# "SIDR_REQ SIDR_REP REQ" messages a VM's rxe0 port sent (tx) or received (rx).
sidr_messages() { # A|B tx|rx
    lab exec --timeout 60 "$1" -- sh -c "cd /sys/class/infiniband/rxe0/ports/1/cm_$2_msgs && \
        echo \$(cat sidr_req) \$(cat sidr_rep) \$(cat req)"
}

# The difference of two readings of three counters.
cm_delta() { # BEFORE AFTER
    local -a before after
    read -ra before <<<"$1"
    read -ra after <<<"$2"
    echo "$((after[0] - before[0])) $((after[1] - before[1])) $((after[2] - before[2]))"
}

# "SRC ATTRIBUTE COUNT" of the CM MADs (RoCE v2 to QP 1, management class 7) in a pcap file, by
# MAD attribute ID: 0x10 REQ, 0x13 REP, 0x14 RTU, 0x17 SIDR_REQ, 0x18 SIDR_REP.
cm_mad_attributes() { # PCAP
    roce_packets "$1" | awk '$5 != "-" { n[$1 " " $5] += $6 } END { for (k in n) print k, n[k] }' | sort
}

# UD over rdma_cm, as perftest -c UD -R: each QP is reached by a SIDR exchange (a SIDR_REQ from
# the initiator, a SIDR_REP with the responder's QP number and Q_Key), counted by both ports' CM
# counters and seen on the link as CM MADs, with no REQ/REP/RTU; the datagrams then go with the
# TOS the CM routes by. UC with -R stays refused, as perftest refuses it.
check_rdma_cm_datagrams() {
    local dir out counts mads a b a_rx a_tx b_rx b_tx rc=0
    dir=$(mktemp -d)
    a=$(lab addr A)
    b=$(lab addr B)
    a_rx=$(sidr_messages A rx) a_tx=$(sidr_messages A tx) b_rx=$(sidr_messages B rx) b_tx=$(sidr_messages B tx)
    out=$(captured_unreliable_run "$dir/ud-cm.pcap" -t send_bw -c UD -n 200 -q 2 -R --tclass 106) || exit 1
    grep -q '^probe send_bw .* connection=UD connected_by=rdma_cm$' <<<"$out" || fail "-c UD -R: not connected by rdma_cm: $out"
    grep -q '^lane sl=0 traffic_class=106 pkey_index=0$' <<<"$out" || fail "-c UD -R --tclass 106: lane not reported: $out"
    grep -q '^delivery sent=400 received=400 lost=0$' <<<"$out" || fail "-c UD -R -q 2 -n 200: not every datagram received: $out"
    # SIDR_REQ SIDR_REP REQ: one SIDR exchange per QP, and no connection of RC's kind.
    [[ $(cm_delta "$b_tx" "$(sidr_messages B tx)") == "2 0 0" ]] || fail "-c UD -R -q 2: initiator's CM tx (SIDR_REQ SIDR_REP REQ) moved by $(cm_delta "$b_tx" "$(sidr_messages B tx)"), expected 2 0 0"
    [[ $(cm_delta "$a_rx" "$(sidr_messages A rx)") == "2 0 0" ]] || fail "-c UD -R -q 2: responder's CM rx moved by $(cm_delta "$a_rx" "$(sidr_messages A rx)"), expected 2 0 0"
    [[ $(cm_delta "$a_tx" "$(sidr_messages A tx)") == "0 2 0" ]] || fail "-c UD -R -q 2: responder's CM tx moved by $(cm_delta "$a_tx" "$(sidr_messages A tx)"), expected 0 2 0"
    [[ $(cm_delta "$b_rx" "$(sidr_messages B rx)") == "0 2 0" ]] || fail "-c UD -R -q 2: initiator's CM rx moved by $(cm_delta "$b_rx" "$(sidr_messages B rx)"), expected 0 2 0"
    mads=$(cm_mad_attributes "$dir/ud-cm.pcap")
    awk -v b="$b" '$1 == b && $2 == "0x17" { n += $3 } END { exit !(n >= 2) }' <<<"$mads" || fail "-c UD -R -q 2: fewer than 2 SIDR_REQ MADs from B on the link: $mads"
    awk -v a="$a" '$1 == a && $2 == "0x18" { n += $3 } END { exit !(n >= 2) }' <<<"$mads" || fail "-c UD -R -q 2: fewer than 2 SIDR_REP MADs from A on the link: $mads"
    awk '$2 != "0x17" && $2 != "0x18" { exit 1 }' <<<"$mads" || fail "-c UD -R: CM MADs other than SIDR on the link: $mads"
    counts=$(roce_packets "$dir/ud-cm.pcap")
    # UD SEND_ONLY (100) datagrams from B to the probe's QPs (not the CM's QP 1), every one with
    # TOS 106.
    awk -v b="$b" '$1 == b && $3 != 1 && $4 == 100 { n += $6; if ($2 != 106) bad += $6 } END { exit !(n == 400 && bad == 0) }' <<<"$counts" \
        || fail "-c UD -R --tclass 106: not 400 UD datagrams from B, all with TOS 106: $counts"
    note "send_bw -c UD -R -q 2 --tclass 106: CM MADs (source attribute count) $(tr '\n' ';' <<<"$mads") SIDR_REQ/SIDR_REP 2/2 on both ports; $(grep '^delivery' <<<"$out")"
    rm -rf "$dir"
    out=$(run_unreliable -t send_lat -c UD -n 200 -R) || fail "send_lat -c UD -R failed: $out"
    grep -q '^probe send_lat .* connection=UD connected_by=rdma_cm$' <<<"$out" || fail "send_lat -c UD -R: not connected by rdma_cm: $out"
    positive_number "$(field "$out" t_typical_usec)" || fail "send_lat -c UD -R measured no round trip: $out"
    positive_number "$(field "$out" samples)" || fail "send_lat -c UD -R: no samples: $out"
    note "send_lat -c UD -R: $(grep -o 't_typical_usec=[0-9.]* .*samples=[0-9]*' <<<"$out")"
    out=$(run_unreliable -t send_bw -c UC -n 200 -R 2>&1) || rc=$?
    ((rc == 2)) || fail "-c UC -R: exit $rc, expected 2: $out"
    grep -q 'rdma_cm over UC: .*perftest: UC is not supported in librdmacm' <<<"$out" || fail "-c UC -R refused without the reason: $out"
    [[ -z $(lab_probe_resources B) ]] || fail "UD over rdma_cm left resources: $(lab_probe_resources B)"
}

check_rdma_cm() {
    local dir out counts a b a_rx b_tx a_tx b_rx rc=0
    dir=$(mktemp -d)
    a=$(lab addr A)
    b=$(lab addr B)
    a_rx=$(cm_messages A rx) a_tx=$(cm_messages A tx) b_rx=$(cm_messages B rx) b_tx=$(cm_messages B tx)
    out=$(run_probe -t write_bw -n 200 -q 3) || fail "write_bw -q 3 failed: $out"
    grep -q ' connected_by=qp_exchange$' <<<"$out" || fail "a plain run does not say it exchanged QP numbers: $out"
    [[ $(cm_delta "$a_rx" "$(cm_messages A rx)") == "0 0 0" ]] || fail "a run without -R moved the responder's CM counters"
    a_rx=$(cm_messages A rx)
    out=$(captured_run "$dir/cm.pcap" -t write_bw -n 200 -q 3 -R --tclass 106) || exit 1
    grep -q ' connected_by=rdma_cm$' <<<"$out" || fail "-R: the run does not say the CM connected it: $out"
    grep -q '^lane sl=0 traffic_class=106 pkey_index=0$' <<<"$out" || fail "-R --tclass 106: lane not reported: $out"
    expect_field "$out" messages 600 "-R -q 3 -n 200"
    # The responder received a REQ and the RTU for each QP and answered each with a REP; the
    # initiator's counters mirror it.
    [[ $(cm_delta "$a_rx" "$(cm_messages A rx)") == "3 0 3" ]] || fail "-R -q 3: responder's CM rx (REQ REP RTU) moved by $(cm_delta "$a_rx" "$(cm_messages A rx)"), expected 3 0 3"
    [[ $(cm_delta "$a_tx" "$(cm_messages A tx)") == "0 3 0" ]] || fail "-R -q 3: responder's CM tx moved by $(cm_delta "$a_tx" "$(cm_messages A tx)"), expected 0 3 0"
    [[ $(cm_delta "$b_tx" "$(cm_messages B tx)") == "3 0 3" ]] || fail "-R -q 3: initiator's CM tx moved by $(cm_delta "$b_tx" "$(cm_messages B tx)"), expected 3 0 3"
    [[ $(cm_delta "$b_rx" "$(cm_messages B rx)") == "0 3 0" ]] || fail "-R -q 3: initiator's CM rx moved by $(cm_delta "$b_rx" "$(cm_messages B rx)"), expected 0 3 0"
    counts=$(roce_cm_counts "$dir/cm.pcap")
    for src in "$b" "$a"; do
        awk -v s="$src" '$1 == s && $2 == "cm" { n += $4 } END { exit !(n >= 3) }' <<<"$counts" \
            || fail "-R: fewer than 3 CM MADs from $src on the link: $counts"
        awk -v s="$src" '$1 == s && $2 == "data" && $3 == 106 { n += $4 } END { exit !(n > 0) }' <<<"$counts" \
            || fail "-R --tclass 106: no data packet from $src with TOS 106: $counts"
        awk -v s="$src" '$1 == s && $2 == "data" && $3 != 106 { n += $4 } END { exit !(n == 0) }' <<<"$counts" \
            || fail "-R --tclass 106: data packets from $src with another TOS: $counts"
    done
    note "-R -q 3 --tclass 106: CM REQ/REP/RTU 3/3/3 on both ports; packets (source kind TOS count): $(tr '\n' ';' <<<"$counts")"
    rm -rf "$dir"
    # The responder's own management address is not on rxe0: the QP exchange connects through
    # it, the connection manager cannot.
    lab spawn --name mgmt-responder B -- "$PROBE" serve -d rxe0 --listen ":$((RESPONDER_PORT + 1))" >/dev/null
    lab_wait_listen B "$((RESPONDER_PORT + 1))"
    local mgmt
    mgmt=$(lab exec B -- ip -4 -o addr show dev mgmt0 | awk '{ sub("/.*", "", $4); print $4 }')
    out=$(lab exec --timeout 120 B -- "$PROBE" run -d rxe0 -t write_bw -n 100 "$mgmt:$((RESPONDER_PORT + 1))") \
        || fail "the QP exchange through the management address $mgmt failed: $out"
    out=$(lab exec --timeout 120 B -- "$PROBE" run -d rxe0 -t write_bw -n 100 -R "$mgmt:$((RESPONDER_PORT + 1))" 2>&1) && fail "-R through $mgmt ran: $out"
    grep -q "rdma_cm cannot listen at $mgmt:0: No such device (with rdma_cm the initiator must name this host by an address of its RDMA device" <<<"$out" \
        || fail "-R through $mgmt refused without the reason: $out"
    lab kill B mgmt-responder >/dev/null
    [[ -z $(lab_probe_resources B) ]] || fail "the refused rdma_cm run left resources: $(lab_probe_resources B)"
    out=$(run_probe -t write_bw -n 100 -R -S 3 2>&1) || rc=$?
    ((rc == 2)) || fail "-R -S 3: exit $rc, expected 2: $out"
    grep -q 'sl=3 with rdma_cm: the SL is the path' <<<"$out" || fail "-R -S 3 refused without the reason: $out"
    note "-R refused through the management address ($mgmt) and with -S 3"
}

# A run over UC or UD (-c in ARGS), which take none of the RC knobs run_probe gives.
run_unreliable() { # ARGS...
    lab exec --timeout 120 B -- "$PROBE" run -d rxe0 "$@" "$(lab addr A):$RESPONDER_PORT"
}

captured_unreliable_run() { # PCAP ARGS...
    captured_by "$1" run_unreliable "${@:2}"
}

# IBA opcodes (RC 0x00.., UC 0x20..): SEND_ONLY 4, RDMA_WRITE_ONLY 10, RDMA_READ_REQUEST 12,
# ACKNOWLEDGE 17, ATOMIC_ACKNOWLEDGE 18, COMPARE_SWAP 19, FETCH_ADD 20; UC SEND_ONLY 36, UC
# RDMA_WRITE_ONLY 42; UD SEND_ONLY 100. 1024-byte messages are one packet each at the lab's MTU.
check_transport() {
    local dir out counts a b
    dir=$(mktemp -d)
    a=$(lab addr A)
    b=$(lab addr B)
    out=$(captured_run "$dir/faa.pcap" -t atomic_bw -n 200) || exit 1
    grep -q '^probe atomic_bw .* size=8 .*atomic_type=FETCH_AND_ADD connected_by=qp_exchange$' <<<"$out" || fail "atomic_bw does not report its type: $out"
    counts=$(roce_opcode_counts "$dir/faa.pcap")
    (($(opcode_count "$counts" "$b" 20) == 200)) || fail "atomic_bw -n 200: not 200 FETCH_ADD requests from B: $counts"
    (($(packets_from "$counts" "$b") == 200)) || fail "atomic_bw -n 200: B sent more than its 200 atomics: $counts"
    (($(opcode_count "$counts" "$a" 18) == 200)) || fail "atomic_bw -n 200: not 200 ATOMIC ACKNOWLEDGEs from A: $counts"
    note "atomic_bw FETCH_AND_ADD: (source opcode count) $(tr '\n' ';' <<<"$counts")"
    out=$(captured_run "$dir/cas.pcap" -t atomic_bw -n 200 -A CMP_AND_SWAP --validate) || exit 1
    grep -q '^validation sent=200 received=200 checked=200 errors=0 ' <<<"$out" || fail "validating CMP_AND_SWAP: $out"
    counts=$(roce_opcode_counts "$dir/cas.pcap")
    (($(opcode_count "$counts" "$b" 19) == 200)) || fail "-A CMP_AND_SWAP: not 200 COMPARE_SWAP requests from B: $counts"
    (($(opcode_count "$counts" "$b" 20) == 0)) || fail "-A CMP_AND_SWAP sent FETCH_ADDs: $counts"
    (($(opcode_count "$counts" "$b" 12) == 1)) || fail "the validating run did not read its targets back with one RDMA READ: $counts"
    note "atomic_bw CMP_AND_SWAP --validate: $(tr '\n' ';' <<<"$counts")"
    out=$(captured_unreliable_run "$dir/uc-send.pcap" -t send_bw -n 200 -s 1024 -c UC) || exit 1
    grep -q '^probe send_bw .* connection=UC connected_by=qp_exchange$' <<<"$out" || fail "the UC run does not report its connection: $out"
    grep -q '^delivery sent=200 ' <<<"$out" || fail "the UC send reports no delivery: $out"
    counts=$(roce_opcode_counts "$dir/uc-send.pcap")
    (($(opcode_count "$counts" "$b" 36) == 200)) || fail "-c UC send_bw: not 200 UC SEND_ONLY packets from B: $counts"
    (($(packets_from "$counts" "$a") == 0)) || fail "-c UC: the responder answered UC packets: $counts"
    note "send_bw -c UC: $(tr '\n' ';' <<<"$counts"); $(grep '^delivery' <<<"$out")"
    out=$(captured_unreliable_run "$dir/uc-write.pcap" -t write_bw -n 200 -s 1024 -c UC) || exit 1
    counts=$(roce_opcode_counts "$dir/uc-write.pcap")
    (($(opcode_count "$counts" "$b" 42) == 200)) || fail "-c UC write_bw: not 200 UC RDMA_WRITE_ONLY packets from B: $counts"
    (($(packets_from "$counts" "$a") == 0)) || fail "-c UC write: the responder answered UC packets: $counts"
    note "write_bw -c UC: $(tr '\n' ';' <<<"$counts")"
    # UD: perftest's 64 KiB default cut to the path MTU (1024 here), one datagram each.
    out=$(captured_unreliable_run "$dir/ud-send.pcap" -t send_bw -n 200 -c UD) || exit 1
    grep -q '^probe send_bw .* size=1024 .* connection=UD connected_by=qp_exchange$' <<<"$out" || fail "-c UD: the message is not cut to the path MTU: $out"
    grep -q '^delivery sent=200 ' <<<"$out" || fail "the UD send reports no delivery: $out"
    counts=$(roce_opcode_counts "$dir/ud-send.pcap")
    (($(opcode_count "$counts" "$b" 100) == 200)) || fail "-c UD send_bw: not 200 UD SEND_ONLY datagrams from B: $counts"
    (($(packets_from "$counts" "$a") == 0)) || fail "-c UD: the responder answered datagrams: $counts"
    note "send_bw -c UD: $(tr '\n' ';' <<<"$counts"); $(grep '^delivery' <<<"$out")"
    local rc=0
    out=$(run_unreliable -t send_bw -n 200 -s 2048 -c UD 2>&1) || rc=$?
    ((rc != 0)) || fail "-c UD -s 2048 over a 1024-byte path ran: $out"
    grep -q 'message_size 2048: a UD message is one packet, at most the path MTU (1024 bytes)' <<<"$out" \
        || fail "-c UD -s 2048 refused without the reason: $out"
    note "-c UD -s 2048 refused: $(grep -o 'message_size 2048: [^;]*' <<<"$out" | head -n1)"
    out=$(captured_run "$dir/rc-send.pcap" -t send_bw -n 200 -s 1024 --report_gbits) || exit 1
    # --report_gbits: the same figure in decimal Gbit/s, from the run's own messages and seconds.
    python3 - "$out" <<'PY' || fail "--report_gbits: bw_average_Gbps is not messages x 1024 x 8 / seconds: $out"
import re, sys
line = next(l for l in sys.argv[1].splitlines() if l.startswith("bw_average_Gbps="))
f = dict(re.findall(r"(\w+)=([0-9.]+)", line))
gbps = float(f["bw_average_Gbps"])
expected = float(f["messages"]) * 1024 * 8 / float(f["seconds"]) / 1e9
sys.exit(0 if abs(gbps - expected) <= 0.006 and "bw_average_MiBps" not in sys.argv[1] else 1)
PY
    counts=$(roce_opcode_counts "$dir/rc-send.pcap")
    (($(opcode_count "$counts" "$b" 4) == 200)) || fail "RC send_bw: not 200 SEND_ONLY packets from B: $counts"
    (($(opcode_count "$counts" "$a" 17) > 0)) || fail "RC send_bw: the responder sent no ACK: $counts"
    note "send_bw RC: $(tr '\n' ';' <<<"$counts")"
    rm -rf "$dir"
}

# The "RX depth" an ib_send_bw server in VM A prints for ARGS (its client in VM B).
perftest_rx_depth() { # ARGS...
    local job out
    job=$(lab spawn --timeout 120 A -- ib_send_bw -d rxe0 -x "$(lab gid A)" "$@") \
        || fail "cannot start ib_send_bw $* in VM A"
    lab_wait_listen A 18515
    out=$(lab exec --timeout 120 B -- ib_send_bw -d rxe0 -x "$(lab gid B)" "$@" "$(lab addr A)" 2>&1) \
        || { lab kill A "$job" >/dev/null 2>&1; fail "ib_send_bw $* failed: $out"; }
    out=$(lab wait --timeout 60 A "$job") || fail "ib_send_bw $* server failed: $out"
    sed -n 's/^ *RX depth *: *\([0-9]*\).*/\1/p' <<<"$out"
}

# Freezes the responder in VM A (SIGSTOP) at the first RoCE packet VM A's rxe0 receives after
# this returns, until MESSAGES more have arrived (or 20 s passed); prints, when `lab wait A
# freezer` returns, "before=N": the packets that arrived before the freeze.
freeze_responder_at_first_packet() { # MESSAGES
    # shellcheck disable=SC2016  # expanded in the VM
    lab spawn --name freezer A -- sh -c '
        pid=$(pgrep -f -x "[^ ]*/ibprobe_probe serve -d rxe0 --listen :$1")
        [ -n "$pid" ] || { echo "no responder"; exit 1; }
        c=/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts
        base=$(cat $c)
        echo armed
        until [ "$(cat $c)" -gt "$base" ]; do sleep 0.005; done
        kill -STOP $pid
        before=$(($(cat $c) - base))
        end=$(($(date +%s) + 20))
        until [ "$(cat $c)" -ge $((base + $2)) ] || [ "$(date +%s)" -ge $end ]; do sleep 0.05; done
        kill -CONT $pid
        echo before=$before' freezer "$RESPONDER_PORT" "$1" >/dev/null || fail "cannot start the freezer in VM A"
    local deadline=$((SECONDS + 30))
    until lab output A freezer | grep -q armed; do
        ((SECONDS < deadline)) || fail "the freezer did not arm: $(lab output A freezer)"
        sleep 0.2
    done
}

# perftest's receive depth over UC and UD (force_dependecies in perftest_parameters.c): in
# iteration mode a send run's default depth (DEF_RX_SEND, 512) becomes min(iterations,
# UC_MAX_RX 16000), a receive for every message, posted before the first arrives. The responder
# is frozen from the first datagram on until all have arrived, so it posts nothing meanwhile:
# every message that finds a receive (rxe's rdma_recvs, the delivery line) found one posted
# before the run. 1000 messages at 200/s, so that the freeze comes long before 1000 - 512 have
# arrived and perftest's 512 could not pass; --rx-depth 512 shows the same freeze costs messages.
check_unreliable_receive_depth() {
    local out transport expected received before args source
    for args in "-c UD" "-c UC" "-c UD --rx-depth 512"; do
        transport=${args:3:2}
        if [[ $args == *--rx-depth* ]]; then
            expected=512 source="asked for"
        else
            source="ib_send_bw's RX depth"
            expected=$(perftest_rx_depth -c "$transport" -n 1000 -s 1024)
            ((expected == 1000)) || fail "ib_send_bw -c $transport -n 1000 posts $expected receives, not one per message"
        fi
        freeze_responder_at_first_packet 1000
        # shellcheck disable=SC2086  # ARGS are words
        out=$(run_unreliable -t send_bw $args -n 1000 -s 1024 --rate-limit 200 --rate-units pps) \
            || { lab kill A freezer >/dev/null 2>&1; fail "send_bw $args failed: $out"; }
        before=$(lab wait --timeout 60 A freezer | sed -n 's/^before=//p')
        [[ -n $before ]] || fail "send_bw $args: the freezer did not report"
        ((before < 1000 - 512)) || fail "send_bw $args: the responder froze only after $before of 1000 messages"
        expect_field "$out" rx_depth "$expected" "send_bw $args -n 1000"
        received=$(sed -n 's/^delta side=peer counter=hw_counters\/rdma_recvs status=valid value=\([0-9]*\).*/\1/p' <<<"$out")
        grep -q "^delivery sent=1000 received=$received " <<<"$out" \
            || fail "send_bw $args: the delivery line disagrees with rxe's rdma_recvs $received: $out"
        if ((expected == 1000)); then
            ((received == 1000)) || fail "send_bw $args: $received of 1000 messages found a receive while the responder was frozen after $before"
        else
            ((received <= 512 + before && received < 1000)) \
                || fail "send_bw $args: $received messages found a receive with 512 posted, frozen after $before"
        fi
        note "send_bw $args -n 1000: rx_depth=$expected ($source), responder frozen after $before packets, $received received"
    done
}

main() {
    lab_test_begin
    lab_test_up two
    lab spawn --name responder A -- "$PROBE" serve -d rxe0 --listen ":$RESPONDER_PORT" >/dev/null \
        || fail "cannot start the responder in VM A"
    lab_wait_listen A "$RESPONDER_PORT"
    check_post_list
    check_cq_moderation
    check_device_defaults
    check_per_side_choices
    check_latency_duration
    check_lane
    check_transport
    check_unreliable_receive_depth
    check_rdma_cm
    check_rdma_cm_datagrams
}

main "$@"
