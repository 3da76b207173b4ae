"""The load a profile-guided build learns from (bin/build-from-profile).

bin/setup builds the compiled modules twice when it can: first built to
count which branches and calls a load takes, then built again from those
counts, so that GCC lays out the paths a job takes together and moves the
rest out of the way (docs/performance.md, "Built from a profile").  This
is that load: every workload of ``leaseq bench queue``, in both durability
classes, once and short, against fresh daemons it starts and stops with
SIGTERM (a daemon writes its counts when it exits).  No redis-server, no
report: what matters is which code runs, not how fast.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time

from . import queue

JOBS = 10_000       # jobs in W1 and W2 (as --quick)
SECONDS = 1.5       # each W3 run
RATE = 5_000        # W3's fixed rate: one job a request, as the bars of docs/performance.md measure


def train(jobs: int = JOBS, seconds: float = SECONDS, workloads: tuple = queue.WORKLOADS,
          classes: tuple = ("fsync", "memory")) -> int:
    """Run the load; the number of runs (one a workload and class)."""
    s = queue.Settings(jobs, seconds, RATE, 1, workloads, classes, None)
    work = tempfile.mkdtemp(prefix="leaseq-training-")
    server = queue.LeaseqServer(work, None)
    try:
        runs = queue.run_interleaved([server], s, say=lambda _msg: None)
    finally:
        server.kill()               # (each run's daemon was stopped with SIGTERM: only a failed one is left)
        shutil.rmtree(work, ignore_errors=True)
    return len(runs)


if __name__ == "__main__":
    t0 = time.monotonic()
    n = train()
    print(f"leaseq: training load done, {n} runs in {time.monotonic() - t0:.1f} s", file=sys.stderr)
