#!/bin/bash
#
# Every shipped query against real data: a Prometheus server on the host scrapes
#   - the exporters of both lab VMs (real rxe devices), with the shipped /metrics job,
#   - a probe job built from the shipped probe-mesh scrape configuration: VM B's exporter probes
#     VM A's responder (write_lat and write_bw), and a peer where no responder listens, so
#     failed probes and their reasons are real too,
#   - an exporter on the host reading a generated sysfs tree (rxe has no PortCounters, so the
#     data and error counter families come from there); the test moves its counters like
#     traffic, raises error counters, takes a port DOWN, lowers a port's rate and feeds a
#     malformed file,
#   - an address where nothing listens (an exporter that is down),
# and loads the shipped recording and alerting rules with their windows shortened to the
# minutes this test runs. Then tests/dashboards/run_queries.py runs every dashboard panel
# query, every dashboard variable, every recording rule and every alert expression against
# Prometheus's HTTP API: each must return data, and the alerts the test provoked must fire
# (and the ones it did not must stay quiet).
#
# Environment: see lab-common.sh; IBPROBE_EXPORTER is the exporter binary, IBPROBE_FIXTURE the
# sysfs tree generator.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"
# shellcheck source=tests/lib/scratch.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/../lib/scratch.sh"

EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
FIXTURE=${IBPROBE_FIXTURE:?set IBPROBE_FIXTURE to the ibprobe_fixture binary}
ROOT=$LAB_TEST_ROOT
RUNNER=$ROOT/tests/dashboards/run_queries.py
# Range selectors of the shipped rules become this window: long enough to hold the test's
# baseline and its provoked changes, short enough that a change shows at once. Alerts must hold
# for HOLD (several scrapes), so one slow scrape of a TCG VM does not count as an outage.
WINDOW=3m
HOLD=6s

wait_http() { # URL SECONDS WHAT
    local deadline=$((SECONDS + $2))
    until curl -fsS -o /dev/null "$1" 2>/dev/null; do
        ((SECONDS < deadline)) || fail "$3 not ready at $1"
        sleep 0.5
    done
}

start_lab_exporters() {
    local host
    # Short probe modules: under TCG a latency round trip takes milliseconds, and the default
    # 5000 x 64 KiB write_bw many seconds.
    cat >"$work/ibprobe.yml" <<YAML
modules:
  write_lat:
    kind: write_lat
    iterations: 20
    timeout: 30s
    rc: {timeout: $LAB_QP_TIMEOUT}
  write_bw:
    kind: write_bw
    iterations: 50
    timeout: 30s
    rc: {timeout: $LAB_QP_TIMEOUT}
YAML
    for host in A B; do
        lab spawn --name exporter "$host" -- "$EXPORTER" --web.listen-address=:9470 \
            --config.file="$work/ibprobe.yml" >/dev/null \
            || fail "cannot start the exporter in VM $host"
    done
    for host in A B; do
        wait_http "$(exporter_url "$host")/-/ready" 60 "exporter in VM $host"
    done
    lab_wait_listen A 9471
    note "exporters serve in both VMs; A's responder listens on $(lab addr A):9471"
}

start_fixture_exporter() {
    "$FIXTURE" "$work/sys" >/dev/null
    FIXTURE_PORT=$(free_port)
    "$EXPORTER" --web.listen-address="127.0.0.1:$FIXTURE_PORT" --path.sysfs="$work/sys" \
        --probe.responder-address=127.0.0.1:0 2>"$work/fixture-exporter.log" &
    pids+=($!)
    wait_http "http://127.0.0.1:$FIXTURE_PORT/-/ready" 30 "fixture exporter"
}

