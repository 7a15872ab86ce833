#!/usr/bin/env python3
"""The cabling plan against a simulated fat tree (4 spines, 16 leaves, 300 HCAs, ibsim): the plan is
ibnetdiscover's output of the intended fabric; the fabric ibsim then simulates differs from it in
its net file by two swapped host cables, one missing cable, one extra cable and one host cable
trained at 4x SDR where the plan says 12x QDR. Every difference the exporter reports (status, both
ends, where a miswired end really goes) equals what `ibnetdiscover --diff` prints against a
`--cache` of the intended fabric, the slow cable what iblinkinfo shows against the plan's rate, and
nothing else is reported. A switch port unplugged and plugged back is missing while it is out and
no difference once it is back. A plan that does not parse stops the exporter at start with its line
number; on SIGHUP or POST /-/reload it is refused and the plan in use stays; a good one replaces
it. Without a plan,
--fabric.state-file keeps a cut cable missing across a restart and /fabric/sd answering, and a
real Prometheus scraping every switch through a restart misses at most one scrape of each.

Usage: fabric_topology_test.py EXPORTER"""

import json
import os
import re
import signal
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
SPINES, LEAVES, HCAS, PORTS = 4, 16, 300, 32
PLANNED = HCAS + SPINES * LEAVES


def edit_netfile(netfile, replacements):
    """The net file with each (old line block, new line block) replaced exactly once."""
    for old, new in replacements:
        if netfile.count(old) != 1:
            raise ValueError(f"{old!r} is not in the net file exactly once")
        netfile = netfile.replace(old, new)
    return netfile


def differing(intended):
    """The intended net file with the test's differences: node-0002 and node-0003 swapped on
    leaf-01, node-0025 (leaf-02 port 6) unplugged, an extra cable leaf-01[30] to leaf-02[30],
    node-0007's full-rate cable (leaf-01 port 7) at ibsim's default 4x SDR."""
    return edit_netfile(intended, [
        ('[1]\t"leaf-01"[2]\n', '[1]\t"leaf-01"[@3]\n'),
        ('[1]\t"leaf-01"[3]\n', '[1]\t"leaf-01"[2]\n'),
        ('[1]\t"leaf-01"[@3]\n', '[1]\t"leaf-01"[3]\n'),
        ('[2]\t"node-0002"[1]\n[3]\t"node-0003"[1]\n', '[2]\t"node-0003"[1]\n[3]\t"node-0002"[1]\n'),
        ('# "node-0025 mlx5_0"\n[1]\t"leaf-02"[6]\n', '# "node-0025 mlx5_0"\n'),
        ('[6]\t"node-0025"[1]\n', ''),
        ('Switch\t32 "leaf-01"\t# "MF0;leaf-01:MQM8700/U1"\n',
         'Switch\t32 "leaf-01"\t# "MF0;leaf-01:MQM8700/U1"\n[30]\t"leaf-02"[30]\n'),
        ('Switch\t32 "leaf-02"\t# "MF0;leaf-02:MQM8700/U1"\n',
         'Switch\t32 "leaf-02"\t# "MF0;leaf-02:MQM8700/U1"\n[30]\t"leaf-01"[30]\n'),
        (f'[1]\t"leaf-01"[7]\t{sf.FULL_RATE}\n', '[1]\t"leaf-01"[7]\n'),
        (f'[7]\t"node-0007"[1]\t{sf.FULL_RATE}\n', '[7]\t"node-0007"[1]\n'),
    ])


def parse_diff(text):
    """From `ibnetdiscover --diff`: the switch ports whose cable the cache has and the fabric
    lacks ('<') and those it has new ('>'), each {(switch GUID, port): (far GUID, far port)}."""
    removed, added = {}, {}
    header = re.compile(r'^(?:< )?Switch\s+\d+\s+"S-([0-9a-f]+)"')
    port_line = re.compile(r'^([<>]) \[(\d+)\]\s+"[SHR]-([0-9a-f]+)"\[(\d+)\]')
    switch = None
    for line in text.splitlines():
        m = header.match(line)
        if m:
            switch = int(m.group(1), 16)
            continue
        if re.match(r'^(?:< )?(Ca|Rt)\s', line):
            switch = None
            continue
        m = port_line.match(line)
        if m and switch is not None:
            side = removed if m.group(1) == "<" else added
            side[(switch, int(m.group(2)))] = (int(m.group(3), 16), int(m.group(4)))
    return removed, added


