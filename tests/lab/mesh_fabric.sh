#!/bin/bash
#
# The probe mesh on a fabric of real rxe devices: `lab.sh up fabric` boots VMs A and B on switch
# leaf1 and C and D on leaf2 (lab-switch.pl), the four exporters run the mesh with a peer list
# that names those ToRs, and a Prometheus server on the host scrapes them with the shipped mesh
# rules.
#   - every host pings the other three (its ToR peer and, with min_watchers 3, both hosts of the
#     other ToR), every ping answered;
#   - `lab.sh link A down` cuts VM A's cable: B, C and D count pings to A lost within 60 s, no
#     pair without A loses a ping, IbprobeMeshHostUnreachable fires for A alone and
#     IbprobeMeshTorPairLoss never fires; `lab.sh link A up` clears the host alert;
#   - `lab.sh trunk down` cuts the link between the switches: every pair across it loses pings,
#     none within a switch does, IbprobeMeshTorPairLoss fires both ways and no
#     IbprobeMeshHostUnreachable fires, and the mesh dashboard's panels and variables and the
#     mesh rules return data (run_queries.py check); `lab.sh trunk up` clears it.
# The rules run with 20 s windows for 5 min and a hold of 10 s for 1 min (run_queries.py
# adapt-rules), so a phase takes seconds, not minutes; the expressions are the shipped ones.
#
# Environment: see lab-common.sh; IBPROBE_EXPORTER is the exporter binary.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"
lab_exporter_test
HOSTS=(A B C D)
# The rules' windows are shortened from 5 min to 20 s, so the pings are made more per window: at
# the default 1 ping/s one ping answered late (a TCG VM starved for a moment) would be 1 of 20,
# the whole 5 % threshold; at 5 pings/s it is 1 of 100, and 5 % needs 5 pings lost, a second of
# outage. Not the 300 of production: 15 pings/s to each of 3 peers overloads the TCG VMs.
WINDOW=20s
PEER_RATE=5
# Long enough that the seconds in which one end of a pair has seen its loss and the other not yet
# (the exporters time pings out and get scraped independently) do not count as a ToR fault.
HOLD=10s
HOST_ALERT=IbprobeMeshHostUnreachable
TOR_ALERT=IbprobeMeshTorPairLoss

tor_of() { [[ $1 == A || $1 == B ]] && echo leaf1 || echo leaf2; }

write_configs() {
    cat >"$work/peers.json" <<JSON
[{"targets": ["$(lab_target A)", "$(lab_target B)"], "labels": {"tor": "leaf1", "gid_family": "ipv4"}},
 {"targets": ["$(lab_target C)", "$(lab_target D)"], "labels": {"tor": "leaf2", "gid_family": "ipv4"}}]
JSON
    lab_write_mesh_configs "$work" --peer-rate="$PEER_RATE" "${HOSTS[@]}"
}

start_exporters() {
    local host
    for host in "${HOSTS[@]}"; do
        lab_spawn_exporter "$host" "$EXPORTER" --config.file="$work/ibprobe-$host.yml"
    done
    lab_wait_exporters "${HOSTS[@]}"
}

lost_of() { mesh_sample "$1" "$2" rdma_mesh_pings_lost_total; }

check_pings_flow() {
    local host peer body lost
    for host in "${HOSTS[@]}"; do
        for peer in "${HOSTS[@]}"; do
            [[ $peer == "$host" ]] && continue
            wait_for 90 "VM $host: 5 answered pings to $peer" answered_at_least "$host" "$peer" 5
            lost=$(lost_of "$host" "$peer")
            [[ $lost == 0 ]] || fail "VM $host lost $lost pings to $peer over the intact fabric"
        done
        body=$(curl -fsS "$(exporter_url "$host")/metrics")
        grep -q "^rdma_mesh_plan_peers{local_tor=\"$(tor_of "$host")\",reason=\"same_tor\"} 1$" <<<"$body" \
            || fail "VM $host: plan has not one same-ToR peer: $(grep '^rdma_mesh_plan_peers' <<<"$body")"
        [[ $(grep -c '^rdma_mesh_pings_sent_total{' <<<"$body") == 3 ]] \
            || fail "VM $host does not ping 3 peers: $(grep '^rdma_mesh_pings_sent_total{' <<<"$body")"
    done
    note "every host pings the other three, every ping answered"
}

start_prometheus() {
    mkdir -p "$work/rules"
    python3 "$RUNNER" adapt-rules "$work/rules" "$LAB_TEST_ROOT"/dashboards/prometheus/ibprobe-mesh.rules.yml \
        --window "$WINDOW" --for "$HOLD"
    local host instances=()
    # `instance` is the host as the peer list names it, so a pair's two ends join in the rules.
    for host in "${HOSTS[@]}"; do instances+=("$host=$(lab addr "$host")"); done
    lab_prometheus_of_exporters "$work" "${instances[@]}"
}

