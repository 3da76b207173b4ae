"""``leaseq bench floor``: what one request costs a server, beside the least
it can cost any Python server on uvloop.

PING at a fixed rate from ``CLIENTS`` connections (each sends its next PING
when its answer came and its turn is due, as W3's producers push), against
three servers one after the other, each alone on the first CPU with the load
on the second:

* ``redis``: redis-server without persistence;
* ``floor``: a bare uvloop protocol (``serve`` below) that parses with
  hiredis and answers +PONG to every command: the kernel's receive and
  send, uvloop's turn and one Python call, nothing else.  No Python daemon
  on uvloop can answer a request for less;
* ``leaseq``: ``leaseq serve`` with its defaults.

The default rate, 15,000 a second, is the three requests of a job (a
push, a claim, an ack) at W3's 5,000 jobs a second.  Printed: the server's
CPU µs per request (median of the reps, servers interleaved) and each
against redis-server's.  Three times leaseq's figure minus the floor's is
what dispatch, the connection and the replies cost a job at that rate
before any queue work (docs/performance.md, "The floor under a request").

With ``--queue`` the unit is a job, not a request: W3 at a fixed rate
(``leaseq bench queue``'s ``w3rate``, memory class: single-job pushes,
workers claiming with BLOCK and acking) against redis-server (Streams), a
*minimal queue* (``MiniQueue`` below: the least a lease queue can do per
job in Python on uvloop), the same minimal queue compiled with its state
in C fields (``bench/_minimal.pyx``, where it was built) and leaseq.  The
minimal queue's figure is the floor for any request path written in
Python on this stack, the compiled one's for any path compiled on uvloop
(docs/performance.md, "The floor under a job").
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque

import hiredis

from .common import HOST, cpu_seconds, free_port, pin_threads, print_grid, publish, wait_pong, progress
from .queue import Endpoint, LeaseqServer, RedisServer, Settings, placement, redis_version, run_one

CLIENTS = 12
PING = b"*1\r\n$4\r\nPING\r\n"
SERVERS = ("redis", "floor", "leaseq")
QUEUE_SERVERS = ("redis", "minimal", "compiled", "leaseq")
QUEUE_LABELS = {"redis": "redis-server", "minimal": "minimal queue, Python", "compiled": "minimal queue, compiled",
                "leaseq": "leaseq"}
START_TIMEOUT = 30.0


# -- the bare server ---------------------------------------------------------------------

class _Pong(asyncio.Protocol):
    """Answers +PONG to every complete command, all of one read in one write."""

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.reader = hiredis.Reader()

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        n = 0
        try:
            while self.reader.gets() is not False:
                n += 1
        except hiredis.ProtocolError:           # an inline command (the readiness check's PING)
            self.reader = hiredis.Reader()
            n += 1
        if n:
            self.transport.write(b"+PONG\r\n" * n)


# -- the minimal queue -------------------------------------------------------------------

def _resp(value) -> bytes:
    """RESP2: bytes as bulk strings, ints, lists, None as a nil array, str as a simple string."""
    kind = type(value)
    if kind is bytes:
        return b"$%d\r\n%s\r\n" % (len(value), value)
    if kind is int:
        return b":%d\r\n" % value
    if kind is list:
        return b"*%d\r\n" % len(value) + b"".join(_resp(v) for v in value)
    if value is None:
        return b"*-1\r\n"
    return b"+%s\r\n" % value.encode()


class _Job:
    __slots__ = ("id", "payload")

    def __init__(self, jid: bytes, payload: bytes) -> None:
        self.id, self.payload = jid, payload


class _Queue:
    def __init__(self) -> None:
        self.ready: deque = deque()       # jobs, oldest first
        self.leased: dict = {}            # lease token -> job
        self.waiters: deque = deque()     # (MiniQueue, count, TimerHandle) of parked claims, in order


class MiniQueue(asyncio.Protocol):
    """The least a lease queue does per job in Python on uvloop: hiredis
    parses, a dict finds the command, a job object goes on a FIFO, a claim
    leases it under a new token (kept in a dict) and answers the job as
    leaseq does (``id``, ``payload``, ``lease``), an ack drops the token, a
    claim that finds nothing parks with a BLOCK timer and is served at the
    end of the loop's turn, as leaseq serves.  Nothing else: no log, no
    options beyond COUNT and BLOCK, no lease expiry, no checks.  Just enough
    of the wire for ``leaseq bench queue``'s W3 (QCREATE, QPUSH, QCLAIM,
    QACK, QINFO, QDROP, INFO's process_id, PING).  ``bench/_minimal.pyx``
    is its compiled twin, with the same replies
    (tests/integration/test_bench.py holds them to the same bytes)."""

    queues: dict = {}
    ids = itertools.count(1)
    woken: set = set()                    # queues with parked claims and ready jobs, served at the turn's end
    loop = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.reader = hiredis.Reader()
        self.pending: deque = deque()
        self.parked = False
        self.out: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        try:
            while (command := self.reader.gets()) is not False:
                self.pending.append(command)
        except hiredis.ProtocolError:     # an inline command (the readiness check's PING)
            self.reader = hiredis.Reader()
            self.pending.append([b"PING"])
        self.run()

    def run(self) -> None:
        while self.pending and not self.parked:
            reply = self.COMMANDS.get(self.pending[0][0].lower(), MiniQueue.other)(self, self.pending.popleft())
            if not self.parked:
                self.out.append(_resp(reply))
        if self.out:
            self.transport.write(b"".join(self.out))
            self.out = []

    def claim(self, q: _Queue, count: int) -> list:
        out = []
        while q.ready and len(out) < count:
            job = q.ready.popleft()
            token = b"%s-%d" % (job.id, next(self.ids))
            q.leased[token] = job
            out.append([b"id", job.id, b"payload", job.payload, b"lease", token])
        return out

    def qpush(self, args: list):
        q = self.queues[args[1]]
        job = _Job(b"%d" % next(self.ids), args[2])
        q.ready.append(job)
        if q.waiters:
            if not self.woken:
                self.loop.call_soon(MiniQueue.serve_woken)
            self.woken.add(q)
        return job.id

    def qclaim(self, args: list):
        q = self.queues[args[1]]
        options = dict(zip((a.lower() for a in args[3::2]), args[4::2]))
        count = int(options.get(b"count", 1))
        jobs = self.claim(q, count)
        if jobs or b"block" not in options:
            return jobs
        self.parked = True
        q.waiters.append((self, count, self.loop.call_later(int(options[b"block"]) / 1000, self.timed_out, q)))
        return None

    def qack(self, args: list):
        leased = self.queues[args[1]].leased
        return sum(leased.pop(token, None) is not None for token in args[2:])

    def qcreate(self, args: list):
        self.queues.setdefault(args[1], _Queue())
        return "OK"

    def qdrop(self, args: list):
        self.queues.pop(args[1], None)
        return "OK"

    def qinfo(self, args: list):
        q = self.queues[args[1]]
        return [b"ready", len(q.ready), b"delayed", 0, b"in_flight", len(q.leased)]

    def info(self, args: list):
        return b"# Server\r\nprocess_id:%d\r\n" % os.getpid()

    def other(self, args: list):
        return "PONG"

    COMMANDS = {b"qpush": qpush, b"qclaim": qclaim, b"qack": qack, b"qcreate": qcreate, b"qdrop": qdrop,
                b"qinfo": qinfo, b"info": info}

    @classmethod
    def serve_woken(cls) -> None:
        woken, cls.woken = cls.woken, set()
        for q in woken:
            while q.ready and q.waiters:
                conn, count, timer = q.waiters.popleft()
                timer.cancel()
                conn.answer(conn.claim(q, count))

    def connection_lost(self, exc) -> None:
        for q in self.queues.values():
            for conn, _count, timer in q.waiters:
                if conn is self:
                    timer.cancel()
            q.waiters = deque(w for w in q.waiters if w[0] is not self)

    def timed_out(self, q: _Queue) -> None:
        q.waiters = deque(w for w in q.waiters if w[0] is not self)
        self.answer(None)

    def answer(self, reply) -> None:
        self.parked = False
        self.out.append(_resp(reply))
        self.run()


def compiled_minimal():
    """The minimal queue compiled (``bench/_minimal.pyx``), or None where it
    was not built (no C compiler, or LEASEQ_PURE_BUILD=1)."""
    try:
        from . import _minimal
    except ImportError:
        return None
    return _minimal


def serve(port: int, protocol=_Pong) -> None:
    """``python -m leaseq.bench.floor --serve PORT``: the floor server (with
    ``--queue``, the minimal queue; ``--compiled``, its compiled twin), until
    SIGTERM."""
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        MiniQueue.loop = loop
        compiled = compiled_minimal()
        if compiled is not None:
            compiled.set_loop(loop)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        server = await loop.create_server(protocol, HOST, port)
        await stop.wait()
        server.close()

    uvloop.run(main())


class FloorServer:
    kind = "floor"
    name = "the floor server"
    flags: tuple = ()

    def __init__(self, server_cpus: set[int] | None) -> None:
        self.server_cpus = server_cpus
        self.proc: subprocess.Popen | None = None

    def start(self) -> tuple[int, int]:
        port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "leaseq.bench.floor", "--serve", str(port), *self.flags],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_pong(self.proc, port, time.monotonic() + START_TIMEOUT, self.name)
        except RuntimeError as e:
            self.kill()
            raise RuntimeError(str(e)) from None
        if self.server_cpus:
            pin_threads(self.proc.pid, self.server_cpus)
        return port, self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


class MiniQueueServer(FloorServer):
    """The minimal queue (or its compiled twin), started fresh for a run, as
    ``bench.queue.run_one`` starts a server (it speaks leaseq's wire)."""

    kind = "leaseq"

    def __init__(self, server_cpus: set[int] | None, compiled: bool = False) -> None:
        super().__init__(server_cpus)
        self.flags = ("--queue", "--compiled") if compiled else ("--queue",)
        self.name = "the compiled minimal queue" if compiled else "the minimal queue"

    def start(self, cls: str):
        port, pid = super().start()
        return Endpoint(HOST, port, pid)


class _Started:
    """One of the three servers, started fresh for a run: (port, pid), then stop."""

    def __init__(self, kind: str, work: str, server_cpus, redis_path: str | None) -> None:
        self.kind = kind
        if kind == "floor":
            self.server = FloorServer(server_cpus)
        elif kind == "redis":
            self.server = RedisServer(work, server_cpus, redis_path)
        else:
            self.server = LeaseqServer(work, server_cpus)

    def start(self) -> tuple[int, int]:
        if self.kind == "floor":
            return self.server.start()
        ep = self.server.start("memory")
        return ep.port, ep.pid

    def stop(self) -> None:
        self.server.stop()


# -- the load ----------------------------------------------------------------------------

def _client(port: int, rate: float, phase: float, seconds: float, cpus, barrier, results) -> None:
    """One connection: PING at ``rate`` a second, the k-th due at start + phase + k / rate."""
    import socket
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        sock = socket.create_connection((HOST, port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        barrier.wait(START_TIMEOUT)
        start = time.monotonic()
        count, sent = int(rate * seconds), 0
        while sent < count:
            due = start + phase + sent / rate
            now = time.monotonic()
            if now > start + 2 * seconds:              # far behind: stop, the report says the rate was missed
                break
            if due > now:
                time.sleep(due - now)
            sock.sendall(PING)
            if not sock.recv(64).startswith(b"+PONG"):
                raise RuntimeError("no +PONG")
            sent += 1
        sock.close()
        results.put(sent)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        barrier.abort()
        results.put(f"{type(e).__name__}: {e}")


def measure(port: int, pid: int, rate: int, seconds: float, load_cpus) -> dict:
    """PING ``port`` at ``rate`` for ``seconds``: requests answered, the rate
    reached, and the server's CPU µs per request."""
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(CLIENTS + 1), ctx.Queue()
    procs = [ctx.Process(target=_client, args=(port, rate / CLIENTS, i / rate, seconds, load_cpus, barrier, results),
                         daemon=True) for i in range(CLIENTS)]
    for p in procs:
        p.start()
    try:
        barrier.wait(START_TIMEOUT)
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        outs = [results.get(timeout=2 * seconds + START_TIMEOUT) for _ in procs]
        cpu1, t1 = cpu_seconds(pid), time.monotonic()
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    errors = [o for o in outs if isinstance(o, str)]
    if errors:
        raise RuntimeError(f"a PING client failed: {errors[0]}")
    n = sum(outs)
    return {"requests": n, "per_s": n / (t1 - t0), "cpu_us_per_request": (cpu1 - cpu0) / n * 1e6}


# -- the run -----------------------------------------------------------------------------

def _interleaved(servers: tuple, reps: int, redis_binary: str, say, one) -> tuple[dict, dict]:
    """``one(kind, work, server_cpus, load_cpus, redis_path)`` for each
    server kind (redis only when installed) and rep, the order reversed
    every other rep: ({kind: [figures of each rep]}, the machine's facts)."""
    say = say or progress
    server_cpus, load_cpus = placement()
    redis_path = shutil.which(redis_binary)
    redis_ver = redis_version(redis_path) if redis_path else None
    kinds = [k for k in servers if k != "redis" or redis_ver]
    work = tempfile.mkdtemp(prefix="leaseq-bench-floor-")
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    try:
        for rep in range(reps):
            for kind in kinds if rep % 2 == 0 else kinds[::-1]:
                say(f"rep {rep + 1}/{reps}: {kind}")
                runs[kind].append(one(kind, work, server_cpus, load_cpus, redis_path))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return runs, {"server_cpus": sorted(server_cpus or []), "load_cpus": sorted(load_cpus or []),
                  "redis_server": redis_ver}


def run(rate: int, seconds: float, reps: int, redis_binary: str, json_path: str | None, say=None) -> dict:
    def one(kind, work, server_cpus, load_cpus, redis_path) -> dict:
        server = _Started(kind, work, server_cpus, redis_path)
        try:
            port, pid = server.start()
            return measure(port, pid, rate, seconds, load_cpus)
        finally:
            server.stop()

    runs, machine = _interleaved(SERVERS, reps, redis_binary, say, one)
    result = {"settings": {"rate": rate, "seconds": seconds, "reps": reps, "clients": CLIENTS},
              "machine": machine, "runs": runs,
              "results": {k: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for k, rs in runs.items()}}
    if not machine["redis_server"]:
        result["notes"] = [f"redis-server not found ({redis_binary!r}): the floor and leaseq only"]
    return publish(result, report, json_path)


def run_queue(rate: int, seconds: float, reps: int, redis_binary: str, json_path: str | None, say=None) -> dict:
    """``--queue``: W3 at ``rate`` jobs a second (memory class) against
    redis-server, the minimal queue in Python and compiled, and leaseq,
    reps interleaved."""
    def one(kind, work, server_cpus, load_cpus, redis_path) -> dict:
        if kind in ("minimal", "compiled"):
            server = MiniQueueServer(server_cpus, compiled=kind == "compiled")
        elif kind == "leaseq":
            server = LeaseqServer(work, server_cpus)
        else:
            server = RedisServer(work, server_cpus, redis_path)
        figures = run_one(server, "w3rate", "memory", Settings(0, seconds, rate, reps, ("w3rate",), ("memory",),
                                                               load_cpus))
        return {key: figures[key] for key in ("jobs", "claimed_total", "jobs_per_s", "sustained",
                                              "server_cpu_us_per_job", "p99_ms")}

    built = compiled_minimal() is not None
    runs, machine = _interleaved(tuple(k for k in QUEUE_SERVERS if k != "compiled" or built), reps, redis_binary,
                                 say, one)
    result = {"settings": {"queue": True, "rate": rate, "seconds": seconds, "reps": reps},
              "machine": machine, "runs": runs,
              "results": {k: {"jobs_per_s": statistics.median(r["jobs_per_s"] for r in rs),
                              "sustained": f"{sum(r['sustained'] for r in rs)}/{len(rs)}",
                              "server_cpu_us_per_job": statistics.median(r["server_cpu_us_per_job"] for r in rs),
                              "p99_ms": statistics.median(r["p99_ms"] for r in rs)} for k, rs in runs.items()}}
    notes = [] if machine["redis_server"] else [f"redis-server not found ({redis_binary!r}): no Redis figures"]
    if not built:
        notes.append("the compiled minimal queue (bench/_minimal.pyx) was not built: the Python one only")
    if notes:
        result["notes"] = notes
    return publish(result, report_queue, json_path)


def times(figure: float, against: float | None) -> str:
    """``figure / against`` to two places, or "-" when there is nothing
    to divide by: no Redis figure, or a run too short for the server's CPU
    time to have moved a clock tick (10 ms) at all."""
    return f"{figure / against:.2f}" if against else "-"


def report_queue(result: dict) -> None:
    res, s = result["results"], result["settings"]
    redis = res.get("redis", {}).get("server_cpu_us_per_job")
    rows = [[QUEUE_LABELS[kind], f"{res[kind]['jobs_per_s']:,.0f}", res[kind]["sustained"],
             f"{res[kind]['server_cpu_us_per_job']:.1f}",
             times(res[kind]['server_cpu_us_per_job'], redis)]
            for kind in QUEUE_SERVERS if kind in res]
    print_grid(f"leaseq bench floor --queue: W3 at {s['rate']:,} single-job pushes/s (memory class), "
               f"{s['seconds']:g} s, median of {s['reps']} rep(s); server alone on CPU "
               f"{result['machine']['server_cpus'] or 'any'}",
               ["server", "jobs/s", "sustained", "CPU us/job", "vs redis"], rows, right={1, 2, 3, 4})
    for kind in ("minimal", "compiled"):
        if "leaseq" in res and kind in res:
            print(f"leaseq against the {QUEUE_LABELS[kind]}: "
                  f"{times(res['leaseq']['server_cpu_us_per_job'], res[kind]['server_cpu_us_per_job'])}")
    for note in result.get("notes", []):
        print(f"note: {note}")


def report(result: dict) -> None:
    res, s = result["results"], result["settings"]
    redis = res.get("redis", {}).get("cpu_us_per_request")
    rows = []
    for kind in SERVERS:
        if kind not in res:
            continue
        r = res[kind]
        rows.append([kind, f"{r['per_s']:,.0f}", f"{r['cpu_us_per_request']:.1f}",
                     f"{r['cpu_us_per_request'] / redis:.2f}" if redis else "-"])
    print_grid(f"leaseq bench floor: PING at {s['rate']:,}/s from {s['clients']} connections, {s['seconds']:g} s, "
               f"median of {s['reps']} rep(s); server alone on CPU {result['machine']['server_cpus'] or 'any'}",
               ["server", "PINGs/s", "CPU us/request", "vs redis"], rows, right={1, 2, 3})
    if "leaseq" in res and "floor" in res:
        above = res["leaseq"]["cpu_us_per_request"] - res["floor"]["cpu_us_per_request"]
        print(f"leaseq above the floor: {above:.1f} us a request, {3 * above:.1f} us a job of three requests")
    for note in result.get("notes", []):
        print(f"note: {note}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", type=int, required=True, help="Run the floor server on this loopback port.")
    parser.add_argument("--queue", action="store_true", help="Serve the minimal queue instead of +PONG.")
    parser.add_argument("--compiled", action="store_true", help="With --queue: its compiled twin.")
    args = parser.parse_args()
    if args.compiled and compiled_minimal() is None:
        parser.error("the compiled minimal queue (bench/_minimal.pyx) was not built")
    serve(args.serve, (compiled_minimal().MiniQueue if args.compiled else MiniQueue) if args.queue else _Pong)


if __name__ == "__main__":
    main()
