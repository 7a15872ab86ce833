# shellcheck shell=bash
# Shared by the end-to-end scripts that run one exporter logging to $work/exporter.log (sourced;
# brings scratch.sh along): their start, failing with that log's tail, and waiting for a condition.

# shellcheck source=tests/lib/scratch.sh
source "$(dirname "${BASH_SOURCE[0]}")/scratch.sh"

# Takes the script's arguments, EXPORTER_BINARY FIXTURE_BINARY, as exporter_bin and fixture_bin,
# and creates the scratch directory $work from the prefix NAME.
# shellcheck disable=SC2034  # exporter_bin and fixture_bin are for the sourcing script
exporter_test_begin() { # NAME EXPORTER_BINARY FIXTURE_BINARY
  exporter_bin=$2
  fixture_bin=$3
  scratch_begin "$1"
}

# shellcheck disable=SC2154  # $work is scratch.sh's
fail() {
  echo "FAIL: $*" >&2
  tail -n 30 "$work/exporter.log" >&2 || true
  exit 1
}

# Runs COMMAND until it succeeds (status 0) or SECONDS have passed (status 1).
# SECONDS bounds only how long a start that never comes takes to be reported: the starts waited
# for are quick, but on a loaded machine (CI runs builds beside the tests) they took over 4 s.
wait_for() { # SECONDS COMMAND...
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}

# Starts $exporter_bin on a port the kernel picks, serving the fixture tree in $work/sys and
# logging to $work/exporter.log, with FLAGS after those; WRAPPER (e.g. prlimit ...), given before
# `--`, runs it. Returns once it logged its port: sets exporter_pid (also added to pids) and port.
# shellcheck disable=SC2154,SC2034  # exporter_bin, pids and port are the sourcing script's
launch_exporter() { # [WRAPPER... --] FLAGS...
  local -a wrapper=()
  if [[ " $* " == *" -- "* ]]; then
    while [[ $1 != -- ]]; do
      wrapper+=("$1")
      shift
    done
    shift
  fi
  : >"$work/exporter.log"
  "${wrapper[@]}" "$exporter_bin" --web.listen-address=127.0.0.1:0 --path.sysfs="$work/sys" \
    "$@" 2>"$work/exporter.log" &
  exporter_pid=$!
  pids+=("$exporter_pid")
  # The exporter's own line, not the probe responder's "listening on" logged just before it.
  wait_for 60 grep -q ' port [0-9]* (metrics at' "$work/exporter.log" || fail "exporter did not start"
  port=$(sed -n 's/.* port \([0-9]*\) (metrics at.*/\1/p' "$work/exporter.log" | head -n1)
}

# Writes $work/web.yml: basic auth for USER with PASSWORD (bcrypt), /metrics and /-/* open.
write_basic_auth_web_config() { # USER PASSWORD
  local hash
  hash=$(python3 -W ignore -c "import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))" "$2")
  cat >"$work/web.yml" <<YAML
basic_auth_users:
  $1: '$hash'
unauthenticated_paths: [/metrics, /-/healthy, /-/ready]
YAML
}

# Starts a peer that accepts connections and never answers (a probe to it hangs in its
# handshake) and sets hanging_peer to its HOST:PORT.
# shellcheck disable=SC2034  # hanging_peer is for the sourcing script
start_hanging_peer() {
  python3 - "$work/hanging_peer_port" <<'PY' &
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
held = []
while True:
    held.append(s.accept()[0])
PY
  pids+=($!)
  wait_for 60 test -s "$work/hanging_peer_port" || fail "hanging peer did not start"
  hanging_peer=127.0.0.1:$(cat "$work/hanging_peer_port")
}