# The Prometheus configuration: the shipped jobs and relabeling, with this lab's targets and
# short intervals. __lab_instance names each target (every forwarded port is on 127.0.0.1,
# which the shipped instance relabeling would fold into one instance).
write_prometheus_config() {
    local dead_port
    dead_port=$(free_port)
    python3 - "$ROOT/dashboards/prometheus" "$work" "$(lab port A 9470)" "$(lab port B 9470)" \
        "$FIXTURE_PORT" "$dead_port" "$(lab addr A)" <<'PY'
import os, sys, yaml
shipped, work, port_a, port_b, port_fixture, port_dead, addr_a = sys.argv[1:]
metrics = yaml.safe_load(open(os.path.join(shipped, "scrape-ibprobe.yml")))["scrape_configs"]
mesh = yaml.safe_load(open(os.path.join(shipped, "scrape-ibprobe-probes.yml")))["scrape_configs"]
name_instance = {"source_labels": ["__lab_instance"], "regex": "(.+)", "target_label": "instance"}

(job,) = [j for j in metrics if j["job_name"] == "ibprobe"]
job.update(scrape_interval="2s", scrape_timeout="2s")
job["static_configs"] = [
    {"targets": [f"127.0.0.1:{port}"], "labels": {"__lab_instance": name}}
    for name, port in (("lab-a", port_a), ("lab-b", port_b), ("fixture", port_fixture),
                       ("dead", port_dead))]
job["relabel_configs"] = job.get("relabel_configs", []) + [name_instance]

probe_jobs = {j["job_name"]: j for j in mesh}
jobs = [job]
# Different intervals keep the two modules from always colliding on B's device.
for name, interval, timeout, peers in (
        ("ibprobe_probe_write_lat", "15s", "14s", [f"{addr_a}:9471", f"{addr_a}:9"]),
        ("ibprobe_probe_write_bw", "20s", "19s", [f"{addr_a}:9471"])):
    j = dict(probe_jobs[name])
    j.update(scrape_interval=interval, scrape_timeout=timeout)
    j["static_configs"] = [{"targets": peers,
                            "labels": {"__prober": f"127.0.0.1:{port_b}", "__lab_instance": "lab-b"}}]
    j["relabel_configs"] = list(j["relabel_configs"]) + [name_instance]
    jobs.append(j)

rules = sorted(os.path.join(work, "rules", f) for f in os.listdir(os.path.join(work, "rules")))
config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
          "rule_files": rules, "scrape_configs": jobs}
with open(os.path.join(work, "prometheus.yml"), "w") as f:
    yaml.safe_dump(config, f, sort_keys=False)
PY
}

