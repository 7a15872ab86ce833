#!/bin/bash
#
# The perftest modes of a probe, each shown by an effect only the applied mode produces:
# - bidirectional (-b): both hosts' NICs send the data volume of their direction (netdev tx
#   bytes), where a one-way run leaves the responder sending ACKs only; the reported BW is the
#   sum of both directions; ib_write_bw -b on the same devices beside it; send -b the same,
#   both sides keeping receives posted, ib_send_bw -b beside it;
# - completion events (-e): the run sleeps on its CQ's events and says so, ib_send_lat -e beside;
# - rate limit: BW within the cap and well under the unlimited run of the same module; pps
#   caps the message rate; the hardware limiter is refused on rxe, auto falls back to software;
# - message-size sweep (--sizes, -a): one result per size, each with the packet count of its
#   size, perftest's 23 sizes for -a;
# - one-variable sweep (--sweep): every step and the knee; two variables are refused;
# - a sweep module through the exporter: /probe answers with every step's figures labelled by
#   step, the async API with the table and the knee; a sweep over a pps cap shows the
#   rate-limit families (configured cap, limiter, achieved BW) following the cap on /probe and
#   /metrics.
#
# Environment: see lab-common.sh; IBPROBE_PROBE is the ibprobe_probe binary, IBPROBE_EXPORTER
# the exporter's.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

PROBE=${IBPROBE_PROBE:?set IBPROBE_PROBE to the ibprobe_probe binary}
EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
RESPONDER_PORT=18600
# The probe's runs measure the same 2 s window as perftest's -D 6 beside them (2 s margins each
# side), with margins of 1 s: 4 s of sending instead of 6.
RUN_SECONDS=4
SPAN=(-D "$RUN_SECONDS" --margin 1)

field() { # OUTPUT NAME
    sed -n "s/.*\b$2=\(-\?[0-9.]*\).*/\1/p" <<<"$1" | head -n1
}

run_probe() { # ARGS...
    lab exec --timeout 240 B -- "$PROBE" run -d rxe0 -u "$LAB_QP_TIMEOUT" "$@" \
        "$(lab addr A):$RESPONDER_PORT"
}

# Bytes the VM's RoCE netdev has sent.
tx_bytes() { # HOST
    lab exec --timeout 30 "$1" -- sh -c 'cat /sys/class/net/$(cat /sys/class/infiniband/rxe0/parent)/statistics/tx_bytes'
}

check() { # CONDITION(python) WHAT
    python3 -c "import sys; sys.exit(0 if ($1) else 1)" || fail "$2"
}

# Runs KIND -b for $RUN_SECONDS s with 64 KiB messages: sets `out`, each direction's messages
# `ini` and `res`, and the bytes each NIC sent meanwhile, `responder_tx` and `initiator_tx`.
# Every message counted in a direction's window left its sender's NIC (the window is part of the
# run, so the NIC sent at least that much), and BW average is the sum of both directions.
run_bidirectional() { # KIND
    local a0 b0
    a0=$(tx_bytes A) b0=$(tx_bytes B)
    out=$(run_probe -t "$1" -b "${SPAN[@]}" -s 65536) || fail "$1 -b failed: $out"
    responder_tx=$(($(tx_bytes A) - a0)) initiator_tx=$(($(tx_bytes B) - b0))
    ini=$(sed -n 's/^direction initiator .*messages=\([0-9]*\).*/\1/p' <<<"$out")
    res=$(sed -n 's/^direction responder .*messages=\([0-9]*\).*/\1/p' <<<"$out")
    [[ -n $ini && -n $res ]] || fail "$1 -b reports no direction figures: $out"
    check "$responder_tx >= $res * 65536 and $initiator_tx >= $ini * 65536 and $res > 0 and $ini > 0" \
        "$1 -b: responder NIC sent $responder_tx bytes for $res messages, initiator $initiator_tx for $ini: $out"
    python3 -c "
import re, sys
out = sys.argv[1]
d = [float(x) for x in re.findall(r'^direction \w+ bw_average_MiBps=([0-9.]+)', out, re.M)]
total = float(re.search(r'^bw_average_MiBps=([0-9.]+)', out, re.M).group(1))
sys.exit(0 if len(d) == 2 and abs(total - d[0] - d[1]) <= 0.02 else 1)" "$out" \
        || fail "$1 -b: BW average is not the sum of both directions: $out"
}

