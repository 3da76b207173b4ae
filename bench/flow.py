"""``leaseq bench flow``: how exact RATE and GROUP-RATE are.

One daemon, two runs of ``--seconds`` each (default 10):

* ``RATE n ms`` on a queue holding more jobs than the run can hand out,
  with ``--claimers`` threads (default 4) each looping ``QCLAIM ... COUNT 10
  BLOCK 20000``: they are served by the queue's timer as the window slides;
* ``GROUP-RATE n ms`` on a queue whose jobs are spread over 4 groups, the
  same claimers.

Each hand-out's moment is read off the daemon's own clock (the claim
reply's deadline minus the lease it asked for), so the figures measure the
daemon's limit, not the network.  Over every sliding window of ``ms``
(starting at each hand-out) the largest number of hand-outs is counted:
``max in any window / n`` is at most 1.0 when the limit holds.  Also
printed: the hand-outs against what the limit allows over the run's span
(``n`` per window, the last window starting at the last hand-out).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from bisect import bisect_left

from .common import Daemon, print_table, publish, progress

LEASE = 600_000
GROUPS = 4


def run(seconds: float, n: int, window_ms: int, claimers: int, json_path: str | None, say=None) -> dict:
    say = say or progress
    work = tempfile.mkdtemp(prefix="leaseq-bench-flow-")
    daemon = Daemon(os.path.join(work, "data"), os.path.join(work, "daemon.log"))
    try:
        daemon.start()
        c = daemon.client()
        budget = int(n * (seconds * 1000 / window_ms + 2)) * GROUPS + 100
        result = {"settings": {"seconds": seconds, "n": n, "window_ms": window_ms, "claimers": claimers}}
        say(f"RATE {n} {window_ms} for {seconds:g} s, {claimers} blocked claimers")
        c.execute_command("QCREATE", "rate", "RATE", n, window_ms, "DURABILITY", "memory")
        _fill(c, "rate", budget, None)
        result["rate"] = _measure(daemon, "rate", seconds, claimers, n, window_ms)
        say(f"GROUP-RATE {n} {window_ms} over {GROUPS} groups for {seconds:g} s")
        c.execute_command("QCREATE", "grouped", "GROUP-RATE", n, window_ms, "DURABILITY", "memory")
        _fill(c, "grouped", budget, GROUPS)
        result["group_rate"] = _measure(daemon, "grouped", seconds, claimers, n, window_ms)
    finally:
        daemon.kill()
        shutil.rmtree(work, ignore_errors=True)
    return publish(result, report, json_path)


def _fill(c, q: str, jobs: int, groups: int | None) -> None:
    for start in range(0, jobs, 1000):
        k = min(1000, jobs - start)
        extra = ("GROUPS", *[f"g{(start + i) % groups}" for i in range(k)]) if groups else ()
        c.execute_command("QPUSHMANY", q, k, *[b"x"] * k, *extra)


def _measure(daemon: Daemon, q: str, seconds: float, claimers: int, n: int, window_ms: int) -> dict:
    moments: dict[bytes, list[int]] = {}
    lock = threading.Lock()
    failures: list = []

    def claimer() -> None:
        try:
            c = daemon.client()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for job in c.execute_command("QCLAIM", q, "w", "COUNT", 10, "LEASE", LEASE, "BLOCK", 20_000):
                    f = dict(zip(job[::2], job[1::2]))
                    with lock:
                        moments.setdefault(f.get(b"group", b""), []).append(f[b"deadline"] - LEASE)
            c.close()
        except Exception as e:          # reported, not swallowed
            failures.append(e)

    threads = [threading.Thread(target=claimer) for _ in range(claimers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    if failures:
        raise RuntimeError(f"a claimer failed: {failures[0]!r}")
    worst, total, span = 0, 0, 0
    for times in moments.values():
        times.sort()
        total += len(times)
        span = max(span, times[-1] - times[0])
        for i, start in enumerate(times):
            worst = max(worst, bisect_left(times, start + window_ms, i) - i)
    keys = len(moments)
    expected = n * keys * (span / window_ms + 1)      # a window may start at the first moment and at the last
    return {"hand_outs": total, "groups": keys, "span_ms": span, "max_in_window": worst,
            "max_over_n": worst / n, "achieved_share": total / expected if expected else float("nan")}


def report(r: dict) -> None:
    s = r["settings"]
    rows = []
    for key, label in (("rate", f"RATE {s['n']} {s['window_ms']}"),
                       ("group_rate", f"GROUP-RATE {s['n']} {s['window_ms']}, {GROUPS} groups")):
        f = r[key]
        rows += [(f"{label}: hand-outs in {f['span_ms'] / 1000:.1f} s", f["hand_outs"], "", ""),
                 (f"{label}: most in any {s['window_ms']} ms window (per group)", f["max_in_window"], "", ""),
                 (f"{label}: that / n (at most 1.0 when the limit holds)", f["max_over_n"], "", ""),
                 (f"{label}: achieved / allowed rate", f["achieved_share"], "", "")]
    print_table(f"leaseq bench flow: {s['seconds']:g} s per run, {s['claimers']} claimers blocked with COUNT 10, "
                f"moments on the daemon's clock", rows, baseline="")