# ibnetdiscover's speed names as lane Gb/s (iblinkinfo's figures).
SPEEDS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR": 14.0625, "EDR": 25.78125, "HDR": 53.125,
          "NDR": 106.25}


def planned_rates(text):
    """{(switch GUID, port): (lanes, lane Gb/s)} from the rates ibnetdiscover prints."""
    rates = {}
    header = re.compile(r'^(Switch|Ca|Rt)\s+\d+\s+"[SHR]-([0-9a-f]+)"')
    port_line = re.compile(r'^\[(\d+)\].*\s(\d+)x([A-Z]+)\s*$')

    def switch_of(m):
        return int(m.group(2), 16) if m.group(1) == "Switch" else None

    for switch, m in sf.switch_port_lines(text, header, port_line, switch_of):
        rates[(switch, int(m.group(1)))] = (int(m.group(2)), SPEEDS[m.group(3)])
    return rates


def expected_downgrades(plan_text, linkinfo, changed):
    """Cables of the plan whose switch port iblinkinfo shows narrower or slower than the plan's
    rate, among the switch ports whose cable did not change."""
    links, _ = sf.parse_ibnetdiscover(plan_text)
    expected = set()
    for here, (lanes, gigabits) in planned_rates(plan_text).items():
        now = linkinfo.get(here)
        if here in changed or now is None:
            continue
        if now[0] < lanes or now[1] < gigabits:
            expected.add(("downgraded", frozenset({end(*here), end(*links[here])}), None))
    return expected


def end(guid, port):
    return (sf.guid_label(guid), str(port))


def expected_differences(removed, added):
    """What the exporter must report, read from the diff alone: a switch port whose cable changed
    is miswired (its found end is the new far end; the planned far end's found end is wherever
    that node shows up new), one whose cable went is missing, a new cable where nothing was
    planned is unexpected."""
    now_at = {far: here for here, far in added.items()}
    expected = set()
    for here, far in removed.items():
        if here in added:
            found_far = now_at.get(far)
            expected.add(("miswired", frozenset({end(*here), end(*far)}),
                          frozenset({(end(*here), end(*added[here])),
                                     (end(*far), end(*found_far) if found_far else None)})))
        else:
            expected.add(("missing", frozenset({end(*here), end(*far)}), None))
    for here, far in added.items():
        if here not in removed and far not in removed:
            expected.add(("unexpected", frozenset({end(*here), end(*far)}), None))
    return expected


def reported_differences(samples):
    """The exporter's rdma_fabric_cable_status series other than ok, in expected_differences'
    form, and its rdma_fabric_cables counts."""
    reported = set()
    for name, labels, value in samples:
        if name != "rdma_fabric_cable_status" or labels["status"] == "ok":
            continue
        node = (labels["node_guid"], labels["port"])
        remote = (labels["remote_guid"], labels["remote_port"])
        found = None
        if labels["status"] == "miswired":
            def found_end(prefix):
                guid = labels.get(prefix + "guid", "")
                return (guid, labels[prefix + "port"]) if guid else None
            found = frozenset({(node, found_end("node_found_")),
                               (remote, found_end("remote_found_"))})
        check(value == 1, f"{labels['status']} cable {node} - {remote} has value 1")
        reported.add((labels["status"], frozenset({node, remote}), found))
    counts = {l["status"]: v for n, l, v in samples if n == "rdma_fabric_cables"}
    return reported, counts


def show(differences):
    return "\n  ".join(sorted(repr(d) for d in differences)) or "(none)"


def rediscovered_differences(base):
    status, _ = sf.http_get(base + "/fabric/discover", method="POST", timeout=120)
    check(status == 200, f"POST /fabric/discover answers 200 ({status})")
    return reported_differences(sf.parse_metrics(sf.http_get(base + "/metrics")[1]))