start_prometheus() {
    mkdir -p "$work/rules" "$work/dashboards"
    # The switch-port rules and dashboard need a fabric of switches (tests/fabric checks them on
    # a simulated one), and this test runs no probe mesh, so the mesh's would have no data. The
    # link-health rules need transceivers and FEC statistics, which virtio_net has not
    # (tests/rules checks them).
    local host_rules=()
    for f in "$ROOT"/dashboards/prometheus/*.rules.yml; do
        [[ $f == *-fabric.rules.yml || $f == *-mesh.rules.yml || $f == *-link-health.rules.yml ]] \
            || host_rules+=("$f")
    done
    cp "$ROOT"/dashboards/grafana/ibprobe-*.json "$work/dashboards/"
    rm "$work/dashboards/ibprobe-switch-ports.json" "$work/dashboards/ibprobe-mesh.json"
    python3 "$RUNNER" adapt-rules "$work/rules" "${host_rules[@]}" \
        --window "$WINDOW" --for "$HOLD"
    write_prometheus_config
    promtool check config "$work/prometheus.yml" >"$work/promtool.log" 2>&1 \
        || fail "promtool check config: $(cat "$work/promtool.log")"
    PROM_PORT=$(free_port)
    prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
        --web.listen-address="127.0.0.1:$PROM_PORT" >"$work/prometheus.log" 2>&1 &
    pids+=($!)
    PROM_API=http://127.0.0.1:$PROM_PORT/api/v1
    wait_http "http://127.0.0.1:$PROM_PORT/-/ready" 60 "Prometheus"
    local deadline=$((SECONDS + 60))
    until [[ $(prom_query 'count(up{job="ibprobe"} == 1)') == 3 ]]; do
        ((SECONDS < deadline)) || fail "Prometheus does not scrape the three exporters: $(tail -5 "$work/prometheus.log")"
        sleep 0.5
    done
    note "Prometheus scrapes lab-a, lab-b and the fixture exporter; rules loaded with $WINDOW windows, for $HOLD"
}

counters() { echo "$work/sys/class/infiniband/$1/ports/$2/counters"; }

add_to() { # FILE AMOUNT
    local v
    v=$(<"$1")
    echo $((v + $2)) >"$1"
}

# Data counters move like traffic (in 4-byte words, as the PMA counts) until the test ends.
start_traffic() {
    (
        while :; do
            add_to "$(counters mlx5_0 1)/port_xmit_data" 250000000
            add_to "$(counters mlx5_0 1)/port_rcv_data" 100000000
            add_to "$(counters mlx5_1 1)/port_xmit_data" 50000000
            add_to "$(counters mlx5_1 1)/port_rcv_data" 200000000
            add_to "$(counters mlx5_0 1)/port_xmit_packets" 60000
            add_to "$(counters mlx5_0 1)/port_rcv_packets" 30000
            add_to "$(counters hfi1_0 1)/port_xmit_wait" 1000
            sleep 1
        done
    ) &
    pids+=($!)
}

# The faults the alerts are for, each on its own port so that each alert's labels say which.
provoke_faults() {
    add_to "$(counters mlx5_0 1)/symbol_error" 50
    add_to "$(counters mlx5_0 1)/link_error_recovery" 1
    add_to "$(counters mlx5_0 2)/link_downed" 1
    add_to "$(counters mlx5_1 1)/excessive_buffer_overrun_errors" 3
    add_to "$(counters hfi1_0 1)/port_rcv_errors" 5
    local port2=$work/sys/class/infiniband/mlx5_0/ports/2
    echo "1: DOWN" >"$port2/state"
    echo "2: Polling" >"$port2/phys_state"
    echo "100 Gb/sec (4X EDR)" >"$work/sys/class/infiniband/mlx5_0/ports/1/rate"
    echo "not a number" >"$(counters hfi1_0 1)/port_xmit_discards"
    note "faults provoked in the fixture tree"
}

wait_for_probes() {
    local deadline=$((SECONDS + 240)) module got
    for module in write_lat write_bw; do
        until got=$(prom_query "max(max_over_time(probe_success{job=\"ibprobe_probe_$module\",target=\"$(lab addr A):9471\"}[$WINDOW]))") \
            && [[ $got == 1 ]]; do
            ((SECONDS < deadline)) || fail "no successful $module probe from B to A; failures: $(
                curl -s --get "$PROM_API/query" --data-urlencode \
                    "query=rdma_probe_failure{job=\"ibprobe_probe_$module\"}" | head -c 600)"
            sleep 2
        done
        note "Prometheus holds a successful $module run from B to A"
    done
    until [[ $(prom_query "max(max_over_time(rdma_probe_failure{target=\"$(lab addr A):9\"}[$WINDOW]))") == 1 ]]; do
        ((SECONDS < deadline)) || fail "the probe to a closed port never reported a failure reason"
        sleep 2
    done
    local reasons
    reasons=$(curl -fsS --get "$PROM_API/query" \
        --data-urlencode "query=rdma_probe_failure{target=\"$(lab addr A):9\"}" \
        | python3 -c 'import json, sys; print(*sorted({r["metric"].get("reason", "?") for r in json.load(sys.stdin)["data"]["result"]}))')
    note "and failed runs to a closed port, reason: $reasons"
}

main() {
    scratch_begin ibprobe-lab-queries
    # The VMs run the exporter with a config in $work: the host's /tmp is visible in them.
    chmod 755 "$work"
    lab_test_begin
    trap 'rc=$?; set +e; scratch_cleanup; (exit $rc); lab_test_end' EXIT
    lab_test_up two --forward 9470
    start_lab_exporters
    start_fixture_exporter
    start_prometheus
    start_traffic
    # A baseline before the faults, which increase() and the 7-day maxima need: two scrapes of
    # every exporter after the traffic started, and the rules evaluated on them.
    prom_await scrape "$(now_ms)"
    prom_await scrape "$(now_ms)"
    prom_await evaluation "$(now_ms)"
    provoke_faults
    wait_for_probes
    # The last change scraped, then evaluated three times: a recording rule read by another
    # group's rule is a group behind it.
    prom_await scrape "$(now_ms)"
    local round
    for round in 1 2 3; do prom_await evaluation "$(now_ms)"; done

    local a_peer empty_ok=()
    a_peer="$(lab addr A):9"
    # A probe's link bytes/s come from the data-counter delta of the sending port; rxe has no
    # PortCounters, so probes between the VMs cannot produce them.
    if [[ -z $(prom_query 'count(rdma_port_data_transmitted_bytes_total{instance=~"lab-.*"})') ]]; then
        empty_ok=(--empty-ok "rdma_probe_link_bytes_per_second=rxe has no PortCounters, so no data-counter delta")
    fi
    # The ethtool collector is off by default, and virtio_net has no pause statistics anyway.
    empty_ok+=(--empty-ok "rdma_port_ethtool_stat_total=no ethtool collector here, and virtio_net has no pause statistics")
    # virtio_net has no transceiver and no FEC statistics (rdma_port_module_up and
    # rdma_port_fec_up say so), and the link-health rules are not loaded here.
    local link_health
    for link_health in ibprobe:port_pre_fec_ber:rate5m ibprobe:port_pre_fec_ber_threshold \
        ibprobe:port_module_rx_power_dbm ibprobe:port_module_rx_power_threshold_dbm \
        rdma_port_module_temperature_celsius rdma_port_module_temperature_threshold_celsius \
        rdma_port_module_info; do
        empty_ok+=(--empty-ok "$link_health=virtio_net has no transceiver and no FEC statistics")
    done
    # No alert reaches a receiver here; roce_loss_two_host checks those panels with a verdict.
    local alert_family
    for alert_family in ibprobe_alert_probe_info ibprobe_alert_probe_error_counter_delta \
        ibprobe_alert_probes_dropped_total; do
        empty_ok+=(--empty-ok "$alert_family=no alert is sent to a receiver in this test")
    done
    python3 "$RUNNER" check --prometheus "http://127.0.0.1:$PROM_PORT" "${empty_ok[@]}" \
        --dashboards "$work/dashboards" --rules "$work"/rules/*.rules.yml \
        --range "$WINDOW" --range-seconds 180 --rate-interval 10s --wait 60 \
        --fire 'IbprobeSymbolErrorsRising{instance="fixture",device="mlx5_0",port="1"}' \
        --fire 'IbprobeLinkErrorRecovery{instance="fixture",device="mlx5_0",port="1"}' \
        --quiet 'IbprobeLinkDowned{instance="fixture",device="mlx5_0",port="1"}' \
        --fire 'IbprobeLinkDowned{instance="fixture",device="mlx5_0",port="2"}' \
        --quiet 'IbprobeLinkErrorRecovery{instance="fixture",device="mlx5_0",port="2"}' \
        --fire 'IbprobeBufferOverruns{instance="fixture",device="mlx5_1",port="1"}' \
        --fire 'IbprobePortErrorsRising{instance="fixture",device="hfi1_0",counter="port_rcv_errors"}' \
        --fire 'IbprobePortNotActive{instance="fixture",device="mlx5_0",port="2"}' \
        --quiet 'IbprobePortFlapping{instance="fixture",device="mlx5_0",port="2"}' \
        --quiet 'IbprobePortFlapping{instance="lab-a"}' \
        --quiet 'IbprobePortNotActive{instance="lab-a"}' \
        --fire 'IbprobeRateBelowExpected{instance="fixture",device="mlx5_0",port="1"}' \
        --quiet 'IbprobeRateBelowExpected{instance="lab-a"}' \
        --fire 'IbprobeCounterSaturated{instance="fixture",device="mthca0"}' \
        --fire "IbprobeProbeFailing{instance=\"lab-b\",target=\"$a_peer\",module=\"write_lat\"}" \
        --fire 'IbprobeExporterDown{instance="dead"}' \
        --quiet 'IbprobeExporterDown{instance="lab-a"}' \
        --fire 'IbprobeScrapeErrors{instance="fixture",reason="malformed"}' \
        || fail "dashboard or rule queries without data (above)"
}

main "$@"
