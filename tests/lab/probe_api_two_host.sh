#!/bin/bash
#
# The probe API end to end on real rxe devices, two-host mode. Exporters in both VMs share a probe
# secret; a Prometheus server on the host scrapes VM B's /probe through the standard
# blackbox-style relabel configuration, with VM A's responder as the target, and must record
# successful probes with their figures and counter deltas. Then, against the same exporters:
# - the async API runs a probe from a shell one-liner and returns its JSON result;
# - a responder holding another secret is refused (unauthorized), a target outside
#   allowed_targets gets 403;
# - /metrics keeps answering under sustained concurrent scrapes (wrk) while probes run back to
#   back: every scrape succeeds, and the scrape latency percentiles are printed;
# - SIGTERM mid-probe: the waiting client gets a clear "cancelled" failure, the exporter exits 0,
#   and neither VM keeps a QP of the run.
#
# Environment: see lab-common.sh; IBPROBE_EXPORTER is the exporter, IBPROBE_PROBE ibprobe_probe.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"
# shellcheck source=tests/lib/scratch.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/../lib/scratch.sh"

EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
PROBE=${IBPROBE_PROBE:?set IBPROBE_PROBE to the ibprobe_probe binary}
OTHER_SECRET_PORT=18601
PROM_PID=""

cleanup() {
    local rc=$?
    set +e
    [[ -n $PROM_PID ]] && kill "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null
    rm -rf "$work"
    # lab_test_end reports and returns the status it finds in $?: the test's own.
    (exit "$rc")
    lab_test_end
}

json_field() { # EXPRESSION on the JSON object `r` read from stdin
    python3 -c "import json, sys; r = json.load(sys.stdin); print($1)"
}

write_config() {
    # Short runs: TCG makes every probe slow. write_bw_long outlasts the SIGTERM below.
    cat >"$work/ibprobe.yml" <<YAML
modules:
  write_bw: {kind: write_bw, iterations: 200, timeout: 20s, rc: {timeout: $LAB_QP_TIMEOUT}}
  write_lat: {kind: write_lat, iterations: 200, timeout: 20s, rc: {timeout: $LAB_QP_TIMEOUT}}
  read_lat: {kind: read_lat, iterations: 200, timeout: 20s, rc: {timeout: $LAB_QP_TIMEOUT}}
  write_bw_long: {kind: write_bw, duration: 40s, margin: 1s, timeout: 60s,
                  rc: {timeout: $LAB_QP_TIMEOUT}}
scheduler: {queue_length: 4, history_length: 32}
allowed_targets: [10.99.0.0/24]
YAML
    printf 'lab-shared-secret-0123456789\n' >"$work/secret"
    printf 'some-other-secret-9876543210\n' >"$work/other-secret"
    chmod 600 "$work/secret" "$work/other-secret"
}

start_exporters() {
    lab_start_exporters "$EXPORTER" --config.file="$work/ibprobe.yml" \
        --probe.secret-file="$work/secret"
    lab_wait_listen A 9471
    note "exporters up in both VMs, A's responder on $(lab addr A):9471"
}

start_prometheus() {
    local port
    port=$(free_port)
    # Each module is its own job, as with blackbox_exporter; the target is the peer's responder,
    # the exporter doing the probing is the scrape address.
    local job
    {
        echo "global: {scrape_interval: 10s, scrape_timeout: 9s, evaluation_interval: 10s}"
        echo "scrape_configs:"
        for job in write_bw write_lat; do
            cat <<YAML
  - job_name: ibprobe_probe_$job
    metrics_path: /probe
    params: {module: [$job]}
    static_configs:
      - targets: ["$(lab addr A):9471"]
    relabel_configs:
      - source_labels: [__address__]
        target_label: __param_target
      - source_labels: [__param_target]
        target_label: instance
      - target_label: __address__
        replacement: 127.0.0.1:$(lab port B 9470)
YAML
        done
    } >"$work/prometheus.yml"
    promtool check config "$work/prometheus.yml" >/dev/null || fail "promtool rejects the scrape config"
    prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
        --web.listen-address="127.0.0.1:$port" >"$work/prometheus.log" 2>&1 &
    PROM_PID=$!
    PROM_API=http://127.0.0.1:$port/api/v1
}

greater_than() { python3 -c "import sys; sys.exit(0 if float('$1') > float('$2') else 1)" 2>/dev/null; }

