"""A busy daemon's status page, as a screenshot (docs/status.png was made
with it).

    python -m leaseq.bench.status_demo docs/status.png [--seconds 8]

Starts a daemon with its HTTP listener (a free port, a temporary data
directory, stopped by PID) and keeps a realistic handful of queues busy in
real time, in 50 ms steps: producers push at their own rates, a few workers
per queue claim, take a while (log-normal), ack most jobs and nack some with
a few distinct errors.  Poison jobs fail every delivery: ``orders`` sends
them to ``orders-dead`` after two, ``webhooks`` keeps them dead in place
after three, ``emails`` nacks them DEAD at once; a few are failed to death
before the load starts, so the page always has dead letters.
``thumbnails`` has more work than workers; ``reports`` holds jobs delayed
by an hour and has a nightly schedule; ``webhooks`` is held to RATE 5 per
second (its partner's limit); ``tenants`` holds jobs of three customers
with GROUP-CONCURRENCY 1, one customer paused, nobody working it.  A snapshot is taken early.  After ``--seconds`` (the rates
need a few seconds of samples) headless Chromium takes the screenshot
while the load goes on.
Needs redis-py (the bench or test extra) and chromium.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time

from .common import Daemon, free_port

STEP = 0.05      # a worker takes at most one job a step
QUEUES = {   # queue: (jobs pushed per second, median ms of work, workers, nack share, errors)
    "orders": (40, 60, 5, 0.04, ["payment declined", "timeout calling billing after 5000 ms"]),
    "emails": (25, 30, 3, 0.02, ["SMTP 451 4.7.1 try again later", "mailbox full"]),
    "thumbnails": (12, 400, 3, 0.02, ["corrupt image: unexpected end of file", "out of memory"]),
    "webhooks": (8, 150, 3, 0.08, ["connection refused: partner-api:443", "HTTP 503 from partner-api"]),
    "audit-log": (60, 5, 5, 0.0, []),
    "search-index": (30, 20, 3, 0.01, ["index locked"]),
}
OPTIONS = {
    "orders": ("MAXDELIVERIES", 2, "DEADLETTER", "orders-dead"),
    "webhooks": ("MAXDELIVERIES", 3, "RATE", 5, 1000),
    "tenants": ("GROUP-CONCURRENCY", 1),
    "audit-log": ("DURABILITY", "async"),
    "search-index": ("DURABILITY", "memory"),
}
POISON = {   # queue: (poison jobs at the start, share of later pushes that are poison, their errors)
    "orders": (4, 0.01, ["invalid address: postcode <missing>", "card expired 04/24"]),
    "emails": (2, 0.0, ["template <welcome_v2> not found"]),
    "webhooks": (2, 0.0, ["HTTP 410 Gone: endpoint removed"]),
}
DEAD_AT_ONCE = {"emails"}     # its workers nack a poison job DEAD; the others retry until MAXDELIVERIES
PREFIX = b"poison: "          # a poison job's payload: the prefix, then the error every delivery fails with


def screenshot(out: str, seconds: float, seed: int = 11) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("needs Debian's chromium package (headless) for the screenshot")
    work = tempfile.mkdtemp(prefix="leaseq-status-demo-")
    http = free_port()
    daemon = Daemon(os.path.join(work, "data"), os.path.join(work, "daemon.log"),
                    env={"LEASEQ_HTTP_PORT": str(http)})
    halt = threading.Event()
    failures: list = []
    load = threading.Thread(target=_keep_busy, args=(daemon, halt, random.Random(seed), failures))
    try:
        daemon.start()
        _set_up(daemon.client())
        load.start()
        time.sleep(seconds)
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={os.path.join(work, 'chromium')}", f"--screenshot={os.path.abspath(out)}",
                        "--window-size=1560,1100", f"http://127.0.0.1:{http}/"],
                       check=True, timeout=120, capture_output=True)
    finally:
        halt.set()
        if load.is_alive():
            load.join(30)
        daemon.kill()
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        raise RuntimeError(f"the load failed: {failures[0]}")


def _set_up(c) -> None:
    """Queues with their options, a backlog of thumbnails, delayed reports,
    the first dead letters (so that the page has some whatever the load
    draws) and a first snapshot."""
    for name, options in OPTIONS.items():
        c.execute_command("QCREATE", name, *options)
    c.execute_command("QPUSHMANY", "thumbnails", 180, *[b'{"image": "upload.jpg"}'] * 180)
    c.execute_command("QPUSHMANY", "reports", 24, *[b'{"report": "daily"}'] * 24)
    c.execute_command("QPUSHMANY", "reports", 40, *[b'{"report": "monthly"}'] * 40, "DELAY", 3_600_000)
    c.execute_command("QSCHEDULE", "reports", "nightly", b'{"report": "daily"}', "CRON", "0 2 * * *",
                      "TZ", "Europe/Paris")
    c.execute_command("QSCHEDULE", "audit-log", "rotate", b'{"rotate": true}', "EVERY", 2000)
    customers = ["acme"] * 30 + ["globex"] * 20 + ["initech"] * 10
    c.execute_command("QPUSHMANY", "tenants", len(customers), *[b'{"sync": 1}'] * len(customers),
                      "GROUPS", *customers)
    c.execute_command("QPAUSE", "tenants", "GROUP", "initech")
    for q, (n, _share, errors) in POISON.items():
        _fail_until_dead(c, q, [errors[i % len(errors)] for i in range(n)])
    c.execute_command("BGSAVE")


def _fail_until_dead(c, q: str, errors: list) -> None:
    """Push one poison job per error and fail every delivery of them until
    none is left to claim: they die in place, or go to the DEADLETTER queue."""
    c.execute_command("QPUSHMANY", q, len(errors), *[PREFIX + e.encode() for e in errors])
    while jobs := c.execute_command("QCLAIM", q, "w", "COUNT", len(errors)):
        for job in map(_as_dict, jobs):
            c.execute_command("QNACK", q, job[b"lease"], *_failure(q, job[b"payload"]))


def _failure(q: str, payload: bytes) -> tuple:
    """QNACK's arguments for a poison job: DEAD or again at once, with its error."""
    how = ("DEAD",) if q in DEAD_AT_ONCE else ("DELAY", 0)
    return how + ("ERROR", payload[len(PREFIX):])


