#!/bin/bash
#
# Correctness probes on real rxe devices, two-host mode: the exporter's responder in VM A, the
# initiator (ibprobe_probe) in VM B.
#   - validating write and send bandwidth runs pass with errors = 0, and their coverage adds up
#     (write: checked + skipped = sent; send: every message checked, one receive per send),
#     including scattered receives and a shared receive queue;
#   - a run with the test-only fault switch (a payload byte flipped after the checksum) fails:
#     send finds exactly one error per corrupted message, write finds some, each with an offset
#     inside the payload, and the responder's log names it;
#   - a back-pressure sweep (send bandwidth with a fixed number of posted receives) shows RNR
#     NAKs once fewer receives are posted than messages are in flight, none with a deep queue;
#   - with rnr_retry 0 and one posted receive, the run fails on IBV_WC_RNR_RETRY_EXC_ERR with the
#     reason spelled out, and neither VM keeps a probe QP, CQ, MR or PD afterwards.
#
# Environment: see lab-common.sh; IBPROBE_PROBE is the ibprobe_probe binary, IBPROBE_EXPORTER
# the exporter.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

PROBE=${IBPROBE_PROBE:?set IBPROBE_PROBE to the ibprobe_probe binary}
EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
RESPONDER_PORT=18610

start_responder() {
    lab spawn --name responder A -- "$EXPORTER" --web.listen-address=:9472 --log.level=debug \
        --probe.responder-address=":$RESPONDER_PORT" >/dev/null \
        || fail "cannot start the exporter in VM A"
    lab_wait_listen A "$RESPONDER_PORT"
}

run_probe() { # TEST ARGS...
    lab exec --timeout 150 B -- "$PROBE" run -d rxe0 -u "$LAB_QP_TIMEOUT" -t "$@" \
        "$(lab addr A):$RESPONDER_PORT" 2>&1
}

field() { # OUTPUT NAME
    sed -n "s/.*\b$2=\([0-9.]*\).*/\1/p" <<<"$1" | head -n1
}

validation_line() { grep '^validation ' <<<"$1" || true; }

# A validating run that must pass; prints its validation line.
check_clean() { # LABEL TEST ARGS...
    local label=$1 out rc=0 line sent checked errors received skipped
    shift
    out=$(run_probe "$@" --validate) || rc=$?
    ((rc == 0)) || fail "$label: exited $rc: $out"
    line=$(validation_line "$out")
    [[ -n $line ]] || fail "$label: no validation figures: $out"
    sent=$(field "$line" sent)
    checked=$(field "$line" checked)
    errors=$(field "$line" errors)
    received=$(field "$line" received)
    skipped=$(field "$line" skipped_overwritten)
    ((errors == 0)) || fail "$label: $errors errors: $line"
    ((sent > 0 && checked > 0)) || fail "$label: nothing checked: $line"
    grep -q 'check side=both name=validation passed=1' <<<"$out" || fail "$label: no passed validation check: $out"
    positive_number "$(field "$out" bw_average_MiBps)" || fail "$label: no bandwidth: $out"
    if [[ $2 == send_bw ]]; then
        ((checked == sent && received == sent)) \
            || fail "$label: send must check every message: sent $sent, received $received, checked $checked"
    else
        ((checked + skipped == sent)) \
            || fail "$label: coverage does not add up: checked $checked + skipped $skipped != sent $sent"
    fi
    note "$label: $line"
}

check_corrupted_send() {
    local out rc=0 line sent errors offset size=4096 every=16 iterations=800
    out=$(run_probe send_bw --validate -s $size -n $iterations --test-fault-corrupt-every $every) || rc=$?
    ((rc == 3)) || fail "corrupted send: expected exit 3 (validation errors), got $rc: $out"
    line=$(validation_line "$out")
    sent=$(field "$line" sent)
    errors=$(field "$line" errors)
    ((sent == iterations)) || fail "corrupted send: sent $sent of $iterations: $line"
    ((errors == iterations / every)) \
        || fail "corrupted send: $errors errors for $((iterations / every)) corrupted messages: $line"
    offset=$(sed -n 's/.*first bad byte at offset \([0-9]*\).*/\1/p' <<<"$line")
    [[ -n $offset ]] || fail "corrupted send: no offset in the first error: $line"
    # Inside the payload: after the 32-byte header, before the 8-byte trailer.
    ((offset >= 32 && offset < size - 8)) || fail "corrupted send: offset $offset outside the payload"
    grep -q 'check side=both name=validation passed=0' <<<"$out" || fail "corrupted send: validation check did not fail: $out"
    note "corrupted send caught: $line"
}

