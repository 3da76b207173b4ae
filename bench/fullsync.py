"""``leaseq bench fullsync``: a replica's full sync from a primary holding
N live jobs (docs/replication.md, "The handshake and the sync"), and what
the primary's other clients see meanwhile.

A primary is loaded with N jobs (``QPUSHMANY`` of 1,000, pipelined; not
timed), then a replica is started empty.  The figure is the time from
starting the replica's process to its link being up (the snapshot sent,
loaded and the stream flowing) and to its ``QLEN`` equal to the
primary's.  Meanwhile two probe connections each send a command to the
primary every millisecond and time each reply: ``QPUSH`` to an fsync
queue (its reply waits for the log's fsync, which shares the disk with the
snapshot being written) and ``QLEN`` (a read: how long the loop took to
get to it).  The slowest and the p99 during the sync, beside those before
it, say whether the primary kept serving.  Nothing is asserted about
speed.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time

import redis

from .common import Daemon, percentile, print_table, publish

CHUNK, WINDOW = 1000, 8          # preload: jobs per QPUSHMANY, commands in flight
PAYLOAD = b"x" * 100
PROBE_EVERY_S = 0.001
DEFAULT_JOBS, QUICK_JOBS = 1_000_000, 50_000


class Probe(threading.Thread):
    """``command`` to the primary every millisecond; (when sent, seconds)
    each."""

    def __init__(self, primary: Daemon, *command) -> None:
        super().__init__(daemon=True, name="probe")
        self.client = primary.client(socket_timeout=30)
        self.command = command
        self.times: list[tuple[float, float]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(PROBE_EVERY_S):
            sent = time.monotonic()
            self.client.execute_command(*self.command)
            self.times.append((sent, time.monotonic() - sent))

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        self.client.close()

    def during(self, start: float, end: float) -> list[float]:
        return [took * 1000 for sent, took in self.times if start <= sent <= end]


def preload(c: redis.Redis, jobs: int) -> None:
    left = jobs
    while left:
        pipe = c.pipeline(transaction=False)
        for _ in range(WINDOW):
            n = min(CHUNK, left)
            if not n:
                break
            pipe.execute_command("QPUSHMANY", "jobs", n, *[PAYLOAD] * n)
            left -= n
        pipe.execute()


def measure(directory: str, jobs: int) -> dict:
    primary = Daemon(os.path.join(directory, "primary"), os.path.join(directory, "primary.log"))
    replica = Daemon(os.path.join(directory, "replica"), os.path.join(directory, "replica.log"))
    probe = reads = None
    try:
        primary.start(timeout=120)
        with primary.client() as c:
            preload(c, jobs)
            held = c.execute_command("QLEN", "jobs")
        probe, reads = Probe(primary, "QPUSH", "probe", "p"), Probe(primary, "QLEN", "jobs")
        probe.start()
        reads.start()
        time.sleep(0.2)                       # the probe's figures before the sync, for comparison
        replica.args = ["--replicaof", f"127.0.0.1 {primary.port}"]
        started = time.monotonic()
        replica.start(timeout=300)
        while replica.info("replication").get("master_link_status") != "up":
            if time.monotonic() - started > 300:
                raise RuntimeError(f"the replica's link did not come up:\n{replica.log()[-2000:]}")
            time.sleep(0.005)
        linked = time.monotonic()
        with replica.client() as r:
            while r.execute_command("QLEN", "jobs") != held:
                time.sleep(0.005)
        caught_up = time.monotonic()
        time.sleep(0.2)
        probe.stop()
        reads.stop()
        before, reads_before = probe.during(0, started), reads.during(0, started)
        during, reads_during = probe.during(started, caught_up), reads.during(started, caught_up)
        return {"jobs": held, "link_up_s": linked - started, "caught_up_s": caught_up - started,
                "probe_before_p99_ms": percentile(before, 99) if before else None,
                "probe_during_p99_ms": percentile(during, 99) if during else None,
                "probe_during_max_ms": max(during, default=None), "probes_during": len(during),
                "read_before_p99_ms": percentile(reads_before, 99) if reads_before else None,
                "read_during_p99_ms": percentile(reads_during, 99) if reads_during else None,
                "read_during_max_ms": max(reads_during, default=None),
                "primary_rss_mib": primary.rss() / 2**20, "replica_rss_mib": replica.rss() / 2**20}
    finally:
        for p in (probe, reads):
            if p is not None and p.is_alive():
                p.stop()
        replica.kill()
        primary.kill()


def run(jobs: int, json_path: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="leaseq-bench-fullsync-") as d:
        result = measure(d, jobs)
    return publish(result, _report, json_path)


def _report(r: dict) -> None:
    print_table(f"leaseq bench fullsync: a replica's full sync of {r['jobs']:,} live jobs, the primary probed "
                f"with a QPUSH and a QLEN every ms", [
                    ("replica started -> link up", r["link_up_s"], "s", ""),
                    ("replica started -> QLEN equal", r["caught_up_s"], "s", ""),
                    ("primary QPUSH (fsync) p99", r["probe_during_p99_ms"], "ms", r["probe_before_p99_ms"]),
                    ("primary QPUSH (fsync) slowest", r["probe_during_max_ms"], "ms", ""),
                    ("primary QLEN p99", r["read_during_p99_ms"], "ms", r["read_before_p99_ms"]),
                    ("primary QLEN slowest", r["read_during_max_ms"], "ms", ""),
                    ("probes", r["probes_during"], "", ""),
                    ("primary RSS", r["primary_rss_mib"], "MiB", ""),
                    ("replica RSS", r["replica_rss_mib"], "MiB", ""),
                ], baseline="before the sync")
