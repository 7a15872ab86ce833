#!/usr/bin/env bash
# Scrape latency and memory of ibprobe_exporter against Debian's prometheus-node-exporter
# (infiniband collector only), side by side in one run on the same generated sysfs tree.
# Usage: scrape_benchmark.sh [BUILD_DIR] [SCRAPES]   (defaults: build, 300)
set -euo pipefail

build=${1:-build}
scrapes=${2:-300}
exporter_bin=$build/exporter/ibprobe_exporter
fixture_bin=$build/tests/ibprobe_fixture
node_exporter_bin=$(command -v prometheus-node-exporter || true)
[[ -x "$exporter_bin" && -x "$fixture_bin" ]] || { echo "build first: $exporter_bin" >&2; exit 1; }
[[ -n "$node_exporter_bin" ]] || { echo "install prometheus-node-exporter" >&2; exit 1; }

# shellcheck source=tests/lib/scratch.sh
source "$(dirname "$0")/../lib/scratch.sh"
scratch_begin ibprobe-bench

"$fixture_bin" "$work/sys" --hcas 8 --ports 2
ibprobe_port=$(free_port)
node_port=$(free_port)
"$exporter_bin" --path.sysfs="$work/sys" --web.listen-address="127.0.0.1:$ibprobe_port" \
  2>"$work/ibprobe.log" &
pids+=($!)
ibprobe_pid=$!
"$node_exporter_bin" --collector.disable-defaults --collector.infiniband \
  --path.sysfs="$work/sys" --web.listen-address="127.0.0.1:$node_port" 2>"$work/node.log" &
pids+=($!)
node_pid=$!

python3 - "$scrapes" "$ibprobe_port" "$ibprobe_pid" "$node_port" "$node_pid" <<'PY'
import http.client, statistics, sys, time

scrapes = int(sys.argv[1])
targets = {"ibprobe_exporter": (int(sys.argv[2]), int(sys.argv[3])),
           "node_exporter": (int(sys.argv[4]), int(sys.argv[5]))}

def connect(port):
    deadline = time.time() + 20
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/metrics")
            c.getresponse().read()
            return c
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)

def rss_kib(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

conns = {name: connect(port) for name, (port, _) in targets.items()}
latencies = {name: [] for name in targets}
bodies = {}
for _ in range(20):  # warm-up, both sides
    for name, c in conns.items():
        c.request("GET", "/metrics"); c.getresponse().read()
# Interleaved, so both see the same machine state.
for _ in range(scrapes):
    for name, c in conns.items():
        start = time.perf_counter()
        c.request("GET", "/metrics")
        r = c.getresponse()
        body = r.read()
        latencies[name].append(time.perf_counter() - start)
        if r.status != 200:
            sys.exit(f"{name} answered {r.status}")
        bodies[name] = body.decode()

def series(body, prefix=""):
    return sum(1 for l in body.splitlines() if l and not l.startswith("#") and l.startswith(prefix))

rows = {}
for name, (port, pid) in targets.items():
    lat = sorted(latencies[name])
    rows[name] = {
        "median_ms": statistics.median(lat) * 1e3,
        "p99_ms": lat[int(len(lat) * 0.99) - 1] * 1e3,
        "rss_kib": rss_kib(pid, "VmRSS"),
        "hwm_kib": rss_kib(pid, "VmHWM"),
        "series": series(bodies[name]),
        "rdma_series": series(bodies[name], "rdma_" if name == "ibprobe_exporter" else "node_infiniband_"),
    }

print(f"tree: 8 dual-port HCAs (16 ports), {scrapes} scrapes each, interleaved, keep-alive")
print(f"{'exporter':<18}{'median ms':>11}{'p99 ms':>9}{'RSS KiB':>10}{'peak KiB':>10}{'series':>8}{'port series':>13}")
for name, r in rows.items():
    print(f"{name:<18}{r['median_ms']:>11.3f}{r['p99_ms']:>9.3f}{r['rss_kib']:>10}{r['hwm_kib']:>10}{r['series']:>8}{r['rdma_series']:>13}")
a, b = rows["ibprobe_exporter"], rows["node_exporter"]
print(f"ratio node_exporter/ibprobe: median latency {b['median_ms']/a['median_ms']:.1f}x, "
      f"RSS {b['rss_kib']/a['rss_kib']:.1f}x; port series ibprobe/node {a['rdma_series']/b['rdma_series']:.2f}x")
PY
if grep -qi 'level=error' "$work/node.log"; then
  echo "node_exporter reported errors:"; grep -i 'level=error' "$work/node.log" | head -5
fi
