#!/bin/bash
#
# The third question on an Ethernet fabric, two-host mode with real rxe devices: did the error
# counters move during the run? Exporters in both VMs, VM B probes VM A's responder through
# /probe, a Prometheus server on the host scrapes both exporters with the shipped alert rules
# (started after the clean and back-pressure runs, so only the lossy run's increases count).
#   - over the clean link a write_bw probe answers errors_clean 1;
#   - with `tc qdisc add dev eth0 root netem loss` in VM B (the sender) the same probe answers
#     errors_clean 0 and names the classified hw_counters that moved, on both sides, and
#     IbprobeRetransmissions, quiet before, fires in Prometheus for B's rxe0;
#   - over the same lossy link a UC send_bw probe (connection: UC) completes without a
#     retransmission (B sent exactly four packets per message) and reports as lost
#     (rdma_probe_messages_lost) what A's rxe did not receive: sent minus A's rdma_recvs delta;
#   - a send_bw probe that keeps one receive posted for 128 messages in flight draws RNR NAKs and
#     the go-back-N they cause: named as the probe's own back-pressure, errors_clean stays 1;
#   - the ethtool statistics of each VM's eth0 (virtio_net) are on /metrics, with the values
#     `ethtool -S eth0` prints in the same VM: every statistic in A (--collector.ethtool.all),
#     the RoCE ones only in B (the default: drops, not packet and byte counts).
#   - the alert loop: Prometheus sends its alerts to a real Alertmanager routed by the shipped
#     example (deploy/config/alertmanager.yml, its URL pointed at B's exporter); the firing
#     IbprobeRetransmissions reaches B's alert receiver, which runs the rule's write_bw probe to
#     A while the loss is still on: its verdict, in Prometheus within 90 s of the alert firing,
#     names the retransmissions. Once the loss is removed, Alertmanager's next notification
#     starts a new run whose verdict is healthy. B pushes both verdicts
#     (--alerts.alertmanager-url) to a second real Alertmanager in VM B, where amtool reads them.
#
# Environment: see lab-common.sh; IBPROBE_EXPORTER is the exporter binary.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"
lab_exporter_test
LOSS_PERCENT=${IBPROBE_LAB_LOSS_PERCENT:-2}
WINDOW=2m
HOLD=4s

write_config() {
    # 4 KiB messages: four packets each at rxe's 1024-byte MTU, so a lost packet costs one
    # go-back-N of a short window, and the run stays within its retry budget at a few percent
    # loss. The ACK timeout (2^18 x 4.096 us, about 1 s) keeps a TCG VM that is merely slow to
    # answer from counting as a lost packet. The starved send draws RNR NAKs on purpose, so
    # its messages are one packet (RNR_MESSAGE_BYTES in lab-common.sh says why).
    cat >"$work/ibprobe.yml" <<YAML
modules:
  write_bw:
    kind: write_bw
    message_size: 4096
    iterations: 2000
    timeout: 60s
    rc: {timeout: 18}
  send_bw_uc:
    kind: send_bw
    message_size: 4096
    iterations: 2000
    connection: UC
    timeout: 60s
  send_bw_starved:
    kind: send_bw
    message_size: $RNR_MESSAGE_BYTES
    iterations: 300
    posted_receives: 1
    timeout: 60s
    rc: {timeout: 18}
alerts:
  instance: lab-b
  repeat: 15s
  peers_file: $work/peers.json
  rules:
    - alertname: IbprobeRetransmissions
      match: {device: rxe0}
      module: write_bw
      peer_choice: same_leaf
YAML
    # The peer list as Prometheus' file_sd has it: both hosts behind one leaf, so the receiver
    # picks A, the only other host there, and probes its responder (9471, as B's own).
    cat >"$work/peers.json" <<JSON
[{"targets": ["lab-b:9470", "$(lab addr A):9470"], "labels": {"tor": "lab-leaf"}}]
JSON
}

# One run from B to A through B's /probe; prints the debug answer (log lines, then metrics).
probe() { # [MODULE]
    curl -fsS --max-time 90 \
        "$(exporter_url B)/probe?target=$(lab addr A):9471&module=${1:-write_bw}&debug=true"
}