check_bidirectional() {
    local out a0 b0 sum ini res responder_tx initiator_tx theirs
    a0=$(tx_bytes A) b0=$(tx_bytes B)
    out=$(run_probe -t write_bw "${SPAN[@]}" -s 65536) || fail "one-way write_bw failed: $out"
    local one_way_peer=$(($(tx_bytes A) - a0)) one_way_local=$(($(tx_bytes B) - b0))
    check "$one_way_peer * 10 < $one_way_local" \
        "one-way run: the responder sent $one_way_peer bytes against $one_way_local: $out"
    # Both directions double the load of an emulated link that already drains a 128 x 64 KiB
    # window slower than perftest's 67 ms ACK timeout: both tools run with the lab's
    # LAB_QP_TIMEOUT (lab-common.sh says why), as every run here does.
    run_bidirectional write_bw
    sum="$(grep -o '^bw_average_MiBps=[0-9.]*' <<<"$out"), initiator/responder messages $ini/$res"
    theirs=$(lab_perftest_pair A B ib_write_bw -b -D 6 -s 65536 --report_gbits) \
        || fail "ib_write_bw -b beside it failed (its output above)"
    local perftest_bw
    perftest_bw=$(awk '/BW average/ { getline; print $4; exit }' <<<"$theirs")
    note "write_bw -b: $sum; NIC tx responder $responder_tx B (one-way run: $one_way_peer B), initiator $initiator_tx B; ib_write_bw -b -D 6 -u $LAB_QP_TIMEOUT: BW average ${perftest_bw:-?} Gb/s"
    out=$(run_probe -t read_bw -b "${SPAN[@]}" -s 65536) || fail "read_bw -b failed: $out"
    [[ -n $(sed -n 's/^direction responder .*messages=\([1-9][0-9]*\).*/\1/p' <<<"$out") ]] \
        || fail "read_bw -b: the responder's direction moved nothing: $out"
    note "read_bw -b: $(grep -o '^bw_average_MiBps=[0-9.]*' <<<"$out")"
    check_bidirectional_send
}

# send_bw -b: both sides post sends and keep receives posted for the other's, perftest's
# run_iter_bi; each direction's messages left its sender's NIC, and the reported BW is the sum.
check_bidirectional_send() {
    local out ini res responder_tx initiator_tx theirs perftest_bw
    run_bidirectional send_bw
    # Each side received what the other sent: the receive side's hw_counters saw it.
    grep -Eq 'delta side=local counter=hw_counters/rcvd_pkts status=valid value=[1-9]' <<<"$out" \
        || fail "send_bw -b: the initiator received nothing: $out"
    local ours
    ours=$(grep -Eo '^(bw_average_MiBps|direction \w+ bw_average_MiBps)=?[0-9.=a-zA-Z_ ]*' <<<"$out" | sed 's/ msg_rate.*//' | tr '\n' ' ')
    out=$(run_probe -t send_bw -b -n 300 -s 65536 --use-srq) || fail "send_bw -b -n 300 --use-srq failed: $out"
    grep -Eq '^direction responder .*messages=300\b' <<<"$out" && grep -Eq '^direction initiator .*messages=300\b' <<<"$out" \
        || fail "send_bw -b -n 300 --use-srq: not 300 messages each way: $out"
    theirs=$(lab_perftest_pair A B ib_send_bw -b -D 6 -s 65536 --report_gbits) \
        || fail "ib_send_bw -b beside it failed (its output above)"
    perftest_bw=$(awk '/BW average/ { getline; print $4; exit }' <<<"$theirs")
    note "send_bw -b ${SPAN[*]}: $ours; initiator $ini, responder $res messages; NIC tx responder $responder_tx B, initiator $initiator_tx B; ib_send_bw -b -D 6 -u $LAB_QP_TIMEOUT: BW average ${perftest_bw:-?} Gb/s"
}

