#!/usr/bin/env bash
# End-to-end: a barrage of malformed and hostile requests against a running exporter (generated
# sysfs tree, probe API on, basic auth on the probe endpoints, /metrics open). Every request must
# get the right status, /metrics must keep answering while slow clients hold connections, and
# afterwards the process must be alive, answer a clean SIGTERM with exit status 0 and, in the
# ASan build, leak nothing (LeakSanitizer fails the exit status otherwise).
# Usage: hostile_requests_test.sh EXPORTER_BINARY FIXTURE_BINARY
set -euo pipefail

# shellcheck source=tests/lib/exporter-checks.sh
source "$(dirname "$0")/../lib/exporter-checks.sh"
exporter_test_begin ibprobe-hostile "$@"

checks=0
# expect STATUS DESCRIPTION CURL_ARGS...: the request must be answered with STATUS.
expect() {
  local want=$1 what=$2 got
  shift 2
  got=$(curl -sS -o "$work/body" -w '%{http_code}' --max-time 20 "$@") || got="curl-failed"
  [[ $got == "$want" ]] || fail "$what: expected $want, got $got: $(head -c 300 "$work/body")"
  checks=$((checks + 1))
}

"$fixture_bin" "$work/sys" >/dev/null
password=correct-horse-battery
write_basic_auth_web_config runbook "$password"
cat >"$work/ibprobe.yml" <<'YAML'
modules:
  write_bw: {kind: write_bw, iterations: 100, timeout: 5s}
  write_lat: {kind: write_lat, iterations: 100, timeout: 5s}
allowed_targets: [127.0.0.0/8, localhost]
scheduler: {queue_length: 2, history_length: 8}
YAML
responder_port=$(free_port)
launch_exporter --web.config.file="$work/web.yml" --config.file="$work/ibprobe.yml" \
  --probe.responder-address="127.0.0.1:$responder_port" --web.threads=8
url=http://127.0.0.1:$port
auth=(-u "runbook:$password")
# A closed port on this host: probes to it fail at once as unreachable.
dead=127.0.0.1:$(free_port)

# Authentication: the probe endpoints need it, /metrics does not.
expect 200 "metrics without credentials" "$url/metrics"
expect 401 "probe without credentials" "$url/probe?target=$dead&module=write_bw"
expect 401 "probe with a wrong password" -u runbook:wrong "$url/probe?target=$dead&module=write_bw"
expect 401 "probe with an unknown user" -u mallory:x "$url/probe?target=$dead&module=write_bw"
expect 401 "async API without credentials" -XPOST "$url/api/v1/probes" -d '{}'
expect 401 "reload without credentials" -XPOST "$url/-/reload"
expect 401 "garbage Authorization header" -H 'Authorization: Basic !!!notbase64' "$url/api/v1/probes"
expect 401 "bearer token nobody issued" -H 'Authorization: Bearer abc' "$url/api/v1/probes"

# Bad parameters.
expect 400 "no module" "${auth[@]}" "$url/probe?target=$dead"
expect 400 "no target" "${auth[@]}" "$url/probe?module=write_bw"
expect 400 "unknown module" "${auth[@]}" "$url/probe?target=$dead&module=nope"
expect 400 "unknown parameter" "${auth[@]}" "$url/probe?target=$dead&module=write_bw&x=1"
expect 400 "duplicate parameter" "${auth[@]}" "$url/probe?target=$dead&module=write_bw&module=write_lat"
expect 400 "malformed escape" "${auth[@]}" "$url/probe?target=%zz&module=write_bw"
expect 400 "control character" "${auth[@]}" "$url/probe?target=a%0Ab&module=write_bw"
expect 400 "target with a space" "${auth[@]}" "$url/probe?target=a%20b:9471&module=write_bw"
expect 400 "port out of range" "${auth[@]}" "$url/probe?target=127.0.0.1:70000&module=write_bw"
expect 400 "bad debug value" "${auth[@]}" "$url/probe?target=$dead&module=write_bw&debug=maybe"
expect 400 "huge query string" "${auth[@]}" "$url/probe?target=$(head -c 6000 /dev/zero | tr '\0' a)&module=write_bw"
expect 400 "scrape timeout not a number" "${auth[@]}" -H 'X-Prometheus-Scrape-Timeout-Seconds: soon' "$url/probe?target=$dead&module=write_bw"
expect 400 "scrape timeout below a second" "${auth[@]}" -H 'X-Prometheus-Scrape-Timeout-Seconds: 0.6' "$url/probe?target=$dead&module=write_bw"
expect 403 "target outside allowed_targets" "${auth[@]}" "$url/probe?target=192.0.2.7:9471&module=write_bw"

