#!/bin/bash
#
# The two-sided verification suite on real rxe devices, two-host mode: the exporter's responder
# in VM A, `ibprobe_probe verify` in VM B. Every case must pass, and each row's evidence is read
# against references the suite does not compute: rxe's own hw_counters in VM B (RNR NAKs
# received, RNR retries and transport retries exhausted), the rdma tool's resource list (no QP,
# CQ, MR or PD left behind by any error path), and a rerun with the same seed.
#   - delayed_recv: RNR NAKs counted, 100 of 100 messages checked in order;
#   - rnr_retry_exceeded: IBV_WC_RNR_RETRY_EXC_ERR, QP in ERR;
#   - local_error_*: the faulty QP fails (error CQE and ERR, or a refused post), the healthy QP on
#     the same CQ completes all 200 and the peer checks all 200;
#   - qp_rebuild: transport retries exhausted, a new generation, old-generation CQEs dropped,
#     every message delivered once in order;
#   - inline_reuse, bidirectional, random_sizes (seeded, reproducible; fixed sequence), soak;
#   - ud_datagrams: datagrams of the lab's 1024-byte path MTU, every one received and checked
#     behind a GRH naming the sender;
#   - a soak past the 120 s cap is refused by a responder whose limits do not allow it;
#   - a `kind: verify` module through VM B's exporter's async API returns the same table as JSON.
#
# Environment: see lab-common.sh; IBPROBE_PROBE is the ibprobe_probe binary, IBPROBE_EXPORTER
# the exporter.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"
# shellcheck source=tests/lib/scratch.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/../lib/scratch.sh"

PROBE=${IBPROBE_PROBE:?set IBPROBE_PROBE to the ibprobe_probe binary}
EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
RESPONDER_PORT=9471

cleanup() {
    local rc=$?
    set +e
    rm -rf "$work"
    (exit "$rc")
    lab_test_end
}

# Exporters in both VMs: A's responder serves every case, B's probe API runs a verify module.
start_exporters() {
    cat >"$work/ibprobe.yml" <<YAML
modules:
  send_bw: {kind: send_bw, iterations: 200, timeout: 20s, rc: {timeout: $LAB_QP_TIMEOUT}}
  suite:
    kind: verify
    cases: [rnr_retry_exceeded, local_error_lkey, bidirectional]
    messages: 100
    timeout: 60s
allowed_targets: [10.99.0.0/24]
YAML
    lab_start_exporters "$EXPORTER" --config.file="$work/ibprobe.yml"
    lab_wait_listen A "$RESPONDER_PORT"
}

verify() { # ARGS...
    lab exec --timeout 280 B -- "$PROBE" verify -d rxe0 "$@" "$(lab addr A):$RESPONDER_PORT" 2>&1
}

# The row of CASE and the detail lines under it.
row_of() { # TABLE CASE
    awk -v c="$2" '$1 == c { on = 1; print; next } on && /^ / { print; next } { on = 0 }' <<<"$1"
}

expect_in() { # ROW TEXT WHAT
    grep -qF -- "$2" <<<"$1" || fail "$3: no '$2' in: $1"
}

number_after() { # TEXT PREFIX
    sed -n "s/.*$2\([0-9][0-9]*\).*/\1/p" <<<"$1" | head -n1
}

check_no_resources_left() {
    lab_wait_resources_released A 15 >/dev/null
    lab_wait_resources_released B 15 >/dev/null
    note "no probe QP, CQ, MR or PD left in either VM"
}

