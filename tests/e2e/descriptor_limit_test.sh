#!/usr/bin/env bash
# End-to-end: the exporter under a hard RLIMIT_NOFILE it cannot raise, on a host with more sysfs
# files than half the limit (80 HCAs of 2 ports, about 9,500 series, against 1024 descriptors).
# The files it keeps open stay within half the limit, directories included, and whatever does
# not fit is opened for each read: every scrape serves the same series as the exporter without
# the limit, no input is dropped, and no descriptor-exhaustion warning is logged.
# Usage: descriptor_limit_test.sh EXPORTER_BINARY FIXTURE_BINARY
set -euo pipefail

# shellcheck source=tests/lib/exporter-checks.sh
source "$(dirname "$0")/../lib/exporter-checks.sh"
exporter_test_begin ibprobe-descriptor-limit "$@"

readonly LIMIT=1024
"$fixture_bin" "$work/sys" --hcas 80 --ports 2 >/dev/null

start_exporter() { # [prlimit ARGS...]: sets exporter_pid and url
  launch_exporter "$@" -- --probe.responder-address=
  url=http://127.0.0.1:$port
  wait_for 60 curl -sf "$url/-/ready" || fail "exporter not ready"
}

stop_exporter() {
  kill "$exporter_pid"
  wait "$exporter_pid" || true
}

# The series of one scrape, values and timing families left out, sorted.
series_of() { # FILE
  grep -v '^#' "$1" | grep -v '^ibprobe_scrape_collector_duration_seconds' | sed 's/ [^ ]*$//' |
    sort
}

dropped_inputs() { # FILE: the error counts above zero
  grep '^ibprobe_scrape_errors_total{' "$1" | awk '$NF != 0' || true
}

start_exporter
curl -fsS "$url/metrics" >"$work/unlimited.txt"
stop_exporter
[[ -z $(dropped_inputs "$work/unlimited.txt") ]] ||
  fail "inputs dropped without a limit: $(dropped_inputs "$work/unlimited.txt")"
expected=$(series_of "$work/unlimited.txt" | wc -l)
((expected > 9000)) || fail "the fixture gave only $expected series"

start_exporter prlimit --nofile="$LIMIT:$LIMIT"
[[ $(awk '/^Max open files/ {print $4 " " $5}' "/proc/$exporter_pid/limits") == "$LIMIT $LIMIT" ]] ||
  fail "the exporter does not run with a limit of $LIMIT: $(grep 'Max open files' "/proc/$exporter_pid/limits")"
for scrape in 1 2 3; do
  curl -fsS "$url/metrics" >"$work/limited-$scrape.txt" || fail "scrape $scrape under the limit failed"
  missing=$(comm -23 <(series_of "$work/unlimited.txt") <(series_of "$work/limited-$scrape.txt") | wc -l)
  ((missing == 0)) || fail "scrape $scrape under a limit of $LIMIT lacks $missing of $expected series;" \
    "dropped: $(dropped_inputs "$work/limited-$scrape.txt")"
  [[ -z $(dropped_inputs "$work/limited-$scrape.txt") ]] ||
    fail "scrape $scrape dropped inputs: $(dropped_inputs "$work/limited-$scrape.txt")"
done
open_fds=$(find "/proc/$exporter_pid/fd" -mindepth 1 | wc -l)
((open_fds <= LIMIT / 2 + 64)) ||
  fail "$open_fds descriptors open after three scrapes; the caches may keep $((LIMIT / 2))"
! grep -q 'no file descriptor left' "$work/exporter.log" || fail "descriptor exhaustion logged"
stop_exporter
echo "PASS: 3 scrapes under RLIMIT_NOFILE $LIMIT:$LIMIT served all $expected series of 80 HCAs," \
  "$open_fds descriptors open"
