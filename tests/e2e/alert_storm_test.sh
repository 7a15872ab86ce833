#!/usr/bin/env bash
# End-to-end: Alertmanager's webhook under storms and bad input, against a running exporter with
# basic auth on its API (generated sysfs tree; the probes hang on a peer that accepts and never
# answers, so every started run stays in flight):
# - 100 identical webhooks in 10 s start one run (99 dropped as repeat);
# - then one message of 1,000 distinct alerts (300 KB: more than any other request may carry)
#   starts one more, up to max_in_flight 2, and drops the other 999 as in_flight_limit;
# - before them, a target outside allowed_targets is dropped as target_not_allowed;
# - malformed JSON, a wrong version, a body over 1 MiB, no
#   credentials and a wrong password each get their 4xx (or drop reason) and their counter;
# - a client reads /metrics back to back throughout: every answer must be 200. Its latencies
#   (p50, p99, max) are printed, not checked: speed is measured, not asserted.
# Usage: alert_storm_test.sh EXPORTER_BINARY FIXTURE_BINARY
set -euo pipefail

# shellcheck source=tests/lib/exporter-checks.sh
source "$(dirname "$0")/../lib/exporter-checks.sh"
exporter_test_begin ibprobe-alert-storm "$@"

"$fixture_bin" "$work/sys" >/dev/null
password=alert-receiver-secret
write_basic_auth_web_config alertmanager "$password"
cat >"$work/ibprobe.yml" <<'YAML'
modules:
  write_bw: {kind: write_bw, timeout: 60s}
allowed_targets: [127.0.0.0/8]
scheduler: {queue_length: 4}
alerts: {max_in_flight: 2, repeat: 1h, dispatch_port: 0}
YAML

# A peer that accepts and never answers: a started probe hangs in its handshake.
start_hanging_peer

launch_exporter --web.config.file="$work/web.yml" --config.file="$work/ibprobe.yml" \
  --probe.responder-address="127.0.0.1:$(free_port)"
wait_for 60 curl -sf "http://127.0.0.1:$port/-/ready" || fail "exporter not ready"

python3 - "http://127.0.0.1:$port" "$hanging_peer" "$password" <<'PY' ||
import base64, http.client, json, statistics, sys, threading, time, urllib.parse

url, peer, password = sys.argv[1:4]
host = urllib.parse.urlsplit(url).netloc
auth = "Basic " + base64.b64encode(f"alertmanager:{password}".encode()).decode()
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def alert(fingerprint, target):
    # As Alertmanager's notify/webhook sends one (template.Alert).
    return {"status": "firing",
            "labels": {"alertname": "IbprobeProbeFailing", "module": "write_bw",
                       "target": target, "severity": "warning", "fingerprint_is": fingerprint},
            "annotations": {"summary": "every run failed for 10 minutes"},
            "startsAt": "2026-12-05T06:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph", "fingerprint": fingerprint}


