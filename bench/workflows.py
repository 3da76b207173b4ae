"""``leaseq bench workflows``: what dependencies and schedules cost.

One daemon (memory queues unless ``--durability`` says otherwise), three
measurements, each on a queue of its own:

* a **chain** of N jobs, each pushed with ``AFTER 1`` on the one before
  (pipelined), then worked one at a time (claim, ack) to the end: the push
  time, the work time, and the daemon's RSS growth while the chain waits;
* a **fan-in** of N parents and one child pushed with ``AFTER N`` on them
  all, then every parent claimed and acked in batches of 1,000: the child's
  push time, the time to work the parents, and that the child is ready at
  the end;
* a **schedule** with ``EVERY 1`` and ``MISFIRE all`` on a frozen DEBUG
  clock moved forward by 1,000 ms ten times: the time each move takes to
  fire 1,000 ticks.

RSS is read from /proc (the process's resident memory, which Python's
allocator rarely gives back: growth, not a count of live bytes).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from .common import Daemon, mib, print_table, publish, rss_of, progress


def run(jobs: int, durability: str, json_path: str | None, say=None) -> dict:
    say = say or progress
    work = tempfile.mkdtemp(prefix="leaseq-bench-workflows-")
    daemon = Daemon(os.path.join(work, "data"), os.path.join(work, "daemon.log"),
                    env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes", "LEASEQ_DEFAULT_DURABILITY": durability})
    try:
        daemon.start()
        c = daemon.client()
        result = {"settings": {"jobs": jobs, "durability": durability}}
        say(f"a chain of {jobs:,} jobs")
        result["chain"] = _chain(c, daemon, jobs)
        say(f"a fan-in of {jobs:,} parents")
        result["fan_in"] = _fan_in(c, daemon, jobs)
        say("a schedule firing 1,000 ticks per clock move")
        result["schedule"] = _schedule(c)
    finally:
        daemon.kill()
        shutil.rmtree(work, ignore_errors=True)
    return publish(result, report, json_path)


def _chain(c, daemon: Daemon, n: int) -> dict:
    before = rss_of(daemon.pid)
    t0 = time.perf_counter()
    pipe = c.pipeline(transaction=False)
    pipe.execute_command("QPUSH", "chain", "link")
    for i in range(2, n + 1):
        pipe.execute_command("QPUSH", "chain", "link", "AFTER", 1, "chain", i - 1)
        if i % 1000 == 0:
            pipe.execute()
    pipe.execute()
    pushed = time.perf_counter() - t0
    grown = rss_of(daemon.pid) - before
    t0 = time.perf_counter()
    for _ in range(n):
        job = c.execute_command("QCLAIM", "chain", "w", "LEASE", 60_000)[0]
        c.execute_command("QACK", "chain", job[5])
    worked = time.perf_counter() - t0
    left = c.execute_command("QLEN", "chain")
    return {"push_s": pushed, "work_s": worked, "rss_growth_bytes": grown, "left": left,
            "per_link_us": worked / n * 1e6}


def _fan_in(c, daemon: Daemon, n: int) -> dict:
    parents = []
    for start in range(0, n, 1000):
        k = min(1000, n - start)
        parents += c.execute_command("QPUSHMANY", "fan", k, *[b"p"] * k)
    before = rss_of(daemon.pid)
    args: list = []
    for pid in parents:
        args += ["fan", pid]
    t0 = time.perf_counter()
    child = c.execute_command("QPUSH", "fan-out", "sum", "AFTER", n, *args)
    pushed = time.perf_counter() - t0
    grown = rss_of(daemon.pid) - before
    t0 = time.perf_counter()
    while True:
        got = c.execute_command("QCLAIM", "fan", "w", "COUNT", 1000, "LEASE", 60_000)
        if not got:
            break
        c.execute_command("QACK", "fan", *[j[5] for j in got])
    worked = time.perf_counter() - t0
    state = dict(zip(*[iter(c.execute_command("QGET", "fan-out", child))] * 2))[b"state"]
    return {"push_s": pushed, "work_s": worked, "rss_growth_bytes": grown, "child_state": state.decode()}


def _schedule(c) -> dict:
    c.execute_command("DEBUG", "CLOCK", "FREEZE")
    c.execute_command("QSCHEDULE", "ticks", "s", "x", "EVERY", 1, "MISFIRE", "all")
    moves = []
    for _ in range(10):
        t0 = time.perf_counter()
        c.execute_command("DEBUG", "CLOCK", "ADVANCE", 1000)
        moves.append(time.perf_counter() - t0)
    fired = dict(zip(*[iter(c.execute_command("QSCHEDULES", "ticks")[0])] * 2))[b"fired"]
    return {"fired": fired, "per_move_ms": sorted(moves)[len(moves) // 2] * 1000}


def report(r: dict) -> None:
    s, ch, fan, sc = r["settings"], r["chain"], r["fan_in"], r["schedule"]
    print_table(f"leaseq bench workflows: {s['jobs']:,} jobs, {s['durability']} queues", [
        ("chain: push all, pipelined", ch["push_s"], "s", ""),
        ("chain: RSS growth while it waits", mib(ch["rss_growth_bytes"]), "MiB", ""),
        ("chain: claim + ack each link in turn", ch["work_s"], "s", ""),
        ("chain: per link (two round trips)", ch["per_link_us"], "µs", ""),
        ("chain: jobs left", ch["left"], "", ""),
        ("fan-in: push the child with AFTER N", fan["push_s"], "s", ""),
        ("fan-in: RSS growth for that push", mib(fan["rss_growth_bytes"]), "MiB", ""),
        ("fan-in: claim + ack the parents, 1,000 a call", fan["work_s"], "s", ""),
        ("fan-in: the child at the end", fan["child_state"], "", ""),
        ("schedule: jobs fired by 10 moves of 1,000 ms", sc["fired"], "", ""),
        ("schedule: one move firing 1,000 ticks (median)", sc["per_move_ms"], "ms", ""),
    ], baseline="")
