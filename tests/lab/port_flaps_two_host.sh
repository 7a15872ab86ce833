#!/bin/bash
#
# Port events as they happen, on a real rxe device: the exporter in VM A reads rxe0's verbs async
# events (the port_events collector), a Prometheus server on the host scrapes it every second
# with the shipped alerting rules (windows shortened), and A's lab NIC goes down and up three
# times within ten seconds, less than one production scrape interval of 15 s. rxe reports each
# NETDEV_DOWN and NETDEV_UP as IBV_EVENT_PORT_ERR and IBV_EVENT_PORT_ACTIVE (rxe_net.c), so:
#   - the exporter counts exactly three flaps and at least three port_error and port_active
#     events, and the time of the last state change falls within the bounces;
#   - IbprobePortFlapping fires in Prometheus for rxe0 port 1 of A;
#   - every scrape during the bounces held rxe0's rdma_port_state, the scrapes while it was down
#     with state DOWN (the port's series stays while the port is down).
# Then rxe0 is unregistered and registered again: the exporter closes its context within a
# second of the unregistration (rxe sends no event for it; the kernel waits for every open
# context), says why in its log, and the device registered again is read again with its flaps
# still counted.
#
# Environment: see lab-common.sh; IBPROBE_EXPORTER is the exporter binary.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"
# shellcheck source=tests/lib/scratch.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/../lib/scratch.sh"

EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
RUNNER=$LAB_TEST_ROOT/tests/dashboards/run_queries.py
PORT_SERIES='device="rxe0",port="1"'

# Value of one sample line of an exposition, by its exact series text.
metric_value() { # EXPOSITION SERIES
    awk -v s="$2" 'index($0, s " ") == 1 { print $NF; found = 1; exit } END { exit !found }' <<<"$1"
}

scrape_a() { curl -fsS "$(exporter_url A)/metrics" || fail "scrape of VM A failed"; }

vm_time() { lab exec --timeout 60 A -- date +%s.%N; }

check_events_read() {
    local body
    body=$(scrape_a)
    [[ $(metric_value "$body" 'rdma_device_events_up{device="rxe0"}') == 1 ]] \
        || fail "VM A: rxe0's async events are not read: $(grep '^rdma_device_events_up' <<<"$body")"
    [[ $(metric_value "$body" "rdma_port_flaps_total{$PORT_SERIES}") == "$1" ]] \
        || fail "VM A: rxe0 port 1 flaps $(metric_value "$body" "rdma_port_flaps_total{$PORT_SERIES}"), expected $1"
}

start_prometheus() {
    mkdir -p "$work/rules"
    python3 "$RUNNER" adapt-rules "$work/rules" "$LAB_TEST_ROOT/dashboards/prometheus/ibprobe-alerts.rules.yml" \
        --window 1m --for 0s
    local port
    port=$(free_port)
    cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: ["$work/rules/ibprobe-alerts.rules.yml"]
scrape_configs:
  - job_name: ibprobe
    static_configs:
      - targets: ["127.0.0.1:$(lab port A 9470)"]
        labels: {instance: lab-a}
YAML
    promtool check config "$work/prometheus.yml" >"$work/promtool.log" 2>&1 \
        || fail "promtool check config: $(cat "$work/promtool.log")"
    prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
        --web.listen-address="127.0.0.1:$port" >"$work/prometheus.log" 2>&1 &
    pids+=($!)
    PROM_API=http://127.0.0.1:$port/api/v1
    local deadline=$((SECONDS + 60))
    # A baseline of a few scrapes with no flap: increase() needs the counter before it rose.
    until [[ $(prom_query "count_over_time(rdma_port_flaps_total{instance=\"lab-a\",$PORT_SERIES}[1m])") -ge 3 ]] 2>/dev/null; do
        ((SECONDS < deadline)) || fail "Prometheus does not scrape VM A's flaps: $(tail -5 "$work/prometheus.log")"
        sleep 0.5
    done
    note "Prometheus scrapes VM A every second, alert rules with 1m windows"
}

# Three down/up cycles of A's lab NIC, a second up between them; the last down phase lasts 3 s,
# so that scrapes see the port DOWN. Prints the VM's time before the first and after the last.
bounce_lab_nic() {
    # shellcheck disable=SC2016  # expanded in the VM
    lab exec --timeout 60 A -- bash -c '
        date +%s.%N
        ip link set eth0 down; sleep 1; ip link set eth0 up; sleep 1
        ip link set eth0 down; sleep 1; ip link set eth0 up; sleep 1
        ip link set eth0 down; sleep 3; ip link set eth0 up
        date +%s.%N'
}

