#!/usr/bin/env python3
"""What the link_health collector costs a scrape between its reads: two ibprobe_exporter
processes on one generated sysfs tree, one with the collector (the default) and one with
--no-collector.link_health, scraped alternately over keep-alive connections; CPU per scrape (the
run time of every thread, /proc/PID/task/*/schedstat) and system calls per scrape (`strace -c -f`
attached to one exporter at a time). Two trees: 8 mlx5 RoCE HCAs whose ports all sit on this
machine's `lo` (the collector reads each port's module and FEC statistics once, is told
EOPNOTSUPP, and asks again only after the module interval), and 8 dual-port InfiniBand HCAs (no
netdev: nothing to read). Scrapes start once every RoCE port's first read has been answered.

Usage: link_health_benchmark.py [BUILD_DIR] [SCRAPES] [TRACED_SCRAPES]   (defaults: build, 2000, 200)
"""
import http.client
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

from syscall_counts import syscalls_during

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
SCRAPES = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
TRACED = int(sys.argv[3]) if len(sys.argv) > 3 else 200
EXPORTER = os.path.join(BUILD, "exporter/ibprobe_exporter")
FIXTURE = os.path.join(BUILD, "tests/ibprobe_fixture")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(connection):
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        sys.exit(f"answered {response.status}")
    return body.decode()


def connect(port, ready):
    """A keep-alive connection once the exporter answers and ready(page) holds."""
    deadline = time.time() + 30
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            if ready(scrape(connection)):
                return connection
            connection.close()
        except OSError:
            pass
        if time.time() > deadline:
            sys.exit(f"exporter on port {port} not ready")
        time.sleep(0.1)


def run_seconds(pid):
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{task}/schedstat").read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e9


def traced_calls(pid, port, scrapes, work, name):
    def scrapes_in_a_row():
        # Connected once strace is attached: the server closes idle connections.
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(scrapes):
            scrape(connection)

    return syscalls_during(pid, os.path.join(work, f"strace-{name}.txt"), scrapes_in_a_row)


def measure(tree_args, roce_ports, work):
    sysfs = os.path.join(work, "sys-" + "-".join(tree_args))
    subprocess.run([FIXTURE, sysfs, *tree_args], check=True, stdout=subprocess.DEVNULL)
    exporters = {}
    for name, flags in (("on", []), ("off", ["--no-collector.link_health"])):
        port = free_port()
        process = subprocess.Popen(
            [EXPORTER, f"--path.sysfs={sysfs}", f"--web.listen-address=127.0.0.1:{port}",
             "--probe.responder-address=", *flags], stderr=subprocess.DEVNULL)
        exporters[name] = (port, process)
    try:
        answered = lambda page: page.count("rdma_port_module_up{") == roce_ports
        connections = {name: connect(port, answered if name == "on" else lambda page: True)
                       for name, (port, _) in exporters.items()}
        for _ in range(50):  # warm-up, both
            for connection in connections.values():
                scrape(connection)
        before = {name: run_seconds(process.pid) for name, (_, process) in exporters.items()}
        for _ in range(SCRAPES):
            for connection in connections.values():
                scrape(connection)
        cpu = {name: (run_seconds(process.pid) - before[name]) / SCRAPES * 1e6
               for name, (_, process) in exporters.items()}
        # The collector's own time in one scrape, as the exporter reports it.
        own = re.search(r'^ibprobe_scrape_collector_duration_seconds\{collector="link_health"\} (\S+)$',
                        scrape(connections["on"]), re.M)
        # Closed first, so that neither exporter closes an idle connection while traced.
        for connection in connections.values():
            connection.close()
        calls = {name: traced_calls(process.pid, port, TRACED, work, name)
                 for name, (port, process) in exporters.items()}
    finally:
        for _, process in exporters.values():
            process.terminate()
            process.wait()
    return cpu, calls, float(own.group(1)) * 1e6


def main():
    for path in (EXPORTER, FIXTURE):
        if not os.access(path, os.X_OK):
            sys.exit(f"build first: {path}")
    print(f"load average before: {open('/proc/loadavg').read().split()[:3]}, "
          f"{os.cpu_count()} CPUs; {SCRAPES} scrapes each, interleaved; system calls over "
          f"{TRACED} more")
    with tempfile.TemporaryDirectory(prefix="ibprobe-link-health-bench.") as work:
        for title, tree_args, roce_ports in (
                ("8 mlx5 RoCE HCAs on lo", ["--hcas", "8", "--netdev", "lo"], 8),
                ("8 dual-port mlx5 InfiniBand HCAs", ["--hcas", "8", "--ports", "2"], 0)):
            cpu, calls, own_us = measure(tree_args, roce_ports, work)
            print(f"\n{title}: the collector's own time in the last scrape {own_us:.1f} us")
            print(f"{'link_health':<13}{'CPU us/scrape':>15}{'syscalls/scrape':>17}  top calls per scrape")
            for name in ("on", "off"):
                total = sum(calls[name].values()) / TRACED
                top = ", ".join(f"{k} {v / TRACED:.2f}" for k, v in
                                sorted(calls[name].items(), key=lambda kv: -kv[1])[:6])
                print(f"{name:<13}{cpu[name]:>15.0f}{total:>17.2f}  {top}")
            differing = {k for k in calls["on"].keys() | calls["off"].keys()
                         if calls["on"].get(k, 0) != calls["off"].get(k, 0)}
            for k in sorted(differing):
                print(f"  {k}: on {calls['on'].get(k, 0)}, off {calls['off'].get(k, 0)} "
                      f"in {TRACED} scrapes")
            if not differing:
                print(f"  the same system calls, call for call, in {TRACED} scrapes")
    print(f"\nload average after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