def metric_values(base, name, path="/metrics", **labels):
    status, body = sf.http_get(base + path)
    if status != 200:
        return None
    return [v for n, l, v in sf.parse_metrics(body)
            if n == name and all(l.get(k) == w for k, w in labels.items())]


def stop(process):
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=20)


def restart_keeps_state(sim, exporter, workdir):
    """--fabric.state-file without a plan: a cable cut before a restart is still missing after
    it, served from the saved state while the first discovery after the restart fails; /fabric/sd
    answers the saved switches while no discovery has succeeded. A corrupt state file is logged and counted, and the
    exporter starts without it and writes a good one."""
    state = os.path.join(workdir, "fabric.state")
    flags = ("--fabric.enabled", "--fabric.discovery-interval-seconds=3600",
             f"--fabric.state-file={state}")
    _, descriptions = sf.parse_ibnetdiscover(sim.run(["ibnetdiscover"]).stdout)
    leaf06 = sf.guid_label(next(g for g, d in descriptions.items() if "leaf-06:" in d))
    process, base = sf.start_exporter(sim, exporter, *flags)
    switches = len(sf.wait_for_model(base, SPINES + LEAVES))
    sim.console('Unlink "leaf-06"[1]')
    sf.http_get(base + "/fabric/discover", method="POST", timeout=120)
    missing = metric_values(base, "rdma_fabric_link_missing", f"/fabric?target={leaf06}", port="1")
    check(missing == [1], f"leaf-06 port 1 cut: rdma_fabric_link_missing {missing}")
    stop(process)

    # Every MAD of the exporter's port dropped: no discovery succeeds after the restart, so
    # whatever /fabric/sd answers comes from the saved state, until and after the first fails.
    sim.console('Error "node-0001"[1] 100')
    process, base = sf.start_exporter(sim, exporter, *flags, "--fabric.timeout-ms=2000",
                                      "--fabric.retries=0")
    answers = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        failed = metric_values(base, "ibprobe_fabric_discoveries_total", result="failure")
        succeeded = metric_values(base, "ibprobe_fabric_discoveries_total", result="success")
        status, body = sf.http_get(base + "/fabric/sd")
        answers.add((status, len(json.loads(body)) if status == 200 else None, succeeded == [0]))
        if failed == [1]:
            break
        time.sleep(0.05)
    check(answers == {(200, switches, True)} and failed == [1],
          f"while no discovery has succeeded since the restart (the first failed), /fabric/sd "
          f"answers the {switches} saved switches: {answers}")
    missing = metric_values(base, "rdma_fabric_link_missing", f"/fabric?target={leaf06}", port="1")
    check(missing == [1], f"after the restart, from the saved state: leaf-06 port 1 missing {missing}")
    sim.console('Error "node-0001"[1] 0')
    sf.http_get(base + "/fabric/discover", method="POST", timeout=120)
    missing = metric_values(base, "rdma_fabric_link_missing", f"/fabric?target={leaf06}", port="1")
    success = metric_values(base, "ibprobe_fabric_discovery_success")
    check(missing == [1] and success == [1],
          f"and after the first good discovery since: missing {missing} (success {success})")
    sim.console('Link "leaf-06"[1] "node-0096"[1]')
    sf.http_get(base + "/fabric/discover", method="POST", timeout=120)
    missing = metric_values(base, "rdma_fabric_link_missing", f"/fabric?target={leaf06}", port="1")
    check(missing == [0], f"plugged back: leaf-06 port 1 missing {missing}")
    stop(process)

    with open(state, "w") as f:
        f.write('{"format": "ibprobe-fabric-state-1", "model": {"nodes": [')
    process, base = sf.start_exporter(sim, exporter, *flags)
    sf.wait_for_model(base, SPINES + LEAVES)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and metric_values(
            base, "ibprobe_fabric_state_saves_total", result="success") != [1]:
        time.sleep(0.1)
    log = open(os.path.join(workdir, f"exporter-{base.rsplit(':', 1)[1]}.log")).read()
    loaded = metric_values(base, "ibprobe_fabric_state_load_success")
    saved = metric_values(base, "ibprobe_fabric_state_saves_total", result="success")
    check(f"fabric: state file {state}: not a saved fabric state" in log and
          "starting without it" in log and loaded == [0] and saved == [1],
          f"a corrupt state file: logged, ibprobe_fabric_state_load_success {loaded}, and "
          f"replaced by the first good discovery's ({saved} saved)")
    with open(state) as f:
        check(json.load(f)["format"] == "ibprobe-fabric-state-1", "the state file is whole again")
    stop(process)


