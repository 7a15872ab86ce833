#!/usr/bin/env python3
"""Detail counters read only where they can tell something, on a small simulated fat tree (ibsim),
both ways at once: exporter A as shipped (a detail attribute read again only when its base
counter moved) and exporter B with --fabric.detail-counters-every-read, each switch read through
/fabric?target=:
- the first read asks every attribute of every port; after it, with nothing moving, a read costs
  PortCounters and PortCountersExtended per port (2 MADs) plus PortRcvErrorDetails of the one port
  whose PortRcvErrors stands at 65535 (a stopped counter hides movement), against B's 5: exact
  per read (ibprobe_fabric_scrape_mads) and at most 2.1 per port per read over several reads
  (ibprobe_fabric_mads_sent_total);
- with base counters and their details moved by PerformanceSet on a few ports (one attribute,
  two, all three, and a PMA reset: every base lower), A's next read asks exactly the attributes
  whose base moved (all three on the reset port), and every detail series and base counter A
  serves equals B's, the values set, and what perfquery (--rcverr, --xmtdisc, --vlxmitcounters
  and the plain PortCounters) prints on the moved ports and two that did not move; the read after
  serves the same from the kept state at 2 MADs per port;
- the kept state is what A serves: a detail field changed without its base counter (which a PMA
  cannot do; ibsim lets the test) keeps its old value on A while B shows the new one, until the
  base counter moves;
- a rediscovery keeps the state of the ports it finds again: the read after it asks ClassPortInfo
  of each switch again and no detail attribute.

Usage: fabric_adaptive_details_test.py EXPORTER"""

import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfabric as sf  # noqa: E402
from simfabric import check, failures  # noqa: E402

SPINES, LEAVES, HCAS, PORTS = 2, 2, 4, 8
STEADY_READS = 5
MAX16 = 0xFFFF
VLS = 16

# Per attribute: its base counter in PortCounters, and its fields (ibsim's spelling, the
# exporter's counter label, perfquery's spelling).
RCV, DISC, WAIT = 0, 1, 2
BASE_FIELD = ["PortRcvErrors", "PortXmitDiscards", "PortXmitWait"]
RCV_FIELDS = [
    ("PortLocalPhysicalErrors", "port_local_physical_errors", "PortLocalPhysicalErrors"),
    ("PortMalformedPacketErrors", "port_malformed_packet_errors", "PortMalformedPktErrors"),
    ("PortBufferOverrunErrors", "port_buffer_overrun_errors", "PortBufferOverrunErrors"),
    ("PortDLIDMappingErrors", "port_dlid_mapping_errors", "PortDLIDMappingErrors"),
    ("PortVLMappingErrors", "port_vl_mapping_errors", "PortVLMappingErrors"),
    ("PortLoopingErrors", "port_looping_errors", "PortLoopingErrors"),
]
DISC_FIELDS = [
    ("PortInactiveDiscards", "port_inactive_discards", "PortInactiveDiscards"),
    ("PortNeighborMTUDiscards", "port_neighbor_mtu_discards", "PortNeighborMTUDiscards"),
    ("PortSwLifetimeLimitDiscards", "port_sw_lifetime_limit_discards",
     "PortSwLifetimeLimitDiscards"),
    ("PortSwHOQLifetimeLimitDiscards", "port_sw_hoq_lifetime_limit_discards",
     "PortSwHOQLifetimeLimitDiscards"),
]


def one(samples, name, **labels):
    found = [v for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]
    return found[0] if len(found) == 1 else None


