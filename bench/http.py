"""``leaseq bench http``: does a Prometheus scrape slow serving?

One daemon with the HTTP listener and ``--queues`` queues holding jobs (so
that a scrape has series to write).  A client sends single QPUSHes back to
back for ``--seconds``, measuring each round trip, once alone and once while
another thread scrapes ``/metrics`` every second, as Prometheus would.
Prints p50, p99 and max of the QPUSH round trips in both runs, and the
scrape's own time and size.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import urllib.request

from .common import Daemon, free_port, percentile, print_table, publish, progress


def run(seconds: float, queues: int, json_path: str | None, say=None) -> dict:
    say = say or progress
    work = tempfile.mkdtemp(prefix="leaseq-bench-http-")
    http = free_port()
    daemon = Daemon(os.path.join(work, "data"), os.path.join(work, "daemon.log"),
                    env={"LEASEQ_HTTP_PORT": str(http)})
    try:
        daemon.start()
        c = daemon.client()
        say(f"{queues} queues with 100 jobs each")
        pipe = c.pipeline(transaction=False)
        for i in range(queues):
            pipe.execute_command("QPUSHMANY", f"q{i}", 100, *[b"x" * 128] * 100)
        pipe.execute()
        url = f"http://127.0.0.1:{http}/metrics"
        result = {"settings": {"seconds": seconds, "queues": queues, "payload_bytes": 128}}
        say("QPUSH round trips, no scrape")
        result["without_scrape"] = _load(c, seconds)
        say("QPUSH round trips, /metrics scraped every second")
        scrapes: list = []
        halt = threading.Event()
        scraper = threading.Thread(target=_scrape, args=(url, halt, scrapes))
        scraper.start()
        try:
            result["with_scrape"] = _load(c, seconds)
        finally:
            halt.set()
            scraper.join(10)
        result["scrape"] = {"count": len(scrapes),
                            "p50_ms": percentile([t for t, _n in scrapes], 50),
                            "max_ms": max((t for t, _n in scrapes), default=float("nan")),
                            "bytes": scrapes[-1][1] if scrapes else 0}
    finally:
        daemon.kill()
        shutil.rmtree(work, ignore_errors=True)
    return publish(result, report, json_path)


def _load(c, seconds: float) -> dict:
    samples = []
    payload = b"p" * 128
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        c.execute_command("QPUSH", "load", payload)
        samples.append((time.perf_counter() - t0) * 1000)
    return {"pushes": len(samples), "p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99),
            "max_ms": max(samples)}


def _scrape(url: str, halt: threading.Event, out: list) -> None:
    while not halt.is_set():
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as r:
            size = len(r.read())
        out.append(((time.perf_counter() - t0) * 1000, size))
        halt.wait(1.0)


def report(r: dict) -> None:
    a, b, s = r["without_scrape"], r["with_scrape"], r["scrape"]
    print_table(f"leaseq bench http: single QPUSH round trips for {r['settings']['seconds']} s, "
                f"{r['settings']['queues']} queues, /metrics scraped every 1 s in the second run", [
        ("QPUSH p50, no scrape", a["p50_ms"], "ms", ""),
        ("QPUSH p99, no scrape", a["p99_ms"], "ms", ""),
        ("QPUSH max, no scrape", a["max_ms"], "ms", ""),
        ("QPUSH p50, scraped every 1 s", b["p50_ms"], "ms", ""),
        ("QPUSH p99, scraped every 1 s", b["p99_ms"], "ms", ""),
        ("QPUSH max, scraped every 1 s", b["max_ms"], "ms", ""),
        ("pushes (no scrape / scraped)", f"{a['pushes']:,} / {b['pushes']:,}", "", ""),
        ("scrape: time p50 / max", f"{s['p50_ms']:.1f} / {s['max_ms']:.1f}", "ms", ""),
        ("scrape: size", s["bytes"], "bytes", ""),
    ], baseline="")