# -e: both sides sleep on their CQ's completion channel instead of polling it. The initiator of
# send_lat waits for each reply's receive completion, so it sleeps on events; without -e it never
# does. ib_send_lat -e beside it on the same devices. -H prints the samples' histogram: cumulative
# counts that end at the sample count, at least half of them at or below t_typical's bound.
check_cq_events() {
    local out events polled theirs
    out=$(run_probe -t send_lat -n 500 -e -H) || fail "send_lat -e -H failed: $out"
    python3 - "$out" <<'PY' || fail "-H: the histogram does not describe the samples: $out"
import re, sys
out = sys.argv[1]
samples = int(re.search(r"\bsamples=(\d+)\n", out).group(1))
typical = float(re.search(r"t_typical_usec=([0-9.]+)", out).group(1))
rows = re.findall(r"^histogram le_usec=(\S+) samples=(\d+)$", out, re.M)
assert len(rows) == 14 and rows[-1] == ("+Inf", str(samples)), rows
counts = [int(c) for _, c in rows]
assert counts == sorted(counts), counts
at_typical = next(int(c) for b, c in rows if b == "+Inf" or float(b) >= typical)
assert 2 * at_typical >= samples, (typical, rows)
print("histogram:", " ".join(f"{b}:{c}" for b, c in rows))
PY
    grep -q ' completion_mode=events ' <<<"$out" || fail "-e is not reported as events: $out"
    events=$(field "$out" cq_events)
    ((events > 0)) || fail "-e: the initiator never slept on a completion event: $out"
    polled=$(run_probe -t send_lat -n 500) || fail "send_lat failed: $polled"
    grep -q ' completion_mode=polling cq_events=0$' <<<"$polled" \
        || fail "without -e the run is not polling, or slept on events: $polled"
    theirs=$(lab_perftest_pair A B ib_send_lat -e -n 500) \
        || fail "ib_send_lat -e beside it failed (its output above)"
    note "send_lat -e: t_typical $(field "$out" t_typical_usec) us after $events completion events; polling: t_typical $(field "$polled" t_typical_usec) us; ib_send_lat -e -n 500: t_typical $(awk '$1 == 2 && NF >= 5 { print $5; exit }' <<<"$theirs") us"
}

# The software limiter paces posts (one post list per ibv_post_send here): over the run's
# $RUN_SECONDS s of posting, at most that many seconds of the cap's messages, the first list, and
# one list of credit. The window's BW average counts completions in the middle 2 s, as perftest's
# does, so messages posted before the window and completed in it (a guest held up by its host
# completes a backlog at once) can lift it above the cap by what was in flight at the window's
# start: the cap bounds what was posted, not what one window saw complete.
check_posted_under_cap() { # OUTPUT MESSAGES_PER_SECOND WHAT
    local posted
    posted=$(field "$1" post_calls)
    [[ -n $posted ]] || fail "$3: no post_calls in the output: $1"
    check "$posted <= ($2) * $RUN_SECONDS + 2" \
        "$3: $posted messages posted in $RUN_SECONDS s, over the cap ($2)/s: $1"
    note "$3: $posted messages posted in $RUN_SECONDS s, at most $(python3 -c "print(int(($2) * $RUN_SECONDS + 2))")"
}