# The value of one sample of the debug answer, by family and a label substring.
metric() { # ANSWER FAMILY LABEL_SUBSTRING
    awk -v f="$2" -v l="$3" '(index($0, f "{") == 1 || index($0, f " ") == 1) && index($0, l) {
        print $NF
        exit
    }' <<<"$1"
}

# Every counter of a side with an error class whose delta is above zero: "counter=delta ...".
moved() { # ANSWER SIDE
    sed -n "s/^rdma_probe_counter_delta{.*side=\"$2\".*counter=\"\([^\"]*\)\".*class=\"\(retransmission\|sequence_error\|ack_timeout\|rnr_nak\|rnr_retry_exceeded\|remote_error\|out_of_buffer\|error\)\".*} \([0-9.e+]*\)$/\1=\3/p" <<<"$1" \
        | awk -F= '$2 > 0' | tr '\n' ' '
}

# A real Alertmanager with the shipped example routing: its receiver pointed at B's exporter (no
# TLS in the lab), the people's receiver at a port where nothing listens, and its intervals
# shortened to this test's seconds.
start_alertmanager() {
    local port dead
    port=$(free_port)
    dead=$(free_port)
    lab_alertmanager_config "$work/alertmanager.yml" \
        "http://127.0.0.1:$(lab port B 9470)/api/v1/alerts" "http://127.0.0.1:$dead/" \
        'instance="lab-b"' "5s 10s"
    prometheus-alertmanager --config.file="$work/alertmanager.yml" \
        --storage.path="$work/alertmanager" --web.listen-address="127.0.0.1:$port" \
        --cluster.listen-address= >"$work/alertmanager.log" 2>&1 &
    pids+=($!)
    local deadline=$((SECONDS + 30))
    until curl -fsS -o /dev/null "http://127.0.0.1:$port/-/ready" 2>/dev/null; do
        ((SECONDS < deadline)) || fail "Alertmanager not ready: $(tail -5 "$work/alertmanager.log")"
        sleep 0.5
    done
    LAB_ALERTMANAGER=127.0.0.1:$port
    note "Alertmanager on $LAB_ALERTMANAGER routes ibprobe's lab-b alerts to B's alert receiver"
}