check_corrupted_write() {
    local out rc=0 line errors sent every=16 log
    out=$(run_probe write_bw --validate -s 4096 -n 3000 --test-fault-corrupt-every $every) || rc=$?
    ((rc == 3)) || fail "corrupted write: expected exit 3 (validation errors), got $rc: $out"
    line=$(validation_line "$out")
    errors=$(field "$line" errors)
    sent=$(field "$line" sent)
    ((errors > 0 && errors <= sent / every)) || fail "corrupted write: $errors errors for $((sent / every)) corrupted: $line"
    grep -q 'first bad byte at offset [0-9]*: expected 0x[0-9a-f]*, got 0x' <<<"$line" \
        || fail "corrupted write: no offset and bytes: $line"
    log=$(lab output --stderr A responder)
    grep -q 'probe validation error: write slot .* first bad byte at offset' <<<"$log" \
        || fail "corrupted write: the responder's debug log does not name the offset: $(tail -n 20 <<<"$log")"
    note "corrupted write caught: $line"
}

rnr_of() { # OUTPUT SIDE COUNTER
    sed -n "s/^delta side=$2 counter=hw_counters\/$3 status=valid value=\([0-9]*\).*/\1/p" <<<"$1" | head -n1
}

# Send bandwidth with up to 128 messages in flight (tx depth) and a fixed number of posted
# receives, in one-packet messages (RNR_MESSAGE_BYTES says why).
check_backpressure_sweep() {
    local n out rc mibps rcvd sent_nak table="" deep_rnr="" shallow_rnr=""
    table=$(printf '%-16s %12s %22s %22s\n' posted_receives MiB/s 'rcvd_rnr_err (B, tx)' 'send_rnr_err (A, rx)')
    for n in 256 64 16 4 1; do
        rc=0
        out=$(run_probe send_bw -s "$RNR_MESSAGE_BYTES" -n 1000 --rx-depth 256 --posted-receives "$n" \
            --timeout 100) || rc=$?
        ((rc == 0)) || fail "sweep posted_receives=$n failed: $out"
        mibps=$(field "$out" bw_average_MiBps)
        rcvd=$(rnr_of "$out" local rcvd_rnr_err)
        sent_nak=$(rnr_of "$out" peer send_rnr_err)
        table+=$(printf '\n%-16s %12s %22s %22s' "$n" "$mibps" "${rcvd:-0}" "${sent_nak:-0}")
        [[ $n == 256 ]] && deep_rnr=${sent_nak:-0}
        [[ $n == 1 ]] && shallow_rnr=${sent_nak:-0}
    done
    echo "back-pressure sweep (send_bw, $RNR_MESSAGE_BYTES B, 1000 messages, tx_depth 128):"
    echo "$table"
    ((deep_rnr == 0)) || fail "RNR NAKs with 256 receives posted for 128 in flight: $deep_rnr"
    ((shallow_rnr > 0)) || fail "no RNR NAK with one receive posted for 128 in flight"
    note "sweep: no RNR NAK at depth 256, $shallow_rnr at depth 1"
}

check_rnr_exhausted() {
    local out rc=0 before after
    before=$(lab_hw_counter B retry_rnr_exceeded_err)
    out=$(run_probe send_bw -s 4096 -n 2000 --posted-receives 1 --rnr-retry 0 --timeout 20) || rc=$?
    ((rc == 1)) || fail "rnr_retry 0 with one posted receive: expected exit 1, got $rc: $out"
    grep -q 'RNR retry counter exceeded' <<<"$out" || fail "not an RNR retry failure: $out"
    grep -q 'rnr_retry allows were used up' <<<"$out" || fail "the RNR failure is not explained: $out"
    after=$(lab_hw_counter B retry_rnr_exceeded_err)
    ((after > before)) || fail "rxe's retry_rnr_exceeded_err did not move ($before -> $after)"
    lab_wait_resources_released A 15 >/dev/null
    lab_wait_resources_released B 15 >/dev/null
    note "RNR retries exhausted: $(grep -o 'completion failed.*' <<<"$out" | head -n1)"
    note "no probe QP, CQ, MR or PD left in either VM; retry_rnr_exceeded_err $before -> $after"
    out=$(run_probe send_bw -s 4096 -n 300 --validate) || fail "the next probe failed: $out"
}

main() {
    lab_test_begin
    lab_test_up two
    start_responder
    check_clean "write_bw" write_bw -s 65536 -n 1000
    check_clean "write_bw 4 QPs deep" write_bw -s 8192 -n 1000 -q 4 --rx-depth 512
    check_clean "write_bw duration" write_bw -s 65536 -D 6
    check_clean "send_bw" send_bw -s 65536 -n 500
    check_clean "send_bw 3 receive SGEs" send_bw -s 10000 -n 1000 --receive-sges 3
    check_clean "send_bw SRQ 2 QPs" send_bw -s 4096 -n 1000 -q 2 --use-srq
    check_clean "send_bw 16 posted receives" send_bw -s "$RNR_MESSAGE_BYTES" -n 1000 --posted-receives 16
    check_corrupted_send
    check_corrupted_write
    check_backpressure_sweep
    check_rnr_exhausted
}

main "$@"
