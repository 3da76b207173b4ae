"""``leaseq bench workers``: jobs/s through a worker library with an empty
handler: the Node package's ``Worker`` (node/, at ``--node-concurrency``,
50 by default) beside ``leaseq.client``'s ``Worker`` in threads and its
asyncio ``Worker`` at several concurrencies, to find the Python worker's
best setting.

One daemon of its own; for each run a fresh queue (``--durability``,
memory by default, so the figure is the worker's cost, not the disk's)
preloaded with N jobs, then one worker process drains it in a burst run:
jobs/s is N over the time from ``run`` to its return, measured inside the
worker process; its CPU seconds too.  The worker has one CPU and the
daemon the other when there are two.  Reps are interleaved and the table
shows medians.  Nothing is asserted.  The Node package's dependencies must
be installed (``npm ci`` in node/; ``bin/test`` does it).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from leaseq.client import Queue, Worker, aio

from .common import Daemon, print_grid, publish
from .queue import PRELOAD_CHUNK, payload, placement

NODE = Path(__file__).resolve().parents[1] / "node"
PYTHON_SETTINGS = (("threads", 1), ("threads", 4), ("threads", 16), ("threads", 50), ("asyncio", 50))
RUN_LIMIT_S = 600


def _python_worker(port: int, name: str, flavour: str, concurrency: int, cpus, results) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    url = f"redis://127.0.0.1:{port}"
    if flavour == "threads":
        queue = Queue(url, name)
        queue.info()
        c0, t0 = time.process_time(), time.monotonic()
        stats = Worker(queue, lambda job: None, concurrency=concurrency).run(burst=True, stop_signals=())
        seconds, cpu = time.monotonic() - t0, time.process_time() - c0
        queue.close()
    else:
        async def empty(job):
            return None

        async def main():
            async with aio.Queue(url, name) as queue:
                await queue.info()
                c0, t0 = time.process_time(), time.monotonic()
                stats = await aio.Worker(queue, empty, concurrency=concurrency).run(burst=True, stop_signals=())
                return stats, time.monotonic() - t0, time.process_time() - c0

        stats, seconds, cpu = asyncio.run(main())
    results.put({"jobs": stats.acked, "seconds": seconds, "cpu_seconds": cpu})


def _run_python(port: int, name: str, flavour: str, concurrency: int, cpus) -> dict:
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    p = ctx.Process(target=_python_worker, args=(port, name, flavour, concurrency, cpus, results), daemon=True)
    p.start()
    try:
        return results.get(timeout=RUN_LIMIT_S)
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()


def _run_node(port: int, name: str, concurrency: int, cpus) -> dict:
    done = subprocess.run(["node", str(NODE / "bench" / "throughput.js"), str(port), name, str(concurrency)],
                          capture_output=True, text=True, timeout=RUN_LIMIT_S, check=False,
                          preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    if done.returncode != 0:
        raise RuntimeError(f"the Node worker failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check_node() -> None:
    if shutil.which("node") is None:
        raise RuntimeError("node is not installed: the Node worker needs Node.js 18 or newer")
    if not (NODE / "node_modules" / "ioredis").is_dir():
        raise RuntimeError(f"the Node package's dependencies are not installed: run `npm ci` in {NODE}")


def run(jobs: int, reps: int, node_concurrency: int, durability: str, json_path: str | None) -> dict:
    _check_node()
    server_cpus, load_cpus = placement()
    settings = [("python " + f, c) for f, c in PYTHON_SETTINGS] + [("node", node_concurrency)]
    work = tempfile.mkdtemp(prefix="leaseq-bench-workers-")
    d = Daemon(os.path.join(work, "data"), os.path.join(work, "leaseq.log"))
    runs: dict[tuple, list[dict]] = {s: [] for s in settings}
    try:
        d.start()
        if server_cpus:
            os.sched_setaffinity(d.pid, server_cpus)
        c = d.client()
        n = 0
        for rep in range(reps):
            for setting in (settings if rep % 2 == 0 else settings[::-1]):
                n += 1
                name = f"bench-{n}"
                c.execute_command("QCREATE", name, "DURABILITY", durability)
                for start in range(0, jobs, PRELOAD_CHUNK):
                    k = min(PRELOAD_CHUNK, jobs - start)
                    c.execute_command("QPUSHMANY", name, k, *[payload()] * k)
                print(f"# rep {rep + 1}/{reps}: {setting[0]} at {setting[1]}", flush=True)
                kind, concurrency = setting
                out = (_run_node(d.port, name, concurrency, load_cpus) if kind == "node"
                       else _run_python(d.port, name, kind.split()[1], concurrency, load_cpus))
                if out["jobs"] != jobs:
                    raise RuntimeError(f"{kind} at {concurrency} acked {out['jobs']} jobs of {jobs}")
                runs[setting].append(out)
                c.execute_command("QDROP", name, "FORCE")
        c.close()
    finally:
        if d.proc is not None:
            d.stop()
        shutil.rmtree(work, ignore_errors=True)
    medians = {f"{kind} {conc}": {"jobs_per_s": statistics.median(r["jobs"] / r["seconds"] for r in rs),
                                  "cpu_us_per_job": statistics.median(r["cpu_seconds"] / r["jobs"] * 1e6 for r in rs)}
               for (kind, conc), rs in runs.items()}
    python = {k: v for k, v in medians.items() if k.startswith("python")}
    best = max(python, key=lambda k: python[k]["jobs_per_s"])
    node = medians[f"node {node_concurrency}"]["jobs_per_s"]
    result = {"jobs": jobs, "reps": reps, "durability": durability, "settings": medians, "python_best": best,
              "node_vs_python_best": node / python[best]["jobs_per_s"]}

    def report(_result: dict) -> None:
        print(f"leaseq bench workers: {jobs:,} jobs of 128 bytes per run, an empty handler, burst runs, "
              f"DURABILITY {durability}; median of {reps} rep(s)")
        rows = [[k.replace(" ", " at ", 1) if k.startswith("node") else k.rsplit(" ", 1)[0] + " at "
                 + k.rsplit(" ", 1)[1], round(v["jobs_per_s"]), round(v["cpu_us_per_job"], 1)]
                for k, v in medians.items()]
        print_grid("worker throughput", ["worker, concurrency", "jobs/s", "worker CPU us/job"], rows, right={1, 2})
        print(f"node at {node_concurrency} / the best Python setting ({best}): "
              f"{result['node_vs_python_best']:.2f}")

    return publish(result, report, json_path)