check_rate_limit() {
    local out unlimited cap limited rate rc=0
    out=$(run_probe -t write_bw "${SPAN[@]}" -s 65536) || fail "unlimited write_bw failed: $out"
    unlimited=$(field "$out" bw_average_MiBps)
    positive_number "$unlimited" || fail "no unlimited BW: $out"
    cap=$(python3 -c "print(f'{$unlimited / 4:.3f}')")
    out=$(run_probe -t write_bw "${SPAN[@]}" -s 65536 --rate-limit "$cap" --rate-units MiBps) \
        || fail "rate-limited write_bw failed: $out"
    limited=$(field "$out" bw_average_MiBps)
    grep -q '^rate_limit .* limiter=software' <<<"$out" || fail "no software limiter reported: $out"
    check_posted_under_cap "$out" "$cap * 1048576 / 65536" "--rate-limit $cap MiBps"
    check "$limited < $unlimited * 0.4 and $limited >= $cap * 0.5" \
        "--rate-limit $cap MiBps: $limited MiB/s (unlimited $unlimited): $out"
    note "rate limit $cap MiB/s (software): $limited MiB/s, unlimited $unlimited MiB/s"
    # -Q 1: the window counts completed messages, and at 4 KiB perftest's CQ moderation of 100
    # would count them a hundred at a time.
    out=$(run_probe -t write_bw "${SPAN[@]}" -s 4096 -Q 1 --rate-limit 500 --rate-units pps) \
        || fail "pps-limited write_bw failed: $out"
    rate=$(field "$out" msg_rate_Mpps)
    check_posted_under_cap "$out" 500 "--rate-limit 500 pps"
    check "$rate * 1e6 >= 250" "--rate-limit 500 pps: $rate Mpps: $out"
    note "rate limit 500 pps: $(python3 -c "print($rate * 1e6)") messages/s"
    out=$(run_probe -t write_bw "${SPAN[@]}" -s 65536 --rate-limit "$cap" --rate-units MiBps \
        --rate-limiter hardware 2>&1) || rc=$?
    ((rc != 0)) && grep -q 'does not take a hardware rate limit' <<<"$out" \
        || fail "a hardware rate limit on rxe was not refused with the reason: $out"
    note "hardware limiter on rxe: $(grep -o 'does not take[^;]*' <<<"$out" | head -n1)"
    out=$(run_probe -t write_bw "${SPAN[@]}" -s 65536 --rate-limit "$cap" --rate-units MiBps \
        --rate-limiter auto) || fail "auto-limited write_bw failed: $out"
    grep -q '^rate_limit .* asked=auto limiter=software' <<<"$out" \
        || fail "auto did not fall back to software on rxe: $out"
    check_posted_under_cap "$out" "$cap * 1048576 / 65536" "--rate-limiter auto"
}

# rxe sends each write as ceil(size / MTU) packets: the packets the responder's rxe took as new
# (received, less the duplicates of go-back-N retransmissions and those out of sequence) say
# which size a step really ran with.
peer_counter() { # BLOCK NAME
    sed -n "s/^delta side=peer counter=hw_counters\/$2 status=valid value=\([0-9]*\).*/\1/p" <<<"$1"
}

check_size_steps() { # OUTPUT ITERATIONS SIZE...
    local out=$1 iterations=$2 step=0 size mtu pkts expected
    shift 2
    for size in "$@"; do
        local block
        block=$(awk -v s="$step" '/^step / { on = ($2 == s) } on' <<<"$out")
        grep -q "^step $step variable=message_size value=$size result=ok" <<<"$block" \
            || fail "step $step is not message_size $size: $out"
        grep -q "^probe write_bw .* size=$size " <<<"$block" || fail "step $step ran another size: $block"
        mtu=$(field "$block" mtu)
        local received duplicates out_of_sequence
        received=$(peer_counter "$block" rcvd_pkts)
        duplicates=$(peer_counter "$block" duplicate_request)
        out_of_sequence=$(peer_counter "$block" out_of_seq_request)
        pkts=$((${received:-0} - ${duplicates:-0} - ${out_of_sequence:-0}))
        expected=$((iterations * ((size + mtu - 1) / mtu)))
        ((pkts == expected)) \
            || fail "step $step (size $size, MTU $mtu): the responder took $pkts new packets, expected $expected: $block"
        step=$((step + 1))
    done
    grep -q "^sweep variable=message_size steps=$# of $#" <<<"$out" || fail "sweep summary: $out"
}

