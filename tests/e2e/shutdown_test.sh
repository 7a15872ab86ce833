#!/usr/bin/env bash
# End-to-end: how long SIGTERM takes to end the exporter, idle and with a probe hanging on a peer
# that accepts and never answers while clients wait on it. Prints the figures; the bound checked
# (500 ms) is a correctness bound far above them, which an accept loop polling for 2 s fails.
# With the probe hanging, every waiter must be answered "cancelled" and the exit status be 0.
# Usage: shutdown_test.sh EXPORTER_BINARY FIXTURE_BINARY
set -euo pipefail

# shellcheck source=tests/lib/exporter-checks.sh
source "$(dirname "$0")/../lib/exporter-checks.sh"
exporter_test_begin ibprobe-shutdown "$@"

"$fixture_bin" "$work/sys" >/dev/null
cat >"$work/ibprobe.yml" <<'YAML'
modules:
  hang: {kind: write_bw, timeout: 60s}
scheduler: {queue_length: 4}
YAML

start_exporter() { # EXTRA_FLAGS...
  launch_exporter --config.file="$work/ibprobe.yml" \
    --probe.responder-address="127.0.0.1:$(free_port)" "$@"
  url=http://127.0.0.1:$port
  wait_for 60 curl -sf "$url/-/ready" || fail "exporter not ready"
}

# Sets stop_ms to the milliseconds from SIGTERM to the exporter's exit; its status must be 0.
# (Not in a subshell: only this shell can wait for the exporter.)
stop_exporter() {
  local start end rc=0
  start=$(date +%s%N)
  kill -TERM "$exporter_pid"
  wait "$exporter_pid" || rc=$?
  end=$(date +%s%N)
  ((rc == 0)) || fail "exporter exited $rc after SIGTERM"
  stop_ms=$(((end - start) / 1000000))
}

# Under AddressSanitizer the exit includes LeakSanitizer's scan of the heap: the figures are
# printed, the bound is not checked.
bound_ms=500
ldd "$exporter_bin" >"$work/ldd"
if grep -q libasan "$work/ldd"; then
  bound_ms=
  echo "sanitizer build: exit times include LeakSanitizer's scan; bound not checked"
fi
within_bound() { [[ -z $bound_ms ]] || (($1 < bound_ms)); }

idle=()
for _ in 1 2 3; do
  start_exporter
  stop_exporter
  idle+=("$stop_ms")
done
echo "SIGTERM to exit, idle: ${idle[*]} ms"
for ms in "${idle[@]}"; do within_bound "$ms" || fail "idle exit took $ms ms"; done

# A peer that accepts and never answers: the probe hangs in its handshake.
start_hanging_peer
peer=$hanging_peer

# Five requests may wait at once: the four waiters and the /probe scrape below.
start_exporter --web.max-waiting-requests=5
id=$(curl -sf -XPOST "$url/api/v1/probes" -d "{\"target\":\"$peer\",\"module\":\"hang\"}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
waiters=()
for i in 1 2 3 4; do
  curl -sS --max-time 30 -o "$work/waiter$i" "$url/api/v1/probes/$id?wait=60s" &
  waiters+=($!)
done
curl -sS --max-time 30 -o "$work/scrape" "$url/probe?target=$peer&module=hang" &
waiters+=($!)
wait_for 10 test "$(curl -sf "$url/api/v1/probes/$id" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')" = running ||
  fail "the probe is not running"
# The sixth waiting request finds no slot and is told when to come back.
wait_for 10 test "$(curl -s -o "$work/refused" -w '%{http_code}' --max-time 5 \
  "$url/api/v1/probes/$id?wait=10s")" = 503 ||
  fail "a sixth waiting request was not refused: $(cat "$work/refused")"
grep -q too_many_waiting "$work/refused" || fail "the refusal says: $(cat "$work/refused")"
curl -sf "$url/metrics" >/dev/null || fail "/metrics does not answer while five requests wait"
stop_exporter
busy=$stop_ms
echo "SIGTERM to exit, with a hanging probe and 5 waiting clients: $busy ms"
within_bound "$busy" || fail "exit with a hanging probe took $busy ms"
n=0
for pid in "${waiters[@]}"; do
  n=$((n + 1))
  rc=0
  wait "$pid" || rc=$?
  ((rc == 0)) || fail "waiting client $n got no answer (curl exit $rc): $(cat "$work/waiter$n" "$work/scrape" 2>/dev/null | head -c 300)"
done
for i in 1 2 3 4; do
  grep -q '"reason":"cancelled"' "$work/waiter$i" ||
    fail "waiter $i was not answered cancelled: $(cat "$work/waiter$i")"
done
grep -q '^probe_success 0' "$work/scrape" || fail "the /probe scrape got: $(cat "$work/scrape")"
echo "PASS: idle exits ${idle[*]} ms, with a hanging probe $busy ms; every waiter answered cancelled"
