"""``leaseq bench claims``: what a Python consumer spends, in CPU, on each
job it claims: QCLAIM's maps, QCLAIM ... COMPACT, and Redis's XREADGROUP,
under one load.

The load is W2 of ``leaseq bench queue``: N jobs of 128 bytes preloaded
(DURABILITY memory against redis-server without persistence), then 8
connections, each a process of its own, loop claim 100 → ack them until
the queue is empty.  The consumers are written as an application would
write them, with redis-py (the protocol it speaks by default), reading
each job's lease token (the entry id for Redis) and payload:

- ``maps``: ``QCLAIM q c COUNT 100``, each job's map read by name (a dict:
  RESP3 gives one, a RESP2 flat list is zipped into one);
- ``compact``: ``QCLAIM q c COUNT 100 COMPACT``, each job read by position;
- ``client``: ``leaseq.client.Queue.claim`` (compact, into ``Job``s), as
  the Worker claims;
- ``xreadgroup``: ``XREADGROUP GROUP g c COUNT 100 STREAMS key >`` as
  redis-py parses it;

and acked with one QACK of the 100 tokens (XACK + XDEL in one pipeline for
Redis).  The consumers' CPU is their own ``time.process_time`` over the
loop, all on one CPU and the server on another when there are two; the
figure is the sum over the 8 consumers divided by the jobs claimed.
Reps are interleaved and the table shows medians.  Nothing is asserted.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import statistics
import tempfile
import time

import redis
from leaseq.client import Queue

from .common import print_grid, publish
from .queue import (
    PRELOAD_CHUNK,
    LeaseqServer,
    RedisServer,
    payload,
    placement,
    redis_version,
)

CONNS = 8
BATCH = 100
FORMS = ("maps", "compact", "client", "xreadgroup")
GROUP = "bench"
RUN_LIMIT_S = 600


def _tokens_of_maps(reply: list) -> list[tuple[bytes, bytes]]:
    out = []
    for job in reply:
        fields = job if isinstance(job, dict) else dict(zip(job[::2], job[1::2]))
        out.append((fields[b"lease"], fields[b"payload"]))
    return out


def _consume(form: str, port: int, key: str, consumer: str, cpus, results) -> None:
    """One consumer process: claim 100, ack them, until nothing comes."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    r = redis.Redis(port=port)
    queue = Queue.from_client(r, key)
    jobs = 0
    t0 = time.process_time()
    while True:
        if form == "xreadgroup":
            reply = r.xreadgroup(GROUP, consumer, {key: ">"}, count=BATCH)
            entries = [(entry_id, fields[b"d"]) for _stream, batch in reply or () for entry_id, fields in batch]
            if not entries:
                break
            ids = [entry_id for entry_id, _ in entries]
            pipe = r.pipeline(transaction=False)
            pipe.xack(key, GROUP, *ids)
            pipe.xdel(key, *ids)
            pipe.execute()
        elif form == "client":
            claimed = queue.claim(consumer, count=BATCH)
            if not claimed:
                break
            entries = [(job.lease, job.payload) for job in claimed]
            r.execute_command("QACK", key, *(token for token, _ in entries))
        else:
            command = ["QCLAIM", key, consumer, "COUNT", BATCH] + (["COMPACT"] if form == "compact" else [])
            reply = r.execute_command(*command)
            entries = ([(job[2], job[1]) for job in reply] if form == "compact" else _tokens_of_maps(reply))
            if not entries:
                break
            r.execute_command("QACK", key, *(token for token, _ in entries))
        jobs += len(entries)
    results.put((time.process_time() - t0, jobs))
    r.close()


def _preload(port: int, form: str, key: str, jobs: int) -> None:
    r = redis.Redis(port=port)
    if form == "xreadgroup":
        r.xgroup_create(key, GROUP, id="$", mkstream=True)
        for start in range(0, jobs, PRELOAD_CHUNK):
            pipe = r.pipeline(transaction=False)
            for _ in range(min(PRELOAD_CHUNK, jobs - start)):
                pipe.xadd(key, {"d": payload()})
            pipe.execute()
    else:
        r.execute_command("QCREATE", key, "DURABILITY", "memory")
        for start in range(0, jobs, PRELOAD_CHUNK):
            n = min(PRELOAD_CHUNK, jobs - start)
            r.execute_command("QPUSHMANY", key, n, *[payload()] * n)
    r.close()


def one_run(form: str, jobs: int, work: str, redis_binary: str) -> dict:
    server_cpus, load_cpus = placement()
    server = RedisServer(work, server_cpus, redis_binary) if form == "xreadgroup" else LeaseqServer(work, server_cpus)
    ep = server.start("memory")
    try:
        _preload(ep.port, form, ep.key, jobs)
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        procs = [ctx.Process(target=_consume, args=(form, ep.port, ep.key, f"c{i}", load_cpus, results), daemon=True)
                 for i in range(CONNS)]
        t0 = time.monotonic()
        for p in procs:
            p.start()
        outs = [results.get(timeout=RUN_LIMIT_S) for _ in procs]
        wall = time.monotonic() - t0
        for p in procs:
            p.join(10)
    finally:
        server.stop()
    cpu = sum(c for c, _ in outs)
    claimed = sum(n for _, n in outs)
    if claimed != jobs:
        raise RuntimeError(f"{form}: the consumers claimed {claimed} jobs of {jobs}")
    return {"cpu_us_per_job": cpu / claimed * 1e6, "jobs_per_s": claimed / wall}


def run(jobs: int, reps: int, redis_binary: str, json_path: str | None) -> dict:
    binary = shutil.which(redis_binary)
    forms = FORMS if binary else tuple(f for f in FORMS if f != "xreadgroup")
    work = tempfile.mkdtemp(prefix="leaseq-bench-claims-")
    runs: dict[str, list[dict]] = {form: [] for form in forms}
    try:
        for rep in range(reps):
            for form in (forms if rep % 2 == 0 else forms[::-1]):
                print(f"# rep {rep + 1}/{reps}: {form}", flush=True)
                runs[form].append(one_run(form, jobs, work, binary or redis_binary))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {form: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for form, rs in runs.items()}
    base = medians.get("xreadgroup", {}).get("cpu_us_per_job")
    rows = [[form, round(m["cpu_us_per_job"], 2), f"{m['jobs_per_s']:,.0f}",
             round(m["cpu_us_per_job"] / base, 2) if base else "-"] for form, m in medians.items()]

    def report(_result: dict) -> None:
        print(f"leaseq bench claims: {jobs:,} jobs of 128 bytes, {CONNS} consumers claiming {BATCH} at a time, "
              f"memory class, redis-py {redis.__version__}"
              + (f", redis-server {redis_version(binary)}" if binary else ", no redis-server (leaseq alone)")
              + f"; median of {reps} rep(s)")
        print_grid("consumer CPU per claimed job", ["form", "consumer CPU us/job", "jobs/s", "/ xreadgroup"], rows,
                   right={1, 2, 3})

    return publish({"jobs": jobs, "reps": reps, "forms": medians}, report, json_path)