start_prometheus() {
    mkdir -p "$work/rules"
    python3 "$RUNNER" adapt-rules "$work/rules" "$LAB_TEST_ROOT"/dashboards/prometheus/*.rules.yml \
        --window "$WINDOW" --for "$HOLD"
    lab_prometheus_of_exporters "$work" A=lab-a B=lab-b
    note "Prometheus scrapes both exporters; rules loaded with $WINDOW windows, for $HOLD"
}

check_clean_run() {
    local out clean
    out=$(probe) || fail "clean probe failed: $out"
    [[ $(metric "$out" probe_success "") == 1 ]] || fail "clean probe did not succeed: $out"
    clean=$(metric "$out" rdma_probe_check 'check="errors_clean"')
    [[ $clean == 1 ]] || fail "errors_clean $clean over the clean link; moved: local $(moved "$out" local), peer $(moved "$out" peer); $(grep '^Link:' <<<"$out")"
    note "clean link: errors_clean 1, BW $(metric "$out" rdma_probe_bandwidth_bytes_per_second "") B/s"
}

check_lossy_run() {
    local out uc clean local_moved peer_moved link
    lab exec --timeout 30 B -- tc qdisc add dev eth0 root netem loss "$LOSS_PERCENT%" \
        || fail "cannot add netem to B's eth0"
    out=$(probe) || fail "lossy probe failed: $out"
    uc=$(probe send_bw_uc) || fail "lossy UC probe failed: $uc"
    check_unreliable_run "$uc"
    [[ $(metric "$out" probe_success "") == 1 ]] || fail "lossy probe did not succeed: $out"
    clean=$(metric "$out" rdma_probe_check 'check="errors_clean"')
    local_moved=$(moved "$out" local)
    peer_moved=$(moved "$out" peer)
    link=$(grep '^Link:' <<<"$out" || true)
    note "$LOSS_PERCENT% loss on B's eth0: errors_clean $clean; moved on B (local): $local_moved; on A (peer): $peer_moved"
    note "$link"
    [[ $clean == 0 ]] || fail "errors_clean $clean with $LOSS_PERCENT% loss"
    [[ -n $local_moved || -n $peer_moved ]] || fail "errors_clean 0 but no error-class delta above zero: $out"
    # The explanation names what moved, with its side.
    grep -Eq '^Link: .*error counters moved during the probe: (local|peer):hw_counters/' <<<"$link" \
        || fail "the explanation does not name the counters: $link"
}

# UC over the lossy link: no ACK, no retransmission, so a message with a lost packet is lost;
# the count of lost messages is the sender's 2000 minus what A's driver says it received.
check_unreliable_run() { # ANSWER
    local out=$1 lost recvs sent_pkts retries
    [[ $(metric "$out" probe_success "") == 1 ]] || fail "UC probe did not succeed: $out"
    lost=$(metric "$out" rdma_probe_messages_lost "")
    recvs=$(metric "$out" rdma_probe_counter_delta 'side="peer",counter="hw_counters/rdma_recvs"')
    sent_pkts=$(metric "$out" rdma_probe_counter_delta 'side="local",counter="hw_counters/sent_pkts"')
    retries=$(metric "$out" rdma_probe_counter_delta 'side="local",counter="hw_counters/completer_retry_err"')
    note "UC send, $LOSS_PERCENT% loss: lost $lost of 2000, A's rdma_recvs +$recvs, B's sent_pkts +$sent_pkts, completer_retry_err +${retries:-0}"
    [[ -n $lost && -n $recvs ]] || fail "UC probe without rdma_probe_messages_lost or A's rdma_recvs: $out"
    python3 -c "import sys; sys.exit(0 if float('$lost') > 0 else 1)" \
        || fail "UC send over a $LOSS_PERCENT% lossy link lost nothing: $out"
    python3 -c "import sys; sys.exit(0 if float('$lost') + float('$recvs') == 2000 else 1)" \
        || fail "UC lost $lost but A's driver received $recvs of 2000"
    [[ $sent_pkts == 8000 ]] || fail "UC sent $sent_pkts packets for 2000 messages of four: retransmitted?"
    python3 -c "import sys; sys.exit(0 if float('${retries:-0}') == 0 else 1)" \
        || fail "UC completer_retry_err +$retries: a UC QP retransmits nothing"
}

check_backpressure_run() {
    local out clean link findings own
    out=$(probe send_bw_starved) || fail "starved send probe failed: $out"
    [[ $(metric "$out" probe_success "") == 1 ]] || fail "starved send probe did not succeed: $out"
    clean=$(metric "$out" rdma_probe_check 'check="errors_clean"')
    link=$(grep '^Link:' <<<"$out" || true)
    findings=$(sed -n 's/.*error counters moved during the probe: \([^(]*\) (.*/\1/p' <<<"$link")
    own=$(sed -n "s/.*; \(.*\) rose from the probe's own receiver back-pressure.*/\1/p" <<<"$link")
    note "one receive posted for 128 in flight: errors_clean $clean; own back-pressure: ${own:-none}; findings: ${findings:-none}"
    [[ $own == *rnr_err* ]] || fail "no RNR counter named as the probe's own back-pressure: $link"
    [[ -z $findings ]] || fail "findings in a back-pressure run over a clean link: $link"
    [[ $clean == 1 ]] || fail "errors_clean $clean with no finding: $link"
}