# The results of a query as lines of LABEL=VALUE for the given labels, sorted.
prom_rows() { # PROMQL LABEL...
    local query=$1
    shift
    curl -fsS --get "$PROM_API/query" --data-urlencode "query=$query" | python3 -c '
import json, sys
labels = sys.argv[1:]
rows = [" ".join(f"{l}={r['"'"'metric'"'"'].get(l, '"'"''"'"')}" for l in labels)
        for r in json.load(sys.stdin)["data"]["result"]]
print("\n".join(sorted(rows)))' "$@"
}

firing() { # ALERT LABEL... -> the firing alerts' labels
    local alert=$1
    shift
    prom_rows "ALERTS{alertname=\"$alert\",alertstate=\"firing\"}" "$@"
}

# The alerts that fired since START_MS. The range is in milliseconds and a phase starts only
# once no mesh alert fires (wait_clean): a range that reached back before the phase would catch
# the previous phase's alert in its last evaluations before it cleared.
fired_since() { # START_MS ALERT LABEL...
    local range_ms=$(($(now_ms) - $1)) alert=$2
    shift 2
    prom_rows "max_over_time(ALERTS{alertname=\"$alert\",alertstate=\"firing\"}[${range_ms}ms])" "$@"
}

pairs_with_loss() { prom_rows 'ibprobe:mesh_pair_loss_ratio:rate5m > 0' instance peer_instance; }
pair_count() { prom_query 'count(ibprobe:mesh_pair_loss_ratio:rate5m)'; }

no_pair_loses() { [[ $(pair_count) == 12 && -z $(pairs_with_loss) ]]; }
host_alert_for_a() { [[ $(firing "$HOST_ALERT" peer_instance) == "peer_instance=$(lab addr A)" ]]; }
host_alert_gone() { [[ -z $(firing "$HOST_ALERT" peer_instance) ]]; }
tor_alert_both_ways() {
    [[ $(firing "$TOR_ALERT" local_tor peer_tor) == $'local_tor=leaf1 peer_tor=leaf2\nlocal_tor=leaf2 peer_tor=leaf1' ]]
}
tor_alert_gone() { [[ -z $(firing "$TOR_ALERT" local_tor) ]]; }
no_mesh_alert_fires() { host_alert_gone && tor_alert_gone; }

lost_rises() { # HOST PEER SINCE
    local lost
    lost=$(lost_of "$1" "$2") || return 1
    ((${lost%.*} > $3))
}

declare -A LOST_BEFORE=()
remember_lost() {
    local host peer
    for host in "${HOSTS[@]}"; do
        for peer in "${HOSTS[@]}"; do
            [[ $peer == "$host" ]] || LOST_BEFORE[$host$peer]=$(lost_of "$host" "$peer")
        done
    done
}

# PREDICATE HOST PEER says whether the pair is cut off; the others must not have lost a ping.
check_only_cut_pairs_lose() { # PREDICATE
    local host peer now
    for host in "${HOSTS[@]}"; do
        for peer in "${HOSTS[@]}"; do
            [[ $peer == "$host" ]] && continue
            "$1" "$host" "$peer" && continue
            now=$(lost_of "$host" "$peer")
            [[ $now == "${LOST_BEFORE[$host$peer]}" ]] \
                || fail "VM $host lost pings to $peer (${LOST_BEFORE[$host$peer]} -> $now), which stayed connected"
        done
    done
}

involves_a() { [[ $1 == A || $2 == A ]]; }
crosses_trunk() { [[ $(tor_of "$1") != "$(tor_of "$2")" ]]; }

wait_clean() {
    wait_for 90 "no pair with loss in Prometheus" no_pair_loses
    wait_for 90 "no mesh alert firing" no_mesh_alert_fires
}

check_host_cut() {
    local t_cut peer t_phase
    wait_clean
    note "Prometheus: 12 pairs, none with loss"
    remember_lost
    t_phase=$(now_ms)
    t_cut=$(now_ms)
    lab link A down >/dev/null || fail "cannot cut VM A's link"
    for peer in B C D; do
        wait_for 60 "VM $peer counting pings to A lost" lost_rises "$peer" A "${LOST_BEFORE[${peer}A]%.*}"
    done
    note "host cut: B, C and D count pings to A lost $(seconds_since "$t_cut") s after the cut"
    wait_for 60 "$HOST_ALERT firing for A alone" host_alert_for_a
    (($(now_ms) - t_cut <= 60000)) || fail "$HOST_ALERT fired only $(seconds_since "$t_cut") s after the cut"
    note "Prometheus: $HOST_ALERT firing for $(lab addr A) $(seconds_since "$t_cut") s after the cut"
    check_only_cut_pairs_lose involves_a

    local t_up
    t_up=$(now_ms)
    lab link A up >/dev/null || fail "cannot restore VM A's link"
    wait_for 90 "$HOST_ALERT clearing" host_alert_gone
    note "link restored: $HOST_ALERT cleared $(seconds_since "$t_up") s after"
    check_only_cut_pairs_lose involves_a
    local fired
    fired=$(fired_since "$t_phase" "$TOR_ALERT" local_tor peer_tor)
    [[ -z $fired ]] || fail "$TOR_ALERT fired for a host cut: $fired"
    fired=$(fired_since "$t_phase" "$HOST_ALERT" peer_instance)
    [[ $fired == "peer_instance=$(lab addr A)" ]] || fail "$HOST_ALERT fired for other hosts than A: $fired"
    note "Prometheus: $TOR_ALERT never fired, $HOST_ALERT for A alone, over the host cut"
}

