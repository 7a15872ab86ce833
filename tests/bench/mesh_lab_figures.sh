#!/bin/bash
#
# The mesh's figures on real rxe devices, two-host lab: what the mesh costs and what it reads.
#   - CPU: the exporter's utime+stime (/proc/PID/stat in the VM) over MEASURE seconds, first
#     with the mesh off, then on at the default rate (1 ping/s to the one peer, answering the
#     peer's 1 ping/s), in both VMs;
#   - RTT: the mesh's RTT over the same window (mean from the histogram's sum and count, and the
#     bucket holding the median), then perftest's ib_send_lat between the same two VMs in the
#     same run, busy-polling and with completion events (-e) as the mesh waits. perftest reports
#     half the round trip for send_lat (print_report_lat's rtt_factor 2): doubled here.
# The RTT is read from the pair's own histogram (mesh.per_peer_rtt: one peer, so 14 series more).
# Prints the figures side by side; asserts only that each was measured.
#
# Environment: see tests/lab/lab-common.sh; IBPROBE_EXPORTER is the exporter binary;
# IBPROBE_MESH_MEASURE_SECONDS (default 60).

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/../lab/lab-common.sh"
# shellcheck source=tests/lib/scratch.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/../lib/scratch.sh"

EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
MEASURE=${IBPROBE_MESH_MEASURE_SECONDS:-60}
# The same mesh with pings close enough that neither VM idles between them, as in perftest's
# back-to-back loop: what the RTT costs in wake-ups from idle shows as the difference.
FAST_RATE=20

target() { echo "$(lab addr "$1"):9470"; }

write_configs() {
    cat >"$work/peers.json" <<JSON
[{"targets": ["$(target A)", "$(target B)"], "labels": {"tor": "leaf1", "gid_family": "ipv4"}}]
JSON
    local host enabled
    for enabled in false true fast; do
        for host in A B; do
            cat >"$work/ibprobe-$host-$enabled.yml" <<YAML
modules:
  write_lat: {kind: write_lat, iterations: 20, timeout: 30s}
mesh:
  enabled: $([[ $enabled == false ]] && echo false || echo true)
  peers_file: $work/peers.json
  self: "$(target "$host")"
  per_peer_rtt: true
$([[ $enabled == fast ]] && echo "  peer_rate: $FAST_RATE")
YAML
        done
    done
}

start_exporters() { # MESH_ENABLED
    local host deadline
    for host in A B; do
        lab spawn --name "exporter-$1" "$host" -- "$EXPORTER" --web.listen-address=:9470 \
            --config.file="$work/ibprobe-$host-$1.yml" >/dev/null || fail "cannot start the exporter in VM $host"
    done
    for host in A B; do
        deadline=$((SECONDS + 60))
        until curl -fsS -o /dev/null "$(exporter_url "$host")/-/ready" 2>/dev/null; do
            ((SECONDS < deadline)) || fail "exporter in VM $host not ready"
            sleep 0.5
        done
    done
}

stop_exporters() {
    local host
    for host in A B; do
        # shellcheck disable=SC2016  # expanded in the VM
        lab exec --timeout 30 "$host" -- sh -c 'kill $(pidof ibprobe_exporter); while pidof ibprobe_exporter >/dev/null; do sleep 0.2; done'
    done
}

# utime+stime of the VM's exporter in clock ticks, and the ticks per second.
cpu_ticks() { # HOST
    # shellcheck disable=SC2016  # expanded in the VM
    lab exec --timeout 30 "$1" -- sh -c 'pid=$(pidof ibprobe_exporter); awk "{ print \$14 + \$15 }" /proc/$pid/stat'
}

mesh_field() { # HOST PEER FAMILY
    local body
    body=$(curl -fsS "$(exporter_url "$1")/metrics")
    awk -v f="$3" -v p="peer=\"$(target "$2")\"" 'index($0, f "{") == 1 && index($0, p) { print $NF; exit }' <<<"$body"
}

# CPU seconds per minute of wall time of each VM's exporter, "A B".
measure_cpu() {
    local host before_a before_b after_a after_b hz
    hz=$(lab exec --timeout 30 A -- getconf CLK_TCK)
    before_a=$(cpu_ticks A)
    before_b=$(cpu_ticks B)
    sleep "$MEASURE"
    after_a=$(cpu_ticks A)
    after_b=$(cpu_ticks B)
    python3 -c "
hz, m = $hz, $MEASURE
print(f'{($after_a - $before_a) / hz:.2f} {($after_b - $before_b) / hz:.2f} ({($after_a - $before_a) / hz / m * 100:.2f} % and {($after_b - $before_b) / hz / m * 100:.2f} % of one CPU)')"
}

