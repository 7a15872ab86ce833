#!/bin/bash
#
# The peer's link taken down mid-run, two-host mode: the exporter (and its probe responder) in
# VM A, the initiator (ibprobe_probe) in VM B. `lab.sh link A down` cuts VM A's cable to the lab
# link (carrier loss on its NIC, every frame dropped; VM B sees only silence, as behind a
# switch) while a bandwidth and a latency probe run. Each time:
#   - the initiator fails within seconds of the cut, long before its timeout: the control
#     connection's keepalive finds the path silent, and the reason says so with the rxe
#     retransmissions its port counted meanwhile;
#   - the exporter in VM A keeps answering /metrics and /-/healthy while the link is down;
#   - once the link is back, neither VM holds a probe QP, CQ, MR or PD (rdma resource show);
#   - the exporter accepts a new probe, which succeeds;
#   - neither kernel logged a warning or an oops (rxe's QP teardown did not time out).
# The runs around the cuts, which are not about a failure, use the lab's 1 s ACK timeout
# (LAB_QP_TIMEOUT, lab-common.sh says why); the cut runs keep perftest's 67 ms.
# On rxe a cut path gives no retry-exceeded completion: rxe retransmits forever at retry_cnt 7
# (deploy/lab/README.md, Limits), so without the keepalive only the run's deadline would end it.
#
# Environment: see lab-common.sh; IBPROBE_PROBE is the ibprobe_probe binary, IBPROBE_EXPORTER
# the exporter.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

PROBE=${IBPROBE_PROBE:?set IBPROBE_PROBE to the ibprobe_probe binary}
EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
WEB_PORT=9470
RESPONDER_PORT=9471
# Slack on top of a probe's timeout for the setup handshake, lab.sh job pickup and TCG.
SLACK=15

exporter_url() { echo "http://127.0.0.1:$(lab port A "$WEB_PORT")"; }

start_exporter() {
    lab spawn --name exporter A -- "$EXPORTER" --web.listen-address=":$WEB_PORT" \
        --probe.responder-address=":$RESPONDER_PORT" >/dev/null \
        || fail "cannot start the exporter in VM A"
    lab_wait_listen A "$RESPONDER_PORT"
    lab_wait_listen A "$WEB_PORT"
    lab output --stderr A exporter | grep -q 'probe responder listening on .* for rxe0 port 1' \
        || fail "the exporter did not start its responder: $(lab output --stderr A exporter)"
}

# The exporter process is alive and serves both endpoints.
check_exporter_serving() { # WHEN
    local url body
    url=$(exporter_url)
    job_running A exporter || fail "$1: the exporter in VM A is gone: $(lab jobs A)"
    curl -fsS --max-time 20 "$url/-/healthy" >/dev/null || fail "$1: /-/healthy did not answer"
    body=$(curl -fsS --max-time 30 "$url/metrics") || fail "$1: /metrics did not answer"
    grep -q '^ibprobe_' <<<"$body" || fail "$1: /metrics has no ibprobe_ series"
}

job_running() { # HOST JOB
    lab jobs "$1" | awk -F'\t' -v job="$2" '$1 == job && $2 ~ /^running/ { found = 1 } END { exit !found }'
}

port_state() { # HOST
    lab exec --timeout 60 "$1" -- cat /sys/class/infiniband/rxe0/ports/1/state
}

rxe_counter() { # HOST NAME
    lab exec --timeout 60 "$1" -- cat "/sys/class/infiniband/rxe0/ports/1/hw_counters/$2"
}

