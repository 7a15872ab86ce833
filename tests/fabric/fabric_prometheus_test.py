#!/usr/bin/env python3
"""A real Prometheus reads a simulated fabric the shipped way (scrape-ibprobe-fabric.yml): it
discovers the switches through /fabric/sd, two exporters (attached to different hosts) share
them by hashmod, and every switch is scraped by exactly one of them, checked through the
Prometheus API. The shipped switch-port rules and dashboard run on the data (every query
returns data, every rule evaluates); a PerformanceSet symbol-error rise fires
IbprobeSwitchPortSymbolErrors with both cable ends named, and a cut cable fires
IbprobeSwitchCableMissing and, against the cabling plan (the fabric as it started),
IbprobeFabricCableMissing; with opensm running, the subnet-manager alerts stay quiet.
--fabric.node-name-map renames a switch in every label (the plan matches it by GUID then).

Usage: fabric_prometheus_test.py EXPORTER"""

import json
import os
import subprocess
import sys
import time
import urllib.parse

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfabric as sf  # noqa: E402
from simfabric import check, failures  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "../..")
RUNNER = os.path.join(ROOT, "tests/dashboards/run_queries.py")
SPINES, LEAVES, HCAS, PORTS = 2, 10, 40, 12


def api(base, path, **params):
    status, body = sf.http_get(f"{base}/api/v1/{path}?" + urllib.parse.urlencode(params))
    if status != 200:
        raise RuntimeError(f"{path}: {status} {body[:300]}")
    return json.loads(body)["data"]