check_full_suite() {
    local out rc=0 t row c gens rnr_before rnr_after retry_before retry_after exc_before exc_after
    rnr_before=$(lab_hw_counter B rcvd_rnr_err)
    exc_before=$(lab_hw_counter B retry_rnr_exceeded_err)
    retry_before=$(lab_hw_counter B retry_exceeded_err)
    t=$(now_ms)
    out=$(verify --soak-seconds 20 --soak-interval 5 --seed 7) || rc=$?
    note "full suite: $(seconds_since "$t") s (wall clock)"
    echo "$out"
    ((rc == 0)) || fail "the suite exited $rc"
    for c in delayed_recv rnr_retry_exceeded local_error_mr_length local_error_lkey \
        local_error_unmapped local_error_max_sge qp_rebuild inline_reuse bidirectional \
        random_sizes atomics ud_datagrams soak; do
        row=$(row_of "$out" "$c")
        [[ -n $row ]] || fail "no row for $c"
        [[ $(awk 'NR == 1 { print $2 }' <<<"$row") == pass ]] || fail "$c did not pass: $row"
    done
    expect_in "$out" "verify: 13 cases, 13 passed, 0 failed, 0 skipped" "summary"

    # The lab's path MTU is 1024 (rxe over a 1500-byte Ethernet MTU): every datagram one packet of
    # it, each received and checked.
    row=$(row_of "$out" ud_datagrams)
    grep -Eq '([0-9]+) datagrams of 1024 bytes \(the path MTU\) sent in windows of [0-9]+: \1 received, \1 checked whole behind a GRH naming the sender, 0 lost' <<<"$row" \
        || fail "ud_datagrams: not every MTU datagram arrived whole: $row"

    row=$(row_of "$out" atomics)
    grep -Eq '([0-9]+) of \1 fetch-and-adds fetched 0, 1, 2, \.\.\. in order' <<<"$row" \
        || fail "atomics: the fetch-and-adds did not fetch in order: $row"
    grep -Eq 'expecting ([0-9]+) fetched ([0-9]+) \(target unchanged\); expecting \2 fetched \2; the target read back (0x[0-9a-f]+) \(the swap wrote \3\)' <<<"$row" \
        || fail "atomics: compare-and-swap semantics: $row"

    row=$(row_of "$out" delayed_recv)
    (($(number_after "$row" 'rcvd_rnr_err +') > 0)) || fail "delayed_recv: no RNR NAK counted: $row"
    expect_in "$row" "peer received 100 checked 100 errors 0" delayed_recv

    row=$(row_of "$out" rnr_retry_exceeded)
    expect_in "$row" "CQE status RNR retry counter exceeded (13)" rnr_retry_exceeded
    expect_in "$row" "QP state after it: ERR" rnr_retry_exceeded

    for c in local_error_mr_length local_error_lkey local_error_unmapped; do
        row=$(row_of "$out" "$c")
        grep -q 'faulty QP: CQE status .* state ERR' <<<"$row" || fail "$c: no error CQE with the QP in ERR: $row"
        if grep -q 'faulty QP: CQE status success' <<<"$row"; then fail "$c: the faulty send succeeded: $row"; fi
        expect_in "$row" "async events:" "$c"
        expect_in "$row" "200 of 200 sends completed in order; peer received 200 checked 200 errors 0" "$c"
    done
    row=$(row_of "$out" local_error_max_sge)
    grep -Eq 'faulty QP: (ibv_post_send refused it: .*QP state RTS|CQE status .* state ERR)' <<<"$row" \
        || fail "local_error_max_sge: neither refused nor failed: $row"
    expect_in "$row" "200 of 200 sends completed in order; peer received 200 checked 200 errors 0" \
        local_error_max_sge

    row=$(row_of "$out" qp_rebuild)
    expect_in "$row" "transport retry counter exceeded (12)" qp_rebuild
    gens=$(sed -n 's/.*generation \([0-9]*\) -> \([0-9]*\);.*/\1 \2/p' <<<"$row")
    [[ -n $gens && ${gens% *} != "${gens#* }" ]] || fail "qp_rebuild: no new generation: $row"
    (($(number_after "$row" 'old-generation CQEs dropped: ') > 0)) || fail "qp_rebuild: no old CQE dropped: $row"
    expect_in "$row" "peer received 200 checked 200 errors 0" qp_rebuild

    row=$(row_of "$out" inline_reuse)
    expect_in "$row" "peer received 100 checked 100 errors 0" inline_reuse
    expect_in "$row" "zero-copy messages of 4096 bytes overwritten before their completion" inline_reuse

    row=$(row_of "$out" bidirectional)
    expect_in "$row" "initiator sent 200 received 200 checked 200 errors 0" bidirectional
    expect_in "$row" "peer received 200 checked 200 errors 0" bidirectional

    row=$(row_of "$out" random_sizes)
    expect_in "$row" "seed 7, rerun with --seed 7" random_sizes
    expect_in "$row" "peer received 200 checked 200 errors 0" random_sizes
    SEEDED_SIZES=$(grep -o 'first: [0-9,]*' <<<"$row")

    row=$(row_of "$out" soak)
    c=$(number_after "$row" ' s, ')
    ((c > 0)) || fail "soak: no messages: $row"
    expect_in "$row" "peer received $c checked $c errors 0" soak
    expect_in "$row" "sender: completions/s per 5 s interval:" soak
    expect_in "$row" "CQEs per poll: 1:" soak
    expect_in "$row" "backlog steady" soak
    grep -q 'receiver: completions/s' <<<"$row" || fail "soak: no receiver figures: $row"

    # rxe's own account in VM B, where the suite's sends failed and retried.
    rnr_after=$(lab_hw_counter B rcvd_rnr_err)
    exc_after=$(lab_hw_counter B retry_rnr_exceeded_err)
    retry_after=$(lab_hw_counter B retry_exceeded_err)
    ((rnr_after > rnr_before)) || fail "rxe's rcvd_rnr_err did not move ($rnr_before -> $rnr_after)"
    ((exc_after > exc_before)) || fail "rxe's retry_rnr_exceeded_err did not move ($exc_before -> $exc_after)"
    ((retry_after > retry_before)) || fail "rxe's retry_exceeded_err did not move ($retry_before -> $retry_after)"
    note "rxe in VM B: rcvd_rnr_err +$((rnr_after - rnr_before)), retry_rnr_exceeded_err +$((exc_after - exc_before)), retry_exceeded_err +$((retry_after - retry_before))"
}