# Runs a probe B -> A, cuts VM A's link once it is under way, and checks everything above.
# The probe gets TIMEOUT explicitly, so the bound checked here is the one it was given; its run
# must outlast the few seconds lab.sh needs, on a loaded host, to see it under way.
cut_mid_run() { # LABEL TIMEOUT EXPECTED_REASON_REGEX PROBE_ARGS...
    local label=$1 timeout=$2 reason_re=$3 job t_start t_cut rc=0 out held retries_before
    shift 3
    retries_before=$(rxe_counter B completer_retry_err)
    t_start=$(now_ms)
    job=$(lab spawn --name "$label" B -- "$PROBE" run -d rxe0 --timeout "$timeout" "$@" \
        "$(lab addr A):$RESPONDER_PORT") || fail "$label: cannot start the probe in VM B"
    # Under way: the probe's QP is connected (RTS), and the responder holds its own.
    # shellcheck disable=SC2016  # expanded in the VM
    lab exec --timeout 90 B -- bash -c '
        for ((i = 0; i < 300; i++)); do
            rdma resource show qp | grep -q "state RTS .*comm ibprobe_probe" && exit 0
            sleep 0.2
        done
        exit 1' || fail "$label: the probe never connected: $(lab output --stderr B "$job")"
    held=$(lab_probe_resources A)
    grep -q '^qp: .*state RTS' <<<"$held" || fail "$label: no responder QP in VM A during the run: $held"
    job_running B "$label" \
        || fail "$label: the probe ended before the cut: $(lab output B "$job") $(lab output --stderr B "$job")"

    t_cut=$(now_ms)
    lab link A down
    note "$label: link of VM A cut $(seconds_since "$t_start") s after the probe started"
    [[ $(port_state A) == *DOWN* ]] || fail "$label: VM A's rxe0 port is not DOWN after the cut: $(port_state A)"
    [[ $(port_state B) == *ACTIVE* ]] || fail "$label: VM B's rxe0 port went down too: $(port_state B)"
    check_exporter_serving "$label, link down"

    lab wait --timeout $((timeout + SLACK + 30)) B "$job" >/dev/null 2>&1 || rc=$?
    local since_cut since_start
    since_cut=$(seconds_since "$t_cut")
    since_start=$(seconds_since "$t_start")
    out=$(lab output --stderr B "$job")
    ((rc != 0 && rc != 124)) || fail "$label: the probe did not fail on its own (status $rc): $out"
    ((${since_start%.*} <= timeout + SLACK)) \
        || fail "$label: the probe took $since_start s to fail (timeout $timeout s): $out"
    [[ $out =~ $reason_re ]] || fail "$label: imprecise reason: $out"
    # The control connection crosses the same cut path: its keepalive ends the run within
    # seconds of the cut, long before the run's deadline. A live peer answers a keepalive probe
    # every 2 s of silence (TCP_KEEPIDLE), so the last answer came up to 2 s before the cut, and
    # TCP_USER_TIMEOUT (5 s) ends the connection 5 s after that answer: 3 to 5 s after the cut,
    # later by the VM's lag (probes/src/control_channel.cpp).
    ((${since_cut%.*} >= 3 && ${since_cut%.*} <= 20)) \
        || fail "$label: failed $since_cut s after the cut; keepalive should end it 3-20 s after: $out"
    note "$label: failed $since_cut s after the cut ($since_start s after start): $out"
    local retries
    retries=$(($(rxe_counter B completer_retry_err) - retries_before))
    ((retries > 0)) || fail "$label: VM B's rxe did not retransmit while the link was cut"
    note "$label: VM B's rxe retransmitted $retries times (completer_retry_err)"

    lab link A up
    local i
    for ((i = 0; i < 60; i++)); do
        [[ $(port_state A) == *ACTIVE* ]] && break
        sleep 0.5
    done
    [[ $(port_state A) == *ACTIVE* ]] || fail "$label: VM A's port did not come back: $(port_state A)"
    local released_b released_a
    released_b=$(lab_wait_resources_released B 10)
    released_a=$(lab_wait_resources_released A $((timeout + SLACK)))
    note "$label: no probe QP/CQ/MR/PD left in VM B (after ${released_b} s) nor in VM A (after ${released_a} s)"
    check_exporter_serving "$label, link back"
}

check_probe_succeeds() { # LABEL FIGURE PROBE_ARGS...
    local label=$1 figure=$2 out value
    shift 2
    out=$(lab exec --timeout 120 B -- "$PROBE" run -d rxe0 -u "$LAB_QP_TIMEOUT" "$@" \
        "$(lab addr A):$RESPONDER_PORT" 2>&1) \
        || fail "$label: the probe failed: $out"
    value=$(sed -n "s/.*\b$figure=\([0-9.]*\).*/\1/p" <<<"$out" | head -n1)
    positive_number "$value" || fail "$label: no $figure in: $out"
    note "$label: $figure=$value"
}

check_kernels_quiet() {
    local host found
    for host in A B; do
        found=$(lab console "$host" | grep -E 'WARNING:|BUG:|Oops|hung_task|blocked for more than' || true)
        [[ -z $found ]] || fail "VM $host's kernel complained: $found"
    done
    note "no kernel warning or oops in either VM"
}

main() {
    lab_test_begin
    command -v curl >/dev/null || fail "curl is required"
    lab_test_up two --forward "$WEB_PORT"
    start_exporter
    [[ -z $(lab_probe_resources A) && -z $(lab_probe_resources B) ]] \
        || fail "probe resources before any probe: A: $(lab_probe_resources A) B: $(lab_probe_resources B)"
    check_probe_succeeds "before the faults, write_bw" bw_average_MiBps -t write_bw -n 300

    cut_mid_run write_bw-cut 70 \
        "stopped answering mid-run: no reply to TCP keepalive or data for 5 s \\(its host froze, or the path to it is cut\\); this port's hw_counters during the run: .*completer_retry_err \\+[1-9]" \
        -t write_bw -D 60
    check_probe_succeeds "after the bandwidth cut, write_bw" bw_average_MiBps -t write_bw -n 300

    cut_mid_run write_lat-cut 45 \
        "stopped answering mid-run: no reply to TCP keepalive or data for 5 s \\(its host froze, or the path to it is cut\\); this port's hw_counters during the run: .*completer_retry_err \\+[1-9]" \
        -t write_lat -n 1000000
    check_probe_succeeds "after the latency cut, write_lat" t_typical_usec -t write_lat -n 300
    check_probe_succeeds "after the latency cut, write_bw" bw_average_MiBps -t write_bw -n 300

    check_kernels_quiet
}

main "$@"
