#!/bin/bash
#
# The exporter on real rxe devices, two-host mode: ibprobe_exporter runs in both VMs, a
# Prometheus server on the host scrapes them through the forwarded ports while perftest's
# ib_write_bw runs from B to A, and the rxe hw_counters must be seen rising during the run.
# Also checks the exposition of a real device: promtool-clean, no dropped inputs, port ACTIVE,
# and the exporter's values equal to what sysfs shows in the VM; then a device registered again
# under the same name, and one renamed, are served as what they now are, their port events read
# under the new name.
#
# Environment: see lab-common.sh; IBPROBE_EXPORTER is the exporter binary.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"
# shellcheck source=tests/lib/scratch.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/../lib/scratch.sh"

EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
PROM_DIR=""
PROM_PID=""

stop_prometheus() {
    [[ -n $PROM_PID ]] && kill "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null
    [[ -n $PROM_DIR ]] && rm -rf "$PROM_DIR"
    return 0
}

start_exporters() {
    local host
    lab_start_exporters "$EXPORTER"
    for host in A B; do
        note "exporter in VM $host serves $(exporter_url "$host")/metrics"
    done
}

# Value of one sample line of an exposition, by its exact series text.
metric_value() { # EXPOSITION SERIES
    awk -v s="$2" 'index($0, s " ") == 1 { print $NF; found = 1; exit } END { exit !found }' <<<"$1"
}

check_exposition() { # HOST
    local host=$1 body gid
    body=$(curl -fsS "$(exporter_url "$host")/metrics") || fail "scrape of VM $host failed"
    local lint
    lint=$(promtool check metrics <<<"$body" 2>&1) || fail "promtool check metrics (VM $host): $lint"
    [[ -z $lint ]] || fail "promtool check metrics (VM $host) reported: $lint"
    [[ $(metric_value "$body" 'rdma_port_state{device="rxe0",port="1"}') == 4 ]] \
        || fail "VM $host: rxe0 port 1 not ACTIVE in the exposition"
    [[ $(metric_value "$body" 'rdma_port_physical_state{device="rxe0",port="1"}') == 5 ]] \
        || fail "VM $host: rxe0 port 1 not LinkUp in the exposition"
    grep -q '^rdma_port_info{device="rxe0",port="1",link_layer="Ethernet",netdev="eth0",' <<<"$body" \
        || fail "VM $host: rdma_port_info does not name eth0: $(grep '^rdma_port_info' <<<"$body")"
    gid=$(lab gid "$host")
    grep -q "^rdma_port_gid_info{device=\"rxe0\",port=\"1\",index=\"$gid\",.*type=\"RoCE v2\",netdev=\"eth0\"} 1" <<<"$body" \
        || fail "VM $host: RoCE v2 GID $gid missing: $(grep '^rdma_port_gid_info' <<<"$body")"
    # A real device reads cleanly: empty GID entries (EINVAL) are not errors, and rxe simply has
    # no counters/ directory.
    ! grep -q '^ibprobe_scrape_errors_total' <<<"$body" \
        || fail "VM $host dropped inputs: $(grep '^ibprobe_scrape_errors_total' <<<"$body")"
    ! grep -q '^ibprobe_scrape_collector_success{.*} 0' <<<"$body" || fail "VM $host: a collector failed"
    ! grep -q '^rdma_port_errors_total' <<<"$body" || fail "VM $host: rxe has no PortCounters"
    note "VM $host: exposition promtool-clean, $(grep -c '^rdma_' <<<"$body") rdma_ series, no dropped inputs"
}

# On an idle link, the exporter reads exactly what sysfs holds.
check_values_match_sysfs() { # HOST COUNTER
    local host=$1 counter=$2 series body sysfs
    # rxe's packet counters are informative (collectors/src/hw_counter_classes.cpp).
    series="rdma_port_hw_stat_total{device=\"rxe0\",port=\"1\",counter=\"$counter\",class=\"informative\"}"
    body=$(curl -fsS "$(exporter_url "$host")/metrics")
    sysfs=$(lab_hw_counter "$host" "$counter")
    [[ $(metric_value "$body" "$series") == "$sysfs" ]] \
        || fail "VM $host $counter: exporter $(metric_value "$body" "$series"), sysfs $sysfs"
    note "VM $host $counter: exporter = sysfs = $sysfs"
}

