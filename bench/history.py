"""``leaseq bench history``: what the per-minute history costs.

Three figures, each from daemons this starts itself (processes, temporary
data directories, stopped by PID):

1. **CPU a job.**  One daemon; a producer sends single QPUSHes at
   ``--rate`` a second (pipelined in 10 ms slices) and a worker claims and
   acks them one command a job (pipelined too), for ``--seconds``.  The
   daemon's CPU time (every thread's, /proc's schedstat) over the jobs
   acked meanwhile is its CPU a job.  The same daemon runs with history on (``history-hours 72``) and off
   (``CONFIG SET history-hours 0``), alternating ``--rounds`` times (the
   daemon pinned to one core, the load on the others), so both share the
   machine's state; the cost is the median of the rounds' differences.
2. **Bytes a queue at 72 hours.**  A daemon with the DEBUG clock frozen is
   driven through ``--hours`` hours of minutes (``fill``: each minute each
   queue gets pushes, claims in two rounds, acks, a few nacks and leases
   left to expire, then the clock moves to the next minute), through the
   real commands; the history/ folder's bytes over the queues, and the
   memory its minutes take (64 bytes a minute: the two ``array`` columns).
   Beside it, the history's own time, measured in this process: one
   journal given a push, a claim and an ack record a job (real bodies, the
   clock moving at ``--rate``), without and with the history; the
   difference over the daemon's CPU a job with history off.  A shared
   machine's noise (rounds differ by several per cent) does not reach it.
3. **The page with charts.**  On that daemon (``--queues`` queues), the
   status page ``GET /?range=1h|24h|72h`` timed from the client over
   loopback (so the server's time and a little more), median and max.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request

from .common import Daemon, dir_bytes, free_port, pin_threads, print_table, publish, progress

MINUTE = 60_000
DEBUG = {"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}


# -- a synthetic history through the real commands ------------------------------------------------

def fill(c, queues: list[str], minutes: int, seed: int = 1, payload: bytes = b"x" * 64) -> int:
    """Drive a daemon whose DEBUG clock is frozen through ``minutes`` whole
    minutes of work on ``queues`` (redis-py client ``c``); returns the
    daemon clock at the end (a minute's start).  Each queue has its own
    level and a daily swing; per minute: a push, two claim rounds some
    hundreds of ms apart (taking at most 1.6 times the queue's level a
    minute: at the swing's peak a backlog grows), acks after a run time, a
    nack now and then, and a lease left to expire now and then."""
    rng = random.Random(seed)
    now = int(c.execute_command("DEBUG", "CLOCK")[1])
    start = now - now % MINUTE + MINUTE
    c.execute_command("DEBUG", "CLOCK", "ADVANCE", start - now)
    levels = {q: (rng.uniform(5, 60), rng.uniform(0, 6.3), rng.choice((40, 200, 900))) for q in queues}
    for q in queues:
        c.execute_command("QCREATE", q, "LEASE", 30_000)
    clock = start
    for m in range(minutes):
        day = 2 * math.pi * m / 1440
        pushes = {}
        pipe = c.pipeline(transaction=False)
        for q in queues:
            level, phase, _run = levels[q]
            n = max(0, int(level * (1.2 + math.sin(day + phase)) + rng.gauss(0, 2)))
            pushes[q] = n
            if n:
                pipe.execute_command("QPUSHMANY", q, n, *([payload] * n))
        wait1 = rng.randint(20, 400)
        pipe.execute_command("DEBUG", "CLOCK", "ADVANCE", wait1)
        pipe.execute()
        claimed: dict = {q: [] for q in queues}
        for round_ in range(2):
            # the first round takes half the new jobs; the second the rest and a few older (nacked, expired)
            wants = {q: pushes[q] // 2 if round_ == 0 else
                     max(0, min(pushes[q] - pushes[q] // 2 + 3, int(levels[q][0] * 1.6) - pushes[q] // 2))
                     for q in queues}
            asked = [q for q in queues if wants[q]]
            pipe = c.pipeline(transaction=False)
            for q in asked:
                pipe.execute_command("QCLAIM", q, "bench", "COUNT", wants[q])
            for q, jobs in zip(asked, pipe.execute()):
                claimed[q] += [j[b"lease"] if isinstance(j, dict) else _lease(j) for j in jobs or []]
            c.execute_command("DEBUG", "CLOCK", "ADVANCE", rng.randint(100, 3000))
        pipe = c.pipeline(transaction=False)
        for q in queues:
            tokens = claimed[q]
            if not tokens:
                continue
            nack = [t for t in tokens if rng.random() < 0.03]
            lost = [t for t in tokens if rng.random() < 0.01 and t not in nack]
            acks = [t for t in tokens if t not in nack and t not in lost]
            if acks:
                pipe.execute_command("QACK", q, *acks)
            if nack:
                pipe.execute_command("QNACK", q, *nack, "ERROR", "synthetic failure")
        run = max(levels[q][2] for q in queues)
        pipe.execute_command("DEBUG", "CLOCK", "ADVANCE", rng.randint(run // 2, run))
        pipe.execute()
        clock = start + (m + 1) * MINUTE
        now = int(c.execute_command("DEBUG", "CLOCK")[1])
        if now < clock:
            c.execute_command("DEBUG", "CLOCK", "ADVANCE", clock - now)
    return clock


def _lease(job) -> bytes:
    """The lease token of a job as RESP2 gives it (a flat list of pairs)."""
    pairs = dict(zip(job[::2], job[1::2]))
    return pairs[b"lease"]


# -- 1: CPU a job -----------------------------------------------------------------------------------

def cpu_ns(pid: int) -> int:
    """Nanoseconds on a CPU of every thread of ``pid`` (the first field of
    each /proc/<pid>/task/<tid>/schedstat): finer than /proc's stat ticks,
    which are 10 ms, 2 % of a 4 s round.  Threads that ended before the
    reading are not counted (the daemon's threads live as long as it)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def _load(c_push, c_work, queue: str, rate: int, seconds: float) -> int:
    """Single QPUSHes at ``rate`` a second and single claims and acks, for
    ``seconds``; returns the jobs acked."""
    halt = threading.Event()
    acked = [0]

    def work() -> None:
        while not halt.is_set() or acked[0] < pushed[0]:
            pipe = c_work.pipeline(transaction=False)
            for _ in range(50):
                pipe.execute_command("QCLAIM", queue, "w")
            got = [j for j in pipe.execute() if j]
            if not got:
                if halt.is_set():
                    return
                time.sleep(0.002)
                continue
            pipe = c_work.pipeline(transaction=False)
            for jobs in got:
                job = jobs[0]
                pipe.execute_command("QACK", queue, job[b"lease"] if isinstance(job, dict) else _lease(job))
            acked[0] += sum(pipe.execute())

    pushed = [0]
    worker = threading.Thread(target=work)
    worker.start()
    t0 = time.monotonic()
    slice_ = 0.01
    per = max(1, int(rate * slice_))
    k = 0
    try:
        while time.monotonic() - t0 < seconds:
            pipe = c_push.pipeline(transaction=False)
            for _ in range(per):
                pipe.execute_command("QPUSH", queue, b"j" * 32)
            pipe.execute()
            pushed[0] += per
            k += 1
            ahead = t0 + k * slice_ - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    finally:
        halt.set()
        worker.join(60)
    return acked[0]


def cpu_cost(rate: int, seconds: float, rounds: int, say) -> dict:
    work = tempfile.mkdtemp(prefix="leaseq-bench-history-cpu-")
    d = Daemon(os.path.join(work, "data"), os.path.join(work, "daemon.log"))
    runs: dict = {"on": [], "off": []}
    cpus = sorted(os.sched_getaffinity(0))
    try:
        d.start()
        if len(cpus) > 1:                     # the daemon on one core, this load on the others
            pin_threads(d.pid, {cpus[0]})
            os.sched_setaffinity(0, set(cpus[1:]))
        c_push, c_work, admin = d.client(), d.client(), d.client()
        admin.execute_command("QCREATE", "cpu")
        _load(c_push, c_work, "cpu", rate, 2.0)                 # warm up
        for r in range(rounds):
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                admin.execute_command("CONFIG", "SET", "history-hours", "72" if mode == "on" else "0")
                _load(c_push, c_work, "cpu", rate, 2.0)         # to settle (and pace the sampling)
                before = cpu_ns(d.pid)
                jobs = _load(c_push, c_work, "cpu", rate, seconds)
                spent = (cpu_ns(d.pid) - before) / 1e9
                runs[mode].append({"jobs": jobs, "cpu_s": spent, "us_per_job": 1e6 * spent / max(1, jobs)})
                say(f"round {r + 1} history {mode}: {jobs} jobs, {spent:.2f} s CPU, "
                    f"{runs[mode][-1]['us_per_job']:.1f} us a job")
    finally:
        os.sched_setaffinity(0, set(cpus))
        d.stop()
        shutil.rmtree(work, ignore_errors=True)
    on = [x["us_per_job"] for x in runs["on"]]
    off = [x["us_per_job"] for x in runs["off"]]
    pairs = [100 * (a - b) / b for a, b in zip(on, off)]
    return {"rate": rate, "seconds": seconds, "rounds": rounds, "runs": runs,
            "us_per_job_on": statistics.median(on), "us_per_job_off": statistics.median(off),
            "cost_pct": statistics.median(pairs), "pairs_pct": pairs}


def hook_cost(jobs: int, rate: int, say) -> dict:
    """The same journal in this process, without and with the history,
    given a push, a claim and an ack record for each of ``jobs`` jobs (real
    bodies, one job each, the clock moving ``1 / rate`` s a job and the
    history ticking every second): the history's own CPU a job, without the
    noise of a shared machine."""
    from leaseq.storage import records
    from leaseq.storage.config import QueueConfig
    from leaseq.storage.history import History
    from leaseq.storage.job import Job
    from leaseq.storage.journal import Journal
    from leaseq.storage.store import Store
    from leaseq.storage.wal import MemoryLog

    class Discard(MemoryLog):
        def _write(self, data: bytes) -> None:
            pass

    store = Store()
    t0 = 1_700_000_000_000
    q = store.create_queue(b"hook", QueueConfig(), t0)
    step_us = 1_000_000 // rate
    bodies = []
    for i in range(1, jobs + 1):
        ts = t0 + i * step_us // 1000
        job = Job(i, b"j" * 32, 5, ts, ts)
        q.jobs.extend([job])
        bodies.append((records.push(q.qid, ts, [job]), records.claim(q.qid, ts + 2, ts + 30_000, i, b"w", [i], [1]),
                       records.ack(q.qid, ts + 5, [i])))
    push, claim, ack = records.PUSH, records.CLAIM, records.ACK
    out = {}
    for mode in ("off", "on", "off", "on"):
        history = History(tempfile.mkdtemp(prefix="leaseq-bench-hook-")) if mode == "on" else None
        log = Discard()
        journal = Journal(log, False, history)
        record = journal.job_record
        if history is not None:
            history.tick(store, t0)
        started = time.process_time()
        for i, (p, c, a) in enumerate(bodies, 1):
            record(q, push, p)
            record(q, claim, c, lease=True)
            record(q, ack, a)
            if i % 1000 == 0:
                log.flush()
                if history is not None and i % rate == 0:
                    history.tick(store, t0 + i * step_us // 1000)
        spent = time.process_time() - started
        out.setdefault(mode, []).append(1e6 * spent / jobs)
        if history is not None:
            shutil.rmtree(history.directory, ignore_errors=True)
    result = {"jobs": jobs, "us_per_job_off": min(out["off"]), "us_per_job_on": min(out["on"])}
    result["us_per_job"] = result["us_per_job_on"] - result["us_per_job_off"]
    say(f"in process: the journal {result['us_per_job_off']:.2f} us a job without the history, "
        f"{result['us_per_job_on']:.2f} us with it")
    return result


# -- 2 and 3: bytes at 72 h, the page ----------------------------------------------------------------

def filled(hours: int, queues: int, say) -> dict:
    work = tempfile.mkdtemp(prefix="leaseq-bench-history-fill-")
    http = free_port()
    data = os.path.join(work, "data")
    d = Daemon(data, os.path.join(work, "daemon.log"), env={**DEBUG, "LEASEQ_HTTP_PORT": str(http)})
    out: dict = {"hours": hours, "queues": queues}
    try:
        d.start()
        c = d.client()
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        names = [f"queue-{i:02d}" for i in range(queues)]
        t0 = time.monotonic()
        fill(c, names, hours * 60)
        out["fill_seconds"] = time.monotonic() - t0
        kept = [len(c.execute_command("QHISTORY", q)) for q in names]
        out["minutes_kept_per_queue"] = statistics.median(kept)
        disk = dir_bytes(os.path.join(data, "history"))
        out["disk_bytes"] = disk
        out["disk_bytes_per_queue"] = disk / queues
        out["memory_bytes_per_queue"] = 64 * statistics.median(kept)
        say(f"{hours} h of minutes on {queues} queues in {out['fill_seconds']:.0f} s: "
            f"{disk / queues / 1024:.0f} KiB a queue on disk")
        for span in ("1h", "24h", "72h"):
            times, size = [], 0
            for _ in range(11):
                t = time.perf_counter()
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/?range={span}", timeout=30) as r:
                    size = len(r.read())
                times.append(1000 * (time.perf_counter() - t))
            out[f"page_{span}"] = {"p50_ms": statistics.median(times[1:]), "max_ms": max(times[1:]), "bytes": size}
            say(f"page ?range={span}: {out[f'page_{span}']['p50_ms']:.0f} ms median, {size} bytes")
    finally:
        d.stop()
        shutil.rmtree(work, ignore_errors=True)
    return out


def run(rate: int, seconds: float, rounds: int, hours: int, queues: int, json_path: str | None, say=None) -> dict:
    say = say or progress
    result = {"hook": hook_cost(200_000, rate, say), "cpu": cpu_cost(rate, seconds, rounds, say),
              "fill": filled(hours, queues, say)}
    return publish(result, report, json_path)


def report(result: dict) -> None:
    cpu, fill, hook = result["cpu"], result["fill"], result["hook"]
    print_table(f"history: daemon CPU a job at {cpu['rate']} single pushes/s (each claimed and acked singly), "
                f"{cpu['rounds']} rounds of {cpu['seconds']:.0f} s each way, the daemon pinned to one core", [
                    ("history off (history-hours 0)", cpu["us_per_job_off"], "us", ""),
                    ("history on (history-hours 72)", cpu["us_per_job_on"], "us", ""),
                    ("cost of history: median of the rounds' differences", cpu["cost_pct"], "%", ""),
                    ("  the rounds' differences, lowest", min(cpu["pairs_pct"]), "%", ""),
                    ("  the rounds' differences, highest", max(cpu["pairs_pct"]), "%", ""),
                    ("the history's own CPU a job, in process (a push, a claim, an ack record)",
                     hook["us_per_job"], "us", ""),
                    ("  that over the daemon's CPU a job with history off", 100 * hook["us_per_job"] /
                     cpu["us_per_job_off"], "%", ""),
                ], baseline="")
    rows = [(f"disk a queue ({fill['hours']} h of minutes, {fill['queues']} queues)",
             fill["disk_bytes_per_queue"] / 1024, "KiB", ""),
            ("memory a queue (64 B a kept minute)", fill["memory_bytes_per_queue"] / 1024, "KiB", ""),
            ("minutes kept a queue", fill["minutes_kept_per_queue"], "", "")]
    for span in ("1h", "24h", "72h"):
        p = fill[f"page_{span}"]
        rows.append((f"status page ?range={span}, median", p["p50_ms"], "ms", ""))
        rows.append((f"status page ?range={span}, max of 10", p["max_ms"], "ms", ""))
        rows.append((f"status page ?range={span}, size", p["bytes"] / 1024, "KiB", ""))
    print_table(f"history: bytes and the page with charts of {fill['queues']} queues "
                f"(filled in {fill['fill_seconds']:.0f} s)", rows, baseline="")
