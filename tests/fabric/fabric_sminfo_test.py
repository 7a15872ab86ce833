#!/usr/bin/env python3
"""The subnet managers and /fabric/sd before the first discovery, on a small simulated fat tree:
- while the exporter's first discovery fails (ibsim drops every MAD of its port), /fabric/sd
  answers 503 with the reason, not an empty list; after a good discovery it lists the switches;
- with opensm running as master (priority 7) and a second opensm as standby (priority 3), the
  exporter's rdma_fabric_sm_* series equal what infiniband-diags' `sminfo` prints for the
  master (the local port's SM LID) and for the standby's LID: LID, GUID, priority, state, and
  the master's ActCount between sminfo's readings before and after the exporter's;
- with both stopped, `sminfo` fails, the exporter says rdma_fabric_sm_master_present 0 and a
  real Prometheus with the shipped fabric rules (`for` shortened) fires IbprobeFabricNoMasterSm;
- the probe's master_sm pre-flight check, asked from the same port: passes at the master's LID
  naming what sminfo names, fails at the standby's LID (standby), at LID 0 (no SM configured the
  port) and once both SMs are stopped (no answer); without a MAD device (outside the simulator)
  it does not apply, with the reason.

Usage: fabric_sminfo_test.py EXPORTER MASTER_SM_CHECK"""

import json
import os
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfabric as sf  # noqa: E402
from simfabric import check, failures  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "../..")
RUNNER = os.path.join(ROOT, "tests/dashboards/run_queries.py")
SPINES, LEAVES, HCAS, PORTS = 2, 2, 4, 8
MASTER_PRIORITY, STANDBY_PRIORITY = 7, 3


def wait_for(what, probe, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise RuntimeError(f"no {what} within {timeout} s")


def samples(base, prefix):
    _, body = sf.http_get(base + "/metrics")
    return [(n, l, v) for n, l, v in sf.parse_metrics(body) if n.startswith(prefix)]


def value(found, name):
    values = [v for n, _, v in found if n == name]
    return values[0] if len(values) == 1 else None


def no_master_alert_fires(sim, base, timeout=30):
    """A real Prometheus with the shipped fabric rules (`for` 0s) scraping the exporter's
    metrics page: whether IbprobeFabricNoMasterSm fires, and within how many seconds."""
    rules_dir = os.path.join(sim.workdir, "rules")
    os.makedirs(rules_dir)
    subprocess.run([sys.executable, RUNNER, "adapt-rules", rules_dir,
                    os.path.join(ROOT, "dashboards/prometheus/ibprobe-fabric.rules.yml"),
                    "--window", "40s", "--for", "0s"], check=True)
    config = os.path.join(sim.workdir, "prometheus.yml")
    with open(config, "w") as f:
        yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                        "rule_files": [os.path.join(rules_dir, n) for n in os.listdir(rules_dir)],
                        "scrape_configs": [{"job_name": "ibprobe_fabric_exporter",
                                            "static_configs": [{"targets": [base[7:]]}]}]}, f)
    port = sf.free_port()
    sim.spawn(["prometheus", f"--config.file={config}",
               f"--storage.tsdb.path={os.path.join(sim.workdir, 'tsdb')}",
               f"--web.listen-address=127.0.0.1:{port}"], "prometheus.log")
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            status, body = sf.http_get(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=2)
        except OSError:
            status = None
        if status == 200 and any(a["labels"]["alertname"] == "IbprobeFabricNoMasterSm"
                                 and a["state"] == "firing"
                                 for a in json.loads(body)["data"]["alerts"]):
            return time.monotonic() - start
        time.sleep(0.5)
    return None


def master_sm_check(sim, tool, lid):
    """The probe's master_sm check from the first node's port, asking the SM at `lid`."""
    result = json.loads(sim.run([tool, "", "0", str(lid)], timeout=30).stdout)
    print(f"master_sm check at lid {lid}: {result}")
    return result