def _as_dict(job) -> dict:
    return job if isinstance(job, dict) else dict(zip(job[::2], job[1::2]))


def _keep_busy(daemon: Daemon, halt: threading.Event, rnd: random.Random, failures: list) -> None:
    try:
        _load(daemon.client(), halt, rnd)
    except Exception as e:          # noqa: BLE001 - reported by the main thread
        failures.append(e)


def _load(c, halt: threading.Event, rnd: random.Random) -> None:
    """Every STEP: push, hand jobs to free workers, finish the jobs whose
    work is done.  A job's outcome is drawn when it is claimed; a poison
    job always fails."""
    working: list = []           # (done at, queue, lease token, QNACK arguments or None for QACK)
    while not halt.is_set():
        started = time.monotonic()
        for q, (rate, work_ms, workers, nack_share, errors) in QUEUES.items():
            _push(c, q, rate, rnd)
            busy = sum(1 for w in working if w[1] == q)
            if busy >= workers:
                continue
            for job in map(_as_dict, c.execute_command("QCLAIM", q, "w", "COUNT", workers - busy, "LEASE", 30_000)):
                done = started + rnd.lognormvariate(math.log(work_ms), 0.6) / 1000
                working.append((done, q, job[b"lease"], _outcome(q, job[b"payload"], nack_share, errors, rnd)))
        now = time.monotonic()
        for _done, q, token, nack in [w for w in working if w[0] <= now]:
            if nack is None:
                c.execute_command("QACK", q, token)
            else:
                c.execute_command("QNACK", q, token, *nack)
        working = [w for w in working if w[0] > now]
        halt.wait(max(0.0, STEP - (time.monotonic() - started)))


def _push(c, q: str, rate: float, rnd: random.Random) -> None:
    n = sum(rnd.random() < rate * STEP / 4 for _ in range(4))
    if not n:
        return
    _n, share, errors = POISON.get(q, (0, 0.0, []))
    payloads = [PREFIX + rnd.choice(errors).encode() if rnd.random() < share
                else b'{"id": %d}' % rnd.randrange(10**6) for _ in range(n)]
    c.execute_command("QPUSHMANY", q, n, *payloads)


def _outcome(q: str, payload: bytes, nack_share: float, errors: list, rnd: random.Random) -> tuple | None:
    """QNACK's arguments, or None when the job is acked."""
    if payload.startswith(PREFIX):
        return _failure(q, payload)
    if rnd.random() < nack_share:
        return ("DELAY", 300, "ERROR", rnd.choice(errors))
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="the PNG to write (1560 x 1100)")
    p.add_argument("--seconds", type=float, default=8.0, help="of load before the screenshot")
    a = p.parse_args()
    screenshot(a.out, a.seconds)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
