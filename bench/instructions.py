"""``leaseq bench floor --queue --instructions``: a job's instructions over sockets.

The servers of ``leaseq bench floor --queue`` (redis-server, the minimal
queue in Python and compiled, leaseq), each run under valgrind (callgrind,
with its cache simulation) and served the same jobs over real sockets.
Callgrind counts what the server's own process executes in user space:
its code, the interpreter, uvloop, libc; not the kernel's.  Printed per
server and job: instructions, and the first-level cache misses of the
simulated CPU (instruction fetches, data reads and writes), and the
instructions against the compiled minimal queue's.

Why count, when ``leaseq bench floor --queue`` times the same servers:
CPU time per job at 5,000 a second moves by a tenth or more from one run
to the next on a shared machine, while a count moves by about a
hundredth.  What the counts say about time is in docs/performance.md,
"What a job costs over sockets, counted".

The load is a job in lockstep, the ``single`` round of ``leaseq bench
path`` over sockets: a worker's claim with a long BLOCK parks, a producer's
push ``PARK_S`` later wakes it, the worker takes the job and acks it, and
only then the next claim goes.  With ``--claimers N`` N workers' claims
park, as the workers of ``leaseq bench queue``'s W3 at a fixed rate do
on one queue; each push wakes one of them, which acks and parks again.  Every request comes alone and every claim
parks, whatever the server's speed under valgrind (a fixed rate would
batch requests when the server is slow and time claims out when it is
fast).  Method: the server starts under callgrind; the queue is made;
callgrind's counters are zeroed (``callgrind_control -z``), the server
idles ``IDLE_S`` seconds and is dumped (``-d``): what its timers cost a
second.  Zeroed again, ``JOBS`` jobs run, dumped again: a job's count is
the load's less the idle rate over the load's length, over the jobs.
"""

from __future__ import annotations

import glob
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

from .common import HOST, free_port, leaseq_command, pin_threads, print_grid, publish, wait_pong, progress
from .floor import QUEUE_LABELS, QUEUE_SERVERS, compiled_minimal
from .queue import Conn, placement, redis_version, wire_for

JOBS = 300                  # jobs in lockstep
PARK_S = 0.02               # from a claim's send to the push that wakes it: the claim has parked by then
BLOCK_MS = 60_000           # the claims' BLOCK: they never time out
IDLE_S = 5.0                # the idle window that measures the timers
JOB_LIMIT_S = 1.0           # a job in lockstep takes about 50 ms under callgrind; the load stops past this average
START_TIMEOUT = 180.0       # a server starting under valgrind
DUMP_TIMEOUT = 60.0
KINDS = QUEUE_SERVERS       # the servers of ``leaseq bench floor --queue``, by the same names
LABELS = QUEUE_LABELS


def server_command(kind: str, port: int, data_dir: str, redis_path: str | None) -> list[str]:
    """How ``kind`` is started, without valgrind (each as ``leaseq bench floor --queue`` starts it)."""
    if kind == "leaseq":
        return leaseq_command() + ["serve", "--port", str(port), "--dir", data_dir]
    if kind in ("minimal", "compiled"):
        return [sys.executable, "-m", "leaseq.bench.floor", "--serve", str(port), "--queue"] + \
            (["--compiled"] if kind == "compiled" else [])
    return [redis_path, "--bind", HOST, "--port", str(port), "--protected-mode", "yes", "--daemonize", "no",
            "--dir", data_dir, "--save", "", "--appendonly", "no"]


