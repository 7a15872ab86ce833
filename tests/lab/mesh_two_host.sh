#!/bin/bash
#
# The probe mesh on real rxe devices, two-host mode: both exporters run the mesh (`mesh:` in
# --config.file), learn each other's UD address over the control channel and ping each other
# once a second; a Prometheus server on the host scrapes both with the shipped mesh rules.
#   - pings flow both ways, every one answered, RTT on the software clock (rxe has no completion
#     timestamps) in the same-ToR path class's histogram and in no per-peer one (mesh.per_peer_rtt
#     is off), the plan one same-ToR peer at 1 ping/s within the 100/s budget;
#   - the exporter's log says why the host clock: rxe reports no timestamp mask and refuses a CQ
#     with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
#   - `lab.sh link A down` cuts VM A's cable: both sides count their pings to the other lost
#     within 60 s of the cut, and the pair's loss ratio rises in Prometheus;
#   - `lab.sh link A up` restores it: pings are answered again, the lost counters stop, and the
#     loss ratio in Prometheus falls back to 0.
#
# Environment: see lab-common.sh; IBPROBE_EXPORTER is the exporter binary.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"
lab_exporter_test
# Short windows, so a cut shows in the loss ratio within seconds and restoring clears it soon.
WINDOW=20s

write_configs() {
    cat >"$work/peers.json" <<JSON
[{"targets": ["$(lab_target A)", "$(lab_target B)"], "labels": {"tor": "leaf1", "gid_family": "ipv4"}}]
JSON
    lab_write_mesh_configs "$work" A B
}

start_exporters() {
    local host
    for host in A B; do
        lab_spawn_exporter "$host" "$EXPORTER" --config.file="$work/ibprobe-$host.yml"
    done
    lab_wait_exporters A B
}

check_pings_flow() {
    local host peer count lost sum clock body fast
    for host in A B; do
        peer=$([[ $host == A ]] && echo B || echo A)
        wait_for 60 "VM $host: 5 answered pings to $peer" answered_at_least "$host" "$peer" 5
        # The one peer is the one same-ToR peer: its path class's histogram is its own.
        count=$(mesh_class_sample "$host" same_tor rdma_mesh_class_rtt_seconds_count)
        sum=$(mesh_class_sample "$host" same_tor rdma_mesh_class_rtt_seconds_sum)
        lost=$(mesh_sample "$host" "$peer" rdma_mesh_pings_lost_total)
        body=$(curl -fsS "$(exporter_url "$host")/metrics")
        clock=$(grep -o 'rdma_mesh_class_rtt_seconds_count{[^}]*}' <<<"$body" | grep -o 'clock="[a-z]*"')
        [[ $clock == 'clock="software"' ]] || fail "VM $host: RTT clock $clock, rxe has no completion timestamps"
        [[ $lost == 0 ]] || fail "VM $host lost $lost pings to $peer over the intact link"
        # Without mesh.per_peer_rtt no histogram names the peer.
        ! grep -q '^rdma_mesh_rtt_seconds' <<<"$body" || fail "VM $host: per-peer RTT histograms without mesh.per_peer_rtt"
        # No round trip between two emulated RNICs takes under 20 us; one that reads so was
        # timed from after the post that sent it.
        fast=$(mesh_class_sample "$host" same_tor rdma_mesh_class_rtt_seconds_bucket 'le="2e-05"')
        [[ $fast == 0 ]] || fail "VM $host: $fast of its RTTs to $peer under 20 us"
        grep -q '^rdma_mesh_plan_peers{local_tor="leaf1",reason="same_tor"} 1$' <<<"$body" || fail "VM $host: plan is not one same-ToR peer"
        note "VM $host -> $peer: $count pings answered, none lost, mean RTT $(python3 -c "print(f'{$sum / $count * 1e6:.0f}')") us ($clock)"
    done
    local log reason
    log=$(lab output --stderr A exporter)
    grep -q 'mesh: .* answers pings on QPN' <<<"$log" \
        || fail "VM A's log does not say it learned B's address: $log"
    reason=$(grep -o 'RTT clock: .*' <<<"$log") || fail "VM A's log does not name its RTT clock: $log"
    [[ $reason == *'completion_timestamp_mask 0;'*'ibv_create_cq_ex with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP failed (Operation not supported)); host clock' ]] \
        || fail "VM A's log does not say why the host clock: $reason"
    note "VM A: $reason"
}

