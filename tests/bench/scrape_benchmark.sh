#!/usr/bin/env bash
# CPU, latency, memory and system calls of ibprobe_exporter against Debian's
# prometheus-node-exporter (infiniband collector only), side by side in one run on the same
# generated sysfs tree.
# Usage: scrape_benchmark.sh [BUILD_DIR] [SCRAPES] [TRACED_SCRAPES]   (defaults: build, 1000, 50)
#   CPU per scrape: the run time of every thread of the process (/proc/PID/task/*/schedstat,
#   in nanoseconds) over SCRAPES scrapes, split into user and kernel as utime and stime
#   (/proc/PID/stat) split it; both exporters scraped alternately over keep-alive
#   connections; latency p50/p99 from the same scrapes; RSS (VmRSS) at the end, and from
#   /proc/PID/smaps_rollup its anonymous and file-backed parts and what is private to the
#   process or shared with others (node_exporter is one static binary, ibprobe maps shared
#   libraries); minor page faults per scrape from /proc/PID/stat; system calls per scrape
#   from `strace -c -f` attached to one exporter at a time for TRACED_SCRAPES further scrapes.
# IBPROBE_BENCH_FLAGS: more flags for ibprobe_exporter, e.g. --scrape.parallelism=1.
set -euo pipefail

build=${1:-build}
scrapes=${2:-1000}
traced=${3:-50}
exporter_bin=$build/exporter/ibprobe_exporter
fixture_bin=$build/tests/ibprobe_fixture
node_exporter_bin=$(command -v prometheus-node-exporter || true)
[[ -x "$exporter_bin" && -x "$fixture_bin" ]] || { echo "build first: $exporter_bin" >&2; exit 1; }
[[ -n "$node_exporter_bin" ]] || { echo "install prometheus-node-exporter" >&2; exit 1; }
command -v strace >/dev/null || { echo "install strace" >&2; exit 1; }

# shellcheck source=tests/lib/scratch.sh
source "$(dirname "$0")/../lib/scratch.sh"
scratch_begin ibprobe-bench

"$fixture_bin" "$work/sys" --hcas 8 --ports 2 >/dev/null
ibprobe_port=$(free_port)
node_port=$(free_port)
"$exporter_bin" --path.sysfs="$work/sys" --web.listen-address="127.0.0.1:$ibprobe_port" \
  --probe.responder-address= ${IBPROBE_BENCH_FLAGS:-} 2>"$work/ibprobe.log" &
pids+=($!)
ibprobe_pid=$!
"$node_exporter_bin" --collector.disable-defaults --collector.infiniband \
  --path.sysfs="$work/sys" --web.listen-address="127.0.0.1:$node_port" 2>"$work/node.log" &
pids+=($!)
node_pid=$!

python3 - "$scrapes" "$traced" "$work" "$ibprobe_port" "$ibprobe_pid" "$node_port" "$node_pid" \
  "$(dirname "$0")" <<'PY'
import http.client, os, statistics, sys, time

sys.path.insert(0, sys.argv[8])
from syscall_counts import syscalls_during  # noqa: E402

scrapes, traced, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
targets = {"ibprobe_exporter": (int(sys.argv[4]), int(sys.argv[5])),
           "node_exporter": (int(sys.argv[6]), int(sys.argv[7]))}
ticks = os.sysconf("SC_CLK_TCK")

def connect(port):
    deadline = time.time() + 20
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/metrics")
            c.getresponse().read()
            return c
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)

def scrape(c):
    c.request("GET", "/metrics")
    r = c.getresponse()
    body = r.read()
    if r.status != 200:
        sys.exit(f"answered {r.status}")
    return body

