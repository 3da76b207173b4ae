"""``leaseq bench lifecycle``: how fast a job's end reaches those who wait for it.

One daemon (its queues ``fsync`` unless ``--durability`` says otherwise),
two measurements:

* **cancel → handler**: a ``leaseq.client.Worker`` runs one handler at a
  time that waits on ``job.cancelled``; the bench cancels each running job
  (QCANCEL) and takes the time from sending the command to the handler
  seeing the event.  Each cancel is sent at a random moment of the beat
  (a wait of 0 to ``heartbeat_ms`` after the handler starts), as a cancel
  from an operator would be.  The worker notices at its next heartbeat, so
  the figure is about half a beat on average and one beat at most, plus a
  QEXTEND and a QGET;
* **ack → QRESULT BLOCK**: a connection blocks in ``QRESULT queue id BLOCK
  0`` while another acks the job with a RESULT; the time from sending the
  ack to the blocked reply arriving.

Both clocks are this process's ``time.perf_counter``: the client side, what
an application sees.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
import threading
import time

from .common import Daemon, percentile, print_table, publish, progress


def run(cancels: int, results: int, heartbeat_ms: int, durability: str, json_path: str | None, say=None) -> dict:
    say = say or progress
    work = tempfile.mkdtemp(prefix="leaseq-bench-lifecycle-")
    daemon = Daemon(os.path.join(work, "data"), os.path.join(work, "daemon.log"),
                    env={"LEASEQ_DEFAULT_DURABILITY": durability})
    try:
        daemon.start()
        result = {"settings": {"cancels": cancels, "results": results, "heartbeat_ms": heartbeat_ms,
                               "durability": durability}}
        say(f"{cancels} cancels of running handlers, heartbeat {heartbeat_ms} ms")
        result["cancel"] = _cancels(daemon, cancels, heartbeat_ms)
        say(f"{results} acks with a RESULT, each awaited by a blocked QRESULT")
        result["result"] = _results(daemon, results)
    finally:
        daemon.kill()
        shutil.rmtree(work, ignore_errors=True)
    return publish(result, report, json_path)


def _cancels(daemon: Daemon, n: int, heartbeat_ms: int) -> dict:
    from leaseq.client import Queue, Worker
    seen: list[float] = []
    running = threading.Event()

    def handler(job):
        running.set()
        if job.cancelled.wait(60):
            seen.append(time.perf_counter())

    logging.getLogger("leaseq.client").setLevel(logging.ERROR)      # one warning per cancel otherwise
    with Queue(f"redis://127.0.0.1:{daemon.port}", "cancel", socket_timeout=30) as queue:
        worker = Worker(queue, handler, heartbeat_ms=heartbeat_ms, block_ms=20)
        thread = threading.Thread(target=worker.run, kwargs={"stop_signals": ()}, daemon=True)
        thread.start()
        took = []
        try:
            for _ in range(n):
                running.clear()
                jid = queue.push("wait for your cancel")
                if not running.wait(30):
                    raise RuntimeError("the worker did not start a handler within 30 s")
                time.sleep(random.uniform(0, heartbeat_ms / 1000))
                before = len(seen)
                sent = time.perf_counter()
                queue.cancel(jid)
                deadline = time.monotonic() + 30
                while len(seen) == before:
                    if time.monotonic() > deadline:
                        raise RuntimeError("a cancel did not reach its handler within 30 s")
                    time.sleep(0.0005)
                took.append((seen[-1] - sent) * 1000)
        finally:
            worker.stop()
            thread.join(30)
    return _figures(took)


def _results(daemon: Daemon, n: int) -> dict:
    c = daemon.client()
    waiter = daemon.client()
    got: dict = {}
    took = []
    for i in range(n):
        jid = c.execute_command("QPUSH", "answers", b"question %d" % i)
        token = dict(zip(*[iter(c.execute_command("QCLAIM", "answers", "w", "LEASE", 60_000)[0])] * 2))[b"lease"]
        got.clear()
        t = threading.Thread(target=lambda: got.update(reply=waiter.execute_command("QRESULT", "answers", jid,
                                                                                    "BLOCK", 0),
                                                       at=time.perf_counter()), daemon=True)
        t.start()
        deadline = time.monotonic() + 10
        while int(c.info("clients")["blocked_clients"]) != 1:     # parked before the ack is sent
            if time.monotonic() > deadline:
                raise RuntimeError("QRESULT did not block")
            time.sleep(0.0002)
        sent = time.perf_counter()
        c.execute_command("QACK", "answers", token, "RESULT", b"answer %d" % i)
        t.join(10)
        if got.get("reply") != b"answer %d" % i:
            raise RuntimeError(f"QRESULT answered {got.get('reply')!r}")
        took.append((got["at"] - sent) * 1000)
    return _figures(took)


def _figures(ms: list[float]) -> dict:
    return {"count": len(ms), "median_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "max_ms": max(ms),
            "min_ms": min(ms)}


def report(r: dict) -> None:
    s, ca, re_ = r["settings"], r["cancel"], r["result"]
    print_table(f"leaseq bench lifecycle: {s['durability']} queues", [
        (f"cancel → handler sees job.cancelled, heartbeat {s['heartbeat_ms']} ms: median", ca["median_ms"], "ms", ""),
        (f"cancel → handler: max of {ca['count']}", ca["max_ms"], "ms", ""),
        ("ack with RESULT → blocked QRESULT answered: median", re_["median_ms"], "ms", ""),
        ("ack → QRESULT: p99", re_["p99_ms"], "ms", ""),
        (f"ack → QRESULT: max of {re_['count']}", re_["max_ms"], "ms", ""),
    ], baseline="")
