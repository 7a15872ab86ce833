#!/bin/bash
#
# The remote_pma collector where it cannot work, one-host mode: rxe0 is a RoCE port. The kernel
# still gives it a umad device (ib_umad serves every port with MAD support, RoCE included, for
# the CM on QP1), but a RoCE port has no LIDs and no subnet to send PerfMgt MADs into. With the
# collector enabled and a target configured, the exporter must say so once in its log, export
# ibprobe_remote_pma_up 0 with the reason on every scrape, count no errors, and leave the other
# collectors exactly as they are.
#
# Environment: see lab-common.sh; IBPROBE_EXPORTER is the exporter binary.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}

metric_value() { # EXPOSITION SERIES
    awk -v s="$2" 'index($0, s " ") == 1 { print $NF; found = 1; exit } END { exit !found }' <<<"$1"
}

# What the VM offers for MADs: umad devices, the ports they serve and those ports' link layer.
# Prints the reason the collector must give.
umad_inventory() {
    local inventory
    # shellcheck disable=SC2016  # expanded in the VM
    inventory=$(lab exec A -- bash -c '
        shopt -s nullglob
        for dev in /sys/class/infiniband_mad/umad*; do
            ibdev=$(<"$dev/ibdev") port=$(<"$dev/port")
            echo "$(basename "$dev") $ibdev $port $(<"/sys/class/infiniband/$ibdev/ports/$port/link_layer")"
        done') || fail "cannot list the umad devices of VM A"
    if [[ -z $inventory ]]; then
        note "VM A has no umad device" >&2
        echo no_umad
        return
    fi
    while read -r dev ibdev port link_layer; do
        note "VM A: /dev/infiniband/$dev serves $ibdev port $port ($link_layer)" >&2
        [[ $link_layer != InfiniBand ]] || fail "VM A unexpectedly has an InfiniBand port: $ibdev"
    done <<<"$inventory"
    echo not_infiniband
}

main() {
    lab_test_begin
    lab_test_up one --forward 9470
    local reason
    reason=$(umad_inventory)

    lab spawn --name exporter A -- "$EXPORTER" --web.listen-address=:9470 --collector.remote_pma \
        --collector.remote_pma.target=1:1 --collector.remote_pma.target=2:all >/dev/null \
        || fail "cannot start the exporter"
    local url deadline
    url="http://127.0.0.1:$(lab port A 9470)"
    deadline=$((SECONDS + 60))
    until curl -fsS -o /dev/null "$url/-/ready" 2>/dev/null; do
        ((SECONDS < deadline)) || fail "exporter not ready: $(lab output --stderr A exporter)"
        sleep 0.5
    done

    local scrape body status collector
    for scrape in 1 2 3; do
        status=$(curl -sS -o /dev/null -w '%{http_code}' "$url/metrics")
        [[ $status == 200 ]] || fail "scrape $scrape answered $status"
    done
    body=$(curl -fsS "$url/metrics") || fail "scrape failed"
    note "4 scrapes answered 200"

    [[ $(metric_value "$body" "ibprobe_remote_pma_up{reason=\"$reason\"}") == 0 ]] \
        || fail "no ibprobe_remote_pma_up{reason=\"$reason\"} 0: $(grep '^ibprobe_remote_pma_up' <<<"$body")"
    [[ $(grep -c '^ibprobe_remote_pma_up' <<<"$body") == 1 ]] || fail "more than one ibprobe_remote_pma_up series"
    [[ $(metric_value "$body" 'ibprobe_scrape_collector_success{collector="remote_pma"}') == 1 ]] \
        || fail "remote_pma reported a failed collection"
    ! grep -q '^ibprobe_scrape_errors_total' <<<"$body" \
        || fail "dropped inputs counted: $(grep '^ibprobe_scrape_errors_total' <<<"$body")"
    ! grep -q '^rdma_.*lid="' <<<"$body" || fail "remote series exported without a fabric"
    note "exposition: ibprobe_remote_pma_up{reason=\"$reason\"} 0, no errors, no remote series"

    for collector in port_counters hw_counters port_info gids; do
        [[ $(metric_value "$body" "ibprobe_scrape_collector_success{collector=\"$collector\"}") == 1 ]] \
            || fail "collector $collector did not succeed"
    done
    [[ $(metric_value "$body" 'rdma_port_state{device="rxe0",port="1"}') == 4 ]] \
        || fail "rxe0 port 1 not ACTIVE in the exposition"
    grep -q '^rdma_port_hw_stat_total{device="rxe0",port="1",counter="sent_pkts",class="informative"}' <<<"$body" \
        || fail "rxe0 hw_counters missing"
    if command -v promtool >/dev/null; then
        local lint
        lint=$(promtool check metrics <<<"$body" 2>&1) || fail "promtool check metrics: $lint"
    fi
    note "other collectors unaffected: rxe0 ACTIVE, hw_counters exported, all collectors succeed"

    local log reports
    log=$(lab output --stderr A exporter)
    reports=$(grep -c 'remote_pma:' <<<"$log" || true)
    ((reports == 1)) || fail "expected one remote_pma log line, got $reports: $log"
    note "log, once: $(grep 'remote_pma:' <<<"$log" | cut -d' ' -f2-)"
    lab kill A exporter
}

main "$@"
