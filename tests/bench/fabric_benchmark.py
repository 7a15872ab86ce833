#!/usr/bin/env python3
"""Full fabric read, side by side on one simulated fat tree (ibsim): ibprobe's whole-fabric
scrape (--collector.fabric, /metrics, Prometheus text included; discovery cached, its own time
shown apart) and its multi-target reads (/fabric?target= for every switch, several at a time as
Prometheus scrapes them) against `ibqueryerrors --skip-sl --data` (discovery included, as it always runs)
and against a perfquery-per-port loop after one ibnetdiscover (what script-based exporters do
per scrape). Wall time, ports, ports per second, MADs per port, and the ratios.

MADs are counted where they leave: every tool runs attached to the same simulated HCA, whose
PortXmitPkts counts each packet it sends; the counter is read with perfquery before and after
(the reading's own MADs are measured and taken off). ibprobe also reports its own count.

Not a timed test: it prints figures. Usage:
  fabric_benchmark.py EXPORTER [--spines 4 --leaves 16 --hcas 317 --ports 36 --runs 5]
                               [--concurrency 16] [--scrapers 8] [--perfquery-ports N]"""

import argparse
import concurrent.futures
import contextlib
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../fabric"))
import simfabric as sf  # noqa: E402


def xmit_packets(sim, lid):
    out = sim.run(["perfquery", "-x", str(lid), "1"]).stdout
    return int(re.search(r"PortXmitPkts:\.*(\d+)", out).group(1))


def own_lid(sim):
    out = sim.run(["ibstat"]).stdout
    return int(re.search(r"Base lid: (\d+)", out).group(1))


class MadMeter:
    """MADs sent by the attached HCA during a block, the meter's own reads taken off."""

    def __init__(self, sim):
        self.sim = sim
        self.lid = own_lid(sim)
        a = xmit_packets(sim, self.lid)
        b = xmit_packets(sim, self.lid)
        self.overhead = b - a  # one reading's MADs, as counted by the next reading

    @contextlib.contextmanager
    def count(self):
        block = {}
        before = xmit_packets(self.sim, self.lid)
        yield block
        block["mads"] = xmit_packets(self.sim, self.lid) - before - self.overhead