check_prometheus_records_probes() {
    local deadline=$((SECONDS + 180)) job value
    for job in write_bw write_lat; do
        until [[ $(prom_query "probe_success{job=\"ibprobe_probe_$job\"}") == 1 ]]; do
            if ((SECONDS > deadline)); then
                curl -sS "$(exporter_url B)/probe?target=$(lab addr A):9471&module=$job&debug=true" >&2 || true
                fail "Prometheus recorded no successful $job probe: $(tail -3 "$work/prometheus.log")"
            fi
            sleep 2
        done
    done
    value=$(prom_query 'rdma_probe_bandwidth_bytes_per_second{job="ibprobe_probe_write_bw"}')
    greater_than "$value" 0 || fail "no bandwidth recorded: '$value'"
    note "Prometheus: write_bw probe of $(lab addr A):9471 recorded, BW average $value B/s"
    value=$(prom_query 'rdma_probe_latency_seconds{job="ibprobe_probe_write_lat",quantile="0.5"}')
    greater_than "$value" 0 || fail "no t_typical recorded: '$value'"
    note "Prometheus: write_lat t_typical $value s"
    value=$(prom_query 'rdma_probe_counter_delta{job="ibprobe_probe_write_bw",side="local",counter="hw_counters/sent_pkts"}')
    greater_than "$value" 199 || fail "the local sent_pkts delta does not show 200 messages: '$value'"
    value=$(prom_query 'rdma_probe_counter_delta{job="ibprobe_probe_write_bw",side="peer",counter="hw_counters/rcvd_pkts"}')
    greater_than "$value" 199 || fail "the peer rcvd_pkts delta does not show 200 messages: '$value'"
    note "Prometheus: counter deltas of the write_bw probe: peer rcvd_pkts +$value"
    [[ $(prom_query 'rdma_probe_check{job="ibprobe_probe_write_bw",side="both",check="version_match"}') == 1 ]] \
        || fail "version_match check not recorded as passed"
    # /metrics keeps the last result of each (target, module) pair, whatever it was, and counts
    # the successes Prometheus saw.
    local metrics
    metrics=$(curl -fsS "$(exporter_url B)/metrics")
    grep -Eq "^probe_success\{target=\"$(lab addr A):9471\",module=\"write_bw\"\} [01]$" <<<"$metrics" \
        || fail "/metrics lacks the last write_bw result: $(grep '^probe_success' <<<"$metrics")"
    grep -Eq '^ibprobe_probes_total\{module="write_bw",result="success"\} [1-9]' <<<"$metrics" \
        || fail "/metrics does not count the successful write_bw runs: $(grep '^ibprobe_probes_total' <<<"$metrics")"
    note "/metrics: $(grep -c '^probe_success{' <<<"$metrics") last results, $(grep '^ibprobe_probes_total' <<<"$metrics" | tr '\n' ' ')"
    kill "$PROM_PID" && wait "$PROM_PID" 2>/dev/null || true
    PROM_PID=""
}

check_async_api() {
    local url id result
    url=$(exporter_url B)
    # The runbook one-liner of docs/probes.md: start a run, then wait for its result.
    id=$(curl -fsS -XPOST "$url/api/v1/probes" -d "{\"target\":\"$(lab addr A):9471\",\"module\":\"read_lat\"}" | json_field 'r["id"]')
    result=$(curl -fsS "$url/api/v1/probes/$id?wait=60s")
    [[ $(json_field 'r["state"]' <<<"$result") == succeeded ]] || fail "async read_lat did not succeed: $result"
    greater_than "$(json_field 'r["result"]["latency"]["t_typical_us"]' <<<"$result")" 0 \
        || fail "async read_lat has no t_typical: $result"
    note "async API: probe $id read_lat t_typical $(json_field 'r["result"]["latency"]["t_typical_us"]' <<<"$result") us"
    [[ $(curl -fsS "$url/api/v1/probes?limit=1" | json_field 'r["probes"][0]["id"]') == "$id" ]] \
        || fail "the run list does not start with the newest run"
}

check_refusals() {
    local url status result id
    url=$(exporter_url B)
    status=$(curl -sS -o "$work/body" -w '%{http_code}' "$url/probe?target=192.0.2.1:9471&module=write_bw")
    [[ $status == 403 ]] || fail "a target outside allowed_targets got $status: $(cat "$work/body")"
    note "target outside allowed_targets: 403 $(cat "$work/body")"
    lab spawn --name other-secret A -- "$PROBE" serve -d rxe0 --secret-file "$work/other-secret" \
        --listen ":$OTHER_SECRET_PORT" >/dev/null || fail "cannot start a responder with another secret"
    lab_wait_listen A "$OTHER_SECRET_PORT"
    id=$(curl -fsS -XPOST "$url/api/v1/probes" -d "{\"target\":\"$(lab addr A):$OTHER_SECRET_PORT\",\"module\":\"write_lat\"}" | json_field 'r["id"]')
    result=$(curl -fsS "$url/api/v1/probes/$id?wait=60s")
    [[ $(json_field 'r["failure"]["reason"]' <<<"$result") == unauthorized ]] \
        || fail "a responder with another secret was not refused as unauthorized: $result"
    note "responder with another secret: $(json_field 'r["failure"]["message"]' <<<"$result")"
    lab kill A other-secret >/dev/null
}

# Scrape latency of /metrics from wrk's output: "p50 p99".
wrk_percentiles() { awk '$1 == "50%" { p50 = $2 } $1 == "99%" { p99 = $2 } END { print p50, p99 }' <<<"$1"; }

check_wrk_clean() { # OUTPUT WHAT
    echo "$1" | sed 's/^/    wrk: /'
    ! grep -q 'Non-2xx' <<<"$1" || fail "some scrapes failed $2"
    ! grep -q 'Socket errors' <<<"$1" || fail "socket errors $2 (Prometheus' default scrape timeout is 10 s, as is wrk's here)"
}