def stat_fields(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()

def cpu_seconds(pid):
    # Fields after the command name: utime and stime are the 12th and 13th (stat(5) 14, 15).
    fields = stat_fields(pid)
    return (int(fields[11]) / ticks, int(fields[12]) / ticks)

def run_seconds(pid):
    # CPU time to the nanosecond, every thread's (the first field of each task's schedstat):
    # utime and stime come in clock ticks of 10 ms, coarse for a run of a few seconds.
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{task}/schedstat").read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9

def minor_faults(pid):
    return int(stat_fields(pid)[7])  # minflt, stat(5) field 10

def rollup_kib(pid):
    # The process's mappings summed by the kernel: anonymous (heap, stacks) against
    # file-backed (program and library text), private against shared with other processes.
    values = {}
    for line in open(f"/proc/{pid}/smaps_rollup"):
        key, _, rest = line.partition(":")
        if rest.strip().endswith("kB"):
            values[key] = int(rest.split()[0])
    return values

def status_kib(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

conns = {name: connect(port) for name, (port, _) in targets.items()}
for _ in range(20):  # warm-up, both sides
    for c in conns.values():
        scrape(c)

latencies = {name: [] for name in targets}
cpu_before = {name: cpu_seconds(pid) for name, (_, pid) in targets.items()}
run_before = {name: run_seconds(pid) for name, (_, pid) in targets.items()}
faults_before = {name: minor_faults(pid) for name, (_, pid) in targets.items()}
bodies = {}
# Interleaved, so both see the same machine state.
for _ in range(scrapes):
    for name, c in conns.items():
        start = time.perf_counter()
        bodies[name] = scrape(c)
        latencies[name].append(time.perf_counter() - start)
run = {name: run_seconds(pid) - run_before[name] for name, (_, pid) in targets.items()}
cpu = {}
for name, (_, pid) in targets.items():
    (user, system), (user_before, system_before) = cpu_seconds(pid), cpu_before[name]
    cpu[name] = (user - user_before, system - system_before)
faults = {name: minor_faults(pid) - faults_before[name] for name, (_, pid) in targets.items()}
memory = {name: rollup_kib(pid) for name, (_, pid) in targets.items()}

# System calls: strace follows every thread of one exporter while it answers `traced` scrapes.
syscalls = {}
for name, (port, pid) in targets.items():
    def traced_scrapes():
        # A fresh connection, made once strace is attached: the server closes idle ones.
        conns[name].close()
        c = connect(port)
        for _ in range(traced):
            scrape(c)

    syscalls[name] = syscalls_during(pid, f"{work}/strace-{name}.txt", traced_scrapes)

def series(body, prefix=""):
    return sum(1 for l in body.decode().splitlines()
               if l and not l.startswith("#") and l.startswith(prefix))

def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]

rows = {}
for name, (port, pid) in targets.items():
    lat = sorted(latencies[name])
    calls = syscalls[name]
    rows[name] = {
        "cpu_us": run[name] / scrapes * 1e6,
        # The ticks' split applied to the precise total.
        "user_us": run[name] * cpu[name][0] / max(sum(cpu[name]), 1e-9) / scrapes * 1e6,
        "system_us": run[name] * cpu[name][1] / max(sum(cpu[name]), 1e-9) / scrapes * 1e6,
        "p50_ms": statistics.median(lat) * 1e3,
        "p99_ms": percentile(lat, 0.99) * 1e3,
        "rss_kib": status_kib(pid, "VmRSS"),
        "anon_kib": memory[name]["Anonymous"],
        "file_kib": memory[name]["Rss"] - memory[name]["Anonymous"],
        "private_kib": memory[name]["Private_Clean"] + memory[name]["Private_Dirty"],
        "shared_kib": memory[name]["Shared_Clean"] + memory[name]["Shared_Dirty"],
        "faults": faults[name] / scrapes,
        "hwm_kib": status_kib(pid, "VmHWM"),
        "syscalls": sum(calls.values()) / traced,
        "top": ", ".join(f"{k} {v / traced:.0f}" for k, v in
                         sorted(calls.items(), key=lambda kv: -kv[1])[:6]),
        "series": series(bodies[name]),
        "rdma_series": series(bodies[name], "rdma_" if name == "ibprobe_exporter" else "node_infiniband_"),
    }

def print_table(columns):
    """A row per exporter under a heading row; columns: (heading, width, key of rows, format)."""
    print(f"{'exporter':<18}" + "".join(f"{heading:>{width}}" for heading, width, _, _ in columns))
    for name, r in rows.items():
        cells = "".join(f"{r[key]:>{width}{spec}}" for _, width, key, spec in columns)
        print(f"{name:<18}{cells}")

print(f"tree: 8 dual-port HCAs (16 ports); {scrapes} scrapes each, interleaved, keep-alive; "
      f"system calls over {traced} more")
print_table([("CPU us/scrape", 14, "cpu_us", ".0f"), ("p50 ms", 9, "p50_ms", ".3f"),
             ("p99 ms", 9, "p99_ms", ".3f"), ("RSS KiB", 10, "rss_kib", ""),
             ("peak KiB", 10, "hwm_kib", ""), ("syscalls", 10, "syscalls", ".0f"),
             ("series", 8, "series", ""), ("port series", 13, "rdma_series", "")])
for name, r in rows.items():
    print(f"{name} CPU per scrape: user {r['user_us']:.0f} us, kernel {r['system_us']:.0f} us")
print(f"memory after the {scrapes} scrapes (KiB, /proc/PID/smaps_rollup), and page faults:")
print_table([("RSS", 8, "rss_kib", ""), ("anon", 8, "anon_kib", ""), ("file", 8, "file_kib", ""),
             ("private", 9, "private_kib", ""), ("shared", 8, "shared_kib", ""),
             ("faults/scrape", 15, "faults", ".1f")])
for name, r in rows.items():
    print(f"{name} system calls per scrape: {r['top']}")
a, b = rows["ibprobe_exporter"], rows["node_exporter"]
print(f"ratio node_exporter/ibprobe: CPU per scrape {b['cpu_us'] / a['cpu_us']:.1f}x, "
      f"p50 {b['p50_ms'] / a['p50_ms']:.1f}x, p99 {b['p99_ms'] / a['p99_ms']:.1f}x, "
      f"RSS {b['rss_kib'] / a['rss_kib']:.1f}x (private {b['private_kib'] / a['private_kib']:.1f}x, "
      f"anon {b['anon_kib'] / a['anon_kib']:.1f}x), system calls {b['syscalls'] / a['syscalls']:.1f}x; "
      f"series ibprobe/node {a['series'] / b['series']:.2f}x "
      f"(port series {a['rdma_series'] / b['rdma_series']:.2f}x)")
met = lambda ok: "met" if ok else "NOT met"
print(f"targets: CPU per scrape <= 1/5 of node_exporter's: {met(a['cpu_us'] * 5 <= b['cpu_us'])}; "
      f"RSS <= 1/2: {met(a['rss_kib'] * 2 <= b['rss_kib'])}")
PY
if grep -qi 'level=error' "$work/node.log"; then
  echo "node_exporter reported errors:"; grep -i 'level=error' "$work/node.log" | head -5
fi
