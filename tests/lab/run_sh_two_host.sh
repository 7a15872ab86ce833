#!/bin/bash
#
# The first thing a newcomer does: ./run.sh on a host without RDMA devices starts the two-host
# lab and prints what to try. Every command and URL it prints works as printed, on the lab it
# started; the probe it suggests finishes with a bandwidth figure.
#
# Environment: see lab-common.sh; IBPROBE_BUILD_DIR is a build with ibprobe_exporter and
# ibprobe_probe (run.sh uses it instead of installing and building).

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

: "${IBPROBE_BUILD_DIR:?set IBPROBE_BUILD_DIR to a build directory}"
ROOT=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
RUN_PID=

stop_run_sh() {
    if [[ -n $RUN_PID ]] && kill -0 "$RUN_PID" 2>/dev/null; then
        kill -TERM "$RUN_PID"
        wait "$RUN_PID" 2>/dev/null || true
    fi
}

main() {
    lab_test_begin
    mkdir -p "$IBPROBE_LAB_STATE"
    local out=$IBPROBE_LAB_STATE/run.sh.out deadline
    if lab status >/dev/null 2>&1; then
        fail "a lab is already up in $IBPROBE_LAB_STATE"
    fi
    LAB_STARTED=1
    # Emptied first: the last run's output, still there until run.sh's redirection opens the
    # file, would be read as this run's.
    : >"$out"
    IBPROBE_RUN_PREBUILT=1 "$ROOT/run.sh" >"$out" 2>&1 &
    RUN_PID=$!
    trap 'rc=$?; stop_run_sh; (exit $rc); lab_test_end' EXIT
    deadline=$((SECONDS + 240))
    until grep -q 'Press Ctrl-C' "$out"; do
        kill -0 "$RUN_PID" 2>/dev/null || fail "run.sh exited early: $(cat "$out")"
        ((SECONDS < deadline)) || fail "run.sh printed no instructions in 240 s: $(cat "$out")"
        sleep 1
    done
    note "run.sh is up"

    local url urls=0
    while read -r url; do
        curl -fsS -o /dev/null "$url" || fail "run.sh printed $url, which does not answer"
        urls=$((urls + 1))
    done < <(grep -o 'http://127\.0\.0\.1:[0-9]*/metrics' "$out")
    ((urls == 2)) || fail "run.sh printed $urls metrics URLs, expected 2: $(cat "$out")"

    local command commands=0 result rc
    while read -r command; do
        rc=0
        result=$(eval "$command" 2>&1) || rc=$?
        ((rc == 0)) || fail "run.sh printed '$command', which failed ($rc): $result"
        positive_number "$(sed -n 's/.*bw_average_MiBps=\([0-9.]*\).*/\1/p' <<<"$result")" \
            || fail "'$command' gave no bandwidth: $result"
        note "as printed: $command: $(grep -o 'bw_average_MiBps=[0-9.]*' <<<"$result")"
        commands=$((commands + 1))
    done < <(sed -n 's/^  \(.*lab\.sh exec .*\)$/\1/p' "$out")
    ((commands >= 1)) || fail "run.sh printed no command to try: $(cat "$out")"
}

main "$@"