# The class entry of a device: its inode (the symlink's own) or "" when there is none.
class_entry_inode() { # HOST DEVICE
    lab exec --timeout 60 "$1" -- sh -c "stat -c %i /sys/class/infiniband/$2 2>/dev/null" || true
}

wait_port_active() { # HOST DEVICE
    local deadline=$((SECONDS + 30))
    until lab exec --timeout 60 "$1" -- grep -q ACTIVE "/sys/class/infiniband/$2/ports/1/state"; do
        ((SECONDS < deadline)) || fail "VM $1: $2 port 1 did not become ACTIVE"
        sleep 0.2
    done
}

# The port_events collector reads DEVICE's async events: a device renamed in place is followed
# under its new name within a second or two (it reads the uverbs node's name every second).
wait_events_read() { # HOST DEVICE
    local deadline=$((SECONDS + 10))
    until [[ $(metric_value "$(curl -fsS "$(exporter_url "$1")/metrics")" \
        "rdma_device_events_up{device=\"$2\"}") == 1 ]]; do
        ((SECONDS < deadline)) || fail "VM $1: $2's port events are not read"
        sleep 0.5
    done
}

# A device registered again under the same name (rdma link delete, add) and a device renamed
# (rdma dev set NAME name NEW) are each served as what they now are, with nothing dropped: the
# exporter knows a device again by its class entry's inode, which the kernel makes anew for a
# registration.
check_device_registered_again_and_renamed() { # HOST
    local host=$1 entry_before entry_after entry_renamed counted_before body
    counted_before=$(lab_hw_counter "$host" rcvd_pkts)
    ((counted_before > 0)) || fail "VM $host: rxe0 received nothing before it was registered again"
    curl -fsS "$(exporter_url "$host")/metrics" >/dev/null || fail "scrape of VM $host failed"
    entry_before=$(class_entry_inode "$host" rxe0)
    lab exec --timeout 60 "$host" -- sh -c 'rdma link delete rxe0 && rdma link add rxe0 type rxe netdev eth0' \
        || fail "VM $host: cannot register rxe0 again"
    wait_port_active "$host" rxe0
    entry_after=$(class_entry_inode "$host" rxe0)
    [[ -n $entry_before && $entry_after != "$entry_before" ]] \
        || fail "VM $host: rxe0 registered again kept its class entry's inode ($entry_before, $entry_after)"
    check_values_match_sysfs "$host" rcvd_pkts
    body=$(curl -fsS "$(exporter_url "$host")/metrics") || fail "scrape of VM $host failed"
    local series='rdma_port_hw_stat_total{device="rxe0",port="1",counter="rcvd_pkts",class="informative"}'
    (($(metric_value "$body" "$series") < counted_before)) \
        || fail "VM $host: rxe0 registered again still shows the old device's rcvd_pkts"
    note "VM $host: rxe0 registered again (class entry inode $entry_before, then $entry_after): rcvd_pkts $counted_before, then $(metric_value "$body" "$series")"

    lab exec --timeout 60 "$host" -- rdma dev set rxe0 name rxe7 || fail "VM $host: cannot rename rxe0"
    entry_renamed=$(class_entry_inode "$host" rxe7)
    body=$(curl -fsS "$(exporter_url "$host")/metrics") || fail "scrape of VM $host failed"
    [[ $(metric_value "$body" 'rdma_port_state{device="rxe7",port="1"}') == 4 ]] \
        || fail "VM $host: renamed rxe7 not served: $(grep '^rdma_port_state' <<<"$body")"
    ! grep -q 'device="rxe0"' <<<"$body" || fail "VM $host: rxe0 still served after its rename"
    wait_events_read "$host" rxe7
    lab exec --timeout 60 "$host" -- rdma dev set rxe7 name rxe0 || fail "VM $host: cannot rename rxe7 back"
    body=$(curl -fsS "$(exporter_url "$host")/metrics") || fail "scrape of VM $host failed"
    [[ $(metric_value "$body" 'rdma_port_state{device="rxe0",port="1"}') == 4 ]] \
        || fail "VM $host: rxe0 not served after renamed back"
    ! grep -q 'device="rxe7"' <<<"$body" || fail "VM $host: rxe7 still served after its rename back"
    wait_events_read "$host" rxe0
    ! grep -q '^ibprobe_scrape_errors_total' <<<"$body" \
        || fail "VM $host dropped inputs: $(grep '^ibprobe_scrape_errors_total' <<<"$body")"
    note "VM $host: rxe0 renamed rxe7 (class entry inode $entry_after, then $entry_renamed) and back, served under each name"
}

