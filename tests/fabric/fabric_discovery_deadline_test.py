#!/usr/bin/env python3
"""The exporter kills a discovery that overruns --fabric.discovery-deadline-seconds: on a
simulated fat tree whose simulator pauses (its console's Wait), a discovery with a 3 s MAD
timeout cannot finish within the 1 s deadline; POST /fabric/discover fails after about that
second, the last good model is still served, discovery_success is 0, the log names the reason
and no discovery process is left behind. All checked during the pause: when it ends, ibsim
exits on the killed child's attach request it had queued (it cannot answer a dead client), so
the recovery of a later discovery is left to fabric_counters_test.py.

Usage: fabric_discovery_deadline_test.py EXPORTER"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfabric as sf  # noqa: E402
from simfabric import check, failures  # noqa: E402

SPINES, LEAVES, HCAS, PORTS = 2, 4, 16, 12
DEADLINE_SECONDS = 1
PAUSE_SECONDS = 6


def metric(base, name):
    _, body = sf.http_get(base + "/metrics")
    values = [v for n, _, v in sf.parse_metrics(body) if n == name]
    return values[0] if len(values) == 1 else None


def children_of(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return f.read().split()


def main():
    exporter = sys.argv[1]
    topology = sf.fat_tree(SPINES, LEAVES, HCAS, PORTS)
    with sf.Simulator(topology) as sim:
        sim.assign_lids()
        process, base = sf.start_exporter(
            sim, exporter, "--fabric.enabled", "--fabric.timeout-ms=3000", "--fabric.retries=0",
            f"--fabric.discovery-deadline-seconds={DEADLINE_SECONDS}")
        sf.wait_for_model(base, SPINES + LEAVES)

        # Not console(): it would wait for the pause to end.
        sim.process.stdin.write(f"Wait {PAUSE_SECONDS}\n")
        sim.process.stdin.flush()
        start = time.monotonic()
        status, _ = sf.http_get(base + "/fabric/discover", method="POST", timeout=60)
        took = time.monotonic() - start
        check(status == 500, f"overrunning discovery fails ({status})")
        check(DEADLINE_SECONDS <= took < DEADLINE_SECONDS + 1.5,
              f"and is stopped at the {DEADLINE_SECONDS} s deadline, not the 3 s MAD timeout "
              f"({took:.2f} s)")
        check(metric(base, "ibprobe_fabric_discovery_success") == 0, "discovery_success 0")
        _, body = sf.http_get(base + "/fabric/sd")
        check(len(json.loads(body)) == SPINES + LEAVES, "the last good model is still served")
        check(children_of(process.pid) == [], "no discovery process left behind")
        log = os.path.join(sim.workdir, [n for n in os.listdir(sim.workdir)
                                         if n.startswith("exporter-")][0])
        with open(log) as f:
            reason = [line for line in f if "fabric discovery failed" in line]
        check(any(f"did not finish within {DEADLINE_SECONDS * 1000} ms and was killed" in line
                  for line in reason), f"the log names the reason: {reason[-1:]}")
        check(time.monotonic() - start < PAUSE_SECONDS, "all checked during the pause")
        # Against the paused, then exited, simulator the exporter's umad port does not close
        # (a SIGTERM went unanswered for 20 s): killed rather than waited for.
        process.kill()
        process.wait()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
