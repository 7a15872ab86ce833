#!/usr/bin/env python3
"""The fabric collector on a simulated fat tree (4 spines, 16 leaves, 300 HCAs, ibsim):
every switch port answers on /fabric; its counters equal random values set through ibsim's
PerformanceSet (data x 4); its far end equals what ibnetdiscover prints; a cut cable shows
within one discovery interval and its return too; a failed discovery keeps the last model;
20 % MAD loss leaves every scrape answering 200 within its budget, losses counted by reason.

Usage: fabric_counters_test.py EXPORTER"""

import os
import json
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfabric as sf  # noqa: E402
from simfabric import check, failures  # noqa: E402

SPINES, LEAVES, HCAS, PORTS = 4, 16, 300, 32
# Settable error counters of ibsim's PerformanceSet and the exporter's counter label, width.
ERROR_COUNTERS = [
    ("SymbolErrorCounter", "symbol_error", 16),
    ("LinkErrorRecoveryCounter", "link_error_recovery", 8),
    ("LinkDownedCounter", "link_downed", 8),
    ("PortRcvErrors", "port_rcv_errors", 16),
    ("PortRcvRemotePhysicalErrors", "port_rcv_remote_physical_errors", 16),
    ("PortRcvSwitchRelayErrors", "port_rcv_switch_relay_errors", 16),
    ("PortXmitDiscards", "port_xmit_discards", 16),
    ("PortXmitConstraintErrors", "port_xmit_constraint_errors", 8),
    ("PortRcvConstraintErrors", "port_rcv_constraint_errors", 8),
]
# MAD traffic itself counts in the data counters of the ports it crosses: at most this many
# 4-octet words per port over the whole test (a few thousand MADs of 64 words and less).
MAD_TRAFFIC_WORDS = 2_000_000


def series(samples, name, **labels):
    return [(l, v) for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]


def one(samples, name, **labels):
    found = series(samples, name, **labels)
    return found[0][1] if len(found) == 1 else None


def scrape_switch(base, guid, timeout_header=None):
    headers = {"X-Prometheus-Scrape-Timeout-Seconds": str(timeout_header)} if timeout_header else {}
    start = time.monotonic()
    status, body = sf.http_get(f"{base}/fabric?target={guid}", headers=headers)
    return status, body, time.monotonic() - start