def message(alerts, version="4"):
    return json.dumps({"version": version, "groupKey": "{}:{alertname=\"IbprobeProbeFailing\"}",
                       "truncatedAlerts": 0, "status": "firing", "receiver": "ibprobe",
                       "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                       "externalURL": "http://alertmanager:9093", "alerts": alerts})


def post(body, authorization=auth):
    conn = http.client.HTTPConnection(host, timeout=30)
    headers = {"Content-Type": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    conn.request("POST", "/api/v1/alerts", body=body, headers=headers)
    response = conn.getresponse()
    text = response.read().decode(errors="replace")
    conn.close()
    return response.status, text


# /metrics read back to back from before the first storm to after the last.
latencies, statuses, stop = [], [], threading.Event()


def scrape_loop():
    conn = http.client.HTTPConnection(host, timeout=10)
    while not stop.is_set():
        start = time.monotonic()
        try:
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            response.read()
            statuses.append(response.status)
        except OSError as e:
            statuses.append(repr(e))
            conn = http.client.HTTPConnection(host, timeout=10)
        latencies.append(time.monotonic() - start)


scraper = threading.Thread(target=scrape_loop)
scraper.start()

# A target outside allowed_targets (checked while nothing is in flight).
status, text = post(message([alert("f-outside", "192.0.2.1:9471")]))
check(status == 200 and json.loads(text)["dropped"][0]["reason"] == "target_not_allowed",
      f"a target outside allowed_targets: {status} {text[:300]}")
# 100 identical webhooks in 10 s, as a flapping group's re-sends look.
started = dropped = 0
for i in range(100):
    status, text = post(message([alert("f-identical", peer)]))
    check(status == 200, f"identical webhook {i}: {status} {text[:200]}")
    answer = json.loads(text) if status == 200 else {}
    started += len(answer.get("started", []))
    dropped += len([d for d in answer.get("dropped", []) if d["reason"] == "repeat"])
    time.sleep(0.1)
check(started == 1 and dropped == 99,
      f"100 identical webhooks started {started} runs and dropped {dropped} as repeat")

# 1,000 distinct alerts in one message.
body = message([alert(f"f{i:04d}", peer) for i in range(1000)])
status, text = post(body)
check(status == 200, f"1,000 alerts ({len(body)} bytes): {status} {text[:200]}")
answer = json.loads(text) if status == 200 else {"started": [], "dropped": []}
reasons = {}
for d in answer["dropped"]:
    reasons[d["reason"]] = reasons.get(d["reason"], 0) + 1
check(len(answer["started"]) == 1 and reasons == {"in_flight_limit": 999},
      f"1,000 alerts: started {len(answer['started'])}, dropped {reasons}")

# Bad input.
for what, body, want in [("malformed JSON", "{", "the message is not valid JSON"),
                         ("version 3", message([alert("f-v3", peer)], "3"),
                          "this receiver reads Alertmanager's version 4")]:
    status, text = post(body)
    check(status == 400 and "bad_webhook" in text and want in text, f"{what}: {status} {text[:200]}")
status, text = post(" " * ((1 << 20) + 1))
check(status == 413 and "larger than 1048576 bytes" in text, f"a body over 1 MiB: {status} {text[:200]}")
status, text = post(message([alert("f-noauth", peer)]), authorization=None)
check(status == 401, f"no credentials: {status}")
wrong = "Basic " + base64.b64encode(b"alertmanager:wrong").decode()
status, text = post(message([alert("f-wrong", peer)]), authorization=wrong)
check(status == 401, f"a wrong password: {status}")

time.sleep(0.5)
stop.set()
scraper.join()
bad = [s for s in statuses if s != 200]
check(not bad, f"/metrics answered {len(bad)} of {len(statuses)} requests with {bad[:5]}")
ms = sorted(x * 1000 for x in latencies)
print(f"/metrics during the storms: {len(ms)} requests, p50 {statistics.median(ms):.1f} ms, "
      f"p99 {ms[int(len(ms) * 0.99) - 1]:.1f} ms, max {ms[-1]:.1f} ms")

conn = http.client.HTTPConnection(host, timeout=10)
conn.request("GET", "/metrics")
page = conn.getresponse().read().decode()
for line in ["ibprobe_alert_probes_started_total 2",
             'ibprobe_alert_probes_dropped_total{reason="repeat"} 99',
             'ibprobe_alert_probes_dropped_total{reason="in_flight_limit"} 999',
             'ibprobe_alert_probes_dropped_total{reason="target_not_allowed"} 1',
             'ibprobe_alert_notifications_total{status="firing"} 1101',
             "ibprobe_alert_webhooks_malformed_total 2",
             'ibprobe_http_requests_refused_total{reason="unauthorized"} 2',
             'ibprobe_http_requests_refused_total{reason="body_too_large"} 1']:
    check(line + "\n" in page, f"/metrics has no line '{line}'")
sys.exit(1 if failures else 0)
PY
  fail "the storms did not go as they should"

# The two hanging runs are cancelled on SIGTERM, and the exporter exits cleanly.
kill -TERM "$exporter_pid"
rc=0
wait "$exporter_pid" || rc=$?
((rc == 0)) || fail "exporter exited $rc after SIGTERM"
echo "PASS: one run for 100 identical webhooks, max_in_flight for 1,000 alerts, every refusal counted, /metrics always 200"