wait_port_back() {
    local deadline=$((SECONDS + 60))
    # shellcheck disable=SC2016  # expanded in the VM
    until lab exec --timeout 60 A -- bash -c '
        port=/sys/class/infiniband/rxe0/ports/1
        grep -q ACTIVE "$port/state" || exit 1
        for gid in "$port"/gids/*; do
            read -r g <"$gid" 2>/dev/null && [[ $g == *":ffff:0a63:"* ]] && exit 0
        done
        exit 1'; do
        ((SECONDS < deadline)) || fail "VM A: rxe0 not ACTIVE with its lab GID again"
        sleep 0.5
    done
}

check_flaps() { # BOUNCE_START BOUNCE_END
    local body changed port_error port_active
    body=$(scrape_a)
    [[ $(metric_value "$body" "rdma_port_flaps_total{$PORT_SERIES}") == 3 ]] \
        || fail "VM A: rxe0 port 1 counted $(metric_value "$body" "rdma_port_flaps_total{$PORT_SERIES}") flaps, not 3: $(grep -E '^rdma_port_(flaps|events)_total' <<<"$body")"
    port_error=$(metric_value "$body" "rdma_port_events_total{$PORT_SERIES,event=\"port_error\"}")
    port_active=$(metric_value "$body" "rdma_port_events_total{$PORT_SERIES,event=\"port_active\"}")
    ((port_error >= 3 && port_active >= 3)) \
        || fail "VM A: port_error $port_error, port_active $port_active events for three bounces"
    changed=$(metric_value "$body" "rdma_port_last_state_change_timestamp_seconds{$PORT_SERIES}") \
        || fail "VM A: no time of the last state change"
    python3 -c "import sys; sys.exit(0 if $1 <= $changed <= $2 else 1)" \
        || fail "VM A: last state change at $changed, not within the bounces ($1 to $2)"
    note "exporter: 3 flaps, last change $(python3 -c "print(f'{$2 - $changed:.1f}')") s before the bounces ended; events: $(grep '^rdma_port_events_total{device="rxe0"' <<<"$body" | sed -E 's/.*event="([a-z_]+)"} /\1=/' | paste -sd ' ')"
}

check_prometheus() { # BOUNCE_HOST_START_MS
    local deadline=$((SECONDS + 60)) firing
    until firing=$(prom_query "ALERTS{alertname=\"IbprobePortFlapping\",alertstate=\"firing\",instance=\"lab-a\",$PORT_SERIES}") \
        && [[ $firing == 1 ]]; do
        ((SECONDS < deadline)) || fail "IbprobePortFlapping did not fire: $(curl -s "$PROM_API/alerts" | head -c 600)"
        sleep 1
    done
    note "Prometheus: IbprobePortFlapping fires for lab-a rxe0 port 1"
    # Every scrape since the bounces began: up, and rxe0's state in it, DOWN in some.
    local window=$((($(now_ms) - $1) / 1000 + 2))s scrapes states lowest
    scrapes=$(prom_query "count_over_time(up{instance=\"lab-a\"}[$window])")
    states=$(prom_query "count_over_time(rdma_port_state{instance=\"lab-a\",$PORT_SERIES}[$window])")
    lowest=$(prom_query "min_over_time(rdma_port_state{instance=\"lab-a\",$PORT_SERIES}[$window])")
    [[ $(prom_query "min_over_time(up{instance=\"lab-a\"}[$window])") == 1 ]] \
        || fail "a scrape of VM A failed during the bounces"
    [[ -n $scrapes && $scrapes == "$states" ]] \
        || fail "$scrapes scrapes of VM A in the last $window, $states with rxe0's state"
    [[ $lowest == 1 ]] || fail "no scrape saw rxe0 port 1 DOWN during the bounces (lowest state: $lowest)"
    note "Prometheus: $scrapes scrapes in the last $window, each with rxe0's state, DOWN (1) in some"
}

# rxe cannot disassociate a user context: unregistering it waits until the exporter closes its
# context, which the exporter does when its uverbs node goes.
check_device_goes_and_comes_back() {
    local t log
    t=$(now_ms)
    lab exec --timeout 60 A -- rdma link delete rxe0 || fail "VM A: rdma link delete rxe0 failed"
    note "rdma link delete rxe0 took $(seconds_since "$t") s with the exporter's context open"
    lab exec --timeout 60 A -- rdma link add rxe0 type rxe netdev eth0 || fail "VM A: cannot add rxe0 again"
    wait_port_back
    log=$(lab output --stderr A exporter)
    grep -q 'port_events: rxe0: async events no longer read (removed: .* is gone)' <<<"$log" \
        || fail "the exporter did not say why rxe0's events ended: $(grep port_events <<<"$log")"
    local deadline=$((SECONDS + 30))
    until [[ $(metric_value "$(scrape_a)" 'rdma_device_events_up{device="rxe0"}') == 1 ]]; do
        ((SECONDS < deadline)) || fail "VM A: rxe0 registered again is not read again"
        sleep 1
    done
    check_events_read 3
    grep -q 'port_events: rxe0: async events read again' <<<"$(lab output --stderr A exporter)" \
        || fail "the exporter did not say that rxe0's events are read again"
    note "rxe0 unregistered and registered again: said in the log, read again, its 3 flaps kept"
}

main() {
    scratch_begin ibprobe-lab-flaps
    lab_test_begin
    trap 'rc=$?; set +e; scratch_cleanup; (exit $rc); lab_test_end' EXIT
    lab_test_up two --forward 9470
    lab_spawn_exporter A "$EXPORTER"
    lab_wait_exporters A
    check_events_read 0
    start_prometheus

    local times start end host_start
    host_start=$(now_ms)
    times=$(bounce_lab_nic) || fail "VM A: bouncing eth0 failed"
    start=$(head -1 <<<"$times")
    end=$(tail -1 <<<"$times")
    note "eth0 of VM A down and up three times in $(python3 -c "print(f'{$end - $start:.1f}')") s"
    wait_port_back
    check_flaps "$start" "$end"
    check_prometheus "$host_start"
    check_device_goes_and_comes_back
}

main "$@"