def bench(args, topology):
    results = {}
    with sf.Simulator(topology) as sim:
        start = time.monotonic()
        sim.assign_lids()
        print(f"fabric: {len(topology.switches)} switches ({args.spines} spines, {args.leaves} "
              f"leaves, {args.ports} ports each), {len(topology.hcas)} HCAs; "
              f"opensm -o took {time.monotonic() - start:.2f} s")
        switch_ports = sum(s.ports for s in topology.switches)
        meter = MadMeter(sim)

        # --- ibprobe: the whole fabric on /metrics ------------------------------------------
        _, base = sf.start_exporter(sim, args.exporter, "--collector.fabric",
                                    "--fabric.discovery-interval-seconds=3600",
                                    f"--fabric.budget-ms={args.budget_ms}",
                                    f"--fabric.concurrency={args.concurrency}")
        sf.wait_for_model(base, len(topology.switches), timeout=600)
        _, body = sf.http_get(base + "/metrics", timeout=120)  # first read asks ClassPortInfo
        first = sf.parse_metrics(body)
        discovery = next(v for n, l, v in first if n == "ibprobe_fabric_discovery_duration_seconds")
        discovery_mads = next(v for n, l, v in first if n == "ibprobe_fabric_discovery_mads")
        # --- ibprobe's /metrics and ibqueryerrors, in interleaved rounds (ABBA) --------------
        def ibprobe_read():
            with meter.count() as m:
                start = time.monotonic()
                status, body = sf.http_get(base + "/metrics", timeout=120)
                wall = time.monotonic() - start
            assert status == 200
            samples = sf.parse_metrics(body)
            own = next(v for n, l, v in samples if n == "ibprobe_fabric_scrape_mads")
            ports = next(v for n, l, v in samples if n == "ibprobe_fabric_scrape_ports")
            return wall, ports, m["mads"], own, len(body)

        def ibqueryerrors_read(*flags):
            with meter.count() as m:
                start = time.monotonic()
                out = sim.run(["ibqueryerrors", "--skip-sl", *flags], check=False).stdout
                wall = time.monotonic() - start
            return wall, int(re.search(r"(\d+) ports checked", out).group(1)), m["mads"]

        # ibqueryerrors --data reads a switch's PortCounters and PortCountersExtended once for
        # all its ports (AllPortSelect, as ibsim's PMA advertises) and a port alone only when
        # the sum shows errors; --counters --switch reads each switch port's extended table.
        tools = {"ibprobe": ibprobe_read,
                 "ibqueryerrors": lambda: ibqueryerrors_read("--data"),
                 "ibqueryerrors per port": lambda: ibqueryerrors_read("--counters", "--switch")}
        rounds = {name: [] for name in tools}
        for r in range(args.runs):
            for name in (list(tools) if r % 2 == 0 else reversed(list(tools))):
                rounds[name].append(tools[name]())

        def spread(values, scale=1000):
            return (f"median {statistics.median(values) * scale:.1f}, "
                    f"{min(values) * scale:.1f}-{max(values) * scale:.1f}")

        mine = rounds["ibprobe"]
        wall = statistics.median(r[0] for r in mine)
        ports = statistics.median(r[1] for r in mine)
        metered = statistics.median(r[2] for r in mine)
        results["ibprobe /metrics"] = (wall, ports, metered)
        print(f"ibprobe /metrics (whole fabric, text included, --fabric.concurrency="
              f"{args.concurrency}): ms {spread([r[0] for r in mine])} over {args.runs} rounds, "
              f"{ports:.0f} of {switch_ports} switch ports answered, {mine[-1][4] / 1e6:.2f} MB "
              f"text; MADs {statistics.median(r[3] for r in mine):.0f} (own count) / "
              f"{metered:.0f} (metered) = {metered / ports:.2f} per port; discovery (cached, on "
              f"its interval) {discovery * 1000:.1f} ms, {discovery_mads:.0f} SMPs")
        theirs = rounds["ibqueryerrors"]
        checked = theirs[-1][1]
        results["ibqueryerrors"] = (statistics.median(r[0] for r in theirs), checked,
                                    statistics.median(r[2] for r in theirs))
        print(f"ibqueryerrors --skip-sl --data (discovery included): ms "
              f"{spread([r[0] for r in theirs])} over {args.runs} rounds, {checked} ports "
              f"checked; MADs {results['ibqueryerrors'][2]:.0f} (metered) = "
              f"{results['ibqueryerrors'][2] / checked:.2f} per port")
        paired = [(a[1] / a[0]) / (b[1] / b[0]) for a, b in zip(mine, theirs)]
        print(f"ports/s ibprobe /metrics vs ibqueryerrors, per round: {spread(paired, 1)}x "
              f"({', '.join(f'{x:.2f}' for x in paired)})")
        per_port = rounds["ibqueryerrors per port"]
        results["ibqueryerrors per port"] = (statistics.median(r[0] for r in per_port),
                                             per_port[-1][1],
                                             statistics.median(r[2] for r in per_port))
        print(f"ibqueryerrors --skip-sl --counters --switch (each switch port's extended table, "
              f"discovery included): ms {spread([r[0] for r in per_port])}, {per_port[-1][1]} "
              f"ports; MADs {results['ibqueryerrors per port'][2]:.0f} (metered)")

        # --- ibprobe multi-target: every switch's /fabric?target=, concurrently as Prometheus
        # scrapes targets (one umad agent: the exchanges take turns, the text is built beside)
        sd = sf.wait_for_model(base, len(topology.switches))
        guids = [g["targets"][0] for g in sd]

        def read_switch(guid):
            status, body = sf.http_get(f"{base}/fabric?target={guid}", timeout=120)
            assert status == 200, body[:200]
            # Not parsed whole: the client's parsing is not the exporter's time.
            return float(re.search(r"^ibprobe_fabric_scrape_ports (\S+)$", body, re.M).group(1))

        times, metered = [], []
        with concurrent.futures.ThreadPoolExecutor(args.scrapers) as pool:
            list(pool.map(read_switch, guids))  # warm: ClassPortInfo is already cached
            for _ in range(args.runs):
                with meter.count() as m:
                    start = time.monotonic()
                    answered = sum(pool.map(read_switch, guids))
                    times.append(time.monotonic() - start)
                metered.append(m["mads"])
        wall = statistics.median(times)
        results["ibprobe /fabric?target"] = (wall, answered, statistics.median(metered))
        print(f"ibprobe /fabric?target= for each of {len(guids)} switches, {args.scrapers} at a "
              f"time: median {wall * 1000:.1f} ms of {args.runs}, {answered:.0f} ports; MADs "
              f"{statistics.median(metered):.0f} (metered) = "
              f"{statistics.median(metered) / answered:.2f} per port")

        # --- one ibnetdiscover, then perfquery per switch port ---------------------------------
        links, descriptions = sf.parse_ibnetdiscover(sim.run(["ibnetdiscover"]).stdout)
        lids = {}
        for line in sim.run(["ibswitches"]).stdout.splitlines():
            m = re.search(r'0x([0-9a-f]+).*lid (\d+)', line)
            if m:
                lids[int(m.group(1), 16)] = int(m.group(2))
        targets = [(lid, p) for guid, lid in sorted(lids.items())
                   for p in range(1, args.ports + 1)][:args.perfquery_ports or None]
        with meter.count() as m:
            start = time.monotonic()
            sim.run(["ibnetdiscover"])
            for lid, p in targets:
                sim.run(["perfquery", "-x", str(lid), str(p)], check=False)
            wall = time.monotonic() - start
        # Each perfquery also reads ClassPortInfo: the loop's MADs, not a per-port estimate.
        results["perfquery loop"] = (wall, len(targets), m["mads"])
        print(f"ibnetdiscover + perfquery -x per port: {wall * 1000:.1f} ms for {len(targets)} "
              f"switch ports; MADs {m['mads']} (metered) = {m['mads'] / len(targets):.2f} per port")

    peer = results["ibqueryerrors"][1] / results["ibqueryerrors"][0]
    print("\ntool                      wall ms    ports   ports/s   MADs/port   ports/s vs ibqueryerrors")
    for name, (wall, ports, mads) in results.items():
        rate = ports / wall
        print(f"{name:24s} {wall * 1000:9.1f} {ports:8.0f} {rate:9.0f} {mads / ports:11.2f} "
              f"{rate / peer:12.3f}x")
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("exporter")
    ap.add_argument("--spines", type=int, default=4)
    ap.add_argument("--leaves", type=int, default=16)
    ap.add_argument("--hcas", type=int, default=317)
    ap.add_argument("--ports", type=int, default=36)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--budget-ms", type=int, default=60000)
    ap.add_argument("--concurrency", type=int, default=16, help="--fabric.concurrency")
    ap.add_argument("--scrapers", type=int, default=8,
                    help="concurrent /fabric?target= requests, as Prometheus scrapes targets")
    ap.add_argument("--perfquery-ports", type=int, default=0,
                    help="only the first N switch ports in the perfquery loop (0: all)")
    args = ap.parse_args()
    bench(args, sf.fat_tree(args.spines, args.leaves, args.hcas, args.ports))


if __name__ == "__main__":
    main()