def main(exporter):
    seed = int(os.environ.get("IBPROBE_FABRIC_SEED", time.time_ns() % 100000))
    print(f"seed {seed} (IBPROBE_FABRIC_SEED reproduces it)")
    rng = random.Random(seed)
    topology = sf.fat_tree(SPINES, LEAVES, HCAS, PORTS, full_rate_every=7)
    by_name = {s.name: s for s in topology.switches}
    descriptions = {s.name: s.description for s in topology.switches}
    descriptions.update({name: desc for name, desc, _, _ in topology.hcas})
    with sf.Simulator(topology) as sim:
        sim.assign_lids()
        links, ibnd_descriptions = sf.parse_ibnetdiscover(sim.run(["ibnetdiscover"]).stdout)
        linkinfo = sf.parse_iblinkinfo(sim.run(["iblinkinfo"]).stdout)
        guid_of = {desc: guid for guid, desc in ibnd_descriptions.items()}
        switch_guids = {name: guid_of[s.description] for name, s in by_name.items()}
        check(len(switch_guids) == SPINES + LEAVES, "ibnetdiscover names every switch")

        # --- discovery on demand only, so no SMP traffic moves the counters under test -------
        _, base = sf.start_exporter(sim, exporter, "--fabric.enabled",
                                    "--fabric.discovery-interval-seconds=3600")
        groups = sf.wait_for_model(base, SPINES + LEAVES)
        sd = {g["targets"][0]: g["labels"]["node_description"] for g in groups}
        check(sd == {sf.guid_label(g): by_name[n].description
                                       for n, g in switch_guids.items()},
              f"/fabric/sd lists every switch with its description ({len(sd)} listed)")

        # Bad requests get their reason; the exporter keeps serving.
        for query, want in (("", 400), ("target=leaf-01", 400), ("target=0x1", 404),
                            (f"target={next(iter(sd))}&module=x", 400)):
            status, body = sf.http_get(f"{base}/fabric?{query}")
            check(status == want, f"/fabric?{query}: {status} {body.strip()} (want {want})")
        check(sf.http_get(base + "/fabric/discover")[0] == 405, "GET /fabric/discover is refused")

        expected = {}
        commands = []
        for name, sw in by_name.items():
            for port in range(1, sw.ports + 1):
                values = {label: rng.randrange(1, 1 << width) for _, label, width in ERROR_COUNTERS}
                values["port_xmit_data"] = rng.randrange(1, 1 << 40)
                values["port_rcv_data"] = rng.randrange(1, 1 << 40)
                values["port_xmit_wait"] = rng.randrange(1, 1 << 32)
                expected[(name, port)] = values
                for field, label, _ in ERROR_COUNTERS:
                    commands.append(f'PerformanceSet "{name}"[{port}] PortCounters.{field}={values[label]}')
                commands.append(f'PerformanceSet "{name}"[{port}] PortCounters.PortXmitWait={values["port_xmit_wait"]}')
                commands.append(f'PerformanceSet "{name}"[{port}] PortCountersExtended.PortXmitData={values["port_xmit_data"]}')
                commands.append(f'PerformanceSet "{name}"[{port}] PortCountersExtended.PortRcvData={values["port_rcv_data"]}')
        for i in range(0, len(commands), 400):
            out = sim.console(*commands[i:i + 400])
            check(sum("has been set" in line for line in out) == len(commands[i:i + 400]),
                  "ibsim took every PerformanceSet")
        print(f"set {len(commands)} counters on {len(expected)} switch ports")

        # The first HCA is where the exporter sends from: the cable to it, and the inter-switch
        # cables, carry the MADs; every other port's data counters are exactly what was set.
        attach = topology.hcas[0][0]
        ports_checked = mads = below_checked = full_rate_seen = 0
        read_time = 0.0
        for name, sw in by_name.items():
            guid = sf.guid_label(switch_guids[name])
            status, body, elapsed = scrape_switch(base, guid)
            read_time += elapsed
            if not check(status == 200, f"{name}: /fabric answers {status}"):
                continue
            samples = sf.parse_metrics(body)
            mads += one(samples, "ibprobe_fabric_scrape_mads") or 0
            for port in range(1, sw.ports + 1):
                want = expected[(name, port)]
                p = str(port)
                link = links.get((switch_guids[name], port))
                far = sw.links.get(port)
                labels_seen = series(samples, "rdma_port_errors_total", port=p, counter="symbol_error")
                if not check(len(labels_seen) == 1, f"{name} port {port}: one symbol_error series"):
                    continue
                labels = labels_seen[0][0]
                ports_checked += 1
                check(labels["node_guid"] == guid and labels["node_description"] == sw.description,
                      f"{name} port {port}: switch labels {labels}")
                if link:
                    check(labels.get("remote_guid") == sf.guid_label(link[0])
                          and labels.get("remote_port") == str(link[1])
                          and labels.get("remote_description") == ibnd_descriptions[link[0]],
                          f"{name} port {port}: far end {labels} != ibnetdiscover {link}")
                    check(far is not None and labels.get("remote_description") == descriptions[far[0]],
                          f"{name} port {port}: far end is {far} in the topology")
                else:
                    check("remote_guid" not in labels and far is None,
                          f"{name} port {port}: no far end (ibnetdiscover: none) {labels}")
                # Width, speed and "below capability" as iblinkinfo reports them.
                info = linkinfo.get((switch_guids[name], port))
                got = (one(samples, "rdma_fabric_port_link_width_lanes", port=p),
                       one(samples, "rdma_fabric_port_link_lane_speed_gigabits", port=p),
                       one(samples, "rdma_fabric_port_link_below_capability", port=p, kind="width"),
                       one(samples, "rdma_fabric_port_link_below_capability", port=p, kind="speed"))
                if info:
                    check(got == (info[0], info[1], float(info[2]), float(info[3])),
                          f"{name} port {port}: width, speed, below {got} != iblinkinfo {info}")
                    below_checked += 1
                    full_rate_seen += (name, port) in topology.full_rate and not info[2]
                else:
                    check(got == (None, None, None, None), f"{name} port {port}: uncabled, yet {got}")
                for _, label, _ in ERROR_COUNTERS:
                    got = one(samples, "rdma_port_errors_total", port=p, counter=label)
                    check(got == want[label], f"{name} port {port} {label}: {got} != set {want[label]}")
                wait = one(samples, "rdma_port_transmit_wait_ticks_total", port=p)
                check(wait == want["port_xmit_wait"], f"{name} port {port} xmit_wait {wait}")
                on_mad_path = far is not None and (far[0] in by_name or far[0] == attach)
                for family, counter in (("rdma_port_data_transmitted_bytes_total", "port_xmit_data"),
                                        ("rdma_port_data_received_bytes_total", "port_rcv_data")):
                    got = one(samples, family, port=p)
                    set_bytes = 4 * want[counter]
                    if on_mad_path:
                        check(got is not None and got % 4 == 0
                              and set_bytes <= got < set_bytes + 4 * MAD_TRAFFIC_WORDS,
                              f"{name} port {port} {counter}: {got} not set x 4 ({set_bytes}) plus MAD traffic")
                    else:
                        check(got == set_bytes, f"{name} port {port} {counter}: {got} != 4 x {want[counter]}")
        check(full_rate_seen == len(topology.full_rate) > 0,
              f"{full_rate_seen} of {len(topology.full_rate)} full-rate cables not below capability")
        print(f"{below_checked} cabled ports' width, speed and below-capability equal iblinkinfo's "
              f"({len(topology.full_rate)} at full rate)")
        total_ports = sum(s.ports for s in topology.switches)
        check(ports_checked == total_ports, f"{ports_checked} of {total_ports} switch ports answered")
        print(f"{ports_checked} switch ports checked against PerformanceSet and ibnetdiscover; "
              f"{mads / ports_checked:.2f} MADs per port (first read: ClassPortInfo included); "
              f"{len(by_name)} switch reads took {read_time:.3f} s")
        status, body, _ = scrape_switch(base, sf.guid_label(switch_guids["leaf-01"]))
        again = one(sf.parse_metrics(body), "ibprobe_fabric_scrape_mads")
        # PortCounters and PortCountersExtended: the three detail attributes, which ibsim's PMAs
        # all answer, were read by the first read and no base counter moved since
        # (fabric.adaptive_details checks their values when one does).
        check(again == 2 * PORTS, f"a repeated read costs 2 MADs per port ({again} for {PORTS} ports)")

        # --- remote_pma on the same fabric: ibsim's port has no link_layer file ("IB") --------
        lid = int(next(g for g in groups if g["targets"][0] == sf.guid_label(switch_guids["leaf-02"]))
                  ["labels"]["__meta_ibprobe_switch_lid"])
        _, remote = sf.start_exporter(sim, exporter, "--collector.remote_pma",
                                      f"--collector.remote_pma.target={lid}:4")
        m = sf.parse_metrics(sf.http_get(remote + "/metrics")[1])
        check(len(series(m, "ibprobe_remote_pma_up")) == 1
              and series(m, "ibprobe_remote_pma_up")[0][1] == 1,
              f"remote_pma starts on the simulated InfiniBand port: {series(m, 'ibprobe_remote_pma_up')}")
        got = one(m, "rdma_port_errors_total", lid=str(lid), port="4", counter="symbol_error")
        check(got == expected[("leaf-02", 4)]["symbol_error"],
              f"remote_pma reads leaf-02 port 4 symbol_error {got}")

        # --- a cable cut, and back, each within one discovery interval ----------------------
        interval = 3
        _, fast = sf.start_exporter(sim, exporter, "--fabric.enabled",
                                    f"--fabric.discovery-interval-seconds={interval}")
        sf.wait_for_model(fast, SPINES + LEAVES)
        leaf = "leaf-05"
        port = 3
        host = by_name[leaf].links[port][0]
        leaf_guid = sf.guid_label(switch_guids[leaf])

        def missing():
            status, body, _ = scrape_switch(fast, leaf_guid)
            if status != 200:
                return None
            return one(sf.parse_metrics(body), "rdma_fabric_link_missing", port=str(port))

        deadline = time.monotonic() + 30
        while missing() != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        check(missing() == 0, f"{leaf} port {port}: cable present before the cut")
        sim.console(f'Unlink "{leaf}"[{port}]')
        cut = time.monotonic()
        while missing() != 1 and time.monotonic() < cut + 4 * interval:
            time.sleep(0.1)
        seen_after = time.monotonic() - cut
        status, body, _ = scrape_switch(fast, leaf_guid)
        samples = sf.parse_metrics(body)
        gone = series(samples, "rdma_fabric_link_missing", port=str(port))
        check(len(gone) == 1 and gone[0][1] == 1 and gone[0][0].get("remote_description") == descriptions[host],
              f"{leaf} port {port}: missing cable to {descriptions[host]}: {gone}")
        # The first discovery that starts after the cut finds it: the one running at the cut
        # ends, one interval passes, the next one runs (a discovery's time twice), then a poll.
        took = one(sf.parse_metrics(sf.http_get(fast + "/metrics")[1]),
                   "ibprobe_fabric_discovery_duration_seconds")
        check(seen_after <= interval + 2 * took + 0.5,
              f"cut cable seen after {seen_after:.2f} s (interval {interval} s, discovery {took:.2f} s)")
        # The port's series keep the former far end's labels while it is down: the same series
        # go down and come back, rather than vanishing and reappearing under other labels.
        now = series(samples, "rdma_port_errors_total", port=str(port), counter="symbol_error")
        check(len(now) == 1 and now[0][0].get("remote_description") == descriptions[host],
              f"{leaf} port {port}: the former far end still labels it after the cut: {now}")
        state = series(samples, "rdma_fabric_port_state", port=str(port))
        check(len(state) == 1 and state[0][1] == 1
              and state[0][0].get("remote_description") == descriptions[host],
              f"{leaf} port {port}: PortState Down under the same labels: {state}")
        print(f"cut cable {leaf}[{port}] -> {host} seen after {seen_after:.2f} s (interval {interval} s)")
        sim.console(f'Link "{leaf}"[{port}] "{host}"[1]')
        back = time.monotonic()
        while missing() != 0 and time.monotonic() < back + 4 * interval:
            time.sleep(0.1)
        back_after = time.monotonic() - back
        took = one(sf.parse_metrics(sf.http_get(fast + "/metrics")[1]),
                   "ibprobe_fabric_discovery_duration_seconds")
        check(missing() == 0 and back_after <= interval + 2 * took + 0.5,
              f"cable back seen after {back_after:.2f} s (discovery {took:.2f} s)")
        print(f"cable back seen after {back_after:.2f} s")
        _, body = sf.http_get(fast + "/metrics")
        m = sf.parse_metrics(body)
        changes = {l["change"]: v for l, v in series(m, "ibprobe_fabric_link_changes_total")}
        # Both ends of the cable: the leaf's port and the HCA's.
        check(changes == {"vanished": 2, "returned": 2, "downgraded": 0},
              f"the cut and the return counted at both ends: {changes}")

        # --- a failed discovery keeps the last good model ------------------------------------
        sim.console(f'Error "{attach}" 100')
        status, _ = sf.http_get(base + "/fabric/discover", method="POST", timeout=120)
        check(status == 500, f"discovery with every MAD lost fails ({status})")
        _, body = sf.http_get(base + "/metrics")
        m = sf.parse_metrics(body)
        check(one(m, "ibprobe_fabric_discovery_success") == 0, "discovery_success 0 after the failure")
        check(one(m, "ibprobe_fabric_nodes", type="switch") == SPINES + LEAVES,
              "the last good model is still served")
        _, body = sf.http_get(base + "/fabric/sd")
        check(len(json.loads(body)) == SPINES + LEAVES, "/fabric/sd still lists every switch")
        sim.console(f'Error "{attach}" 0')
        status, _ = sf.http_get(base + "/fabric/discover", method="POST", timeout=120)
        _, body = sf.http_get(base + "/metrics")
        check(status == 200 and one(sf.parse_metrics(body), "ibprobe_fabric_discovery_success") == 1,
              "discovery succeeds again once MADs get through")

        # --- 20 % MAD loss: every scrape 200 within its budget, losses counted by reason ------
        sim.console(f'Error "{attach}" 20')
        scrape_timeout = 3.0
        lost = {}
        worst = 0.0
        answered = 0
        for round_ in range(3):
            for name, sw in by_name.items():
                status, body, elapsed = scrape_switch(base, sf.guid_label(switch_guids[name]),
                                                      scrape_timeout)
                worst = max(worst, elapsed)
                check(status == 200 and elapsed < scrape_timeout,
                      f"{name} under 20 % loss: {status} after {elapsed:.2f} s")
                samples = sf.parse_metrics(body)
                for labels, value in series(samples, "ibprobe_fabric_scrape_failed_queries"):
                    lost[labels["reason"]] = lost.get(labels["reason"], 0) + value
                for (labels, value) in series(samples, "rdma_port_errors_total", counter="symbol_error"):
                    answered += 1
                    want = expected[(name, int(labels["port"]))]["symbol_error"]
                    check(value == want, f"{name} port {labels['port']} under loss: {value} != {want}")
        sim.console(f'Error "{attach}" 0')
        _, body = sf.http_get(base + "/metrics")
        m = sf.parse_metrics(body)
        total = {l["reason"]: v for l, v in series(m, "ibprobe_fabric_mad_failures_total")}
        check(lost.get("timeout", 0) > 0, f"losses counted as timeouts: {lost}")
        check(all(total.get(r, 0) == v for r, v in lost.items()),
              f"/metrics totals {total} match the scrapes' {lost}")
        print(f"20 % MAD loss: {3 * len(by_name)} scrapes, all 200, slowest {worst:.2f} s of "
              f"{scrape_timeout} s; {answered} port answers correct; lost by reason "
              + ", ".join(f"{r}={int(v)}" for r, v in sorted(lost.items()) if v))

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