class Counted:
    """One server under callgrind; ``count(fn)`` runs ``fn`` with the
    counters zeroed before and dumped after: ({event: count}, seconds,
    the dump's path), the events callgrind names (Ir instructions, I1mr,
    D1mr, D1mw ...)."""

    def __init__(self, kind: str, work: str, server_cpus, redis_path: str | None) -> None:
        self.kind = kind
        self.port = free_port()
        self.data_dir = os.path.join(work, kind)
        os.makedirs(self.data_dir)
        self.out = os.path.join(work, f"callgrind.{kind}")
        self.log = open(os.path.join(work, f"{kind}.log"), "wb")
        cmd = ["valgrind", "--tool=callgrind", "--cache-sim=yes", f"--callgrind-out-file={self.out}.%p"] + \
            server_command(kind, self.port, self.data_dir, redis_path)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_pong(self.proc, self.port, time.monotonic() + START_TIMEOUT, f"{LABELS[kind]} under valgrind")
        except RuntimeError:
            self.stop()
            raise
        if server_cpus:
            pin_threads(self.proc.pid, server_cpus)

    def _control(self, *args: str) -> None:
        out = subprocess.run(["callgrind_control", *args, str(self.proc.pid)], capture_output=True, text=True,
                             timeout=DUMP_TIMEOUT)
        if out.returncode != 0:
            raise RuntimeError(f"callgrind_control {' '.join(args)} failed: {out.stderr or out.stdout}")

    def count(self, fn) -> tuple[dict, float, str]:
        dumps = set(glob.glob(f"{self.out}.{self.proc.pid}.*"))
        self._control("-z")
        started = time.monotonic()
        fn()
        seconds = time.monotonic() - started
        self._control("-d")
        deadline = time.monotonic() + DUMP_TIMEOUT
        while time.monotonic() < deadline:
            for path in set(glob.glob(f"{self.out}.{self.proc.pid}.*")) - dumps:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                events, found = re.search(r"^events:(.*)$", text, re.M), re.search(r"^summary:(.*)$", text, re.M)
                if events and found:
                    counts = [int(n) for n in found.group(1).split()]          # (trailing zeros left out)
                    names = events.group(1).split()
                    return dict(zip(names, counts + [0] * (len(names) - len(counts)))), seconds, path
            time.sleep(0.1)
        raise RuntimeError(f"callgrind wrote no dump of {LABELS[self.kind]} within {DUMP_TIMEOUT:g} s")

    def ending(self, lines: int = 30) -> str:
        """How the server stands (running, or its exit status) and the last
        lines it printed (valgrind's and its own), for an error message."""
        self.log.flush()
        with open(self.log.name, "rb") as f:
            tail = f.read().decode(errors="replace").splitlines()[-lines:]
        code = self.proc.poll()
        state = "still running" if code is None else f"exited with status {code}"
        return f"the server is {state}; its output ends:\n" + "\n".join(tail)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def lockstep(producer: Conn, workers: list[Conn], wire, jobs: int) -> int:
    """``jobs`` jobs one at a time: each worker's claim parks, a push wakes
    one of them, that worker acks its job and parks again; the jobs acked.
    At most ``JOB_LIMIT_S`` a job on average, or it stops."""
    claim = wire.claim("w", 1, BLOCK_MS)
    push, _stamp_at = wire.push_one()
    deadline = time.monotonic() + jobs * JOB_LIMIT_S
    parked: list[Conn] = []             # the workers whose claim waits, in the order they sent it

    def park(worker: Conn) -> None:
        worker.sock.sendall(claim)
        parked.append(worker)

    for worker in workers:
        park(worker)
    for done in range(jobs):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{jobs} jobs in lockstep took more than {jobs * JOB_LIMIT_S:g} s")
        time.sleep(PARK_S)
        producer.call(push)
        ready, _, _ = select.select([w.sock for w in parked], [], [], max(0.0, deadline - time.monotonic()))
        if len(ready) != 1:
            raise RuntimeError(f"a push woke {len(ready)} of {len(parked)} parked claims")
        worker = next(w for w in parked if w.sock is ready[0])
        parked.remove(worker)
        got = wire.claimed(worker.read(1)[0])
        if len(got) != 1:
            raise RuntimeError(f"a parked claim got {len(got)} jobs for one push")
        data, n = wire.ack([h for h, _p in got])
        worker.call(data, n)
        if done + 1 < jobs:
            park(worker)
    return jobs


def measure(kind: str, work: str, server_cpus, redis_path: str | None, jobs: int, idle_s: float = IDLE_S,
            functions: int = 0, claimers: int = 1) -> dict:
    """One server: per job of ``jobs`` in lockstep (``claimers`` parked
    claims, one woken a job), its instructions and
    cache misses (the idle rate taken off), and what it runs a second idle;
    with ``functions``, that many of its C functions with the most misses
    of their own during the load."""
    server = Counted(kind, work, server_cpus, redis_path)
    try:
        key = "bench-instructions"
        wire = wire_for(wire_kind(kind), key)
        producer = Conn(HOST, server.port, timeout=120)
        workers = [Conn(HOST, server.port, timeout=120) for _ in range(claimers)]
        try:
            wire.create(producer, "memory")
            idle, idle_s, _ = server.count(lambda: time.sleep(idle_s))
            acked = []
            try:
                load, load_s, dump = server.count(lambda: acked.append(lockstep(producer, workers, wire, jobs)))
            except (ConnectionError, OSError) as e:
                raise RuntimeError(f"{LABELS[kind]} under callgrind: {e} during the load; {server.ending()}") from e
            top = most_missing(dump, functions, jobs) if functions else None
            left = wire.live(producer)
            wire.drop(producer)
        finally:
            producer.close()
            for worker in workers:
                worker.close()
    finally:
        server.stop()
    if left:
        raise RuntimeError(f"{LABELS[kind]}: {left} jobs left in the queue after {jobs} acked")
    per_job = {event: (load[event] - idle[event] / idle_s * load_s) / jobs for event in load}
    return {"jobs": acked[0], "seconds": load_s, "idle_per_s": idle["Ir"] / idle_s, "load_instructions": load["Ir"],
            "instructions": per_job["Ir"], "i1_misses": per_job["I1mr"],
            "d1_misses": per_job["D1mr"] + per_job["D1mw"], "events_per_job": per_job,
            **({"functions": top} if top is not None else {})}


# a row of callgrind_annotate's table: one cell per event ("1,234 (5.6%)", or "." for none), then file:function
_ROW = re.compile(r"^\s*((?:(?:[\d,]+ \(\s*[\d.]+%\)|\.)\s+)+)(\S.*?)(?:\s+\[[^\]]*\])?\s*$")
_CELL = re.compile(r"([\d,]+) \(\s*[\d.]+%\)|\.")


