#!/usr/bin/env python3
"""Detail counters and flaps of switch ports, on a small simulated fat tree (ibsim):
- every field of PortRcvErrorDetails, PortXmitDiscardDetails and PortVLXmitWaitCounters set with
  ibsim's PerformanceSet on every switch port comes out exactly in the exporter's series (the
  whole-fabric read, and remote_pma with --collector.remote_pma.detail-counters for one switch
  port), and equals what `perfquery --rcverr`, `--xmtdisc` and `--vlxmitcounters` print for the
  same port (on 9 of the 32: the first and last of each switch and the remote_pma one); a value
  at 65535 is flagged saturated; the whole-fabric read has VL wait series for the VLs the port's
  PortInfo OperVLs names (smpquery), remote_pma, without PortInfo, all 16;
- the first read costs one MAD per detail attribute per port (ibsim's PMAs answer all three, so
  five per port: PortCounters, PortCountersExtended and the three details), the reads after it,
  with no base counter moving, two per port, serving the details kept from the first (moving
  counters: fabric_adaptive_details_test.py); two with --no-fabric.detail-counters, which has
  no detail series;
- an inter-switch cable unplugged and plugged back (ibsim's Unlink, ReLink) is a flap on both
  switch ports: PortState goes Down and Active again under the same labels (both cable ends
  named), and the LinkDownedCounter delta shows it. ibsim itself does not count LinkDowned
  (its unlink_port only sets the state), so the test counts it with PerformanceSet as a
  switch would.

Usage: fabric_details_test.py EXPORTER"""

import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfabric as sf  # noqa: E402
from simfabric import check, failures  # noqa: E402

SPINES, LEAVES, HCAS, PORTS = 2, 2, 4, 8
DETAILS_PER_PORT = 3  # PortRcvErrorDetails, PortXmitDiscardDetails, PortVLXmitWaitCounters

# (ibsim attribute, field as ibsim and perfquery name it, the exporter's counter label)
DETAIL_FIELDS = [
    ("PortRcvErrorDetails", "PortLocalPhysicalErrors", "port_local_physical_errors"),
    ("PortRcvErrorDetails", "PortMalformedPktErrors", "port_malformed_packet_errors"),
    ("PortRcvErrorDetails", "PortBufferOverrunErrors", "port_buffer_overrun_errors"),
    ("PortRcvErrorDetails", "PortDLIDMappingErrors", "port_dlid_mapping_errors"),
    ("PortRcvErrorDetails", "PortVLMappingErrors", "port_vl_mapping_errors"),
    ("PortRcvErrorDetails", "PortLoopingErrors", "port_looping_errors"),
    ("PortXmitDiscardDetails", "PortInactiveDiscards", "port_inactive_discards"),
    ("PortXmitDiscardDetails", "PortNeighborMTUDiscards", "port_neighbor_mtu_discards"),
    ("PortXmitDiscardDetails", "PortSwLifetimeLimitDiscards", "port_sw_lifetime_limit_discards"),
    ("PortXmitDiscardDetails", "PortSwHOQLifetimeLimitDiscards",
     "port_sw_hoq_lifetime_limit_discards"),
]
# ibsim's PerformanceSet spells one field differently from libibmad (and perfquery).
IBSIM_FIELD = {"PortMalformedPktErrors": "PortMalformedPacketErrors"}
PERFQUERY_OPTION = {"PortRcvErrorDetails": "--rcverr", "PortXmitDiscardDetails": "--xmtdisc"}
VLS = 16
MAX16 = 0xFFFF


def series(samples, name, **labels):
    return [(l, v) for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]


def one(samples, name, **labels):
    found = series(samples, name, **labels)
    return found[0][1] if len(found) == 1 else None


def perfquery_fields(sim, option, lid, port):
    """{field: value} of perfquery's dump of one attribute of LID's PORT."""
    out = sim.run(["perfquery", option, str(lid), str(port)]).stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+):\.*(\d+)$", out, re.M)}


