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
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import hiredis

from .common import HOST, cpu_seconds, free_port, pin_threads, print_grid, publish, wait_pong
from .queue import LeaseqServer, RedisServer, placement, redis_version

CLIENTS = 12
PING = b"*1\r\n$4\r\nPING\r\n"
SERVERS = ("redis", "floor", "leaseq")
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


def serve(port: int) -> None:
    """``python -m leaseq.bench.floor --serve PORT``: the floor server, until SIGTERM."""
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        server = await loop.create_server(_Pong, HOST, port)
        await stop.wait()
        server.close()

    uvloop.run(main())


class FloorServer:
    kind = "floor"

    def __init__(self, server_cpus: set[int] | None) -> None:
        self.server_cpus = server_cpus
        self.proc: subprocess.Popen | None = None

    def start(self) -> tuple[int, int]:
        port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "leaseq.bench.floor", "--serve", str(port)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_pong(self.proc, port, time.monotonic() + START_TIMEOUT, "the floor server")
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

def run(rate: int, seconds: float, reps: int, redis_binary: str, json_path: str | None, say=None) -> dict:
    say = say or (lambda msg: print(f"# {msg}", file=sys.stderr, flush=True))
    server_cpus, load_cpus = placement()
    redis_path = shutil.which(redis_binary)
    redis_ver = redis_version(redis_path) if redis_path else None
    kinds = [k for k in SERVERS if k != "redis" or redis_ver]
    work = tempfile.mkdtemp(prefix="leaseq-bench-floor-")
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    try:
        for rep in range(reps):
            for kind in kinds if rep % 2 == 0 else kinds[::-1]:
                say(f"rep {rep + 1}/{reps}: {kind}")
                server = _Started(kind, work, server_cpus, redis_path)
                try:
                    port, pid = server.start()
                    runs[kind].append(measure(port, pid, rate, seconds, load_cpus))
                finally:
                    server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"settings": {"rate": rate, "seconds": seconds, "reps": reps, "clients": CLIENTS},
              "machine": {"server_cpus": sorted(server_cpus or []), "load_cpus": sorted(load_cpus or []),
                          "redis_server": redis_ver},
              "runs": runs,
              "results": {k: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for k, rs in runs.items()}}
    if not redis_ver:
        result["notes"] = [f"redis-server not found ({redis_binary!r}): the floor and leaseq only"]
    return publish(result, report, json_path)


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
    serve(parser.parse_args().serve)


if __name__ == "__main__":
    main()