def prometheus_scraping(sim, workdir, exporter_address, interval):
    """A real Prometheus reading every switch through `exporter_address` the shipped way
    (scrape-ibprobe-fabric.yml's first shard job, one shard), every `interval` seconds, with
    /fabric/sd refreshed as often; returns its base URL."""
    shipped = yaml.safe_load(open(os.path.join(ROOT, "dashboards/prometheus/scrape-ibprobe-fabric.yml")))
    job = yaml.safe_load(yaml.safe_dump(shipped["scrape_configs"][0]).replace(
        "fabric-mgmt-01:9470", exporter_address))
    job.update(scrape_interval=f"{interval}s", scrape_timeout=f"{interval}s")
    job["http_sd_configs"][0]["refresh_interval"] = f"{interval}s"
    for rule in job["relabel_configs"]:
        if rule.get("action") == "hashmod":
            rule["modulus"] = 1
    config = os.path.join(workdir, "prometheus-restart.yml")
    with open(config, "w") as f:
        yaml.safe_dump({"global": {"scrape_interval": f"{interval}s"}, "scrape_configs": [job]}, f)
    port = sf.free_port()
    sim.spawn(["prometheus", f"--config.file={config}",
               f"--storage.tsdb.path={os.path.join(workdir, 'tsdb-restart')}",
               f"--web.listen-address=127.0.0.1:{port}"], "prometheus-restart.log")
    return f"http://127.0.0.1:{port}"


def prometheus_query(prometheus, query):
    try:
        status, body = sf.http_get(f"{prometheus}/api/v1/query?" +
                                   urllib.parse.urlencode({"query": query}), timeout=10)
    except OSError:
        return None
    return json.loads(body)["data"]["result"] if status == 200 else None


def restart_under_prometheus(sim, exporter, workdir):
    """The exporter restarted (same address, --fabric.state-file) while a real Prometheus scrapes
    every switch through it: no switch series misses more than the one scrape that finds the
    exporter gone, and every switch target stays. /fabric/sd answers from the saved state at once,
    so Prometheus never sees an empty target list, and /fabric?target= reads the switches with the
    saved model before the first discovery after the restart."""
    interval = 2
    state = os.path.join(workdir, "restart.state")
    flags = ("--fabric.enabled", "--fabric.discovery-interval-seconds=3600",
             f"--fabric.state-file={state}")
    port = sf.free_port()
    process, base = sf.start_exporter(sim, exporter, *flags, port=port)
    switches = len(sf.wait_for_model(base, SPINES + LEAVES))
    prometheus = prometheus_scraping(sim, workdir, f"127.0.0.1:{port}", interval)
    # Every switch scraped three times before the restart.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        counts = prometheus_query(prometheus, "count_over_time(up{job='ibprobe_fabric_shard0'}[1h])")
        if counts and len(counts) == switches and min(float(r["value"][1]) for r in counts) >= 3:
            break
        time.sleep(0.5)
    check(counts and len(counts) == switches, f"Prometheus scrapes all {switches} switches")
    stopped = time.time()
    stop(process)
    process, base = sf.start_exporter(sim, exporter, *flags, port=port)
    print(f"exporter restarted in {time.time() - stopped:.2f} s")
    # Every switch scraped four times since the restart, by Prometheus' own count.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        since = int(time.time() - stopped) + 1
        counts = prometheus_query(
            prometheus, f"count_over_time(up{{job='ibprobe_fabric_shard0'}}[{since}s])")
        if counts and len(counts) == switches and min(float(r["value"][1]) for r in counts) >= 4:
            break
        time.sleep(0.5)
    window = int(time.time() - stopped) + 4 * interval
    series = prometheus_query(prometheus, f"rdma_fabric_port_state[{window}s]")
    gaps = []
    for s in series or []:
        times = [float(t) for t, _ in s["values"]]
        gaps.append((max(b - a for a, b in zip(times, times[1:])), s["metric"]["instance"],
                     s["metric"]["port"], times[-1] > stopped))
    worst = max(gaps) if gaps else None
    print(f"{len(gaps)} switch-port series over the restart; widest gap between samples: {worst}")
    check(len(gaps) > switches and all(after for _, _, _, after in gaps),
          f"every switch-port series has samples after the restart ({len(gaps)} series)")
    check(worst and worst[0] <= 2 * interval + 0.5,
          f"no switch-port series misses more than one {interval} s scrape over the restart "
          f"(widest gap {worst[0] if worst else None:.2f} s)")
    ups = prometheus_query(prometheus, f"up{{job='ibprobe_fabric_shard0'}}[{window}s]")
    failed = sorted(sum(v == "0" for _, v in r["values"]) for r in ups or [])
    targets = prometheus_query(prometheus, "count(up{job='ibprobe_fabric_shard0'})")
    print(f"scrapes that failed, per switch: {failed}")
    check(len(failed) == switches and max(failed) <= 1,
          "no switch target failed more than the one scrape that found the exporter gone")
    check(targets and int(targets[0]["value"][1]) == switches,
          f"Prometheus still has all {switches} switch targets after the restart")
    stop(process)


