#!/usr/bin/env python3
"""Discovery leaks nothing into the exporter: on a simulated fat tree, the heap in use after 80
discoveries through the exporter's way (each in a child process) grows by less than what one
discovery with libibnetdisc in the same process leaks, while 6 such in-process discoveries grow
it by at least a 64-byte LID-map entry per switch port each (rdma-core 44's leak), which shows
the measurement sees that leak.

Usage: fabric_leak_test.py LEAK_CHECK EXPORTER"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfabric as sf  # noqa: E402

CHILD_DISCOVERIES = 80
IN_PROCESS_DISCOVERIES = 6  # ibsim's preload lets one process open its umad port ~15 times
LEAK_ENTRY_BYTES = 64


def main():
    check, exporter = sys.argv[1], sys.argv[2]
    topology = sf.fat_tree(2, 4, 16, 12)
    with sf.Simulator(topology) as sim:
        sim.assign_lids()
        result = sim.run([check, exporter, str(CHILD_DISCOVERIES), str(IN_PROCESS_DISCOVERIES)], timeout=240)
    figures = json.loads(result.stdout)
    print(json.dumps(figures))
    leak_per_discovery = figures["switch_ports"] * LEAK_ENTRY_BYTES
    failures = []
    if figures["in_process_growth_bytes"] < IN_PROCESS_DISCOVERIES * leak_per_discovery:
        failures.append(f"in-process discovery grew the heap by only "
                        f"{figures['in_process_growth_bytes']} bytes: the measurement does not "
                        f"see the leak it is meant to rule out")
    # Over all of them, less than what one in-process discovery leaks.
    if figures["child_growth_bytes"] >= leak_per_discovery:
        failures.append(f"{CHILD_DISCOVERIES} discoveries through the exporter grew its heap by "
                        f"{figures['child_growth_bytes']} bytes")
    for failure in failures:
        print("FAIL:", failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