def prometheus_config(work, exporter_a, exporter_b, rule_files):
    """The shipped fabric jobs with this test's exporters and short intervals."""
    shipped = yaml.safe_load(open(os.path.join(ROOT, "dashboards/prometheus/scrape-ibprobe-fabric.yml")))
    text = yaml.safe_dump(shipped["scrape_configs"])
    text = text.replace("fabric-mgmt-01:9470", exporter_a).replace("fabric-mgmt-02:9470", exporter_b)
    jobs = yaml.safe_load(text)
    for job in jobs:
        job.update(scrape_interval="2s", scrape_timeout="2s")
        for sd in job.get("http_sd_configs", []):
            sd["refresh_interval"] = "2s"
    config = {"global": {"scrape_interval": "2s", "evaluation_interval": "1s"},
              "rule_files": rule_files, "scrape_configs": jobs}
    path = os.path.join(work, "prometheus.yml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return path


def main(exporter):
    topology = sf.fat_tree(SPINES, LEAVES, HCAS, PORTS)
    with sf.Simulator(topology) as sim:
        sim.assign_lids()
        # A master SM for the subnet-manager rules' series (they stay quiet with it).
        sim.start_sm(7)
        # The fabric as it starts is the cabling plan.
        plan = os.path.join(sim.workdir, "plan.topo")
        with open(plan, "w") as f:
            f.write(sim.run(["ibnetdiscover"]).stdout)
        _, descriptions = sf.parse_ibnetdiscover(open(plan).read())
        guid_of = {d: g for g, d in descriptions.items()}
        switch_guid = {s.name: guid_of[s.description] for s in topology.switches}
        # The node-name-map renames one spine: every label of it must carry the new name.
        renamed = "spine-01 (row A, rack 3)"
        name_map = os.path.join(sim.workdir, "node-name-map")
        with open(name_map, "w") as f:
            f.write(f'# site names\n0x{switch_guid["spine-01"]:016x} "{renamed}"\n')
        names = {s.name: s.description for s in topology.switches}
        names["spine-01"] = renamed

        # FEC counters on: ibsim answers no PortExtendedSpeedsCounters, and its QDR links have
        # no FEC, so the switch-ports dashboard's status table lists every switch as
        # no_extended_speed_port and its BER panel stays empty.
        flags = ("--fabric.enabled", "--fabric.discovery-interval-seconds=3600",
                 "--fabric.extended-speeds-counters",
                 f"--fabric.node-name-map={name_map}", f"--fabric.topology-file={plan}")
        _, base_a = sf.start_exporter(sim, exporter, *flags)
        _, base_b = sf.start_exporter(sim, exporter, *flags, host=topology.hcas[1][0])
        for base in (base_a, base_b):
            sd = sf.wait_for_model(base, len(topology.switches))
            check({g["targets"][0]: g["labels"]["node_description"] for g in sd}
                  == {sf.guid_label(switch_guid[n]): d for n, d in names.items()},
                  f"{base}/fabric/sd lists every switch, named by the node-name-map")

        rules_dir = os.path.join(sim.workdir, "rules")
        os.makedirs(rules_dir)
        subprocess.run([sys.executable, RUNNER, "adapt-rules", rules_dir,
                        os.path.join(ROOT, "dashboards/prometheus/ibprobe-fabric.rules.yml"),
                        "--window", "40s", "--for", "0s"], check=True)
        rule_files = [os.path.join(rules_dir, f) for f in sorted(os.listdir(rules_dir))]
        config = prometheus_config(sim.workdir, base_a[len("http://"):], base_b[len("http://"):],
                                   rule_files)
        subprocess.run(["promtool", "check", "config", config], check=True, capture_output=True)
        port = sf.free_port()
        prom = f"http://127.0.0.1:{port}"
        log = open(os.path.join(sim.workdir, "prometheus.log"), "w")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(sim.workdir, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        sim.children.append(prometheus)

        # --- every switch scraped by exactly one exporter, healthy ---------------------------
        want = {sf.guid_label(g) for g in switch_guid.values()}
        deadline = time.monotonic() + 90
        fabric = []
        while time.monotonic() < deadline:
            try:
                active = api(prom, "targets", state="active")["activeTargets"]
            except (OSError, RuntimeError):
                time.sleep(1)
                continue
            fabric = [t for t in active if t["labels"]["job"].startswith("ibprobe_fabric_shard")]
            if len(fabric) >= len(want) and all(t["health"] == "up" for t in fabric):
                break
            time.sleep(1)
        shards = {}
        for t in fabric:
            target = urllib.parse.parse_qs(urllib.parse.urlparse(t["scrapeUrl"]).query)["target"][0]
            shards.setdefault(target, []).append((t["labels"]["job"], t["health"],
                                                  urllib.parse.urlparse(t["scrapeUrl"]).netloc))
        check(set(shards) == want, f"Prometheus targets are exactly the {len(want)} switches")
        check(all(len(v) == 1 and v[0][1] == "up" for v in shards.values()),
              "every switch scraped by exactly one job, and up")
        per_exporter = {}
        for v in shards.values():
            per_exporter[v[0][2]] = per_exporter.get(v[0][2], 0) + 1
        check(len(per_exporter) == 2, f"both exporters read switches: {per_exporter}")
        # And in the data: each switch's series come from one job only, once every switch's
        # first scrape is in.
        deadline = time.monotonic() + 60
        while True:
            counted = api(prom, "query", query="count by (node_guid) (count by (node_guid, job) "
                                               "(rdma_fabric_port_state))")["result"]
            if len(counted) >= len(want) or time.monotonic() > deadline:
                break
            time.sleep(1)
        check(sorted(r["metric"]["node_guid"] for r in counted) == sorted(want)
              and all(r["value"][1] == "1" for r in counted),
              "every switch's series come from exactly one job")
        renamed_series = api(prom, "query", query=f'count(rdma_port_errors_total{{node_description="{renamed}"}})')["result"]
        check(renamed_series and int(renamed_series[0]["value"][1]) > 0,
              "the node-name-map's name labels the renamed spine's series")
        print(f"shards: {per_exporter}")

        # --- a symbol-error rise and a cut cable fire the switch alerts ----------------------
        leaf = topology.switch("leaf-02")
        far, far_port = leaf.links[1]
        # leaf-03 port 3's link went down three times (ibsim does not count LinkDowned itself).
        sim.console(f'PerformanceSet "leaf-02"[1] PortCounters.SymbolErrorCounter=500',
                    f'PerformanceSet "leaf-03"[2] PortCounters.PortRcvErrors=77',
                    f'PerformanceSet "leaf-03"[3] PortCounters.LinkDownedCounter=3')
        cut_leaf, cut_port = "leaf-04", 1
        sim.console(f'Unlink "{cut_leaf}"[{cut_port}]')
        for base in (base_a, base_b):
            check(sf.http_get(base + "/fabric/discover", method="POST")[0] == 200,
                  f"{base}: rediscovered on demand after the cut")
        leaf_desc = leaf.description
        # The dashboard's error and cable panels show the rise and the cut once Prometheus has
        # scraped them: when the alerts on the same series fire.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            firing = {a["labels"]["alertname"] for a in api(prom, "alerts")["alerts"]
                      if a["state"] == "firing"}
            if {"IbprobeSwitchPortSymbolErrors", "IbprobeSwitchCableMissing"} <= firing:
                break
            time.sleep(1)
        prepare_dashboards(sim.workdir)
        result = subprocess.run(
            [sys.executable, RUNNER, "check", "--prometheus", prom,
             "--dashboards", os.path.join(sim.workdir, "dashboards"), "--rules", *rule_files,
             "--range", "40s", "--range-seconds", "60", "--rate-interval", "10s", "--wait", "60",
             "--fire", f'IbprobeSwitchPortSymbolErrors{{node_description="{leaf_desc}",port="1",'
                       f'remote_description="{far} mlx5_0",remote_port="{far_port}"}}',
             "--fire", f'IbprobeSwitchPortErrors{{node_description="{topology.switch("leaf-03").description}",'
                       f'port="2",counter="port_rcv_errors"}}',
             "--fire", f'IbprobeSwitchCableMissing{{node_description="{topology.switch(cut_leaf).description}",'
                       f'port="{cut_port}",remote_description="{topology.switch(cut_leaf).links[cut_port][0]} mlx5_0"}}',
             "--fire", f'IbprobeFabricPortFlapping{{node_description="{topology.switch("leaf-03").description}",'
                       f'port="3",remote_description="{topology.switch("leaf-03").links[3][0]} mlx5_0"}}',
             "--fire", f'IbprobeFabricCableMissing{{node_description="{topology.switch(cut_leaf).description}",'
                       f'port="{cut_port}",remote_description="{topology.switch(cut_leaf).links[cut_port][0]} mlx5_0"}}',
             "--empty-ok", "rdma_fabric_cable_status=the cut cable is missing, none is miswired or unexpected",
             "--empty-ok", "ibprobe:port_pre_fec_ber:rate5m=ibsim answers no PortExtendedSpeedsCounters",
             "--empty-ok", "ibprobe:port_pre_fec_ber_threshold=ibsim answers no PortExtendedSpeedsCounters",
             "--quiet", f'IbprobeSwitchPortSymbolErrors{{node_description="{leaf_desc}",port="2"}}',
             "--quiet", "IbprobeFabricCableMiswired", "--quiet", "IbprobeFabricCableUnexpected",
             "--quiet", "IbprobeFabricDiscoveryFailing", "--quiet", "IbprobeFabricNoMasterSm",
             "--quiet", "IbprobeFabricMasterSmChanged", "-v"],
            capture_output=True, text=True, cwd=sim.workdir,
            timeout=300)
        print(result.stdout[-6000:], result.stderr[-2000:])
        check(result.returncode == 0, "shipped switch-port dashboard and rules on live data; alerts fire")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("PASS")
    return 0


def prepare_dashboards(work):
    """The switch-ports dashboard alone: the host dashboards need host exporters."""
    os.makedirs(os.path.join(work, "dashboards"), exist_ok=True)
    src = os.path.join(ROOT, "dashboards/grafana/ibprobe-switch-ports.json")
    with open(src) as f, open(os.path.join(work, "dashboards", "ibprobe-switch-ports.json"), "w") as g:
        g.write(f.read())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