main() {
    scratch_begin ibprobe-lab-mesh-figures
    lab_test_begin
    trap 'rc=$?; set +e; scratch_cleanup; (exit $rc); lab_test_end' EXIT
    lab_test_up two --forward 9470
    write_configs

    start_exporters false
    sleep 5
    note "mesh off: exporter CPU seconds over ${MEASURE} s, VM A VM B: $(measure_cpu)"
    stop_exporters

    start_exporters true
    local deadline=$((SECONDS + 60))
    until [[ -n $(mesh_field B A rdma_mesh_rtt_seconds_count) && $(mesh_field B A rdma_mesh_rtt_seconds_count) != 0 && -n $(mesh_field A B rdma_mesh_rtt_seconds_count) && $(mesh_field A B rdma_mesh_rtt_seconds_count) != 0 ]]; do
        ((SECONDS < deadline)) || fail "no mesh pings answered within 60 s"
        sleep 1
    done
    local count0 sum0 count1 sum1 lost0 lost1
    count0=$(mesh_field B A rdma_mesh_rtt_seconds_count)
    sum0=$(mesh_field B A rdma_mesh_rtt_seconds_sum)
    lost0=$(mesh_field B A rdma_mesh_pings_lost_total)
    note "mesh on (1 ping/s each way): exporter CPU seconds over ${MEASURE} s, VM A VM B: $(measure_cpu)"
    count1=$(mesh_field B A rdma_mesh_rtt_seconds_count)
    sum1=$(mesh_field B A rdma_mesh_rtt_seconds_sum)
    lost1=$(mesh_field B A rdma_mesh_pings_lost_total)
    note "mesh RTT B->A over the window: $((${count1%.*} - ${count0%.*})) pings, $((${lost1%.*} - ${lost0%.*})) lost, mean $(python3 -c "print(f'{($sum1 - $sum0) / ($count1 - $count0) * 1e6:.0f}')") us (software clock, responder turnaround subtracted)"
    note "mesh RTT histogram B->A (cumulative): $(curl -fsS "$(exporter_url B)/metrics" | grep "^rdma_mesh_rtt_seconds_bucket{.*peer=\"$(target A)\"" | sed 's/.*le="\([^"]*\)"} \(.*\)/\1:\2/' | tr '\n' ' ')"

    stop_exporters
    start_exporters fast
    sleep 5
    count0=$(mesh_field B A rdma_mesh_rtt_seconds_count)
    sum0=$(mesh_field B A rdma_mesh_rtt_seconds_sum)
    sleep 20
    count1=$(mesh_field B A rdma_mesh_rtt_seconds_count)
    sum1=$(mesh_field B A rdma_mesh_rtt_seconds_sum)
    note "mesh RTT B->A at $FAST_RATE pings/s over 20 s: $((${count1%.*} - ${count0%.*})) pings, mean $(python3 -c "print(f'{($sum1 - $sum0) / ($count1 - $count0) * 1e6:.0f}')") us"
    note "mesh RTT histogram B->A at $FAST_RATE pings/s (cumulative): $(curl -fsS "$(exporter_url B)/metrics" | grep "^rdma_mesh_rtt_seconds_bucket{.*peer=\"$(target A)\"" | sed 's/.*le="\([^"]*\)"} \(.*\)/\1:\2/' | tr '\n' ' ')"

    local out typical avg
    out=$(lab_perftest_pair A B ib_send_lat -n 1000)
    typical=$(perftest_field "$out" 't_typical' 5)
    avg=$(perftest_field "$out" 't_typical' 6)
    positive_number "$typical" || fail "no t_typical from ib_send_lat: $out"
    note "ib_send_lat B->A (polling), same run: t_typical $typical us, t_avg $avg us -> round trip $(python3 -c "print(f'{2 * $typical:.0f}')") us typical, $(python3 -c "print(f'{2 * $avg:.0f}')") us avg"
    out=$(lab_perftest_pair A B ib_send_lat -e -n 1000)
    typical=$(perftest_field "$out" 't_typical' 5)
    avg=$(perftest_field "$out" 't_typical' 6)
    positive_number "$typical" || fail "no t_typical from ib_send_lat -e: $out"
    note "ib_send_lat -e B->A (completion events), same run: t_typical $typical us, t_avg $avg us -> round trip $(python3 -c "print(f'{2 * $typical:.0f}')") us typical, $(python3 -c "print(f'{2 * $avg:.0f}')") us avg"
}

main "$@"
