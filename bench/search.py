"""``leaseq bench search``: does a search over a million jobs delay anyone?

One daemon with the HTTP listener, one queue of ``--jobs`` jobs (QPUSHMANY,
memory durability), payloads ``order:<n % 1000>:<n>`` and, per push of
10,000, META ``customer c<k>`` (50 customers).  A probe, in a process of its
own, sends PING and QLEN alternately, one at a time, for the whole run and
times each reply.  Meanwhile, one after another:

* idle: nothing else (the probe's floor);
* search: the status page's search ``GET /search`` with a payload glob, and
  with a META glob (every job looked at);
* QSCAN loop: ``QSCAN ... MATCH ... COUNT n`` from cursor 0 to 0;
* bulk cancel: the confirmation (``POST /search/confirm``: every job looked
  at, the matches listed) and the action (``POST /search/act``), cancelling
  the jobs of 11 customers in 50 (22 %).

Prints, per phase, how long it took and the probe's replies in it (each
request in flight at some moment of the phase): count, p50, p99 and max
round trip.  The target (docs/performance.md): no reply
delayed more than 50 ms.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import tempfile
import time
import urllib.parse
import urllib.request

from .common import Daemon, free_port, percentile, print_table, publish, progress

QUEUE = "orders"
BATCH = 10_000
CUSTOMERS = 50


def run(jobs: int, count: int, search_slice: int | None, json_path: str | None, say=None) -> dict:
    say = say or progress
    work = tempfile.mkdtemp(prefix="leaseq-bench-search-")
    http = free_port()
    env = {"LEASEQ_HTTP_PORT": str(http), "LEASEQ_DEFAULT_DURABILITY": "memory"}
    if search_slice:
        env["LEASEQ_SEARCH_SLICE"] = str(search_slice)
    daemon = Daemon(os.path.join(work, "data"), os.path.join(work, "daemon.log"), env=env)
    probe = None
    try:
        daemon.start()
        c = daemon.client()
        say(f"loading {jobs:,} jobs")
        started = time.perf_counter()
        for start in range(0, jobs, BATCH):
            n = min(BATCH, jobs - start)
            c.execute_command("QPUSHMANY", QUEUE, n, *[b"order:%d:%d" % (i % 1000, i) for i in range(start, start + n)],
                              "META", "customer", f"c{(start // BATCH) % CUSTOMERS}")
        load_s = time.perf_counter() - started
        slice_size = int(c.config_get("search-slice")["search-slice"])
        base = f"http://127.0.0.1:{http}"
        stop, out = multiprocessing.Event(), multiprocessing.Queue()
        probe = multiprocessing.Process(target=_probe, args=(daemon.port, stop, out), daemon=True)
        probe.start()
        phases: list = []

        def phase(name: str, action) -> object:
            say(name)
            t0 = time.monotonic()
            value = action()
            phases.append((name, t0, time.monotonic(), value))
            return value

        time.sleep(0.5)
        phase("idle", lambda: time.sleep(2) or "")
        found = phase("search: payload glob", lambda: _matches(_get(base, {"match": "order:7*:*"})))
        phase("search: META glob", lambda: _matches(_get(base, {"meta_field": "customer", "meta": "c1*"})))
        phase(f"QSCAN MATCH loop, COUNT {count:,}", lambda: _qscan_loop(c, count))
        with urllib.request.urlopen(base + "/", timeout=60) as r:          # the status page's forms carry the token
            token = re.search(r'name="csrf" value="([^"]+)"', r.read().decode()).group(1)
        confirmation = phase("bulk cancel: confirmation", lambda: _post(base + "/search/confirm", {
            "queue": QUEUE, "meta_field": "customer", "meta": "c1*", "action": "cancel", "csrf": token}))
        asked = int(re.search(r"Cancel <b>([\d,]+)</b>", confirmation).group(1).replace(",", ""))
        plan = re.search(r'name="plan" value="([0-9a-f]+)"', confirmation).group(1)
        done = phase("bulk cancel: action", lambda: _post(base + "/search/act", {"plan": plan, "csrf": token}))
        time.sleep(0.3)
        stop.set()
        samples = out.get(timeout=60)
        probe.join(10)
        result = {"settings": {"jobs": jobs, "qscan_count": count, "search_slice": slice_size},
                  "load_seconds": load_s, "search_matches": found, "cancel_asked": asked,
                  "cancel_done": done.strip(), "phases": {}}
        for name, t0, t1, _ in phases:
            # a request in flight at any moment of the phase: one that waited through a short phase counts in it
            rtts = [rtt for when, rtt in samples if when <= t1 and when + rtt / 1000 >= t0]
            result["phases"][name] = {"seconds": t1 - t0, "replies": len(rtts),
                                      "p50_ms": percentile(rtts, 50), "p99_ms": percentile(rtts, 99),
                                      "max_ms": max(rtts, default=float("nan"))}
        whole = [rtt for when, rtt in samples if phases[1][1] <= when <= phases[-1][2]]
        result["worst_ms"] = max(whole, default=float("nan"))
        result["p99_ms"] = percentile(whole, 99)
    finally:
        if probe is not None and probe.is_alive():
            probe.kill()
        daemon.kill()
        shutil.rmtree(work, ignore_errors=True)
    return publish(result, report, json_path)


def _probe(port: int, stop, out) -> None:
    """PING and QLEN in turn, one at a time, until ``stop``: (monotonic start, round trip ms) each."""
    import redis
    c = redis.Redis(host="127.0.0.1", port=port, protocol=2, socket_timeout=120)
    samples = []
    i = 0
    while not stop.is_set():
        t0 = time.monotonic()
        if i % 2:
            c.execute_command("QLEN", QUEUE)
        else:
            c.execute_command("PING")
        samples.append((t0, (time.monotonic() - t0) * 1000))
        i += 1
    out.put(samples)


def _get(base: str, filters: dict) -> str:
    url = f"{base}/search?" + urllib.parse.urlencode({"queue": QUEUE, **filters})
    with urllib.request.urlopen(url, timeout=600) as r:
        return r.read().decode()


def _post(url: str, form: dict) -> str:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    req = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=600) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        if e.code == 303:
            return e.read().decode()
        raise RuntimeError(f"{url} answered {e.code}: {e.read().decode()[:300]}") from None


def _matches(page: str) -> int:
    return int(re.search(r'id="match-count">([\d,]+)<', page).group(1).replace(",", ""))


def _qscan_loop(c, count: int) -> int:
    cursor, found = b"0", 0
    while True:
        cursor, jobs = c.execute_command("QSCAN", QUEUE, cursor, "MATCH", "order:77*:*", "COUNT", count)
        found += len(jobs)
        if cursor == b"0":
            return found


def report(r: dict) -> None:
    s = r["settings"]
    rows = [("jobs loaded", f"{s['jobs']:,} in {r['load_seconds']:.1f} s", "", ""),
            ("search-slice", s["search_slice"], "jobs", ""),
            ("search matches (payload glob)", r["search_matches"], "jobs", ""),
            ("bulk cancel", r["cancel_done"].split(" matching")[0], "", "")]
    for name, p in r["phases"].items():
        rows.append((f"{name}: took", p["seconds"] * 1000, "ms", ""))
        rows.append((f"{name}: probe p50 / p99 / max",
                     f"{p['p50_ms']:.2f} / {p['p99_ms']:.2f} / {p['max_ms']:.2f}", "ms", f"{p['replies']:,} replies"))
    rows.append(("probe worst reply, all phases but idle", r["worst_ms"], "ms", ""))
    rows.append(("probe p99 reply, all phases but idle", r["p99_ms"], "ms", ""))
    print_table(f"leaseq bench search: {s['jobs']:,} jobs; a PING/QLEN probe while the status page searches, "
                "QSCAN walks and a bulk cancel runs (target: no reply over 50 ms)", rows, baseline="")
