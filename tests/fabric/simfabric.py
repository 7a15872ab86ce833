"""A simulated InfiniBand fabric for tests: fat-tree topologies in ibsim's net-file format, and
ibsim itself with its console on a pipe, LIDs assigned once by opensm, and any libibumad program
(the exporter, infiniband-diags) run against it through ibsim-run's libumad2sim.so preload."""

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field

# ibsim's compiled-in limits (ibsim -h); larger fabrics raise them with -S, -N and -P.
IBSIM_SWITCHES, IBSIM_NODES, IBSIM_PORTS = 256, 2048, 13312


@dataclass
class Switch:
    name: str  # ibsim node id: what console commands name
    description: str  # NodeDescription as a real switch reports it
    ports: int
    links: dict = field(default_factory=dict)  # port -> (far node name, far port)


@dataclass
class Topology:
    switches: list
    hcas: list  # (name, description, leaf name, leaf port)
    netfile: str
    full_rate: set = field(default_factory=set)  # (switch name, port) of full-rate cables

    def switch(self, name):
        return next(s for s in self.switches if s.name == name)

    @property
    def port_count(self):  # what ibsim allocates: switch port 0 too, and every HCA port
        return sum(s.ports + 1 for s in self.switches) + 2 * len(self.hcas)


# ibsim's port options for a cable at the best both ends support: 12x enabled, QDR enabled.
FULL_RATE = "w=8 s=4"


# sminfo's answer line, and SMInfo's SMState values as the exporter's state label names them.
SMINFO = re.compile(r"sm lid (\d+) sm guid 0x([0-9a-f]+), activity count (\d+) priority (\d+) "
                    r"state (\d+)")
SM_STATES = {0: "not_active", 1: "discovering", 2: "standby", 3: "master"}

# Every check of a test run is reported, and the run fails at its end if any did.
failures = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message, flush=True)
    if not condition:
        failures.append(message)
    return condition


def fat_tree(spines, leaves, hcas, ports_per_switch, full_rate_every=0):
    """Two-level fat tree: every leaf has one uplink to every spine (leaf ports after its hosts,
    spine port N to leaf N) and the HCAs spread evenly over the leaves. The first HCA comes first
    in the file: ibsim attaches opensm and, by default, every client there. Every
    `full_rate_every`-th HCA's cable runs at the best both ends support (12x QDR); the others
    train at ibsim's default 4x SDR, below what the simulated ports support."""
    per_leaf = [hcas // leaves + (1 if i < hcas % leaves else 0) for i in range(leaves)]
    if max(per_leaf) + spines > ports_per_switch or leaves > ports_per_switch:
        raise ValueError(
            f"{ports_per_switch} ports per switch cannot hold {max(per_leaf)} hosts and "
            f"{spines} uplinks per leaf, or {leaves} leaves per spine")
    spine_sw = [Switch(f"spine-{s + 1:02d}", f"MF0;spine-{s + 1:02d}:MQM8700/U1", ports_per_switch)
                for s in range(spines)]
    leaf_sw = [Switch(f"leaf-{l + 1:02d}", f"MF0;leaf-{l + 1:02d}:MQM8700/U1", ports_per_switch)
               for l in range(leaves)]
    hca_list = []
    full_rate = set()  # (switch name, port) of cables at full rate
    number = 1
    for l, leaf in enumerate(leaf_sw):
        for p in range(1, per_leaf[l] + 1):
            name = f"node-{number:04d}"
            hca_list.append((name, f"{name} mlx5_0", leaf.name, p))
            leaf.links[p] = (name, 1)
            if full_rate_every and number % full_rate_every == 0:
                full_rate.add((leaf.name, p))
            number += 1
        for s, spine in enumerate(spine_sw):
            up = per_leaf[l] + 1 + s
            leaf.links[up] = (spine.name, l + 1)
            spine.links[l + 1] = (leaf.name, up)
    lines = ["# fat tree: %d spines, %d leaves, %d HCAs, %d ports per switch"
             % (spines, leaves, hcas, ports_per_switch), ""]
    def options(switch, port):
        return "\t" + FULL_RATE if (switch, port) in full_rate else ""

    for name, description, leaf, port in hca_list:
        lines += [f'Hca\t1 "{name}"\t# "{description}"',
                  f'[1]\t"{leaf}"[{port}]{options(leaf, port)}', ""]
    for sw in spine_sw + leaf_sw:
        lines.append(f'Switch\t{sw.ports} "{sw.name}"\t# "{sw.description}"')
        lines += [f'[{p}]\t"{far}"[{fp}]{options(sw.name, p)}'
                  for p, (far, fp) in sorted(sw.links.items())]
        lines.append("")
    return Topology(spine_sw + leaf_sw, hca_list, "\n".join(lines), full_rate)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=30, headers=None, method="GET"):
    """(status, body) of one request; HTTP errors are answers too."""
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def parse_metrics(text):
    """[(name, {label: value}, value)] of a Prometheus text page."""
    samples = []
    pattern = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
    label = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = pattern.match(line)
        if not m:
            raise ValueError(f"not a sample line: {line!r}")
        labels = dict(label.findall(m.group(2) or ""))
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def guid_label(guid):
    """A GUID as the exporter labels it (sysfs's node_guid form)."""
    h = f"{guid:016x}"
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