# The lane: out of range, or a P_Key index the probe port does not have (the generated sysfs
# tree has no P_Key table), refused with the reason before anything runs.
# expect_lane STATUS DESCRIPTION REASON CURL_ARGS...: STATUS, with REASON in the body.
expect_lane() {
  local want=$1 what=$2 reason=$3
  shift 3
  expect "$want" "$what" "$@"
  grep -qF "$reason" "$work/body" || fail "$what: the reason '$reason' is not in: $(head -c 300 "$work/body")"
}
expect_lane 400 "/probe with sl 16" "sl=16: a service level is 0..15" \
  "${auth[@]}" "$url/probe?target=$dead&module=write_bw&sl=16"
expect_lane 400 "/probe with traffic_class 256" "traffic_class=256: a traffic class is one byte" \
  "${auth[@]}" "$url/probe?target=$dead&module=write_bw&traffic_class=256"
expect_lane 400 "/probe with an unknown pkey_index" "pkey_index=5: the port's P_Key table has 0 entries, no index 5" \
  "${auth[@]}" "$url/probe?target=$dead&module=write_bw&pkey_index=5"
expect_lane 400 "/probe with sl not a number" "sl 'high' is not a whole number" \
  "${auth[@]}" "$url/probe?target=$dead&module=write_bw&sl=high"
expect_lane 400 "API with sl 16" "sl=16: a service level is 0..15" \
  "${auth[@]}" -XPOST "$url/api/v1/probes" -d "{\"target\":\"$dead\",\"module\":\"write_bw\",\"sl\":16}"
expect_lane 400 "API with traffic_class 1000" "traffic_class=1000: a traffic class is one byte" \
  "${auth[@]}" -XPOST "$url/api/v1/probes" -d "{\"target\":\"$dead\",\"module\":\"write_bw\",\"traffic_class\":1000}"
expect_lane 400 "API with an unknown pkey_index" "pkey_index=3: the port's P_Key table has 0 entries, no index 3" \
  "${auth[@]}" -XPOST "$url/api/v1/probes" -d "{\"target\":\"$dead\",\"module\":\"write_bw\",\"pkey_index\":3}"
grep -q '"bad_lane"' "$work/body" || fail "the API's refusal has no code bad_lane: $(cat "$work/body")"

# Huge and hostile values in the async API.
expect 400 "body is not JSON" "${auth[@]}" -XPOST "$url/api/v1/probes" -d 'target=x'
expect 400 "body is a JSON array" "${auth[@]}" -XPOST "$url/api/v1/probes" -d '[1,2]'
expect 400 "unknown JSON field" "${auth[@]}" -XPOST "$url/api/v1/probes" -d "{\"target\":\"$dead\",\"module\":\"write_bw\",\"qps\":100000}"
expect 400 "target of the wrong type" "${auth[@]}" -XPOST "$url/api/v1/probes" -d '{"target":1e308,"module":"write_bw"}'
expect 400 "negative timeout" "${auth[@]}" -XPOST "$url/api/v1/probes" -d "{\"target\":\"$dead\",\"module\":\"write_bw\",\"timeout_seconds\":-1}"
expect 400 "deeply nested JSON" "${auth[@]}" -XPOST "$url/api/v1/probes" --data-binary "$(printf '%.0s[' {1..5000})"
head -c 100000 /dev/zero | tr '\0' ' ' >"$work/big-body"
expect 413 "body over 64 KiB" "${auth[@]}" -XPOST "$url/api/v1/probes" --data-binary "@$work/big-body"
expect 400 "wait beyond its bound" "${auth[@]}" "$url/api/v1/probes/1?wait=99999s"
expect 400 "id not a number" "${auth[@]}" "$url/api/v1/probes/abc"
expect 404 "id never issued" "${auth[@]}" "$url/api/v1/probes/18446744073709551615"
expect 400 "id beyond 64 bits" "${auth[@]}" "$url/api/v1/probes/99999999999999999999999"
expect 400 "list limit out of range" "${auth[@]}" "$url/api/v1/probes?limit=100000000000000000000"
expect 405 "DELETE on the API" "${auth[@]}" -XDELETE "$url/api/v1/probes"
expect 405 "POST on /metrics" -XPOST "$url/metrics"
expect 401 "unknown path without credentials" "$url/nothing-here"
expect 404 "unknown path" "${auth[@]}" "$url/nothing-here"