def operational_vls(sim, lid, port):
    """The data VLs smpquery's PortInfo says the port uses (OperVLs "VL0-7" -> 8)."""
    out = sim.run(["smpquery", "portinfo", str(lid), str(port)]).stdout
    m = re.search(r"^OperVLs:\.*VL0(?:-(\d+))?$", out, re.M)
    return int(m.group(1) or 0) + 1


def main(exporter):
    seed = int(os.environ.get("IBPROBE_FABRIC_SEED", time.time_ns() % 100000))
    print(f"seed {seed} (IBPROBE_FABRIC_SEED reproduces it)")
    rng = random.Random(seed)
    topology = sf.fat_tree(SPINES, LEAVES, HCAS, PORTS)
    by_name = {s.name: s for s in topology.switches}
    with sf.Simulator(topology) as sim:
        sim.assign_lids()
        _, ibnd_descriptions = sf.parse_ibnetdiscover(sim.run(["ibnetdiscover"]).stdout)
        guid_of = {desc: guid for guid, desc in ibnd_descriptions.items()}
        switch_guids = {name: guid_of[s.description] for name, s in by_name.items()}
        lids = sf.switch_lids(sim)
        check(set(lids) == set(switch_guids.values()), f"ibswitches lists every switch: {lids}")

        # Every detail field of every switch port, at random; one port has every field at the
        # 16-bit maximum, where the counters stop.
        expected = {}
        commands = []
        saturated_port = ("leaf-01", 1)
        for name, sw in by_name.items():
            for port in range(1, sw.ports + 1):
                top = (name, port) == saturated_port
                values = {label: MAX16 if top else rng.randrange(1, MAX16)
                          for _, _, label in DETAIL_FIELDS}
                waits = [MAX16 if top else rng.randrange(1, MAX16) for _ in range(VLS)]
                expected[(name, port)] = (values, waits)
                for attribute, field, label in DETAIL_FIELDS:
                    commands.append(f'PerformanceSet "{name}"[{port}] '
                                    f'{attribute}.{IBSIM_FIELD.get(field, field)}={values[label]}')
                for vl, wait in enumerate(waits):
                    commands.append(f'PerformanceSet "{name}"[{port}] '
                                    f'PortVLXmitWaitCounters.PortVLXmitWaitCounters{vl}={wait}')
        for i in range(0, len(commands), 400):
            out = sim.console(*commands[i:i + 400])
            check(sum("has been set" in line for line in out) == len(commands[i:i + 400]),
                  "ibsim took every PerformanceSet")
        print(f"set {len(commands)} detail counters on {len(expected)} switch ports")

        # The reference: perfquery's own decoding of the same attributes, on the first and last
        # port of every switch, the saturated one and the one remote_pma reads below.
        remote_switch, remote_port = "leaf-02", 3
        sampled = {saturated_port, (remote_switch, remote_port)}
        sampled |= {(name, p) for name, sw in by_name.items() for p in (1, sw.ports)}
        reference_ok = True
        for name, port in sorted(sampled):
            values, waits = expected[(name, port)]
            lid = lids[switch_guids[name]]
            for attribute, option in PERFQUERY_OPTION.items():
                printed = perfquery_fields(sim, option, lid, port)
                for attr, field, label in DETAIL_FIELDS:
                    if attr == attribute and printed.get(field) != values[label]:
                        reference_ok = False
                        print(f"FAIL perfquery {option} {name}[{port}] {field}: "
                              f"{printed.get(field)} != set {values[label]}")
            printed = perfquery_fields(sim, "--vlxmitcounters", lid, port)
            if [printed.get(f"PortVLXmitWait{vl}") for vl in range(VLS)] != waits:
                reference_ok = False
                print(f"FAIL perfquery --vlxmitcounters {name}[{port}]: {printed} != {waits}")
        check(reference_ok, f"perfquery prints every value set, on {len(sampled)} switch ports")

        # remote_pma reads one leaf port, in an exporter of its own: libumad2sim hands a
        # process's PerfMgt answers to one of its umad agents only.
        remote_lid = lids[switch_guids[remote_switch]]
        _, remote_base = sf.start_exporter(
            sim, exporter, "--collector.remote_pma",
            f"--collector.remote_pma.target={remote_lid}:{remote_port}",
            "--collector.remote_pma.detail-counters")
        remote_samples = sf.parse_metrics(sf.http_get(remote_base + "/metrics")[1])
        _, base = sf.start_exporter(sim, exporter, "--collector.fabric",
                                    "--fabric.discovery-interval-seconds=3600")
        sf.wait_for_model(base, SPINES + LEAVES)
        first = one(sf.parse_metrics(sf.http_get(base + "/metrics")[1]),
                    "ibprobe_fabric_scrape_mads")
        _, body = sf.http_get(base + "/metrics")
        samples = sf.parse_metrics(body)

        switch_ports = sum(sw.ports for sw in topology.switches)
        mads = one(samples, "ibprobe_fabric_scrape_mads")
        check(first == switch_ports * (2 + DETAILS_PER_PORT) + SPINES + LEAVES,
              f"the first read sends {first} MADs for {switch_ports} ports: ClassPortInfo of each "
              f"switch, PortCounters, PortCountersExtended and one per detail attribute")
        check(mads == switch_ports * 2,
              f"the second, no base counter having moved, {mads}: PortCounters and "
              f"PortCountersExtended, the details kept from the first")
        check(one(samples, "ibprobe_fabric_scrape_ports") == switch_ports,
              f"every switch port answered ({one(samples, 'ibprobe_fabric_scrape_ports')})")
        # After a discovery each switch's PMA is asked ClassPortInfo again, once; the ports it
        # found again keep their details.
        sf.http_get(base + "/fabric/discover", method="POST", timeout=120)
        relearn = [one(sf.parse_metrics(sf.http_get(base + "/metrics")[1]),
                       "ibprobe_fabric_scrape_mads") for _ in range(2)]
        check(relearn == [switch_ports * 2 + SPINES + LEAVES, switch_ports * 2],
              f"after a discovery: {relearn} MADs, ClassPortInfo of each switch asked once again")

        exact = True
        for (name, port), (values, waits) in expected.items():
            guid = sf.guid_label(switch_guids[name])
            p = str(port)
            for _, field, label in DETAIL_FIELDS:
                got = one(samples, "rdma_port_errors_total", node_guid=guid, port=p, counter=label)
                if got != values[label]:
                    exact = False
                    print(f"FAIL {name}[{port}] {label}: {got} != {values[label]}")
            vls = operational_vls(sim, lids[switch_guids[name]], port)
            got = [one(samples, "rdma_port_vl_transmit_wait_ticks_total", node_guid=guid, port=p,
                       vl=str(vl)) for vl in range(VLS)]
            if not 0 < vls < VLS or got != waits[:vls] + [None] * (VLS - vls):
                exact = False
                print(f"FAIL {name}[{port}] VL waits {got} != {waits} for VL0-{vls - 1}")
        check(exact, f"every detail series equals the value set, on all {len(expected)} ports")

        name, port = saturated_port
        guid = sf.guid_label(switch_guids[name])
        flags = {l["counter"]: v for l, v in series(samples, "rdma_port_pma_saturated",
                                                    node_guid=guid, port=str(port))}
        check(all(flags.get(label) == 1 for _, _, label in DETAIL_FIELDS),
              f"{name}[{port}]: every detail counter at 65535 is flagged saturated")
        name, port = "spine-01", 1
        flags = {l["counter"]: v for l, v in series(samples, "rdma_port_pma_saturated",
                                                    node_guid=sf.guid_label(switch_guids[name]),
                                                    port=str(port))}
        check(all(flags.get(label) == 0 for _, _, label in DETAIL_FIELDS),
              f"{name}[{port}]: no detail counter below 65535 is flagged")

        values, waits = expected[(remote_switch, remote_port)]
        remote = {"lid": str(remote_lid), "port": str(remote_port)}
        got = {label: one(remote_samples, "rdma_port_errors_total", counter=label, **remote)
               for _, _, label in DETAIL_FIELDS}
        check(got == values, f"remote_pma {remote_lid}:{remote_port}: details {got} == {values}")
        got = [one(remote_samples, "rdma_port_vl_transmit_wait_ticks_total", vl=str(vl), **remote)
               for vl in range(VLS)]
        check(got == waits, f"remote_pma {remote_lid}:{remote_port}: VL waits {got} == {waits}")

        _, plain = sf.start_exporter(sim, exporter, "--collector.fabric",
                                     "--fabric.discovery-interval-seconds=3600",
                                     "--no-fabric.detail-counters")
        sf.wait_for_model(plain, SPINES + LEAVES)
        sf.http_get(plain + "/metrics")
        m = sf.parse_metrics(sf.http_get(plain + "/metrics")[1])
        labels = {label for _, _, label in DETAIL_FIELDS}
        check(one(m, "ibprobe_fabric_scrape_mads") == 2 * switch_ports
              and not [l for n, l, _ in m if n == "rdma_port_errors_total" and l["counter"] in labels]
              and not series(m, "rdma_port_vl_transmit_wait_ticks_total"),
              f"--no-fabric.detail-counters: {one(m, 'ibprobe_fabric_scrape_mads')} MADs for "
              f"{switch_ports} ports, no detail series")

        # --- a flap: an inter-switch cable out and back in ---------------------------------------
        leaf, spine = by_name["leaf-01"], "spine-01"
        leaf_port = next(p for p, (far, _) in leaf.links.items() if far == spine)
        spine_port = leaf.links[leaf_port][1]
        ends = {"leaf-01": (leaf_port, spine, spine_port), spine: (spine_port, "leaf-01", leaf_port)}

        def port_series(samples, name, family, **labels):
            port, far, far_port = ends[name]
            return series(samples, family, node_guid=sf.guid_label(switch_guids[name]),
                          port=str(port), **labels), far, far_port

        def flap_view(when, want_state):
            sf.http_get(base + "/fabric/discover", method="POST", timeout=120)
            m = sf.parse_metrics(sf.http_get(base + "/metrics")[1])
            for name in ends:
                found, far, far_port = port_series(m, name, "rdma_fabric_port_state")
                check(len(found) == 1 and found[0][1] == want_state
                      and found[0][0].get("remote_description") == by_name[far].description
                      and found[0][0].get("remote_port") == str(far_port),
                      f"{when}: {name} port {ends[name][0]} PortState {want_state}, far end "
                      f"{far} port {far_port} named: {found}")
            return m

        before = flap_view("before the flap", 4)
        downed = {}
        for name in ends:
            found, _, _ = port_series(before, name, "rdma_port_errors_total", counter="link_downed")
            downed[name] = found[0][1] if len(found) == 1 else None
        sim.console(f'Unlink "leaf-01"[{leaf_port}]')
        flap_view("cable out", 1)
        # ibsim does not count LinkDowned on Unlink: count it as both switch ports would.
        sim.console(*(f'PerformanceSet "{name}"[{ends[name][0]}] '
                      f'PortCounters.LinkDownedCounter={int(downed[name]) + 1}' for name in ends))
        sim.console(f'ReLink "leaf-01"[{leaf_port}]')
        # The ports come back in Init; the SM's next sweep makes them Active.
        sim.assign_lids()
        after = flap_view("cable back", 4)
        for name in ends:
            found, far, _ = port_series(after, name, "rdma_port_errors_total", counter="link_downed")
            check(len(found) == 1 and downed[name] is not None and found[0][1] == downed[name] + 1
                  and found[0][0].get("remote_description") == by_name[far].description,
                  f"{name} port {ends[name][0]}: link_downed {downed[name]} -> "
                  f"{found[0][1] if found else None} on the series naming {far}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
