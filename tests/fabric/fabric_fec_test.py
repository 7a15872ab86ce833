#!/usr/bin/env python3
"""PortExtendedSpeedsCounters (FEC counters) on a simulated fabric whose PMAs do not answer them
(ibsim 0.10 has no handler for attribute 0x1F and drops the MAD, as `perfquery --extended_speeds`
shows here), with some cables at EDR (ibsim's `e=2` port option, smpquery as the reference):
- with --fabric.extended-speeds-counters the first read after a discovery asks it of every switch
  port at an extended speed (one MAD and its retries each), and of no port at QDR or slower; each
  switch with such ports is switched off with rdma_fabric_fec_counters_up{reason="no_answer"} 0
  and one debug log line; the switches without are reported reason="no_extended_speed_port";
  later reads send exactly the MADs of a read without the option; a discovery makes the next
  read ask once again;
- without the option no read asks it and the status series is absent;
- remote_pma with --collector.remote_pma.extended-speeds-counters, for one EDR switch port: one
  failed query in the first scrape, rdma_remote_pma_fec_counters_up{reason="no_answer"} 0, and
  no further failure.
The decoding of real answers is tested on byte images (tests/unit/pma_mad_test.cpp,
remote_pma_test.cpp) only: no simulator here answers the attribute.

Usage: fabric_fec_test.py EXPORTER"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfabric as sf  # noqa: E402
from simfabric import check, failures  # noqa: E402

SPINES, LEAVES, HCAS, PORTS = 2, 2, 4, 8
DETAILS_PER_PORT = 3  # detail counters are on by default
ATTEMPTS = 3  # --fabric.retries default 2: three attempts per query
EDR = "e=2"  # ibsim port option: LinkSpeedExtEnabled EDR


def one(samples, name, **labels):
    found = [v for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]
    return found[0] if len(found) == 1 else None


def with_edr(topology, cables):
    """The topology's netfile with both ends of each (switch, port) cable enabled for EDR."""
    ends = set()
    for name, port in cables:
        far, far_port = topology.switch(name).links[port]
        ends |= {(name, port), (far, far_port)}
    lines, node = [], None
    for line in topology.netfile.splitlines():
        m = re.match(r'^(?:Switch|Hca)\t\d+ "([^"]+)"', line)
        if m:
            node = m.group(1)
        m = re.match(r"^\[(\d+)\]", line)
        if m and (node, int(m.group(1))) in ends:
            line += "\t" + EDR
        lines.append(line)
    topology.netfile = "\n".join(lines)
    return {(n, p) for n, p in ends if any(s.name == n for s in topology.switches)}


def lane_speed(sim, lid, port):
    out = sim.run(["smpquery", "portinfo", str(lid), str(port)]).stdout
    m = re.search(r"^LinkSpeedExtActive:\.*(.*)$", out, re.M)
    return m.group(1).strip() if m else None