class Port:
    """What the test set on one switch port: the detail fields and the base counters."""

    def __init__(self, rng):
        self.rcv = [rng.randrange(1, 3000) for _ in RCV_FIELDS]
        self.disc = [rng.randrange(1, 3000) for _ in DISC_FIELDS]
        self.waits = [rng.randrange(1, 60000) for _ in range(VLS)]
        self.bases = [sum(self.rcv), sum(self.disc), sum(self.waits)]

    def commands(self, where, attributes=(RCV, DISC, WAIT)):
        out = []
        if RCV in attributes:
            out += [f"{where} PortRcvErrorDetails.{f}={v}" for (f, _, _), v in zip(RCV_FIELDS, self.rcv)]
        if DISC in attributes:
            out += [f"{where} PortXmitDiscardDetails.{f}={v}"
                    for (f, _, _), v in zip(DISC_FIELDS, self.disc)]
        if WAIT in attributes:
            out += [f"{where} PortVLXmitWaitCounters.PortVLXmitWaitCounters{vl}={v}"
                    for vl, v in enumerate(self.waits)]
        out += [f"{where} PortCounters.{BASE_FIELD[a]}={self.bases[a]}" for a in attributes]
        return out

    def expected(self, vls):
        """{counter label or vlN: value} the exporter should serve for this port."""
        view = {label: v for (_, label, _), v in zip(RCV_FIELDS + DISC_FIELDS, self.rcv + self.disc)}
        view.update({f"vl{vl}": self.waits[vl] for vl in range(vls)})
        view.update({"port_rcv_errors": self.bases[RCV], "port_xmit_discards": self.bases[DISC],
                     "port_xmit_wait": self.bases[WAIT]})
        return view


def detail_view(samples):
    """{(node_guid, port): {counter label or vlN: value}} of the error, transmit-wait and VL-wait
    series (the detail counters and their base counters) and their saturation flags."""
    view = {}
    for n, l, v in samples:
        key = (l.get("node_guid"), l.get("port"))
        if n == "rdma_port_errors_total":
            view.setdefault(key, {})[l["counter"]] = v
        elif n == "rdma_port_transmit_wait_ticks_total":
            view.setdefault(key, {})["port_xmit_wait"] = v
        elif n == "rdma_port_vl_transmit_wait_ticks_total":
            view.setdefault(key, {})["vl" + l["vl"]] = v
        elif n == "rdma_port_pma_saturated" and not l["counter"].endswith(("_data", "_packets")):
            view.setdefault(key, {})["saturated:" + l["counter"]] = v
    return view


def perfquery_fields(sim, lid, port, *option):
    out = sim.run(["perfquery", *option, str(lid), str(port)]).stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+):\.*(\d+)$", out, re.M)}