def main(exporter):
    start = time.monotonic()
    topology = sf.fat_tree(SPINES, LEAVES, HCAS, PORTS, full_rate_every=7)
    intended = topology.netfile
    workdir = None
    with sf.Simulator(topology) as sim:
        workdir = sim.workdir
        sim.own_workdir = False  # the plan and the cache outlive this simulator
        sim.assign_lids()
        plan = os.path.join(workdir, "intended.topo")
        with open(plan, "w") as f:
            f.write(sim.run(["ibnetdiscover"]).stdout)
        sim.run(["ibnetdiscover", "--cache", os.path.join(workdir, "intended.cache")])
    print(f"intended fabric saved after {time.monotonic() - start:.1f} s")

    topology.netfile = differing(intended)
    with sf.Simulator(topology, workdir=workdir) as sim:
        sim.own_workdir = not os.environ.get("IBPROBE_FABRIC_KEEP")
        sim.assign_lids()
        diff = sim.run(["ibnetdiscover", "--diff", os.path.join(workdir, "intended.cache")]).stdout
        removed, added = parse_diff(diff)
        expected = expected_differences(removed, added)
        check(sorted(d[0] for d in expected) == ["missing", "miswired", "miswired", "unexpected"],
              f"ibnetdiscover --diff shows the two swapped, the missing and the extra cable:\n  "
              f"{show(expected)}")
        downgrades = expected_downgrades(open(plan).read(),
                                         sf.parse_iblinkinfo(sim.run(["iblinkinfo"]).stdout),
                                         set(removed) | set(added))
        check(len(downgrades) == 1, f"iblinkinfo shows one cable below the plan's rate: "
                                    f"{show(downgrades)}")
        expected |= downgrades

        exporter_process = sf.start_exporter(sim, exporter, "--fabric.enabled",
                                             "--fabric.discovery-interval-seconds=3600",
                                             f"--fabric.topology-file={plan}")
        base = exporter_process[1]
        sf.wait_for_model(base, SPINES + LEAVES)
        print(f"exporter's first model after {time.monotonic() - start:.1f} s")
        reported, counts = reported_differences(sf.parse_metrics(sf.http_get(base + "/metrics")[1]))
        check(reported == expected,
              f"the exporter reports exactly what ibnetdiscover --diff and iblinkinfo show:\n  "
              f"{show(reported)}")
        check(counts == {"ok": PLANNED - 4, "miswired": 2, "missing": 1, "downgraded": 1,
                         "unexpected": 1},
              f"every other planned cable is ok: {counts}")

        # A full-rate host cable (node-0077) unplugged at its switch port and plugged back: it
        # trains at 12x QDR again and must not read as downgraded.
        sim.console('Unlink "leaf-05"[1]')
        reported, counts = rediscovered_differences(base)
        new = reported - expected
        check(len(new) == 1 and next(iter(new))[0] == "missing" and reported >= expected,
              f"leaf-05 port 1 unplugged: its cable is missing as well: {show(new)}")
        sim.console('Link "leaf-05"[1] "node-0077"[1]')
        reported, counts = rediscovered_differences(base)
        check(reported == expected and counts["ok"] == PLANNED - 4,
              f"leaf-05 port 1 plugged back: no difference but the five ({counts}):\n  "
              f"{show(reported)}")

        # A plan with a bad line: the exporter does not start, and says where.
        broken = os.path.join(workdir, "broken.topo")
        with open(broken, "w") as f:
            f.write("leaf-01 1 node-0001 mlx5_0 1\nleaf-01 2 node-0002 mlx5_0\n")
        refused = subprocess.run(
            [exporter, "--web.listen-address=127.0.0.1:0", "--path.sysfs=/nonexistent",
             "--probe.responder-address=", "--fabric.enabled", f"--fabric.topology-file={broken}"],
            env=sim.env(), capture_output=True, text=True, timeout=60)
        check(refused.returncode != 0 and f"{broken}: line 2: want NODE PORT NODE PORT" in
              refused.stderr, f"a broken plan stops the exporter at start ({refused.returncode}): "
              f"{refused.stderr.strip()[-300:]}")

        # SIGHUP with the plan file broken: refused, the plan in use stays. Then the fabric as
        # it is now, saved by ibnetdiscover, as the plan: nothing differs.
        process, base = exporter_process
        with open(plan, "w") as f:
            f.write("Switch\t32 \"S-0000000000200004\"\n[1]\t\"H-0000000000100002\"\n")
        process.send_signal(signal.SIGHUP)
        log = os.path.join(workdir, f"exporter-{base.rsplit(':', 1)[1]}.log")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "topology reload refused" not in open(log).read():
            time.sleep(0.1)
        samples = sf.parse_metrics(sf.http_get(base + "/metrics")[1])
        reported, counts = reported_differences(samples)
        loaded = [v for n, _, v in samples if n == "ibprobe_fabric_topology_load_success"]
        check(f"{plan}: line 2: want [PORT]" in open(log).read() and loaded == [0]
              and reported == expected,
              f"a broken plan on SIGHUP is refused by line, the previous plan stays ({loaded})")
        with open(plan, "w") as f:
            f.write(sim.run(["ibnetdiscover"]).stdout)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            samples = sf.parse_metrics(sf.http_get(base + "/metrics")[1])
            if [v for n, _, v in samples if n == "ibprobe_fabric_topology_load_success"] == [1]:
                break
            time.sleep(0.1)
        reported, counts = reported_differences(samples)
        check(not reported and counts["ok"] == PLANNED,
              f"the fabric as it is, as the plan after SIGHUP: every cable ok ({counts})")

        # POST /-/reload reloads the plan as SIGHUP does.
        good_plan = open(plan).read()
        with open(plan, "w") as f:
            f.write("Switch\t32 \"S-0000000000200004\"\n[1]\t\"H-0000000000100002\"\n")
        status, body = sf.http_get(base + "/-/reload", method="POST")
        samples = sf.parse_metrics(sf.http_get(base + "/metrics")[1])
        reported, counts = reported_differences(samples)
        error = json.loads(body)["error"] if status == 400 else {}
        check(error.get("code") == "invalid_topology" and "line 2: want [PORT]" in error["message"]
              and not reported and counts["ok"] == PLANNED,
              f"POST /-/reload with a broken plan: {status} {body.strip()[:200]}; the plan in use "
              f"stays ({counts})")
        with open(plan, "w") as f:
            f.write(good_plan)
        status, body = sf.http_get(base + "/-/reload", method="POST")
        loaded = metric_values(base, "ibprobe_fabric_topology_load_success")
        check(status == 200 and loaded == [1],
              f"POST /-/reload with the plan mended: {status} {body.strip()}, loaded {loaded}")

        restart_keeps_state(sim, exporter, workdir)
        restart_under_prometheus(sim, exporter, workdir)
    print(f"done after {time.monotonic() - start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
