#!/bin/bash
#
# A responder that a vanished initiator cannot pin: the initiator's whole VM is frozen
# (SIGSTOP on its QEMU process: no FIN, no RST, its kernel answers nothing) in the middle of a
# long bandwidth run. TCP keepalive and TCP_USER_TIMEOUT on the control connection end the run
# on the responder's side within 10 s: its QPs, buffers and port gate are released, and a new
# probe is served at once.
#
# Environment: see lab-common.sh; IBPROBE_PROBE is the ibprobe_probe binary.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

PROBE=${IBPROBE_PROBE:?set IBPROBE_PROBE to the ibprobe_probe binary}
RESPONDER_PORT=18600
FROZEN_PID=

thaw() {
    [[ -n $FROZEN_PID ]] && kill -CONT "$FROZEN_PID" 2>/dev/null || true
}

a_received_more_than() { # PACKETS
    (($(lab_hw_counter A rcvd_pkts) > $1))
}

responder_qps() {
    lab exec --timeout 30 A -- rdma resource show qp 2>&1 | grep -c 'comm ibprobe_probe' || true
}

main() {
    lab_test_begin
    lab_test_up two
    trap 'rc=$?; thaw; (exit $rc); lab_test_end' EXIT
    lab spawn --name responder A -- "$PROBE" serve -d rxe0 --listen ":$RESPONDER_PORT" >/dev/null \
        || fail "cannot start the responder in VM A"
    lab_wait_listen A "$RESPONDER_PORT"
    lab spawn --name long-run B -- "$PROBE" run -d rxe0 -t write_bw -D 60 --timeout 90 \
        "$(lab addr A):$RESPONDER_PORT" >/dev/null
    local deadline=$((SECONDS + 60))
    until (($(responder_qps) > 0)); do
        ((SECONDS < deadline)) || fail "the run never reached the responder's QPs"
        sleep 1
    done
    # Frozen in the data phase: A's device has received the run's packets.
    local received
    received=$(lab_hw_counter A rcvd_pkts)
    wait_for 60 "the run's data reaching A" a_received_more_than $((received + 1000))
    FROZEN_PID=$(lab status 2>/dev/null | sed -n 's/.*VM B: up (qemu pid \([0-9]*\)).*/\1/p')
    [[ -n $FROZEN_PID ]] || fail "no QEMU pid for VM B in: $(lab status 2>&1)"
    kill -STOP "$FROZEN_PID"
    local t_freeze seconds
    t_freeze=$(now_ms)
    note "VM B frozen mid-run (qemu pid $FROZEN_PID); responder QPs: $(responder_qps)"
    until (($(responder_qps) == 0)); do
        seconds=$(seconds_since "$t_freeze")
        ((${seconds%.*} < 10)) || fail "the responder still holds its QPs $seconds s after the initiator froze: $(lab output --stderr A responder)"
        sleep 0.5
    done
    seconds=$(seconds_since "$t_freeze")
    note "the responder released its QPs $seconds s after the initiator froze"
    # The port gate is free as well: a probe from VM A to its own responder (two QPs on one rxe)
    # is served, not told busy.
    local out
    out=$(lab exec --timeout 120 A -- "$PROBE" run -d rxe0 -u "$LAB_QP_TIMEOUT" -t write_bw -n 200 \
        "127.0.0.1:$RESPONDER_PORT" 2>&1) || fail "the responder did not serve a new probe: $out"
    positive_number "$(sed -n 's/.*bw_average_MiBps=\([0-9.]*\).*/\1/p' <<<"$out")" \
        || fail "no bandwidth from the new probe: $out"
    note "a new probe is served: $(grep -o 'bw_average_MiBps=[0-9.]*' <<<"$out")"
    thaw
    FROZEN_PID=
}

main "$@"