class Simulator:
    """ibsim on a topology, console on a pipe. Use as a context manager."""

    def __init__(self, topology, workdir=None):
        self.topology = topology
        self.own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="ibprobe-fabric.")
        self.netfile = os.path.join(self.workdir, "net")
        with open(self.netfile, "w") as f:
            f.write(topology.netfile)
        # A socket name of our own: several simulators may run on one machine.
        self.sockname = f"ibsim-{os.getpid()}-{id(self) & 0xffff:x}"
        self.process = None
        self.lines = queue.Queue()
        self.log = []
        self.children = []

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        t = self.topology
        args = ["ibsim", "-s"]
        # Raise ibsim's limits only where the topology needs it.
        if len(t.switches) > IBSIM_SWITCHES:
            args += ["-S", str(len(t.switches) + 8)]
        if len(t.switches) + len(t.hcas) > IBSIM_NODES:
            args += ["-N", str(len(t.switches) + len(t.hcas) + 8)]
        if t.port_count > IBSIM_PORTS:
            args += ["-P", str(t.port_count + 64)]
        self.process = subprocess.Popen(
            args + [self.netfile], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1, env=self.env(preload=False))
        threading.Thread(target=self._read, daemon=True).start()
        self._wait_for(lambda line: "Network simulator ready" in line, 120, "ibsim start")

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def _wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if line is None:
                raise RuntimeError(f"ibsim exited during {what}: " + "\n".join(self.log[-20:]))
            self.log.append(line)
            seen.append(line)
            if predicate(line):
                return seen
        raise RuntimeError(f"ibsim: no end of {what} within {timeout} s: " + "\n".join(seen[-20:]))

    def console(self, *commands, timeout=60):
        """Runs console commands and returns what ibsim printed for them. A `Verbose` query after
        them marks the end: ibsim answers it with one line, after the commands before it."""
        self.process.stdin.write("\n".join(commands) + "\nVerbose\n")
        self.process.stdin.flush()
        return self._wait_for(lambda line: "simulator verbose level is" in line, timeout,
                              commands[0] if commands else "")

    def env(self, preload=True, host=None):
        env = dict(os.environ, IBSIM_SOCKNAME=self.sockname)
        if preload:
            env["LD_PRELOAD"] = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
        if host:
            env["SIM_HOST"] = host
        return env

    def run(self, args, timeout=300, host=None, check=True):
        """A libibumad program (infiniband-diags, opensm) against the simulated fabric."""
        result = subprocess.run(args, env=self.env(host=host), capture_output=True, text=True,
                                timeout=timeout, cwd=self.workdir)
        if check and result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({result.returncode}): {result.stderr[-2000:]}")
        return result

    def assign_lids(self):
        """opensm once: LIDs and routes, then it exits (no SM runs afterwards)."""
        log = os.path.join(self.workdir, "opensm.log")
        return self.run(["opensm", "-o", "-f", log], timeout=600)

    def start_sm(self, priority, host=None, timeout=60):
        """opensm kept running at `priority` on `host` (the first node by default); returns its
        process once `sminfo` from that host sees it as master or standby."""
        name = f"opensm-{host or 'default'}"
        process = self.spawn(["opensm", "-p", str(priority), "-f",
                              os.path.join(self.workdir, name + ".log")], name + ".out", host=host)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lid = None if host is None else self.port_lid(host)
            answer = self.sminfo(*([lid] if lid else []))
            if answer and answer[4] in ("master", "standby") and answer[3] == str(priority):
                return process
            time.sleep(0.2)
        raise RuntimeError(f"opensm -p {priority} on {host}: not master or standby in {timeout} s")

    def port_lid(self, host):
        """The LID of `host`'s port as ibstat shows it there, or None before one is assigned."""
        lid = re.findall(r"Base lid: (\d+)", self.run(["ibstat"], host=host).stdout)
        return lid[0] if lid and lid[0] != "0" else None

    def sminfo(self, *args):
        """(lid, guid label, activity count, priority, state name) as infiniband-diags' `sminfo`
        prints them (from the first node; ARGS as sminfo takes them), or None without an answer."""
        result = self.run(["sminfo", *args], check=False, timeout=30)
        m = SMINFO.search(result.stdout)
        if result.returncode != 0 or not m:
            return None
        lid, guid, count, priority, state = m.groups()
        return (lid, guid_label(int(guid, 16)), int(count), priority, SM_STATES[int(state)])

    def spawn(self, args, log_name, host=None):
        """A long-running program against the fabric (the exporter), stopped with the fabric."""
        log = open(os.path.join(self.workdir, log_name), "w")
        process = subprocess.Popen(args, env=self.env(host=host), stdout=log,
                                   stderr=subprocess.STDOUT, cwd=self.workdir)
        self.children.append(process)
        return process

    def stop(self):
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in self.children:
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if self.process and self.process.poll() is None:
            self.process.stdin.close()
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.own_workdir and not os.environ.get("IBPROBE_FABRIC_KEEP"):
            shutil.rmtree(self.workdir, ignore_errors=True)