# A probe that runs: the target is closed, so it fails at once, as unreachable.
expect 200 "probe of a closed port" "${auth[@]}" "$url/probe?target=$dead&module=write_bw"
grep -q '^probe_success 0$' "$work/body" || fail "probe of a closed port: $(cat "$work/body")"
grep -q '^rdma_probe_failure{reason="unreachable"} 1$' "$work/body" || fail "no unreachable reason: $(cat "$work/body")"

# Concurrent duplicates: every request is answered, either queued (202) or refused (429 with
# Retry-After); none is lost. A silent listener holds each run for its 5 s handshake bound.
python3 - "$work" <<'PY' &
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(64)
open(sys.argv[1] + "/silent-port", "w").write(str(s.getsockname()[1]))
conns = []
end = time.time() + 60
while time.time() < end:
    s.settimeout(1)
    try:
        conns.append(s.accept()[0])
    except OSError:
        pass
PY
pids+=($!)
wait_for 60 test -s "$work/silent-port" || fail "silent listener did not start"
silent=127.0.0.1:$(cat "$work/silent-port")
for i in $(seq 1 12); do
  curl -sS -o "$work/dup-$i.body" -D "$work/dup-$i.headers" -w '%{http_code}\n' "${auth[@]}" \
    -XPOST "$url/api/v1/probes" -d "{\"target\":\"$silent\",\"module\":\"write_lat\"}" >"$work/dup-$i.status" &
done
wait_for 30 bash -c "[[ \$(cat $work/dup-*.status 2>/dev/null | wc -l) -eq 12 ]]" || fail "duplicate requests went unanswered"
accepted=$(cat "$work"/dup-*.status | grep -c '^202$' || true)
refused=$(cat "$work"/dup-*.status | grep -c '^429$' || true)
((accepted + refused == 12 && accepted >= 1 && refused >= 1)) ||
  fail "12 concurrent requests: $accepted accepted, $refused refused, $(cat "$work"/dup-*.status | tr '\n' ' ')"
for f in "$work"/dup-*.status; do
  if grep -q 429 "$f"; then
    grep -qi '^Retry-After: [0-9]' "${f%.status}.headers" || fail "429 without Retry-After"
  fi
done
echo "concurrent duplicates: $accepted queued, $refused refused with 429 and Retry-After"

# Slow clients: connections that dribble their headers hold a few worker threads; /metrics and
# the health endpoint must still answer from the others.
python3 - "$port" "$work/slow_connected" <<'PY' &
import socket, sys, time
conns = []
for _ in range(5):
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    conns.append(c)
open(sys.argv[2], "w").write("connected")
for _ in range(10):
    time.sleep(1)
    for c in conns:
        try:
            c.sendall(b"X-Slow: 1\r\n")
        except OSError:
            pass
PY
slow=$!
pids+=("$slow")
wait_for 30 test -s "$work/slow_connected" || fail "the slow clients did not connect"
for i in 1 2 3; do
  expect 200 "metrics while slow clients hold connections ($i)" "$url/metrics"
  expect 200 "health while slow clients hold connections ($i)" "$url/-/healthy"
done

# Malformed HTTP on a raw socket: answered (4xx) or closed, never a crash.
python3 - "$port" <<'PY' || fail "malformed HTTP killed the server"
import socket, sys
for raw in [b"\x00\x01\x02\r\n\r\n", b"GET " + b"/" * 70000 + b" HTTP/1.1\r\n\r\n",
            b"POST /api/v1/probes HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n{}",
            b"POST /api/v1/probes HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
            b"GET /metrics HTTP/9.9\r\n\r\n"]:
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    c.settimeout(10)
    try:
        c.sendall(raw)
        c.recv(4096)
    except OSError:
        pass
    c.close()
PY

kill "$slow" 2>/dev/null || true
expect 200 "health after the barrage" "$url/-/healthy"
expect 200 "metrics after the barrage" "$url/metrics"
grep -q '^ibprobe_probes_total{module="write_bw",result="failure"}' "$work/body" ||
  fail "/metrics lacks the probe totals after the barrage"

kill -TERM "$exporter_pid"
rc=0
wait "$exporter_pid" || rc=$?
((rc == 0)) || fail "exporter exited $rc after SIGTERM (a sanitizer report is in the log)"
grep -q 'shutting down' "$work/exporter.log" || fail "no orderly shutdown in the log"
echo "PASS: $checks hostile requests answered with the expected status; exporter alive throughout and exited 0"
