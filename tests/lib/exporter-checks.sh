# shellcheck shell=bash
# Shared by the end-to-end scripts that run one exporter logging to $work/exporter.log (sourced
# after scratch.sh): failing with that log's tail, and waiting for a condition.

# shellcheck disable=SC2154  # $work is scratch.sh's
fail() {
  echo "FAIL: $*" >&2
  tail -n 30 "$work/exporter.log" >&2 || true
  exit 1
}

# Runs COMMAND until it succeeds (status 0) or SECONDS have passed (status 1).
wait_for() { # SECONDS COMMAND...
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}