check_sizes_reproduce() {
    local out row
    out=$(verify --case random_sizes --seed 7) || fail "random_sizes rerun failed: $out"
    row=$(row_of "$out" random_sizes)
    [[ $(grep -o 'first: [0-9,]*' <<<"$row") == "$SEEDED_SIZES" ]] \
        || fail "seed 7 drew other sizes on the rerun: $SEEDED_SIZES vs $row"
    out=$(verify --case random_sizes --fixed-sizes --max-size 8192 --messages 30) \
        || fail "fixed sizes failed: $out"
    row=$(row_of "$out" random_sizes)
    expect_in "$row" "fixed boundary sequence; first: 1,2,63,64,65,4095,4096,4097" "fixed sizes"
    expect_in "$row" "peer received 30 checked 30 errors 0" "fixed sizes"
    note "random sizes: seed 7 reproduced ($SEEDED_SIZES), fixed sequence passed"
}

check_long_soak_refused() {
    local out rc=0 row
    out=$(verify --case soak --soak-seconds 121) || rc=$?
    ((rc == 3)) || fail "a soak past the cap: expected exit 3, got $rc: $out"
    row=$(row_of "$out" soak)
    expect_in "$row" "rejected" "long soak"
    expect_in "$row" "duration" "long soak"
    note "a 121 s soak is refused by a responder without max_soak_duration"
}

json_field() { # EXPRESSION on the JSON object `r` read from stdin
    python3 -c 'import json, sys; r = json.load(sys.stdin); print('"$1"')'
}

check_async_api() {
    local url id result table metrics
    url=$(exporter_url B)
    id=$(curl -fsS -XPOST "$url/api/v1/probes" -d "{\"target\":\"$(lab addr A):$RESPONDER_PORT\",\"module\":\"suite\"}" \
        | json_field 'r["id"]') || fail "cannot start the verify module"
    result=$(curl -fsS "$url/api/v1/probes/$id?wait=120s")
    [[ $(json_field 'r["state"]' <<<"$result") == succeeded ]] || fail "the verify module did not run: $result"
    [[ $(json_field '",".join(c["case"] + "=" + c["result"] for c in r["result"]["verify"]["cases"])' <<<"$result") \
        == "rnr_retry_exceeded=pass,local_error_lkey=pass,bidirectional=pass" ]] \
        || fail "the verify module's cases: $result"
    table=$(json_field 'r["result"]["verify"]["table"]' <<<"$result")
    expect_in "$table" "verify: 3 cases, 3 passed, 0 failed, 0 skipped" "the verify module's table"
    metrics=$(curl -fsS "$url/metrics")
    grep -Eq '^rdma_probe_verify_case\{target="[0-9.:]+",module="suite",case="bidirectional",result="pass"\} 1$' \
        <<<"$metrics" || fail "/metrics lacks the verify module's cases: $(grep verify <<<"$metrics")"
    note "async API: verify module 'suite' run $id, 3 cases passed"
}

check_unknown_case() {
    local out rc=0
    out=$(verify --case nonsense) || rc=$?
    ((rc != 0)) || fail "an unknown case was accepted: $out"
    expect_in "$out" "unknown verify case 'nonsense'" "unknown case"
}

main() {
    lab_test_begin
    scratch_begin ibprobe-verify-lab
    trap cleanup EXIT
    lab_test_up two --forward 9470
    start_exporters
    check_full_suite
    check_no_resources_left
    check_sizes_reproduce
    check_long_soak_refused
    check_unknown_case
    check_async_api
}

main "$@"
