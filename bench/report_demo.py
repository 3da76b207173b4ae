"""A realistic log for ``leaseq report`` (docs/report.png was made from it).

    python -m leaseq.bench.report_demo DIR [--seconds 180] [--seed 7]
    leaseq report DIR --out /tmp/report

(docs/report-sources.png: three pods, ``/tmp/pods/pod-{1,2,3}/data`` with
seeds 1, 2 and 3, then ``leaseq report '/tmp/pods/*/data'``.)

Starts a daemon on DIR with the DEBUG clock frozen, and walks it through
``--seconds`` of daemon time in 100 ms steps: three queues, a push rate that
rises and falls, workers that claim, take a while (log-normal), ack most
jobs, nack some with a few distinct errors, and now and then let a lease
run out; ``orders`` has MAXDELIVERIES 2 and a dead-letter queue.
Needs redis-py (the bench or test extra).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import socket
import subprocess
import sys
import time

import redis

STEP = 100
QUEUES = {   # queue: (jobs per second at the peak, median ms of work, workers, nack share, errors)
    "orders": (14, 180, 3, 0.08, ["payment declined", "timeout calling billing", "invalid address"]),
    "emails": (9, 60, 1, 0.04, ["SMTP 451 try again", "mailbox full"]),
    "thumbnails": (5, 700, 4, 0.03, ["corrupt image", "out of memory"]),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(data_dir: str, seconds: int, seed: int = 7) -> None:
    rnd = random.Random(seed)
    port = _free_port()
    env = dict(os.environ, LEASEQ_ENABLE_DEBUG_COMMAND="yes")
    proc = subprocess.Popen([sys.executable, "-m", "leaseq.cli", "serve", "--port", str(port),
                             "--dir", data_dir], env=env, stderr=subprocess.DEVNULL)
    try:
        c = redis.Redis(port=port)
        for _ in range(200):
            try:
                c.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        c.execute_command("QCREATE", "orders", "MAXDELIVERIES", 2, "DEADLETTER", "orders-dl")
        inflight = []            # (due step, queue, token, outcome)
        for step in range(seconds * 1000 // STEP):
            phase = step * STEP / 1000 / seconds
            for q, (rate, work_ms, workers, nack_share, errors) in QUEUES.items():
                level = 0.35 + 0.65 * math.sin(math.pi * phase) ** 2 * (1.3 if q == "emails" and phase > .5 else 1)
                n = sum(rnd.random() < rate * level * STEP / 1000 / 3 for _ in range(3))
                if phase < 0.85 and n:
                    c.execute_command("QPUSHMANY", q, n, *[b"x" * rnd.randint(50, 400)] * n)
                busy = sum(1 for j in inflight if j[1] == q)
                if busy >= workers:           # few workers: at the peak a backlog builds, and waits grow
                    continue
                for job in c.execute_command("QCLAIM", q, "w", "COUNT", workers - busy, "LEASE", 5000):
                    job = job if isinstance(job, dict) else dict(zip(job[::2], job[1::2]))
                    token = job[b"lease"]
                    r = rnd.random()
                    outcome = ("expire" if r < 0.01 else "nack:" + rnd.choice(errors) if r < 0.01 + nack_share
                               else "ack")
                    if q == "orders" and r > 0.985:
                        outcome = "nack:invalid address"                    # a poison message
                    ms = rnd.lognormvariate(math.log(work_ms), 0.6)
                    inflight.append((step + max(1, round(ms / STEP)), q, token, outcome))
            due = [j for j in inflight if j[0] <= step]
            inflight = [j for j in inflight if j[0] > step]
            for _s, q, token, outcome in due:
                if outcome == "ack":
                    c.execute_command("QACK", q, token)
                elif outcome.startswith("nack:"):
                    c.execute_command("QNACK", q, token, "DELAY", 500, "ERROR", outcome[5:])
            c.execute_command("DEBUG", "CLOCK", "ADVANCE", STEP)
    finally:
        proc.terminate()
        proc.wait(20)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--seconds", type=int, default=180)
    p.add_argument("--seed", type=int, default=7, help="another seed: another pod's log")
    a = p.parse_args()
    run(a.dir, a.seconds, a.seed)
    print(f"wrote a log of {a.seconds} s of daemon time into {a.dir}")


if __name__ == "__main__":
    main()
