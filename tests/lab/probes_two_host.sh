#!/bin/bash
#
# Verbs probes on real rxe devices, two-host mode: the responder of the ibprobe exporter in VM A,
# the initiator (ibprobe_probe) in VM B. Every probe kind runs and reports figures; the rxe hw_counters of both hosts show the
# traffic (write, read and send, bandwidth and latency, SRQ, duration mode); a responder stopped
# mid-run (the exporter stopped) makes the initiator fail with a precise reason instead of
# hanging, and leaves no QP.
#
# Environment: see lab-common.sh; IBPROBE_PROBE is the ibprobe_probe binary, IBPROBE_EXPORTER
# the exporter.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

PROBE=${IBPROBE_PROBE:?set IBPROBE_PROBE to the ibprobe_probe binary}
EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
RESPONDER_PORT=18600

start_responder() {
    lab spawn --name responder A -- "$EXPORTER" --web.listen-address=:9470 \
        --probe.responder-address=":$RESPONDER_PORT" >/dev/null \
        || fail "cannot start the exporter in VM A"
    lab_wait_listen A "$RESPONDER_PORT"
    lab output --stderr A responder | grep -q 'probe responder listening on .* for rxe0 port 1' \
        || fail "the exporter did not report its responder: $(lab output --stderr A responder)"
}

run_probe() { # TEST ARGS...
    lab exec --timeout 120 B -- "$PROBE" run -d rxe0 -u "$LAB_QP_TIMEOUT" -t "$@" \
        "$(lab addr A):$RESPONDER_PORT"
}

field() { # OUTPUT NAME
    sed -n "s/.*\b$2=\([0-9.]*\).*/\1/p" <<<"$1" | head -n1
}