def main(exporter):
    topology = sf.fat_tree(SPINES, LEAVES, HCAS, PORTS)
    leaf = topology.switch("leaf-01")
    uplink = next(p for p, (far, _) in leaf.links.items() if far.startswith("spine"))
    hca_port = next(p for p, (far, _) in leaf.links.items() if far.startswith("node"))
    edr_ports = with_edr(topology, [("leaf-01", uplink), ("leaf-01", hca_port)])
    switch_ports = sum(sw.ports for sw in topology.switches)
    # The first read asks the detail attributes of every port; the later ones, no base counter
    # moving, serve them from it.
    first_read = switch_ports * (2 + DETAILS_PER_PORT)
    baseline = switch_ports * 2
    with sf.Simulator(topology) as sim:
        sim.assign_lids()
        out = sim.run(["ibswitches"]).stdout
        lids = {m.group(1): int(m.group(2))
                for m in re.finditer(r'^Switch\s+:\s+0x[0-9a-f]+ ports \d+ "([^"]+)".*\blid (\d+)',
                                     out, re.M)}
        name_of = {sw.description: sw.name for sw in topology.switches}
        lids = {name_of[d]: lid for d, lid in lids.items()}
        check(len(lids) == SPINES + LEAVES, f"ibswitches lists every switch: {lids}")
        speeds = {(n, p): lane_speed(sim, lids[n], p) for n, p in sorted(edr_ports)}
        check(all(s and s.startswith("25.78125") for s in speeds.values()),
              f"smpquery: the EDR cables' switch ports run EDR lanes: {speeds}")
        name, port = sorted(edr_ports)[0]
        pq = sim.run(["perfquery", "--extended_speeds", str(lids[name]), str(port)], check=False,
                     timeout=60)
        check(pq.returncode != 0,
              f"perfquery --extended_speeds {lids[name]} {port}: ibsim does not answer "
              f"(exit {pq.returncode}: {pq.stderr.strip()[-120:]})")

        process, base = sf.start_exporter(sim, exporter, "--collector.fabric",
                                          "--fabric.discovery-interval-seconds=3600",
                                          "--fabric.extended-speeds-counters", "--log.level=debug")
        sf.wait_for_model(base, SPINES + LEAVES)
        reads = [sf.parse_metrics(sf.http_get(base + "/metrics")[1]) for _ in range(3)]
        mads = [one(m, "ibprobe_fabric_scrape_mads") for m in reads]
        fec_asked = SPINES + LEAVES + ATTEMPTS * len(edr_ports)
        first = first_read + fec_asked
        check(mads == [first, baseline, baseline],
              f"MADs per read {mads}: the first asks ClassPortInfo of {SPINES + LEAVES} switches "
              f"and PortExtendedSpeedsCounters of the {len(edr_ports)} EDR switch ports "
              f"({ATTEMPTS} attempts each), then {baseline} as without the option")
        failed = [one(m, "ibprobe_fabric_scrape_failed_queries", reason="timeout") for m in reads]
        check(failed == [len(edr_ports), 0, 0],
              f"only the first read lost queries, one per EDR port: {failed}")
        edr_switches = {n for n, _ in edr_ports}
        for m in reads:
            status = {l["node_description"]: (l.get("reason"), v)
                      for n, l, v in m if n == "rdma_fabric_fec_counters_up"}
            want = {sw.description: ("no_answer" if sw.name in edr_switches
                                     else "no_extended_speed_port", 0)
                    for sw in topology.switches}
            check(status == want, f"rdma_fabric_fec_counters_up per switch: {status}")
            check(not [n for n, _, _ in m if n.startswith("rdma_port_fec_")],
                  "no FEC series from PMAs that do not answer")
        with open(os.path.join(sim.workdir, f"exporter-{base.rsplit(':', 1)[1]}.log")) as f:
            said = re.findall(r"PortExtendedSpeedsCounters no_answer, not asked again", f.read())
        check(len(said) == len(edr_switches),
              f"said once per switch in the debug log: {len(said)} lines for "
              f"{len(edr_switches)} switches")

        sf.http_get(base + "/fabric/discover", method="POST", timeout=120)
        again = [one(sf.parse_metrics(sf.http_get(base + "/metrics")[1]),
                     "ibprobe_fabric_scrape_mads") for _ in range(2)]
        check(again == [baseline + fec_asked, baseline],
              f"after a discovery: {again} MADs, asked once again, then switched off again")

        _, plain = sf.start_exporter(sim, exporter, "--collector.fabric",
                                     "--fabric.discovery-interval-seconds=3600")
        sf.wait_for_model(plain, SPINES + LEAVES)
        m = [sf.parse_metrics(sf.http_get(plain + "/metrics")[1]) for _ in range(2)]
        check([one(x, "ibprobe_fabric_scrape_mads") for x in m]
              == [first_read + SPINES + LEAVES, baseline]
              and not [n for x in m for n, _, _ in x if n == "rdma_fabric_fec_counters_up"],
              "without --fabric.extended-speeds-counters: no PortExtendedSpeedsCounters MAD, "
              "no status series")

        name, port = sorted(edr_ports)[0]
        _, remote = sf.start_exporter(
            sim, exporter, "--collector.remote_pma",
            f"--collector.remote_pma.target={lids[name]}:{port}",
            "--collector.remote_pma.extended-speeds-counters")
        scrapes = [sf.parse_metrics(sf.http_get(remote + "/metrics")[1]) for _ in range(3)]
        lost = [one(x, "ibprobe_scrape_errors_total", collector="remote_pma", reason="timeout")
                for x in scrapes]
        check(lost == [1, 1, 1],
              f"remote_pma {lids[name]}:{port}: one query lost in the first scrape, none after "
              f"(errors total {lost})")
        status = [one(x, "rdma_remote_pma_fec_counters_up", lid=str(lids[name]), reason="no_answer")
                  for x in scrapes]
        check(status == [0, 0, 0], f"rdma_remote_pma_fec_counters_up no_answer: {status}")
        check(all(one(x, "rdma_port_errors_total", lid=str(lids[name]), port=str(port),
                      counter="symbol_error") is not None for x in scrapes),
              "its PortCounters are read all the same")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