def main(exporter):
    seed = int(os.environ.get("IBPROBE_FABRIC_SEED", time.time_ns() % 100000))
    print(f"seed {seed} (IBPROBE_FABRIC_SEED reproduces it)")
    rng = random.Random(seed)
    topology = sf.fat_tree(SPINES, LEAVES, HCAS, PORTS)
    by_name = {s.name: s for s in topology.switches}
    switch_ports = sum(sw.ports for sw in topology.switches)
    switches = len(topology.switches)
    with sf.Simulator(topology) as sim:
        sim.assign_lids()
        _, ibnd_descriptions = sf.parse_ibnetdiscover(sim.run(["ibnetdiscover"]).stdout)
        guid_of = {desc: guid for guid, desc in ibnd_descriptions.items()}
        switch_guids = {name: guid_of[s.description] for name, s in by_name.items()}
        lids = sf.switch_lids(sim)

        def where(name, port):
            return f'PerformanceSet "{name}"[{port}]'

        def console(commands):
            for i in range(0, len(commands), 400):
                out = sim.console(*commands[i:i + 400])
                check(sum("has been set" in line for line in out) == len(commands[i:i + 400]),
                      "ibsim took every PerformanceSet")

        ports = {(name, p): Port(rng) for name, sw in by_name.items() for p in range(1, sw.ports + 1)}
        # PortRcvErrors at its 16-bit maximum no longer moves: its details are read every time.
        saturated = ("leaf-02", 5)
        ports[saturated].bases[RCV] = MAX16
        console([c for (name, p), port in ports.items() for c in port.commands(where(name, p))])

        _, adaptive = sf.start_exporter(sim, exporter, "--fabric.enabled",
                                        "--fabric.discovery-interval-seconds=3600")
        _, full = sf.start_exporter(sim, exporter, "--fabric.enabled",
                                    "--fabric.discovery-interval-seconds=3600",
                                    "--fabric.detail-counters-every-read")
        sf.wait_for_model(adaptive, switches)
        sf.wait_for_model(full, switches)

        def read(base):
            """One read of every switch (/fabric?target=): its samples and the MADs it sent."""
            samples, mads, statuses = [], 0, []
            for name in by_name:
                status, body = sf.http_get(f"{base}/fabric?target={sf.guid_label(switch_guids[name])}")
                statuses.append(status)
                page = sf.parse_metrics(body)
                mads += one(page, "ibprobe_fabric_scrape_mads") or 0
                samples += page
            if statuses != [200] * len(by_name):
                check(False, f"{base} /fabric?target= of every switch: {statuses}")
            return samples, int(mads)

        def mads_sent(base):
            return one(sf.parse_metrics(sf.http_get(base + "/metrics")[1]),
                       "ibprobe_fabric_mads_sent_total")

        vls = {}
        for (name, p) in ports:
            out = sim.run(["smpquery", "portinfo", str(lids[switch_guids[name]]), str(p)]).stdout
            m = re.search(r"^OperVLs:\.*VL0(?:-(\d+))?$", out, re.M)
            vls[(name, p)] = int(m.group(1) or 0) + 1

        def compare(when, a_samples, b_samples):
            """A's detail view equals B's and the values set, on every port."""
            a_view, b_view = detail_view(a_samples), detail_view(b_samples)
            check(a_view == b_view, f"{when}: A serves what B reads every time, on "
                  f"{len(a_view)} ports" + ("" if a_view == b_view else
                  f": {[(k, a_view.get(k), b_view.get(k)) for k in b_view if a_view.get(k) != b_view[k]][:3]}"))
            wrong = []
            for (name, p), port in ports.items():
                served = a_view.get((sf.guid_label(switch_guids[name]), str(p)), {})
                for label, value in port.expected(vls[(name, p)]).items():
                    if served.get(label) != value:
                        wrong.append((name, p, label, served.get(label), value))
                extra = [k for k in served if k.startswith("vl") and int(k[2:]) >= vls[(name, p)]]
                if extra:
                    wrong.append((name, p, "VLs not run", extra))
            check(not wrong, f"{when}: every detail and base counter A serves equals the value set"
                  + (f": {wrong[:3]}" if wrong else ""))
            return a_view

        def against_perfquery(when, view, sampled):
            wrong = []
            for name, p in sampled:
                lid = lids[switch_guids[name]]
                served = view[(sf.guid_label(switch_guids[name]), str(p))]
                printed = perfquery_fields(sim, lid, p, "--rcverr")
                printed.update(perfquery_fields(sim, lid, p, "--xmtdisc"))
                for _, label, field in RCV_FIELDS + DISC_FIELDS:
                    if served.get(label) != printed.get(field):
                        wrong.append((name, p, field, served.get(label), printed.get(field)))
                printed = perfquery_fields(sim, lid, p, "--vlxmitcounters")
                for vl in range(vls[(name, p)]):
                    if served.get(f"vl{vl}") != printed.get(f"PortVLXmitWait{vl}"):
                        wrong.append((name, p, vl, served.get(f"vl{vl}"), printed.get(f"PortVLXmitWait{vl}")))
                printed = perfquery_fields(sim, lid, p)
                for a, label in enumerate(("port_rcv_errors", "port_xmit_discards", "port_xmit_wait")):
                    if served.get(label) != printed.get(BASE_FIELD[a]):
                        wrong.append((name, p, label, served.get(label), printed.get(BASE_FIELD[a])))
            check(not wrong, f"{when}: A's series equal perfquery's on {len(sampled)} ports"
                  + (f": {wrong[:3]}" if wrong else ""))

        # --- the first read, then steady state ---------------------------------------------------
        first = [read(adaptive)[1], read(full)[1]]
        check(first == [switches + 5 * switch_ports] * 2,
              f"the first read asks ClassPortInfo of each switch and every attribute of every port "
              f"on both: {first} MADs for {switch_ports} ports")
        steady_a = 2 * switch_ports + 1
        before = [mads_sent(adaptive), mads_sent(full)]
        per_read = []
        for _ in range(STEADY_READS):
            a_samples, a_mads = read(adaptive)
            b_samples, b_mads = read(full)
            per_read.append((a_mads, b_mads))
        after = [mads_sent(adaptive), mads_sent(full)]
        per_port = [(after[i] - before[i]) / (STEADY_READS * switch_ports) for i in range(2)]
        print(f"steady state, {STEADY_READS} reads of {switch_ports} ports: "
              f"{per_port[0]:.3f} MADs per port per read adaptive, {per_port[1]:.3f} every read")
        check(per_read == [(steady_a, 5 * switch_ports)] * STEADY_READS,
              f"nothing moving: each read {steady_a} MADs on A (2 per port, and the saturated "
              f"port's PortRcvErrorDetails), {5 * switch_ports} on B: {per_read}")
        check(per_port[0] <= 2.1 and per_port[1] == 5.0,
              f"ibprobe_fabric_mads_sent_total: {per_port[0]:.3f} MADs per port per read on A "
              f"(at most 2.1), {per_port[1]:.3f} on B")
        compare("steady state", a_samples, b_samples)

        # --- counters move on a few ports --------------------------------------------------------
        candidates = sorted(k for k in ports if k != saturated)
        moved = rng.sample(candidates, 6)
        plans = [(RCV,), (DISC,), (WAIT,), (RCV, WAIT), (RCV, DISC, WAIT), "reset"]
        commands, extra = [], 0
        for key, plan in zip(moved, plans):
            port = ports[key]
            if plan == "reset":
                # A PMA reset: every counter starts again from zero and counts a little since.
                port.rcv = [v // 3 for v in port.rcv]
                port.disc = [v // 3 for v in port.disc]
                port.waits = [v // 3 for v in port.waits]
                port.bases = [sum(port.rcv), sum(port.disc), sum(port.waits)]
                plan = (RCV, DISC, WAIT)
            else:
                for a in plan:
                    fields = {RCV: port.rcv, DISC: port.disc, WAIT: port.waits}[a]
                    i = rng.randrange(len(fields))
                    step = rng.randrange(1, 500)
                    fields[i] += step
                    port.bases[a] += step
            extra += len(plan)
            commands += port.commands(where(*key), plan)
        console(commands)
        print(f"moved: {list(zip(moved, plans))}")
        a_samples, a_mads = read(adaptive)
        b_samples, b_mads = read(full)
        check(a_mads == steady_a + extra,
              f"after the move A asks exactly the {extra} attributes whose base moved: {a_mads} "
              f"MADs, want {steady_a + extra}")
        view = compare("after the move", a_samples, b_samples)
        unmoved = [k for k in candidates if k not in moved][:2]
        against_perfquery("after the move", view, moved + unmoved)
        a_samples, a_mads = read(adaptive)
        b_samples, _ = read(full)
        check(a_mads == steady_a, f"the read after asks no detail again: {a_mads} MADs")
        compare("the read after, from the kept state", a_samples, b_samples)

        # --- the kept state is what A serves -------------------------------------------------------
        key = unmoved[0]
        guid, p = sf.guid_label(switch_guids[key[0]]), str(key[1])
        old = ports[key].rcv[5]
        sim.console(f"{where(*key)} PortRcvErrorDetails.PortLoopingErrors={old + 10}")
        a_view = detail_view(read(adaptive)[0])[(guid, p)]
        b_view = detail_view(read(full)[0])[(guid, p)]
        check(a_view.get("port_looping_errors") == old and
              b_view.get("port_looping_errors") == old + 10,
              f"{key}: a detail changed without its base counter: A serves the kept "
              f"{a_view.get('port_looping_errors')}, B reads {b_view.get('port_looping_errors')}")
        ports[key].rcv[5] += 10
        ports[key].bases[RCV] += 10
        sim.console(f"{where(*key)} PortCounters.PortRcvErrors={ports[key].bases[RCV]}")
        a_samples, a_mads = read(adaptive)
        b_samples, _ = read(full)
        check(a_mads == steady_a + 1, f"{key}: its PortRcvErrors moved, one more MAD: {a_mads}")
        compare("the base counter moved too", a_samples, b_samples)

        # --- a rediscovery keeps the state of the ports it finds again --------------------------
        sf.http_get(adaptive + "/fabric/discover", method="POST", timeout=120)
        a_samples, a_mads = read(adaptive)
        b_samples, _ = read(full)
        check(a_mads == switches + steady_a,
              f"after a rediscovery: ClassPortInfo of each switch and no detail: {a_mads} MADs")
        compare("after a rediscovery", a_samples, b_samples)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
