#!/usr/bin/env python3
"""The mesh's peers from the fabric model on a simulated fat tree (2 spines, 3 leaves of 4, 3 and
3 HCAs, ibsim): `--mesh.plan` with `peers_fabric` in --config.file discovers the fabric, and
  - the ToR it gives each host is the leaf switch ibnetdiscover shows its cable at (by the
    leaf's node description), every host there under the name its node description starts with;
  - every host's plan pings the hosts under the same leaf as same_tor, all of them, and no
    other host as same_tor;
  - a local CA that does not exist is a clear error (exit status 2), not an empty plan.

Usage: mesh_fabric_peers_test.py EXPORTER"""

import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfabric as sf  # noqa: E402
from simfabric import check, failures  # noqa: E402

SPINES, LEAVES, HCAS, PORTS = 2, 3, 10, 8
EXPORTER_PORT = 9100


def leaf_of_each_host(ibnetdiscover_output):
    """{host: leaf description} from ibnetdiscover: the switch each CA's cable ends at, the host
    being the first word of the CA's node description."""
    links, descriptions = sf.parse_ibnetdiscover(ibnetdiscover_output)
    switches = {guid for guid, _ in links}
    leaves = {}
    for (switch, _), (far, _) in links.items():
        if far not in switches:
            leaves[descriptions[far].split()[0]] = descriptions[switch]
    return leaves


def write_config(sim, name, fabric):
    path = os.path.join(sim.workdir, name)
    with open(path, "w") as f:
        f.write("modules:\n  lat:\n    kind: write_lat\nmesh:\n  peers_fabric:\n")
        for key, value in fabric.items():
            f.write(f"    {key}: {value}\n")
    return path


def main():
    exporter = sys.argv[1]
    topology = sf.fat_tree(SPINES, LEAVES, HCAS, PORTS)
    with sf.Simulator(topology) as sim:
        sim.assign_lids()
        reference = leaf_of_each_host(sim.run(["ibnetdiscover"]).stdout)
        check(len(reference) == HCAS and len(set(reference.values())) == LEAVES,
              f"ibnetdiscover shows {len(reference)} hosts under {len(set(reference.values()))} "
              f"leaves, the topology has {HCAS} under {LEAVES}")

        config = write_config(sim, "mesh.yml", {"exporter_port": EXPORTER_PORT})
        result = sim.run([exporter, "--mesh.plan", f"--config.file={config}", "--mesh.self=*"],
                         check=False)
        check(result.returncode == 0, f"--mesh.plan exited {result.returncode}: {result.stderr}")
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        tor_of = {}
        for line in lines:
            tor_of[line["peer"]] = line["peer_tor"]
        expected = {f"{host}:{EXPORTER_PORT}": leaf for host, leaf in reference.items()}
        check(tor_of == expected,
              f"the ToRs of the peer list differ from ibnetdiscover's leaves: "
              f"{sorted(set(tor_of.items()) ^ set(expected.items()))}")
        selves = {line["self"] for line in lines}
        check(selves == set(expected), f"plans printed for {sorted(selves)}, not every host")

        same_tor = collections.defaultdict(set)
        for line in lines:
            same_leaf = expected.get(line["self"]) == expected.get(line["peer"])
            if line["reason"] == "same_tor":
                same_tor[line["self"]].add(line["peer"])
                check(same_leaf, f"{line['self']} pings {line['peer']} as same_tor, "
                                 f"under another leaf")
            else:
                check(not same_leaf, f"{line['self']} pings {line['peer']} as {line['reason']}, "
                                     f"under the same leaf")
        for host, leaf in expected.items():
            neighbours = {h for h, l in expected.items() if l == leaf and h != host}
            check(same_tor[host] == neighbours,
                  f"{host} pings {sorted(same_tor[host])} as same_tor, its leaf holds "
                  f"{sorted(neighbours)}")
        print(f"{len(expected)} hosts under {len(set(expected.values()))} leaves as ibnetdiscover "
              f"shows them; {len(lines)} planned pings, "
              f"{sum(len(p) for p in same_tor.values())} of them same_tor", flush=True)

        config = write_config(sim, "bad-ca.yml", {"ca": "no_such_ca"})
        result = sim.run([exporter, "--mesh.plan", f"--config.file={config}", "--mesh.self=*"],
                         check=False)
        check(result.returncode == 2 and "no_such_ca" in result.stderr and not result.stdout,
              f"a missing CA: exit {result.returncode}, stderr {result.stderr!r}, "
              f"stdout {result.stdout[:200]!r}")
        print(f"a missing CA: exit {result.returncode}: {result.stderr.strip()}", flush=True)

    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
