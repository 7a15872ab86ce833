# shellcheck shell=bash
# Shared by host-side test and benchmark scripts (sourced): a scratch directory and the
# background processes started into `pids`, both removed on exit, and free loopback ports.

# Creates $work from the prefix NAME and arranges for cleanup on exit.
scratch_begin() { # NAME
  work=$(mktemp -d "/tmp/$1.XXXXXX")
  pids=()
  trap scratch_cleanup EXIT
}

scratch_cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
