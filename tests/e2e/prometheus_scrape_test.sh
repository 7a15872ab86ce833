#!/usr/bin/env bash
# End-to-end: a real Prometheus server scrapes ibprobe_exporter running on a generated sysfs tree;
# the values Prometheus stored are checked against the fixture files themselves, and promtool
# checks the exposition.
# Usage: prometheus_scrape_test.sh EXPORTER_BINARY FIXTURE_BINARY
set -euo pipefail

# shellcheck source=tests/lib/exporter-checks.sh
source "$(dirname "$0")/../lib/exporter-checks.sh"
exporter_test_begin ibprobe-e2e "$@"

# Prometheus logs here too: a failure shows the tail of every log.
fail() {
  echo "FAIL: $*" >&2
  for log in "$work"/*.log; do
    echo "--- $log" >&2
    tail -n 20 "$log" >&2
  done
  exit 1
}

sysfs=$work/sys
"$fixture_bin" "$sysfs"
launch_exporter --log.level=debug
exporter_port=$port
exporter=http://127.0.0.1:$exporter_port

curl -fsS "$exporter/metrics" >"$work/metrics.txt" || fail "scrape failed"
lint=$(promtool check metrics <"$work/metrics.txt" 2>&1) || fail "promtool check metrics: $lint"
[[ -z "$lint" ]] || fail "promtool check metrics reported: $lint"
echo "promtool check metrics: clean ($(grep -vc '^#' "$work/metrics.txt") samples)"

shipped_config=$(dirname "$0")/../../dashboards/prometheus/scrape-ibprobe.yml
promtool check config "$shipped_config" >"$work/promtool-config.log" 2>&1 ||
  fail "promtool check config $shipped_config: $(cat "$work/promtool-config.log")"
echo "promtool check config: shipped scrape configuration is valid"

prometheus_port=$(free_port)
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ibprobe
    static_configs:
      - targets: ["127.0.0.1:$exporter_port"]
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prometheus_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)
api=http://127.0.0.1:$prometheus_port/api/v1
wait_for 60 curl -fsS "http://127.0.0.1:$prometheus_port/-/ready" || fail "prometheus not ready"

# Prints the single value of an instant query, or nothing.
query() {
  curl -fsS --get "$api/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
result = json.load(sys.stdin)["data"]["result"]
if len(result) == 1:
    print(result[0]["value"][1])
elif len(result) > 1:
    print("MULTIPLE")'
}

has_samples() { [[ -n "$(query 'up{job="ibprobe"} == 1')" ]]; }
wait_for 60 has_samples || fail "prometheus never scraped the exporter successfully"

failures=0
expect() {
  local promql=$1 want=$2 got
  got=$(query "$promql")
  if [[ "$got" == "$want" ]]; then
    echo "ok   $promql = $got"
  else
    echo "FAIL $promql = '${got}', want '$want'"
    failures=$((failures + 1))
  fi
}
file_value() { tr -d '\n' <"$sysfs/class/infiniband/$1"; }
times4() { python3 -c "print($1 * 4)"; }

# Data counters: Prometheus holds the file value x 4 (bytes), read straight from the fixture.
expect 'rdma_port_data_transmitted_bytes_total{device="mlx5_0",port="1"}' \
  "$(times4 "$(file_value mlx5_0/ports/1/counters/port_xmit_data)")"
expect 'rdma_port_data_received_bytes_total{device="mlx5_1",port="1"}' \
  "$(times4 "$(file_value mlx5_1/ports/1/counters/port_rcv_data)")"
expect 'rdma_port_packets_transmitted_total{device="mlx5_0",port="2"}' \
  "$(file_value mlx5_0/ports/2/counters/port_xmit_packets)"
expect 'rdma_port_transmit_wait_ticks_total{device="hfi1_0",port="1"}' \
  "$(file_value hfi1_0/ports/1/counters/port_xmit_wait)"
expect 'rdma_port_errors_total{device="mlx5_0",port="2",counter="symbol_error"}' \
  "$(file_value mlx5_0/ports/2/counters/symbol_error)"
expect 'rdma_port_errors_total{device="mthca0",port="1",counter="VL15_dropped"}' \
  "$(file_value mthca0/ports/1/counters/VL15_dropped)"
expect 'rdma_port_hw_stat_total{device="rxe0",port="1",counter="sent_pkts"}' \
  "$(file_value rxe0/ports/1/hw_counters/sent_pkts)"
expect 'rdma_port_hw_stat_total{device="hfi1_0",port="1",counter="DRAM_ECC_Corr_Bank_0"}' \
  "$(file_value 'hfi1_0/ports/1/hw_counters/DRAM ECC Corr,Bank 0')"
expect 'rdma_device_hw_stat_total{device="hfi1_0",counter="TxFlitVL0"}' \
  "$(file_value hfi1_0/hw_counters/TxFlitVL0)"
expect 'rdma_port_pma_saturated{device="mthca0",port="1",counter="port_xmit_data"}' 1
expect 'rdma_port_pma_saturated{device="mthca0",port="1",counter="port_rcv_data"}' 0
expect 'rdma_port_state{device="mlx5_0",port="1"}' 4
expect 'rdma_port_rate_bytes_per_second{device="mlx5_0",port="1"}' 25000000000
expect 'rdma_port_info{device="mlx5_1",port="1",link_layer="Ethernet",netdev="ens1f0"}' 1
expect 'rdma_port_gid_info{device="rxe0",index="3",type="RoCE v2"}' 1
# Every error-class file of the tree is one series.
error_files=$(find "$sysfs/class/infiniband/" -path '*/counters/*' \( -name 'symbol_error' \
  -o -name 'link_*' -o -name '*errors' -o -name 'port_xmit_discards' -o -name 'VL15_dropped' \) \
  -follow | wc -l)
expect 'count(rdma_port_errors_total)' "$error_files"
# The default collectors: port_counters, hw_counters, port_info, gids, link_health, port_events.
expect 'sum(ibprobe_scrape_collector_success)' 6
# No device of the tree is a verbs device here: port events fall back to the state files, and
# every port still has its flaps counter.
expect 'sum(rdma_device_events_up)' 0
expect 'count(rdma_port_flaps_total)' "$(find "$sysfs/class/infiniband/" -mindepth 3 -maxdepth 3 \
  -path '*/ports/*' -follow | wc -l)"
expect 'count(ibprobe_scrape_errors_total)' ""

((failures == 0)) || fail "$failures expectations failed"
echo "e2e: Prometheus stored every expected series"