def most_missing(dump: str, n: int, jobs: int) -> list[dict]:
    """The ``n`` C functions with the most first-level misses of their own
    (I1 + D1) in a dump, per job: {function, instructions, i1_misses,
    d1_misses}.  A dump taken while the server runs credits the functions
    on its stack at that moment (the loop, the interpreter's frames) with
    the whole run; rows that claim half the total or more are those, and
    are left out: their own share is in the total, not in this list."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", dump],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"callgrind_annotate failed (exit {out.returncode}): {out.stderr[-2000:]}")
    shown = re.search(r"^Events shown:\s*(.*)$", out.stdout, re.M)
    events = shown.group(1).split() if shown else []
    rows: dict[str, dict] = {}
    total = 0
    for line in out.stdout.splitlines():
        m = _ROW.match(line)
        if m is None:
            continue
        cells = [int(c.group(1).replace(",", "")) if c.group(1) else 0 for c in _CELL.finditer(m.group(1))]
        counts = dict(zip(events, cells))
        if "PROGRAM TOTALS" in line:
            total = counts.get("Ir", 0)
            continue
        if total and counts.get("Ir", 0) * 2 >= total:
            continue
        file, _, function = m.group(2).rpartition(":")
        function = function.split("'")[0]              # "f'2": f called within itself
        name = f"{os.path.basename(file)}:{function}" if file else m.group(2)
        row = rows.setdefault(name, {"function": name, "instructions": 0, "i1_misses": 0, "d1_misses": 0})
        row["instructions"] += counts.get("Ir", 0) / jobs
        row["i1_misses"] += counts.get("I1mr", 0) / jobs
        row["d1_misses"] += (counts.get("D1mr", 0) + counts.get("D1mw", 0)) / jobs
    return sorted(rows.values(), key=lambda r: -(r["i1_misses"] + r["d1_misses"]))[:n]


def wire_kind(kind: str) -> str:
    """The wire a server speaks, as ``bench.queue`` names it."""
    return "redis" if kind == "redis" else "leaseq"


def run(redis_binary: str, json_path: str | None, kinds=KINDS, jobs: int = JOBS, idle_s: float = IDLE_S,
        functions: int = 0, say=None, claimers: int = 1) -> dict:
    """Count each of ``kinds`` in turn (redis only when installed, the
    compiled minimal queue only where it was built); ``functions``: list
    that many of leaseq's C functions with the most misses."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("--instructions needs valgrind (Debian package valgrind)")
    say = say or progress
    server_cpus, _load_cpus = placement()
    redis_path = shutil.which(redis_binary)
    redis_ver = redis_version(redis_path) if redis_path else None
    chosen = [k for k in kinds if (k != "redis" or redis_ver) and (k != "compiled" or compiled_minimal())]
    work = tempfile.mkdtemp(prefix="leaseq-bench-instructions-")
    results = {}
    try:
        for kind in chosen:
            say(f"{LABELS[kind]} under callgrind")
            results[kind] = measure(kind, work, server_cpus, redis_path, jobs, idle_s,
                                    functions if kind == "leaseq" else 0, claimers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"settings": {"jobs": jobs, "park_s": PARK_S, "idle_s": idle_s, "claimers": claimers},
              "machine": {"redis_server": redis_ver}, "results": results}
    notes = [f"{LABELS[k]}: not counted ({'redis-server not found' if k == 'redis' else 'not built'})"
             for k in kinds if k not in chosen]
    if notes:
        result["notes"] = notes
    return publish(result, report, json_path)


def report(result: dict) -> None:
    res, s = result["results"], result["settings"]
    base = res.get("compiled", {}).get("instructions")
    rows = [[LABELS[k], f"{r['instructions']:,.0f}", f"{r['instructions'] / base:.2f}" if base else "-",
             f"{r['i1_misses']:,.0f}", f"{r['d1_misses']:,.0f}", f"{r['idle_per_s']:,.0f}"] for k, r in res.items()]
    parked = "a parked claim" if s.get("claimers", 1) == 1 else f"{s['claimers']} parked claims"
    print_grid(f"leaseq bench floor --queue --instructions: {s['jobs']:,} jobs in lockstep over sockets ({parked}, "
               f"the push that wakes one, the ack), each server under callgrind; user space only, per job",
               ["server", "instructions", "vs compiled minimal", "I1 misses", "D1 misses", "idle instructions/s"],
               rows, right={1, 2, 3, 4, 5})
    top = res.get("leaseq", {}).get("functions")
    if top:
        print_grid(f"leaseq's {len(top)} C functions with the most first-level misses of their own, per job "
                   f"(not the event loop's or the interpreter's loop: see most_missing in bench/instructions.py)",
                   ["function", "instructions", "I1 misses", "D1 misses"],
                   [[f["function"], f"{f['instructions']:,.0f}", f"{f['i1_misses']:,.0f}", f"{f['d1_misses']:,.0f}"]
                    for f in top], right={1, 2, 3})
    for note in result.get("notes", []):
        print(f"note: {note}")