def start_exporter(sim, exporter, *flags, host=None, port=None):
    """The exporter against the simulated fabric, serving on `port` (default: a free loopback
    port); returns (process, base URL) once it answers /-/ready."""
    port = port or free_port()
    args = [exporter, f"--web.listen-address=127.0.0.1:{port}", "--path.sysfs=/nonexistent",
            "--probe.responder-address=", "--no-collector.port_counters",
            "--no-collector.hw_counters", "--no-collector.port_info", "--no-collector.gids",
            *flags]
    process = sim.spawn(args, f"exporter-{port}.log", host=host)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            with open(os.path.join(sim.workdir, f"exporter-{port}.log")) as f:
                raise RuntimeError("exporter exited: " + f.read()[-3000:])
        try:
            if http_get(base + "/-/ready", timeout=2)[0] == 200:
                return process, base
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("exporter not ready within 60 s")


def wait_for_model(base, switches, timeout=120):
    """The exporter's /fabric/sd once its first discovery listed `switches` switches."""
    import json
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = http_get(base + "/fabric/sd")
        if status == 200 and len(json.loads(body)) >= switches:
            return json.loads(body)
        time.sleep(0.1)
    raise RuntimeError(f"no model of {switches} switches within {timeout} s")


def switch_port_lines(text, header, port_line, switch_of):
    """(switch GUID, match) for each line of `text` that matches `port_line` and follows the header
    of a switch: a line matching `header`, of which `switch_of` gives the GUID (None for a node
    that is no switch)."""
    current = None
    for line in text.splitlines():
        m = header.match(line)
        if m:
            current = switch_of(m)
            continue
        m = port_line.match(line)
        if m and current is not None:
            yield current, m


def parse_iblinkinfo(text):
    """{(switch GUID, port): (width lanes, lane Gb/s, could be wider, could be faster)} of the
    cabled switch ports in iblinkinfo's output."""
    ports = {}
    header = re.compile(r"^Switch: 0x([0-9a-f]+) |^CA:")
    port_line = re.compile(r"^\s+\d+\s+(\d+)\[\s*\]\s+==\(\s*(\d+)X\s+([\d.]+) Gbps.*\((.*)\)$")

    def switch_of(m):
        return int(m.group(1), 16) if m.group(1) else None

    for switch, m in switch_port_lines(text, header, port_line, switch_of):
        could = m.group(4)
        ports[(switch, int(m.group(1)))] = (int(m.group(2)), float(m.group(3)),
                                            bool(re.search(r"Could be \d+X", could)),
                                            "Gbps" in could)
    return ports


def parse_ibnetdiscover(text):
    """From ibnetdiscover's topology output: {(switch GUID, port): (far node GUID, far port)} and
    {node GUID: node description}."""
    links, descriptions = {}, {}
    header = re.compile(r'^(Switch|Ca|Rt)\s+\d+\s+"[SHR]-([0-9a-f]+)"\s+# "([^"]*)"')
    port_line = re.compile(r'^\[(\d+)\]\s+"[SHR]-([0-9a-f]+)"\[(\d+)\]')

    def switch_of(m):
        guid = int(m.group(2), 16)
        descriptions[guid] = m.group(3)
        return guid if m.group(1) == "Switch" else None

    for switch, m in switch_port_lines(text, header, port_line, switch_of):
        links[(switch, int(m.group(1)))] = (int(m.group(2), 16), int(m.group(3)))
    return links, descriptions


def switch_lids(sim):
    """{switch GUID: LID} as ibswitches prints them."""
    out = sim.run(["ibswitches"]).stdout
    return {int(m.group(1), 16): int(m.group(2))
            for m in re.finditer(r"^Switch\s+:\s+0x([0-9a-f]+).*\blid (\d+)", out, re.M)}
