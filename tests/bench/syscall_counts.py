"""The system calls a running process makes while some work runs, as `strace -c -f` counts them:
the benchmarks' figures that do not drift between machines, printed beside their times."""
import re
import signal
import subprocess
import time


def syscalls_during(pid, summary, work):
    """{system call: calls} of process `pid` (every thread) while work() runs; strace's summary
    table stays at `summary`."""
    tracer = subprocess.Popen(["strace", "-c", "-f", "-o", summary, "-p", str(pid)],
                              stderr=subprocess.DEVNULL)
    time.sleep(1)  # attached to every thread
    work()
    tracer.send_signal(signal.SIGINT)
    tracer.wait()
    calls = {}
    for line in open(summary):
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
        if m and m.group(2) != "total":
            calls[m.group(2)] = int(m.group(1))
    return calls