check_sizes() {
    local out
    out=$(run_probe -t write_bw -n 200 --sizes 1024,16384,65536) || fail "--sizes failed: $out"
    check_size_steps "$out" 200 1024 16384 65536
    note "--sizes 1024,16384,65536: one result each, packets per size as expected"
    out=$(run_probe -t write_bw -n 5 -a) || fail "-a failed: $out"
    # shellcheck disable=SC2046
    check_size_steps "$out" 5 $(python3 -c "print(' '.join(str(1 << i) for i in range(1, 24)))")
    note "-a: 23 results, 2 B .. 8 MiB"
}

check_sweep() {
    local out rc=0
    out=$(run_probe -t write_bw -D 3 --margin 1 -s 65536 --sweep tx_depth=1,4,16,128) \
        || fail "--sweep tx_depth failed: $out"
    [[ $(grep -c '^step [0-9]* variable=tx_depth value=[0-9]* result=ok' <<<"$out") == 4 ]] \
        || fail "--sweep tx_depth: not 4 steps: $out"
    grep -q '^sweep variable=tx_depth steps=4 of 4 knee_threshold=0.05 knee_step=' <<<"$out" \
        || fail "--sweep tx_depth: no summary: $out"
    note "sweep tx_depth: $(grep -o 'bw_average_MiBps=[0-9.]*' <<<"$out" | tr '\n' ' ')$(grep -o 'knee_step=.*' <<<"$out")"
    out=$(run_probe -t write_bw -n 100 --sizes 4096,8192 --sweep qps=1,2 2>&1) || rc=$?
    ((rc == 2)) && grep -q 'a sweep varies exactly one variable' <<<"$out" \
        || fail "a two-variable sweep was not refused with the reason (exit $rc): $out"
}

check_sweep_through_exporter() {
    local work url metrics id result
    work=$(mktemp -d)
    cat >"$work/ibprobe.yml" <<YAML
modules:
  sizes: {kind: write_bw, iterations: 200, message_size: [4096, 16384, 65536], timeout: 30s,
          rc: {timeout: $LAB_QP_TIMEOUT}}
  capped: {kind: write_bw, duration: 4s, margin: 1s, message_size: 4096, cq_moderation: 1,
           rate_limit: {value: 100, unit: pps}, sweep: {rate_limit: [100, 300]}, timeout: 30s,
           rc: {timeout: $LAB_QP_TIMEOUT}}
allowed_targets: [10.99.0.0/24]
YAML
    lab_start_exporters "$EXPORTER" --config.file="$work/ibprobe.yml"
    lab_wait_listen A 9471
    url=$(exporter_url B)
    metrics=$(curl -fsS "$url/probe?target=$(lab addr A):9471&module=sizes")         || fail "/probe of the sweep module failed"
    grep -qx 'probe_success 1' <<<"$metrics" || fail "sweep /probe did not succeed: $metrics"
    local step size
    for step in 0 1 2; do
        size=$((4096 << (2 * step)))
        grep -q "^rdma_probe_sweep_step_value{step=\"$step\",variable=\"message_size\"} $size\$" <<<"$metrics"             || fail "/probe: no value $size for step $step: $metrics"
        grep -q "^rdma_probe_bandwidth_bytes_per_second{step=\"$step\"} [0-9]" <<<"$metrics"             || fail "/probe: no BW for step $step: $metrics"
    done
    note "/probe sweep: $(grep -E '^rdma_probe_(bandwidth_bytes_per_second|sweep_knee_value)' <<<"$metrics" | tr '\n' ' ')"
    id=$(curl -fsS -XPOST "$url/api/v1/probes" -d "{\"target\":\"$(lab addr A):9471\",\"module\":\"sizes\"}"         | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])') || fail "async start failed"
    result=$(curl -fsS "$url/api/v1/probes/$id?wait=120s") || fail "async wait failed"
    python3 - "$result" <<'PY' || fail "async sweep table: $result"
