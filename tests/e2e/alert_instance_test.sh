#!/usr/bin/env bash
# End-to-end: the alert receiver of exporters scraped by IP, as a site's file_sd of addresses or
# Kubernetes' pod targets name them. Two hosts, each a network namespace of this test's own with
# one end of a veth pair (198.18.0.1 and 198.18.0.2, the benchmarking range), each running the
# built exporter on a generated sysfs tree:
# - host 1's exporter on the default address (:9470, no --web.listen-address, no
#   alerts.instance) runs the probe of an alert whose instance is 198.18.0.1:9470;
# - host 2's on :19477: an alert about 198.18.0.2:19477 posted to host 1 is sent on to that
#   port and runs there, carrying the alert as its trigger;
# - neither drops anything as other_instance;
# - their configuration file holds only an alerts section: the built-in modules stay.
# Usage: alert_instance_test.sh EXPORTER_BINARY FIXTURE_BINARY
set -euo pipefail

# shellcheck source=tests/lib/exporter-checks.sh
source "$(dirname "$0")/../lib/exporter-checks.sh"
exporter_test_begin ibprobe-alert-instance "$@"

ns1=ibprobe-ai1-$$
ns2=ibprobe-ai2-$$
cleanup() {
  scratch_cleanup
  ip netns del "$ns1" 2>/dev/null || true
  ip netns del "$ns2" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns1"
ip netns add "$ns2"
ip link add veth-ai1 netns "$ns1" type veth peer name veth-ai2 netns "$ns2"
ip -n "$ns1" addr add 198.18.0.1/24 dev veth-ai1
ip -n "$ns2" addr add 198.18.0.2/24 dev veth-ai2
for ns in "$ns1" "$ns2"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns1" link set veth-ai1 up
ip -n "$ns2" link set veth-ai2 up

"$fixture_bin" "$work/sys" >/dev/null
# A file of one concern, the alerts: the built-in modules stay (write_bw among them). The probes
# target a port where nothing listens: each run fails at once, and still carries its trigger.
cat >"$work/ibprobe.yml" <<'YAML'
alerts:
  repeat: 1h
YAML

start_host() { # NAMESPACE LOG FLAGS...
  local ns=$1 log=$2
  shift 2
  ip netns exec "$ns" "$exporter_bin" --path.sysfs="$work/sys" --config.file="$work/ibprobe.yml" \
    "$@" 2>"$log" &
  pids+=($!)
}
start_host "$ns1" "$work/exporter.log"
start_host "$ns2" "$work/exporter2.log" --web.listen-address=:19477
in_ns() { ip netns exec "$1" "${@:2}"; }
wait_for 60 in_ns "$ns1" curl -sf http://198.18.0.1:9470/-/ready || fail "host 1's exporter not ready"
wait_for 60 in_ns "$ns2" curl -sf http://198.18.0.2:19477/-/ready ||
  fail "host 2's exporter not ready: $(tail -5 "$work/exporter2.log")"

# POSTs one firing alert about INSTANCE to host 1's receiver; prints the answer.
post_alert() { # INSTANCE FINGERPRINT
  in_ns "$ns1" curl -fsS -X POST -H 'Content-Type: application/json' \
    http://198.18.0.1:9470/api/v1/alerts --data-binary @- <<JSON
{"version": "4", "status": "firing", "receiver": "ibprobe", "alerts": [{"status": "firing",
 "labels": {"alertname": "IbprobeProbeFailing", "instance": "$1", "module": "write_bw",
            "target": "127.0.0.1:1"},
 "annotations": {}, "startsAt": "2026-12-05T06:00:00Z", "fingerprint": "$2"}]}
JSON
}

# The fingerprints of the alert-started runs an exporter has, one per line.
triggered_runs() { # NAMESPACE URL
  in_ns "$1" curl -fsS "$2/api/v1/probes" | python3 -c '
import json, sys
for run in json.load(sys.stdin)["probes"]:
    if "trigger" in run:
        print(run["trigger"]["fingerprint"], run["trigger"]["labels"]["instance"])'
}

answer=$(post_alert 198.18.0.1:9470 self) || fail "webhook to host 1 refused"
echo "alert about 198.18.0.1:9470 posted to host 1: $answer"
python3 -c 'import json, sys; a = json.loads(sys.argv[1]); sys.exit(0 if len(a["started"]) == 1 else 1)' \
  "$answer" || fail "host 1 did not run the probe of an alert about itself by IP: $answer"

answer=$(post_alert 198.18.0.2:19477 other) || fail "webhook to host 1 refused"
echo "alert about 198.18.0.2:19477 posted to host 1: $answer"
python3 -c '
import json, sys
a = json.loads(sys.argv[1])
sys.exit(0 if [s["exporter"] for s in a["sent_on"]] == ["198.18.0.2:19477"] and not a["started"] else 1)' \
  "$answer" || fail "host 1 did not send the alert about 198.18.0.2:19477 on to that port: $answer"
wait_for 30 bash -c "$(declare -f in_ns triggered_runs); triggered_runs $ns2 http://198.18.0.2:19477 | grep -qx 'other 198.18.0.2:19477'" ||
  fail "host 2 has no run of the alert sent on: $(triggered_runs "$ns2" http://198.18.0.2:19477 | tr '\n' ';'); $(tail -5 "$work/exporter2.log")"
echo "host 2 ran it: $(triggered_runs "$ns2" http://198.18.0.2:19477 | tr '\n' ';')"
[[ $(triggered_runs "$ns1" http://198.18.0.1:9470) == "self 198.18.0.1:9470" ]] ||
  fail "host 1's alert-started runs: $(triggered_runs "$ns1" http://198.18.0.1:9470 | tr '\n' ';')"

for ns_url in "$ns1 http://198.18.0.1:9470" "$ns2 http://198.18.0.2:19477"; do
  read -r ns url <<<"$ns_url"
  if in_ns "$ns" curl -fsS "$url/metrics" | grep -q 'ibprobe_alert_probes_dropped_total{reason="other_instance"}'; then
    fail "$url dropped an alert as other_instance"
  fi
done
echo "PASS: an exporter reached by IP at :9470 runs the probe of an alert about itself; one about an exporter at :19477 runs there"