start_prometheus() {
    PROM_DIR=$(mktemp -d)
    local port
    port=$(free_port)
    cat >"$PROM_DIR/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: lab
    static_configs:
      - targets: ["127.0.0.1:$(lab port A 9470)"]
        labels: {lab_host: A}
      - targets: ["127.0.0.1:$(lab port B 9470)"]
        labels: {lab_host: B}
YAML
    prometheus --config.file="$PROM_DIR/prometheus.yml" --storage.tsdb.path="$PROM_DIR/tsdb" \
        --web.listen-address="127.0.0.1:$port" >"$PROM_DIR/log" 2>&1 &
    PROM_PID=$!
    PROM_API=http://127.0.0.1:$port/api/v1
    local deadline=$((SECONDS + 60))
    until [[ $(prom_query 'count(up{job="lab"} == 1)') == 2 ]]; do
        ((SECONDS < deadline)) || fail "Prometheus did not scrape both lab exporters: $(tail -5 "$PROM_DIR/log")"
        sleep 0.5
    done
    note "Prometheus scrapes both lab exporters"
}

main() {
    lab_test_begin
    # lab_test_end reports and returns the status it finds in $?: hand it the test's own.
    trap 'rc=$?; set +e; stop_prometheus; (exit $rc); lab_test_end' EXIT
    lab_test_up two --forward 9470
    start_exporters
    check_exposition A
    check_exposition B
    check_values_match_sysfs A rcvd_pkts
    check_values_match_sysfs B sent_pkts

    start_prometheus
    local t
    t=$(now_ms)
    lab_perftest_pair A B ib_write_bw -F -D 4 >/dev/null
    note "ib_write_bw -D 4 from B to A: $(seconds_since "$t") s"
    # Every exporter scraped once more after the run: what the queries read includes all of it.
    prom_await scrape "$(now_ms)"

    local window=$((($(now_ms) - LAB_TEST_START_MS) / 1000 + 5))s host counter changes rise
    for host in A B; do
        for counter in sent_pkts rcvd_pkts; do
            local sel="rdma_port_hw_stat_total{lab_host=\"$host\",device=\"rxe0\",counter=\"$counter\"}"
            changes=$(prom_query "changes(${sel}[$window])")
            rise=$(prom_query "max_over_time(${sel}[$window]) - min_over_time(${sel}[$window])")
            [[ -n $changes && -n $rise ]] || fail "Prometheus has no $counter for VM $host"
            # Rising on two or more scrapes: seen while the traffic ran, not just before/after.
            ((changes >= 2)) || fail "VM $host $counter changed on $changes scrapes only"
            python3 -c "import sys; sys.exit(0 if float('$rise') > 0 else 1)" \
                || fail "VM $host $counter did not rise"
            note "Prometheus: VM $host $counter rose by $rise over $changes scrapes during the run"
        done
    done
    check_values_match_sysfs A rcvd_pkts
    check_values_match_sysfs B sent_pkts

    # Prometheus would scrape while the device is gone: a scrape then drops the device's inputs.
    stop_prometheus
    PROM_PID="" PROM_DIR=""
    check_device_registered_again_and_renamed A
}

main "$@"