import json, sys
r = json.loads(sys.argv[1])
sweep = r["sweep"]
assert r["success"] is True, "not a success"
assert sweep["variable"] == "message_size" and sweep["values"] == [4096, 16384, 65536], sweep["values"]
steps = sweep["steps"]
assert [s["value"] for s in steps] == [4096, 16384, 65536]
for s in steps:
    assert s["success"] and s["result"]["bandwidth"]["messages"] == 200, s
    assert s["result"]["bandwidth"]["bytes_per_second"] > 0, s
print("async table:", [(s["value"], round(s["result"]["bandwidth"]["mebibytes_per_second"], 2)) for s in steps],
      "knee:", sweep["knee"])
PY
    check_rate_limit_metrics "$url"
    note "async API sweep: $(python3 -c 'import json, sys; r = json.loads(sys.argv[1]); print([(s["value"], round(s["result"]["bandwidth"]["mebibytes_per_second"], 2)) for s in r["sweep"]["steps"]], "knee", r["sweep"]["knee"])' "$result")"
    rm -rf "$work"
}

# The rate-limit families follow the module's cap: a sweep over it gives, per step, the cap in
# bytes per second (pps x 4 KiB), the limiter that enforced it and a BW that follows it.
check_rate_limit_metrics() { # EXPORTER_URL
    local url=$1 metrics last
    metrics=$(curl -fsS "$url/probe?target=$(lab addr A):9471&module=capped") || fail "/probe of the capped module failed"
    grep -qx 'probe_success 1' <<<"$metrics" || fail "capped /probe did not succeed: $metrics"
    last=$(curl -fsS "$url/metrics") || fail "/metrics failed"
    python3 - "$metrics" "$last" <<'PY' || fail "rate-limit metrics do not follow the cap: $metrics"
import re, sys
probe, last = sys.argv[1], sys.argv[2]
def value(text, name, labels):
    m = re.search(r'^' + name + r'\{' + labels + r'\} (\S+)$', text, re.M)
    assert m, f"no {name}{{{labels}}}"
    return float(m.group(1))
achieved = []
for step, pps in ((0, 100), (1, 300)):
    at = f'step="{step}",side="local"'
    configured = value(probe, "rdma_probe_rate_limit_configured_bytes_per_second", at)
    assert configured == pps * 4096, (step, configured)
    assert value(probe, "rdma_probe_rate_limiter", at + ',limiter="software"') == 1
    got = value(probe, "rdma_probe_rate_limit_achieved_bytes_per_second", at)
    # No upper bound here: the window counts completions (check_posted_under_cap above bounds
    # the posts), and a backlog completed inside it may lift it over the cap.
    assert got >= 0.5 * configured, (step, got, configured)
    assert got == value(probe, "rdma_probe_bandwidth_bytes_per_second", f'step="{step}"')
    achieved.append(got)
    assert value(last, "rdma_probe_rate_limit_configured_bytes_per_second",
                 r'target="[^"]*",module="capped",' + at) == configured
assert achieved[1] > 2 * achieved[0], achieved
print(" ".join(f"{c} pps: {a / 4096:.1f} messages/s" for c, a in zip((100, 300), achieved)))
PY
    note "rate-limit metrics: $(grep -E '^rdma_probe_rate_limit' <<<"$metrics" | tr '\n' ' ')"
}

main() {
    lab_test_begin
    lab_test_up two --forward 9470
    lab spawn --name responder A -- "$PROBE" serve -d rxe0 --listen ":$RESPONDER_PORT" >/dev/null \
        || fail "cannot start the responder in VM A"
    lab_wait_listen A "$RESPONDER_PORT"
    check_bidirectional
    check_cq_events
    check_rate_limit
    check_sizes
    check_sweep
    check_sweep_through_exporter
}

main "$@"