def main(exporter, check_tool):
    topology = sf.fat_tree(SPINES, LEAVES, HCAS, PORTS)
    exporter_host = topology.hcas[0][0]  # where ibsim attaches clients by default
    standby_host = topology.hcas[1][0]
    with sf.Simulator(topology) as sim:
        # --- /fabric/sd before the first good discovery ----------------------------------------
        sim.console(f'Error "{exporter_host}"[1] 100')
        _, base = sf.start_exporter(sim, exporter, "--fabric.enabled",
                                    "--fabric.discovery-interval-seconds=3600",
                                    "--fabric.timeout-ms=200", "--fabric.retries=0")
        wait_for("failed first discovery", lambda: [
            v for n, l, v in samples(base, "ibprobe_fabric_discoveries_total")
            if l.get("result") == "failure" and v >= 1])
        status, body = sf.http_get(base + "/fabric/sd")
        check(status == 503 and "no fabric model yet" in body,
              f"/fabric/sd before the first good discovery: {status} {body.strip()!r}")
        check(samples(base, "rdma_fabric_sm_") == [], "no SM series without a model")
        sim.console(f'Error "{exporter_host}"[1] 0')

        # --- a master and a standby SM ---------------------------------------------------------
        master = sim.start_sm(MASTER_PRIORITY)
        standby = sim.start_sm(STANDBY_PRIORITY, host=standby_host)
        want_master = sim.sminfo()
        want_standby = sim.sminfo(sim.port_lid(standby_host))
        print(f"sminfo: master {want_master}, standby {want_standby}")
        check(want_master[4] == "master" and want_standby[4] == "standby",
              "sminfo sees the master at the SM LID and the standby at its LID")

        before = sim.sminfo()[2]
        status, _ = sf.http_get(base + "/fabric/discover", method="POST", timeout=60)
        after = sim.sminfo()[2]
        check(status == 200, f"discovery with the SMs running ({status})")
        status, body = sf.http_get(base + "/fabric/sd")
        check(status == 200 and len(json.loads(body)) == SPINES + LEAVES,
              f"/fabric/sd lists every switch after it ({status}, {body[:80]!r}...)")

        found = samples(base, "rdma_fabric_sm_")
        for line in found:
            print("  ", line)
        check(value(found, "rdma_fabric_sm_master_present") == 1, "master_present 1")
        info = sorted((l["lid"], l["guid"], l["priority"], l["state"])
                      for n, l, _ in found if n == "rdma_fabric_sm_info")
        want = sorted((s[0], s[1], s[3], s[4]) for s in (want_master, want_standby))
        check(info == want, f"rdma_fabric_sm_info (lid, guid, priority, state) {info} equal "
                            f"sminfo's {want}")
        counts = {(l["lid"], l["guid"]): v for n, l, v in found
                  if n == "rdma_fabric_sm_activity_count"}
        count = counts.get((want_master[0], want_master[1]))
        check(count is not None and before <= count <= after,
              f"master ActCount {count} between sminfo's before and after it ({before}, {after})")
        check((want_standby[0], want_standby[1]) in counts, "standby's ActCount present")

        # --- the probe's pre-flight check asks the same SMs --------------------------------------
        at_master = master_sm_check(sim, check_tool, want_master[0])
        guid = "0x" + want_master[1].replace(":", "")
        check(at_master["passed"] and at_master["applicable"]
              and f"lid {want_master[0]}, guid {guid}, priority {want_master[3]}"
              in at_master["detail"],
              f"master_sm passes at sminfo's master and names it (lid {want_master[0]}, guid "
              f"{guid}, priority {want_master[3]})")
        at_standby = master_sm_check(sim, check_tool, want_standby[0])
        check(not at_standby["passed"] and "is standby, not master" in at_standby["detail"],
              "master_sm fails at the standby's LID, saying it is a standby")
        no_umad = json.loads(subprocess.run([check_tool, "", "0", want_master[0]], check=True,
                                            capture_output=True, text=True).stdout)
        check(not no_umad["applicable"] and "SMInfo not asked: cannot open" in no_umad["detail"],
              f"master_sm without a MAD device to ask through: not applicable ({no_umad})")
        unset = master_sm_check(sim, check_tool, 0)
        check(not unset["passed"] and "no subnet manager configured it" in unset["detail"],
              "master_sm fails for a port without an SM LID")

        # --- no SM: the standby first, so it does not take over --------------------------------
        for sm in (standby, master):
            sm.terminate()
            sm.wait(timeout=20)
        check(sim.sminfo() is None, "sminfo gets no answer with both SMs stopped")
        gone = master_sm_check(sim, check_tool, want_master[0])
        check(not gone["passed"] and gone["applicable"]
              and "no subnet manager answered SMInfo" in gone["detail"],
              "master_sm fails at the old master's LID once no SM answers")
        status, _ = sf.http_get(base + "/fabric/discover", method="POST", timeout=60)
        check(status == 200, f"discovery without an SM ({status})")
        found = samples(base, "rdma_fabric_sm_")
        check(value(found, "rdma_fabric_sm_master_present") == 0,
              f"master_present 0 with no SM: {found}")
        check(not [n for n, _, _ in found if n == "rdma_fabric_sm_info"], "no SM listed")
        took = no_master_alert_fires(sim, base)
        check(took is not None, f"a real Prometheus fires IbprobeFabricNoMasterSm ({took} s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