start_prometheus() {
    mkdir -p "$work/rules"
    python3 "$RUNNER" adapt-rules "$work/rules" "$LAB_TEST_ROOT"/dashboards/prometheus/ibprobe-mesh.rules.yml \
        --window "$WINDOW" --for 0s
    # `instance` is the host as the peer list names it, so a pair's two ends join in the rules.
    lab_prometheus_of_exporters "$work" "A=$(lab addr A)" "B=$(lab addr B)"
}

pair_loss() { # FROM TO
    prom_query "ibprobe:mesh_pair_loss_ratio:rate5m{instance=\"$(lab addr "$1")\",peer=\"$(lab_target "$2")\"}"
}

loss_above() { # FROM TO RATIO
    local ratio
    ratio=$(pair_loss "$1" "$2")
    [[ -n $ratio ]] && python3 -c "import sys; sys.exit(0 if $ratio > $3 else 1)"
}

loss_zero() { # FROM TO
    [[ $(pair_loss "$1" "$2") == 0 ]]
}

lost_rises() { # HOST PEER SINCE
    local lost
    lost=$(mesh_sample "$1" "$2" rdma_mesh_pings_lost_total) || return 1
    ((${lost%.*} > $3))
}

check_cut_and_restore() {
    local t_cut lost_a lost_b before_a before_b
    wait_for 60 "a zero loss ratio A->B in Prometheus" loss_zero A B
    wait_for 60 "a zero loss ratio B->A in Prometheus" loss_zero B A
    note "Prometheus: loss ratio 0 both ways over the intact link"
    lost_a=$(mesh_sample A B rdma_mesh_pings_lost_total)
    lost_b=$(mesh_sample B A rdma_mesh_pings_lost_total)
    t_cut=$(now_ms)
    lab link A down >/dev/null || fail "cannot cut VM A's link"
    wait_for 60 "B counting pings to A lost" lost_rises B A "${lost_b%.*}"
    wait_for 60 "A counting pings to B lost" lost_rises A B "${lost_a%.*}"
    note "link cut: both sides count pings lost $(seconds_since "$t_cut") s after the cut"
    wait_for 60 "B->A loss ratio above 0.5 in Prometheus" loss_above B A 0.5
    wait_for 60 "A->B loss ratio above 0.5 in Prometheus" loss_above A B 0.5
    (($(now_ms) - t_cut <= 60000)) || fail "loss showed in Prometheus only $(seconds_since "$t_cut") s after the cut"
    note "Prometheus: loss ratio B->A $(pair_loss B A), A->B $(pair_loss A B), $(seconds_since "$t_cut") s after the cut"

    local t_up
    t_up=$(now_ms)
    lab link A up >/dev/null || fail "cannot restore VM A's link"
    before_a=$(mesh_answered A B)
    before_b=$(mesh_answered B A)
    wait_for 60 "A's pings to B answered again" answered_at_least A B $((before_a + 3))
    wait_for 60 "B's pings to A answered again" answered_at_least B A $((before_b + 3))
    note "link restored: pings answered again $(seconds_since "$t_up") s after"
    # Once answered again, nothing more is lost: the counters hold still over 10 pings each way.
    lost_a=$(mesh_sample A B rdma_mesh_pings_lost_total)
    lost_b=$(mesh_sample B A rdma_mesh_pings_lost_total)
    before_a=$(mesh_answered A B)
    before_b=$(mesh_answered B A)
    wait_for 60 "10 more of A's pings to B answered" answered_at_least A B $((before_a + 10))
    wait_for 60 "10 more of B's pings to A answered" answered_at_least B A $((before_b + 10))
    [[ $(mesh_sample A B rdma_mesh_pings_lost_total) == "$lost_a" ]] || fail "A still loses pings to B after the restore"
    [[ $(mesh_sample B A rdma_mesh_pings_lost_total) == "$lost_b" ]] || fail "B still loses pings to A after the restore"
    wait_for 90 "A->B loss ratio back to 0" loss_zero A B
    wait_for 90 "B->A loss ratio back to 0" loss_zero B A
    note "Prometheus: loss ratio 0 both ways again $(seconds_since "$t_up") s after the restore ($lost_a and $lost_b pings lost in all)"
}

check_series_count() {
    local host n
    for host in A B; do
        n=$(curl -fsS "$(exporter_url "$host")/metrics" | grep -c '^rdma_mesh_')
        note "VM $host: $n rdma_mesh_ series with one peer in the plan"
    done
}

main() {
    scratch_begin ibprobe-lab-mesh
    lab_test_begin
    trap 'rc=$?; set +e; scratch_cleanup; (exit $rc); lab_test_end' EXIT
    lab_test_up two --forward 9470
    write_configs
    start_exporters
    check_pings_flow
    check_series_count
    start_prometheus
    check_cut_and_restore
}

main "$@"