check_kind() { # TEST FIGURE [ARGS...]
    local test=$1 figure=$2 out value before after
    shift 2
    before=$(lab_hw_counter B sent_pkts)
    (($# > 0)) || set -- -n 300
    out=$(run_probe "$test" "$@") || fail "$test $* probe failed: $out"
    after=$(lab_hw_counter B sent_pkts)
    value=$(field "$out" "$figure")
    positive_number "$value" || fail "$test: no $figure in: $out"
    ((after > before)) || fail "$test: VM B sent_pkts did not move ($before -> $after)"
    local side
    for side in local peer; do
        grep -q "check side=$side name=port_active passed=1" <<<"$out" \
            || fail "$test: $side port_active check missing or failed: $out"
    done
    grep -q 'check side=both name=version_match passed=1' <<<"$out" \
        || fail "$test: version_match missing or failed: $out"
    # The probe's own counter deltas: both rxe ports saw the run's packets.
    grep -Eq 'delta side=local counter=hw_counters/sent_pkts status=valid value=[1-9]' <<<"$out" \
        || fail "$test: no local sent_pkts delta: $out"
    grep -Eq 'delta side=peer counter=hw_counters/rcvd_pkts status=valid value=[1-9]' <<<"$out" \
        || fail "$test: no peer rcvd_pkts delta: $out"
    grep -q '^link .*diagnosis=' <<<"$out" || fail "$test: no link reading: $out"
    note "$test $*: $figure=$value, setup $(field "$out" setup_seconds) s, VM B sent_pkts +$((after - before))"
}

# The run is under way once VM A has received a window's worth of its packets (128 x 64 KiB at
# rxe's 1024 B MTU is 8192), whatever the load on the host makes the handshake take.
run_under_way() { # RCVD_PKTS_BEFORE
    (($(lab_hw_counter A rcvd_pkts) > $1 + 8192))
}

check_peer_killed_mid_run() {
    local job out rc=0 t before
    before=$(lab_hw_counter A rcvd_pkts)
    job=$(lab spawn --name long-run B -- "$PROBE" run -d rxe0 -u "$LAB_QP_TIMEOUT" -t write_bw -n 1000000 \
        "$(lab addr A):$RESPONDER_PORT")
    wait_for 60 "the long write_bw run under way" run_under_way "$before"
    t=$(now_ms)
    lab kill A responder >/dev/null
    lab wait --timeout 90 B "$job" >/dev/null 2>&1 || rc=$?
    out=$(lab output --stderr B "$job")
    ((rc != 0)) || fail "the probe survived its responder"
    # An exporter stopped by SIGTERM cancels its responder's run and says so on the control
    # channel before it exits; one that dies without that closes the connection. Either names
    # the peer's end, not a timeout.
    grep -Eq 'closed the control connection mid-run|reported an error: the probe was cancelled' <<<"$out" \
        || fail "no precise reason for the lost peer: $out"
    # Well before the run's 30 s timeout: the lost peer is noticed, not waited out.
    local seconds
    seconds=$(seconds_since "$t")
    ((${seconds%.*} < 20)) || fail "the lost peer took $seconds s to notice"
    note "responder stopped mid-run: probe failed $seconds s after it: $out"
    local qps
    qps=$(lab exec B -- rdma resource show qp 2>&1 | grep -c 'comm ibprobe_probe' || true)
    ((qps == 0)) || fail "VM B still holds $qps ibprobe QPs"
    note "VM B holds no ibprobe QP afterwards (rdma resource show qp)"
}

check_numa() {
    local out rc=0
    out=$(run_probe write_bw -n 100)
    grep -q 'numa_node=-1' <<<"$out" || fail "rxe has no NUMA node, yet: $out"
    out=$(run_probe write_bw -n 100 --numa 0) || fail "--numa 0 failed: $out"
    grep -q 'numa_node=0' <<<"$out" || fail "--numa 0 not applied: $out"
    out=$(run_probe write_bw -n 100 --numa 7 2>&1) || rc=$?
    ((rc != 0)) || fail "--numa 7 was accepted on a one-node VM: $out"
    grep -q 'NUMA node 7 does not exist' <<<"$out" || fail "--numa 7 refused without the reason: $out"
    note "NUMA: auto gives none on rxe, --numa 0 binds node 0, --numa 7 refused ($out)"
}

# rxe is RoCE: no fabric ports can be read over PerfMgt MADs, and the probe says so but runs.
check_fabric_ports_unavailable() {
    local out
    out=$(run_probe write_bw -n 100 --fabric-port 1:1) || fail "probe with a fabric port failed: $out"
    grep -q 'check side=local name=fabric_ports passed=0 detail="remote PMA unavailable' <<<"$out" \
        || fail "no fabric_ports check explaining why: $out"
    positive_number "$(field "$out" bw_average_MiBps)" || fail "no bandwidth with a fabric port: $out"
    note "fabric port on RoCE: $(grep 'name=fabric_ports' <<<"$out")"
}

# Without -d the probe runs on the first ACTIVE port, rxe0 port 1; with no ACTIVE port it is
# refused with where it looked, and -i without -d is refused. The VMs' kernels scale no CPU
# frequency: both sides report the cpu_frequency check as not applicable, with the reason. A
# sysfs tree (--path.sysfs) whose cpu0 runs the powersave governor below its maximum, with the
# VM's own /sys/class beside it for the port's counters, fails the check on that side alone, and
# the run completes with its figures and counter deltas.
check_default_device_and_cpu_frequency() {
    local out tree side
    out=$(lab exec --timeout 120 B -- "$PROBE" run -u "$LAB_QP_TIMEOUT" -t write_bw -n 100 \
        "$(lab addr A):$RESPONDER_PORT") || fail "a run without -d failed: $out"
    grep -qx 'local device=rxe0 port=1' <<<"$out" || fail "without -d: not rxe0 port 1: $out"
    for side in local peer; do
        grep -q "check side=$side name=cpu_frequency passed=na detail=\"no cpufreq policy for cpu 0 in /sys/devices/system/cpu: the kernel scales no frequency here" <<<"$out" \
            || fail "$side cpu_frequency is not reported as not applicable: $out"
    done
    note "no -d: $(grep '^local device' <<<"$out"); $(grep 'side=peer name=cpu_frequency' <<<"$out")"
    local rc=0
    tree=$(mktemp -d -p /tmp ibprobe-lab-sysfs.XXXXXX)
    out=$(lab exec B -- "$PROBE" run --path.sysfs "$tree" "$(lab addr A):$RESPONDER_PORT" 2>&1) || rc=$?
    rmdir "$tree"
    ((rc == 2)) && grep -q "no -d given, and no ACTIVE port under $tree/class/infiniband" <<<"$out" \
        || fail "without -d and without an ACTIVE port: exit $rc, $out"
    rc=0
    out=$(lab exec B -- "$PROBE" run -i 1 "$(lab addr A):$RESPONDER_PORT" 2>&1) || rc=$?
    ((rc != 0)) && grep -q -- '--ib-port requires --device' <<<"$out" \
        || fail "-i without -d was not refused: exit $rc, $out"
    note "refused: no ACTIVE port (exit 2), -i without -d ($(head -n1 <<<"$out"))"

    tree=$(mktemp -d -p /tmp ibprobe-lab-sysfs.XXXXXX)
    ln -s /sys/class "$tree/class"
    mkdir -p "$tree/devices/system/cpu/cpu0/cpufreq"
    echo powersave >"$tree/devices/system/cpu/cpu0/cpufreq/scaling_governor"
    echo 1000000 >"$tree/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"
    echo 3000000 >"$tree/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"
    out=$(run_probe write_bw -n 100 --path.sysfs "$tree") || fail "the run with a slow core failed: $out"
    rm -rf "$tree"
    grep -q 'check side=local name=cpu_frequency passed=0 detail="cpu 0: governor powersave, not performance; cpu 0: 1000 MHz, under its maximum 3000 MHz"' <<<"$out" \
        || fail "the powersave core did not fail cpu_frequency: $out"
    grep -q 'check side=peer name=cpu_frequency passed=na ' <<<"$out" \
        || fail "the peer's cpu_frequency changed with this side's tree: $out"
    positive_number "$(field "$out" bw_average_MiBps)" || fail "no bandwidth beside the failed check: $out"
    grep -Eq 'delta side=local counter=hw_counters/sent_pkts status=valid value=[1-9]' <<<"$out" \
        || fail "no local sent_pkts delta through the tree's /sys/class: $out"
    note "powersave core: $(grep 'side=local name=cpu_frequency' <<<"$out"), the run completed"
}

check_invalid_spec() {
    local out rc=0
    out=$(run_probe write_lat -q 4 2>&1) || rc=$?
    ((rc != 0)) || fail "a multi-QP latency probe was accepted"
    grep -q 'several QPs' <<<"$out" || fail "multi-QP latency rejected without the reason: $out"
    note "invalid spec rejected up front: $out"
}

main() {
    lab_test_begin
    lab_test_up two
    start_responder
    check_kind write_bw bw_average_MiBps
    check_kind write_lat t_typical_usec
    check_kind read_bw bw_average_MiBps
    check_kind read_lat t_typical_usec
    check_kind send_bw bw_average_MiBps
    check_kind send_lat t_typical_usec
    check_kind send_bw bw_average_MiBps -n 300 --use-srq
    check_kind write_bw bw_average_MiBps -D 6
    check_numa
    check_fabric_ports_unavailable
    check_default_device_and_cpu_frequency
    check_invalid_spec
    check_peer_killed_mid_run
}

main "$@"
