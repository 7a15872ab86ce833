#!/usr/bin/env bash
# Installs what is needed, builds, and runs ibprobe_exporter. On a host with RDMA devices it
# serves them on :9470. On a host without any, it starts the Soft-RoCE lab: two QEMU VMs with a
# real rxe device and an exporter each, forwarded to ports on this host.
# Arguments are passed to the exporter, e.g. ./run.sh --log.level=debug
set -euo pipefail
cd "$(dirname "$0")"
root=$PWD

build=${IBPROBE_BUILD_DIR:-$root/build}
# IBPROBE_RUN_PREBUILT=1 uses what is already built in $build (the lab test of this script).
if [[ ${IBPROBE_RUN_PREBUILT:-0} != 1 ]]; then
  ./scripts/install-deps.sh all
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j "$(nproc)" --target ibprobe_exporter ibprobe_probe >/dev/null
fi
exporter=$build/exporter/ibprobe_exporter

if compgen -G "/sys/class/infiniband/*" >/dev/null; then
  exec "$exporter" "$@"
fi

lab=$root/deploy/lab/lab.sh
echo "No RDMA device under /sys/class/infiniband: starting the two-host Soft-RoCE lab." >&2
"$lab" prepare
"$lab" up two --forward 9470
trap '"$lab" down' EXIT INT TERM
for host in A B; do
  "$lab" spawn "$host" -- "$exporter" --web.listen-address=:9470 "$@" >/dev/null
done
urls=()
for host in A B; do
  port=$("$lab" port "$host" 9470)
  url=http://127.0.0.1:$port
  deadline=$((SECONDS + 60))
  until curl -fsS -o /dev/null "$url/-/ready" 2>/dev/null; do
    ((SECONDS < deadline)) || { echo "exporter in lab host $host did not start" >&2; exit 1; }
    sleep 0.5
  done
  urls+=("$url")
done

cat <<TEXT

ibprobe lab is up: two VMs, each with rxe0 (Soft-RoCE) and an ibprobe exporter.
  host A ($("$lab" addr A)): ${urls[0]}/metrics
  host B ($("$lab" addr B)): ${urls[1]}/metrics

Prometheus scrape config:
  scrape_configs:
    - job_name: ibprobe-lab
      static_configs:
        - targets: ["${urls[0]#http://}", "${urls[1]#http://}"]

Probe host A from host B (the exporter in A answers on :9471; the rxe hw_counters rise; -u 18,
a 1 s ACK timeout, outlasts the pauses of an emulated VM, see deploy/lab/README.md, Limits):
  $lab exec B -- $build/probes/ibprobe_probe run -d rxe0 -t write_bw -u 18 $("$lab" addr A):9471

Press Ctrl-C to stop the lab.
TEXT
while "$lab" status >/dev/null 2>&1; do sleep 5; done