check_trunk_cut() {
    local t_cut t_phase
    wait_clean
    note "Prometheus: 12 pairs, none with loss"
    remember_lost
    t_phase=$(now_ms)
    t_cut=$(now_ms)
    lab trunk down >/dev/null || fail "cannot cut the trunk"
    wait_for 60 "VM A counting pings to C lost" lost_rises A C "${LOST_BEFORE[AC]%.*}"
    wait_for 60 "VM D counting pings to B lost" lost_rises D B "${LOST_BEFORE[DB]%.*}"
    wait_for 60 "$TOR_ALERT firing leaf1->leaf2 and leaf2->leaf1" tor_alert_both_ways
    (($(now_ms) - t_cut <= 60000)) || fail "$TOR_ALERT fired only $(seconds_since "$t_cut") s after the cut"
    note "Prometheus: $TOR_ALERT firing both ways $(seconds_since "$t_cut") s after the trunk cut"
    check_only_cut_pairs_lose crosses_trunk
    check_mesh_dashboard

    local t_up
    t_up=$(now_ms)
    lab trunk up >/dev/null || fail "cannot restore the trunk"
    wait_for 90 "$TOR_ALERT clearing" tor_alert_gone
    note "trunk restored: $TOR_ALERT cleared $(seconds_since "$t_up") s after"
    check_only_cut_pairs_lose crosses_trunk
    local fired
    fired=$(fired_since "$t_phase" "$HOST_ALERT" peer_instance)
    [[ -z $fired ]] || fail "$HOST_ALERT fired for a trunk cut: $fired"
    note "Prometheus: $HOST_ALERT never fired over the trunk cut"
}

# On a failure, what the verdict was made of: every exporter's counters and RTT buckets now, and
# from Prometheus when each pair's lost counter rose over the last 5 minutes.
dump_mesh_state() {
    local host
    for host in "${HOSTS[@]}"; do
        echo "--- VM $host ($(lab addr "$host")) mesh series:"
        curl -fsS "$(exporter_url "$host")/metrics" | grep -E '^rdma_mesh_(pings|class_rtt_seconds_bucket)' \
            | grep -v 'le="[0-9.e-]*"} 0$'
        echo "--- VM $host exporter log, last lines:"
        lab output --stderr "$host" exporter | tail -n 20
    done
    [[ -n ${PROM_API:-} ]] || return 0
    echo "--- lost pings per pair and second (seconds before now):"
    curl -fsS --get "$PROM_API/query_range" --data-urlencode 'query=rdma_mesh_pings_lost_total' \
        --data-urlencode "start=$(($(date +%s) - 300))" --data-urlencode "end=$(date +%s)" \
        --data-urlencode step=1 | python3 -c '
import json, sys, time
now = time.time()
for r in json.load(sys.stdin)["data"]["result"]:
    m, v = r["metric"], r["values"]
    rises = [f"-{now - t:.0f}s:+{float(b) - float(a):g}" for (_, a), (t, b) in zip(v, v[1:]) if b != a]
    print(m["instance"], "->", m["peer"], " ".join(rises) or "none")'
}

# The mesh dashboard on the data of this run, while the trunk is cut: every panel's query and
# variable returns data (both path classes, both ToRs, the lossy ToR pairs), every mesh recording
# rule has series and every alert evaluates. Two families list only what the trunk cut does not
# make: unreachable hosts (the host cut shows those, above) and loss no ToR pair explains.
check_mesh_dashboard() {
    mkdir -p "$work/dashboards"
    cp "$LAB_TEST_ROOT"/dashboards/grafana/ibprobe-mesh.json "$work/dashboards/"
    python3 "$RUNNER" check --prometheus "${PROM_API%/api/v1}" --dashboards "$work/dashboards" \
        --rules "$work"/rules/*.rules.yml --range "$WINDOW" --range-seconds 60 \
        --rate-interval 10s --wait 30 --fire "$TOR_ALERT" --quiet "$HOST_ALERT" \
        --empty-ok "ibprobe:mesh_host_unreachable=no host is unreachable while only the trunk is cut" \
        --empty-ok "ibprobe:mesh_pair_unexplained_loss_ratio:rate5m=the trunk cut explains every pair's loss" \
        || fail "the mesh dashboard's queries or the mesh rules returned no data (above)"
    note "the mesh dashboard's queries and the mesh rules return data over the trunk cut"
}

main() {
    scratch_begin ibprobe-lab-mesh-fabric
    lab_test_begin
    trap 'rc=$?; set +e; ((rc == 0)) || dump_mesh_state >&2; scratch_cleanup; (exit $rc); lab_test_end' EXIT
    lab_test_up fabric --forward 9470
    write_configs
    start_exporters
    check_pings_flow
    start_prometheus
    check_host_cut
    check_trunk_cut
}

main "$@"