check_metrics_under_load() {
    local url runs=0 before after idle busy
    url=$(exporter_url B)
    # The same load without probes first: the VM's one emulated CPU is slow, so the figure that
    # matters is how much running probes add to it.
    idle=$(wrk -t2 -c4 -d5s --timeout 10s --latency "$url/metrics")
    check_wrk_clean "$idle" "without probes"
    before=$(curl -fsS "$url/metrics" | awk '/^ibprobe_probes_total/ { s += $NF } END { print s + 0 }')
    # Probes back to back for as long as wrk scrapes: none starts after it has stopped.
    (
        end=$((SECONDS + 20))
        while ((SECONDS < end)); do
            id=$(curl -fsS -XPOST "$url/api/v1/probes" -d "{\"target\":\"$(lab addr A):9471\",\"module\":\"write_bw\"}" \
                | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])') || continue
            curl -fsS -o /dev/null "$url/api/v1/probes/$id?wait=60s" || true
        done
    ) &
    local loop=$!
    busy=$(wrk -t2 -c4 -d20s --timeout 10s --latency "$url/metrics")
    wait "$loop"
    check_wrk_clean "$busy" "while probes ran"
    after=$(curl -fsS "$url/metrics" | awk '/^ibprobe_probes_total/ { s += $NF } END { print s + 0 }')
    runs=$((after - before))
    ((runs >= 2)) || fail "only $runs probes ran during the load test"
    note "load, /metrics from 4 connections: idle $(awk '/requests in/ { print $1 }' <<<"$idle") scrapes in 5 s, p50/p99 $(wrk_percentiles "$idle"); with $runs write_bw probes back to back $(awk '/requests in/ { print $1 }' <<<"$busy") scrapes in 20 s, p50/p99 $(wrk_percentiles "$busy"); every scrape answered 200"
}

# The control connections to A's responder as both VMs' kernels see them: A's listen queue and
# both sides' sockets on port 9471 (lab_test_end adds every VM's drop counters).
control_path_state() {
    local host
    for host in A B; do
        echo "--- VM $host, TCP on port 9471:" >&2
        lab exec --timeout 15 "$host" -- ss -tanoi '( sport = :9471 or dport = :9471 )' >&2 || true
    done
    echo "--- the end of A's exporter log:" >&2
    lab output --stderr A exporter 2>&1 | tail -n 20 >&2 || true
}

check_sigterm_mid_probe() {
    local url id state deadline answer rc=0
    url=$(exporter_url B)
    id=$(curl -fsS -XPOST "$url/api/v1/probes" -d "{\"target\":\"$(lab addr A):9471\",\"module\":\"write_bw_long\"}" | json_field 'r["id"]')
    deadline=$((SECONDS + 60))
    while state=$(curl -fsS "$url/api/v1/probes/$id" | json_field 'r["state"]') || state=unreadable
        [[ $state != running ]]; do
        if [[ $state == failed ]] || ((SECONDS >= deadline)); then
            control_path_state
            fail "write_bw_long did not start ($state): $(curl -fsS "$url/api/v1/probes/$id")"
        fi
        sleep 0.5
    done
    sleep 5 # well inside the 40 s data phase
    curl -sS "$url/api/v1/probes/$id?wait=120s" >"$work/answer" &
    local waiter=$!
    sleep 1
    lab kill B exporter >/dev/null
    wait "$waiter" || fail "the waiting client got no answer when the exporter stopped"
    answer=$(cat "$work/answer")
    [[ $(json_field 'r["state"]' <<<"$answer") == failed &&
        $(json_field 'r["failure"]["reason"]' <<<"$answer") == cancelled ]] \
        || fail "the in-flight request was not answered with a cancelled failure: $answer"
    note "SIGTERM mid-probe: in-flight request answered: $(json_field 'r["failure"]["message"]' <<<"$answer")"
    lab wait --timeout 10 B exporter >/dev/null 2>&1 || rc=$?
    ((rc == 0)) || fail "the exporter exited $rc after SIGTERM: $(lab output --stderr B exporter | tail -5)"
    lab output --stderr B exporter | grep -q 'received signal 15, shutting down' \
        || fail "the exporter did not log its shutdown"
    local host qps
    for host in B A; do
        deadline=$((SECONDS + 30))
        while qps=$(lab exec "$host" -- rdma resource show qp 2>&1 | grep -c 'comm ibprobe_expo' || true); ((qps > 0)); do
            ((SECONDS < deadline)) || fail "VM $host still holds $qps exporter QPs"
            sleep 1
        done
    done
    curl -fsS -o /dev/null "$(exporter_url A)/-/healthy" || fail "the exporter in A stopped serving"
    note "after SIGTERM: exporter B exited 0, no exporter QP left in either VM, A still serving"
}

main() {
    lab_test_begin
    scratch_begin ibprobe-probe-api
    trap cleanup EXIT
    write_config
    lab_test_up two --forward 9470
    start_exporters
    start_prometheus
    check_prometheus_records_probes
    check_async_api
    check_refusals
    check_metrics_under_load
    check_sigterm_mid_probe
}

main "$@"