# Prometheus starts after the runs above: their counter increases are its baseline, not in any
# increase() it computes. Before the lossy run, the alert must be quiet.
check_alert_quiet() {
    local deadline=$((SECONDS + 30)) state
    until [[ -n $(prom_query 'count(rdma_port_hw_stat_total{instance="lab-b",class="retransmission"})') ]]; do
        ((SECONDS < deadline)) || fail "Prometheus has no hw_counters of lab-b"
        sleep 0.5
    done
    # An alert that went pending at the first evaluation on these series would be firing at the
    # first evaluation its `for` later: wait for that one.
    prom_await evaluation $(($(now_ms) + ${HOLD%s} * 1000))
    state=$(curl -fsS "$PROM_API/alerts" | python3 -c '
import json, sys
print(" ".join(a["state"] for a in json.load(sys.stdin)["data"]["alerts"]
               if a["labels"]["alertname"] == "IbprobeRetransmissions"))')
    [[ -z $state ]] || fail "IbprobeRetransmissions is $state before any loss"
    note "IbprobeRetransmissions quiet before the loss"
}

check_alert() {
    local deadline=$((SECONDS + 60)) firing=""
    until firing=$(curl -fsS "$PROM_API/alerts" | python3 -c '
import json, sys
alerts = json.load(sys.stdin)["data"]["alerts"]
print(" ".join("%s/%s=%.0f" % (a["labels"]["instance"], a["labels"]["device"], float(a["value"]))
               for a in alerts
               if a["labels"]["alertname"] == "IbprobeRetransmissions" and a["state"] == "firing"))') \
        && [[ $firing == *lab-b/rxe0* ]]; do
        ((SECONDS < deadline)) || fail "IbprobeRetransmissions does not fire for lab-b: ${firing:-nothing firing}"
        sleep 1
    done
    note "IbprobeRetransmissions firing: $firing"
}

# The Alertmanager B's receiver pushes its verdicts to (--alerts.alertmanager-url): a second
# real one, inside VM B, since the lab's VMs cannot open connections to the host.
start_verdict_alertmanager() {
    printf 'route: {receiver: keep}\nreceivers: [{name: keep}]\n' >"$work/verdicts.yml"
    lab spawn --name verdicts B -- prometheus-alertmanager --config.file="$work/verdicts.yml" \
        --storage.path=/run/tmp/verdicts --web.listen-address=127.0.0.1:9093 \
        --cluster.listen-address= >/dev/null || fail "cannot start Alertmanager in VM B"
    lab_wait_listen B 9093
}

# The verdicts B's Alertmanager holds, one per line: "VERDICT_FOR VERDICT SUMMARY".
verdicts() {
    lab exec --timeout 30 B -- amtool --alertmanager.url=http://127.0.0.1:9093 alert query \
        -o json alertname=IbprobeProbeVerdict | python3 -c '
import json, sys
for a in json.load(sys.stdin):
    print(a["labels"]["verdict_for"], a["labels"]["verdict"], a["annotations"]["summary"])'
}

# Prints the IbprobeRetransmissions verdict matching PATTERN ("VERDICT SUMMARY") once B's
# Alertmanager holds it, within 30 s.
await_verdict() { # PATTERN
    local deadline=$((SECONDS + 30)) found
    until found=$(verdicts | grep "^IbprobeRetransmissions $1"); do
        ((SECONDS < deadline)) || fail "no verdict '$1' in Alertmanager: $(verdicts | tr '\n' ';')"
        sleep 1
    done
    echo "$found"
}

start_exporters() {
    start_verdict_alertmanager
    lab_spawn_exporter A "$EXPORTER" --config.file="$work/ibprobe.yml" --collector.ethtool \
        --collector.ethtool.all
    lab_spawn_exporter B "$EXPORTER" --config.file="$work/ibprobe.yml" --collector.ethtool \
        --alerts.alertmanager-url=http://127.0.0.1:9093
    lab_wait_exporters A B
    lab_wait_listen A 9471
    note "exporters up in both VMs (ethtool collector: A every statistic, B the RoCE ones); B pushes verdicts to the Alertmanager in VM B"
}

# /metrics between two `ethtool -S eth0` in the same VM: every statistic the exporter shows lies
# between the two readings (equal where eth0 was idle in between, as it is without probes).
check_ethtool() { # HOST all|roce
    local host=$1 before page after
    before=$(lab exec --timeout 30 "$host" -- ethtool -S eth0) || fail "ethtool -S in VM $host"
    page=$(curl -fsS "$(exporter_url "$host")/metrics") || fail "no /metrics from VM $host"
    after=$(lab exec --timeout 30 "$host" -- ethtool -S eth0) || fail "ethtool -S in VM $host"
    promtool check metrics <<<"$page" >"$work/promtool-$host.log" 2>&1 \
        || fail "promtool check metrics on VM $host's page: $(cat "$work/promtool-$host.log")"
    python3 - "$host" "$2" "$before" "$page" "$after" <<'PY' || fail "ethtool statistics of VM $host differ"
import re, sys
host, selection, before, page, after = sys.argv[1:]
def ethtool(text):
    out = {}
    for line in text.splitlines()[1:]:
        name, _, value = line.strip().rpartition(":")
        out[name.strip()] = int(value)
    return out
b, a = ethtool(before), ethtool(after)
shown = {}
for m in re.finditer(r'^rdma_port_ethtool_stat_total\{([^}]*)\} (\S+)$', page, re.M):
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
    if labels.get("netdev") == "eth0":
        shown[labels["stat"]] = float(m.group(2))
problems = [f"{k}: /metrics {v:.0f}, ethtool {b.get(k)}..{a.get(k)}" for k, v in shown.items()
            if k not in b or not b[k] <= v <= a[k]]
if not shown:
    problems.append("no rdma_port_ethtool_stat_total for eth0 on /metrics")
if selection == "all" and set(shown) != set(b):
    problems.append(f"--collector.ethtool.all: not on /metrics: {sorted(set(b) - set(shown))}")
if selection == "roce":
    # virtio_net's per-queue drop counters are RoCE evidence; its packet and byte counts are not.
    if "rx_queue_0_drops" not in shown:
        problems.append("rx_queue_0_drops is not on /metrics")
    traffic = [k for k in shown if k.endswith(("_packets", "_bytes"))]
    if traffic:
        problems.append(f"traffic statistics exported without --collector.ethtool.all: {traffic}")
for p in problems:
    print(p, file=sys.stderr)
equal = sum(1 for k, v in shown.items() if b.get(k) == a.get(k) == v)
print(f"VM {host} ({selection}): {len(shown)} of {len(b)} eth0 statistics on /metrics, {equal} "
      f"equal to ethtool -S before "
      f"and after, {len(shown) - equal - len(problems)} between the two readings; "
      f"e.g. " + ", ".join(f"{k}={shown[k]:.0f}" for k in sorted(shown)[:4]))
sys.exit(1 if problems else 0)
PY
}

# The alert-triggered runs of B's receiver, newest first: "ID STATE SUCCESS DELTAS" where DELTAS
# are the error-class counters that moved on either side ("-" for none).
alert_runs() {
    curl -fsS "$(exporter_url B)/api/v1/probes?limit=50" | python3 -c '
import json, sys
for run in json.load(sys.stdin)["probes"]:
    if run.get("trigger", {}).get("alertname") != "IbprobeRetransmissions":
        continue
    moved = ["%s:%s=%.0f" % (side, d["counter"], d["delta"])
             for side, deltas in run.get("result", {}).get("deltas", {}).items()
             if side in ("local", "peer") for d in deltas
             if d["error_class"] and (d["delta"] or 0) > 0]
    print(run["id"], run["state"], str(run.get("success", "-")).lower(), ",".join(moved) or "-")'
}

# The probes dashboard's alert-verdict tables, their queries as shipped, show the run: a row for
# the alert on lab-b, and the hw_counters that moved. Prometheus holds the verdict already; the
# panels are read until both show it (a scrape may fall between the two queries).
verdict_panel_rows() {
    python3 - "$LAB_TEST_ROOT/dashboards/grafana/ibprobe-probes.json" "$PROM_API" <<'PY'
import json, sys, urllib.parse, urllib.request
board, api = sys.argv[1:3]
for panel in json.load(open(board))["panels"]:
    if not panel["title"].startswith("Alert-started probes: "):
        continue
    expr = panel["targets"][0]["expr"].replace("$prober", ".*")
    with urllib.request.urlopen(api + "/query?" + urllib.parse.urlencode({"query": expr})) as r:
        result = json.load(r)["data"]["result"]
    rows = [m["metric"] for m in result
            if m["metric"].get("alertname") == "IbprobeRetransmissions"
            and m["metric"].get("instance") == "lab-b"]
    print(panel["title"], len(rows), rows[0].get("counter", rows[0].get("diagnosis")) if rows else "-")
PY
}

check_verdict_panels() {
    local rows deadline=$((SECONDS + 30))
    until rows=$(verdict_panel_rows) && [[ $(grep -c ' [1-9][0-9]* ' <<<"$rows") == 2 ]]; do
        ((SECONDS < deadline)) || fail "the alert-verdict panels do not show the run: $(tr '\n' ';' <<<"$rows")"
        sleep 1
    done
    note "dashboard panels: $(tr '\n' ';' <<<"$rows")"
}

# The alert fired with the loss still on: the receiver's run sees it, and its verdict reaches
# Prometheus. Then the loss goes, and the next notification's run is healthy.
check_alert_probe() {
    local fired deadline first verdict_seconds run latest removed
    # When the alert fired: Prometheus' activeAt (it went pending) plus the rule's `for`.
    fired=$(curl -fsS "$PROM_API/alerts" | python3 -c '
import datetime, json, sys
hold = float(sys.argv[1].rstrip("s"))
for a in json.load(sys.stdin)["data"]["alerts"]:
    if a["labels"]["alertname"] == "IbprobeRetransmissions" and a["labels"]["instance"] == "lab-b":
        at = datetime.datetime.fromisoformat(a["activeAt"][:26].rstrip("Z") + "+00:00")
        print("%.1f" % (at.timestamp() + hold))
        break' "$HOLD")
    [[ -n $fired ]] || fail "IbprobeRetransmissions for lab-b is not in Prometheus' alerts"
    deadline=$((SECONDS + 90))
    until [[ -n $(prom_query 'count(ibprobe_alert_probe_error_counter_delta{instance="lab-b",alertname="IbprobeRetransmissions",counter=~"hw_counters/.*"} > 0)') ]]; do
        ((SECONDS < deadline)) || fail "no verdict of an alert-triggered run in Prometheus 90 s after the alert fired; runs: $(alert_runs | tr '\n' ';'); receiver: $(curl -fsS "$(exporter_url B)/metrics" | grep '^ibprobe_alert_' | tr '\n' ';')"
        sleep 1
    done
    verdict_seconds=$(python3 -c "import time; print('%.0f' % (time.time() - $fired))")
    first=$(alert_runs | awk '$2 == "succeeded" || $2 == "failed"' | tail -1)
    note "alert to verdict: ${verdict_seconds} s from IbprobeRetransmissions firing (Prometheus' activeAt + for) to the verdict in Prometheus (polled every second); run $first"
    ((verdict_seconds <= 90)) || fail "the verdict took ${verdict_seconds} s from the alert firing"
    check_verdict_panels
    local pushed
    pushed=$(await_verdict 'errors_moved .*completer_retry_err')
    note "verdict in Alertmanager: $pushed"
    [[ $(awk '{print $4}' <<<"$first") == *hw_counters/* ]] || fail "the alert-triggered run under loss names no moved counter: $first"
    lab exec --timeout 30 B -- tc qdisc del dev eth0 root || fail "cannot remove netem"
    # Only a run submitted after the loss was removed counts: one queued or running by then may
    # have sent under the loss.
    latest=$(alert_runs | awk 'NR == 1 {print $1}')
    removed=$SECONDS
    deadline=$((SECONDS + 90))
    until run=$(alert_runs | awk -v latest="$latest" '$1 > latest && ($2 == "succeeded" || $2 == "failed")' | head -1) \
        && [[ -n $run ]]; do
        ((SECONDS < deadline)) || fail "no new alert-triggered run after the loss was removed: $(alert_runs | tr '\n' ';')"
        sleep 1
    done
    note "after the loss was removed: run $run, $((SECONDS - removed)) s later"
    [[ $run == *" succeeded true -" ]] || fail "the run after the loss was removed is not healthy: $run"
    pushed=$(await_verdict 'healthy ')
    note "verdict in Alertmanager after the loss was removed: $pushed"
    [[ $(curl -fsS "$(exporter_url B)/metrics" | grep -c '^ibprobe_alert_probe_error_counter_delta{') == 0 ]] \
        || fail "the healthy verdict still carries error counter deltas"
}

main() {
    scratch_begin ibprobe-lab-roce-loss
    chmod 755 "$work" # the VMs read the module file from the host's /tmp
    lab_test_begin
    # A failure while the loss is on must not hand the next test a lossy link.
    trap 'rc=$?; set +e; lab exec --timeout 30 B -- tc qdisc del dev eth0 root >/dev/null 2>&1
          scratch_cleanup; (exit $rc); lab_test_end' EXIT
    lab_test_up two --forward 9470
    write_config
    start_exporters
    check_ethtool A all
    check_ethtool B roce
    check_clean_run
    check_backpressure_run
    start_alertmanager
    start_prometheus
    check_alert_quiet
    check_lossy_run
    check_alert
    check_alert_probe
}

main "$@"
