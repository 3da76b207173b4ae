"""``leaseq bench queue``: leaseq beside redis-server, same workloads, same
client machinery, same durability, so that a ratio says how far leaseq is
from a well-known server on this machine.

Pairing of the durability classes (each run starts a fresh server with a
fresh data directory, stopped by its PID afterwards):

- ``fsync``:  a leaseq queue created with ``DURABILITY fsync`` (replies to
  pushes and acks wait for fdatasync, group commit) against redis-server
  ``--appendonly yes --appendfsync always``.
- ``memory``: a leaseq queue with ``DURABILITY memory`` against
  redis-server ``--save "" --appendonly no``.
- ``replicated`` (leaseq only): the ``fsync`` class on a primary with one
  replica (another ``leaseq serve`` on this machine, not pinned: the
  kernel runs it on either CPU) and ``min-replicas-to-ack 1``: a reply that waits for
  the primary's fsync also waits for the replica's.  The report sets it
  beside leaseq's ``fsync`` class of the same run.
- ``replicated-async`` (leaseq only): the same with ``min-replicas-to-ack
  0``; during W3 at a fixed rate a sampler reads both nodes' replication
  offsets every millisecond and reports how far behind the replica was,
  in time (``lag_*_ms``).  Only in this class: with ``min-replicas-to-ack
  1`` the replies wait for the replica, so its lag is not the question,
  and the sampler's two thousand INFO calls a second would weigh on the
  latency that is (``LAG_SAMPLED``).  In both, the replica's own CPU a job
  (``replica_cpu_us_per_job``) is counted apart from the other processes'.

On the Redis side a queue is a stream with one consumer group: push =
XADD, claim = XREADGROUP, ack = XACK + XDEL in one write.

Workloads (128-byte payloads):

- ``w1`` produce: 8 connections push N jobs in batches of 100
  (QPUSHMANY 100 against 100 pipelined XADD).
- ``w2`` consume: N jobs preloaded, then 8 connections loop claim 100 →
  ack them until the queue is empty.
- ``w2g`` consume in groups (leaseq only: Redis has no groups): W2 on a
  queue with ``GROUP-CONCURRENCY 1``, the N jobs spread over 10,000 groups
  (``QPUSHMANY ... GROUPS``, job i in group i mod 10,000), so every claim
  takes turns among the groups and no group has two jobs in flight.
- ``w3max`` mixed at max rate: 2 producers (batches of 100) and 4 workers
  (blocking claim 100 → ack) for D seconds; producers hold back while the
  backlog is above BACKLOG_PER_WORKER jobs per worker, so the figure is
  jobs through per second, not how fast a backlog grows.
- ``w3rate`` mixed at a fixed rate: 8 producers push one job per call on a
  schedule adding up to ``--rate`` jobs/s, 4 workers claim with BLOCK; each
  payload carries the producer's CLOCK_MONOTONIC ns and the worker computes
  claim time - push time.

The load generator must never be the bottleneck: each connection is its own
process (fork), commands are encoded once with hiredis.pack_command and
reused (acks, whose tokens vary, are packed per call; timestamps are
spliced into a pre-encoded push), replies are parsed by hiredis.Reader on a
plain socket.  With two or more CPUs the server's threads are pinned to the
first CPU and the load processes to the second.  Server CPU seconds come
from /proc/<pid>/stat.

Reps are interleaved (rep 1 of every workload and server, then rep 2, ...,
the server order alternating) and the table shows medians.  Nothing is
asserted about speed.
"""

from __future__ import annotations

import array
import bisect
import math
import multiprocessing
import os
import platform
import queue as stdqueue
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from urllib.parse import urlsplit

import hiredis

from .common import (HOST, Daemon, cpu_by_process, free_port, percentile, pin_threads, print_grid, publish,
                     read_calls, steal_seconds, wait_pong, progress)

PAYLOAD = 128
BATCH = 100                   # jobs per push batch and per claim
CONNS = 8                     # W1 and W2 connections
MAX_PRODUCERS, MAX_WORKERS = 2, 4
RATE_PRODUCERS, RATE_WORKERS = 8, 4
BACKLOG_PER_WORKER = 4 * BATCH  # w3max: producers wait while more than this × workers are queued
BLOCK_MS = 100                # blocking claims return at least this often, so loops see their deadline
PRELOAD_CHUNK = 1000          # w2 preload: jobs per command
PRELOAD_WINDOW = 10           # w2 preload: commands in flight
DRAIN_GRACE = 2.0             # w3rate: seconds the workers may go on claiming after the producers stop
SUSTAINED = 0.97              # w3rate: pushed and claimed rates at least this share of the target
LOAD_BOUND = 0.9              # load processes' share of their CPU above which a figure may be load-bound
NOISY = 0.15                  # other processes' share of a CPU above which a run is called noisy
STARTUP_TIMEOUT = 60.0        # load processes connected and at the barrier
STAMP = b"\x00stamp!\x00"     # 8 bytes of a payload template replaced by the push time

DEFAULT_JOBS, QUICK_JOBS = 200_000, 10_000
DEFAULT_SECONDS, QUICK_SECONDS = 10.0, 1.5
DEFAULT_RATE = 5000
DEFAULT_REPS = 3
WORKLOADS = ("w1", "w2", "w2g", "w3max", "w3rate")
LEASEQ_ONLY = ("w2g",)
GROUPS = 10_000               # w2g: groups the jobs are spread over
CLASSES = ("fsync", "memory", "replicated", "replicated-async")
# the replicated classes: min-replicas-to-ack of the primary; their queues are DURABILITY fsync
REPLICATED = {"replicated": 1, "replicated-async": 0}
LAG_SAMPLE_S = 0.001          # replicated-async, w3rate: how often the lag sampler reads both offsets
LAG_SAMPLED = ("replicated-async",)   # the classes whose W3 at a fixed rate runs the lag sampler
TITLES = {"w1": "W1 produce", "w2": "W2 consume", "w2g": "W2g consume, 10,000 groups, GROUP-CONCURRENCY 1",
          "w3max": "W3 mixed, max", "w3rate": "W3 mixed, fixed rate"}


# --- the wire -------------------------------------------------------------

class ServerError(RuntimeError):
    """An error reply where the benchmark expected none."""


class Conn:
    """One plain socket and a hiredis.Reader: write pre-encoded bytes, read
    back a known number of replies.  No redis-py in the hot loop."""

    def __init__(self, host: str, port: int, auth: bytes | None = None, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()
        if auth:
            self.call(auth)

    def call(self, data: bytes, replies: int = 1) -> list:
        self.sock.sendall(data)
        return self.read(replies)

    def read(self, replies: int) -> list:
        out = []
        while len(out) < replies:
            reply = self.reader.gets()
            if reply is False:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    raise ConnectionError("the server closed the connection")
                self.reader.feed(chunk)
                continue
            if isinstance(reply, hiredis.ReplyError):
                raise ServerError(str(reply))
            out.append(reply)
        return out

    def close(self) -> None:
        self.sock.close()


def pack(*args) -> bytes:
    return hiredis.pack_command(tuple(args))


def payload() -> bytes:
    """A 128-byte payload whose first 8 bytes are the STAMP placeholder."""
    return STAMP + b"x" * (PAYLOAD - len(STAMP))


def stamped(template: bytes, offset: int) -> bytes:
    """``template`` with the current CLOCK_MONOTONIC ns at ``offset``."""
    return template[:offset] + time.monotonic_ns().to_bytes(8, "little") + template[offset + 8:]


def stamp_of(data: bytes) -> int:
    return int.from_bytes(data[:8], "little")


class LeaseqWire:
    """leaseq commands for a queue ``key``: QPUSHMANY / QPUSH, QCLAIM, QACK."""

    kind = "leaseq"

    def __init__(self, key: str) -> None:
        self.key = key

    def create(self, conn: Conn, cls: str) -> None:
        conn.call(pack("QCREATE", self.key, "DURABILITY", "fsync" if cls in REPLICATED else cls))

    def push_batch(self, count: int) -> tuple[bytes, int]:
        """(bytes, replies) pushing ``count`` jobs in one command."""
        return pack("QPUSHMANY", self.key, count, *[payload()] * count), 1

    def push_one(self) -> tuple[bytes, int]:
        """A single-job push and the offset of its stamp."""
        data = pack("QPUSH", self.key, payload())
        return data, data.index(STAMP)

    def claim(self, consumer: str, count: int, block_ms: int | None) -> bytes:
        extra = ("BLOCK", block_ms) if block_ms is not None else ()
        return pack("QCLAIM", self.key, consumer, "COUNT", count, *extra)

    def claimed(self, reply) -> list[tuple[bytes, bytes]]:
        """(lease token, payload) per job of a QCLAIM reply (RESP2: a flat
        field/value list per job).  A job's map starts id, payload, lease
        (docs/commands.md), read by position as a client that knows it would;
        a dict of the whole map, built per job, kept the load generator's CPU
        full on W2 while the server had room."""
        out = []
        for job in reply or ():
            if job[2] == b"payload" and job[4] == b"lease":
                out.append((job[5], job[3]))
            else:
                f = dict(zip(job[::2], job[1::2]))
                out.append((f[b"lease"], f[b"payload"]))
        return out

    def ack(self, handles: list[bytes]) -> tuple[bytes, int]:
        return pack("QACK", self.key, *handles), 1

    def live(self, conn: Conn) -> int:
        """Jobs not completed: ready + delayed + in flight (QINFO)."""
        info = conn.call(pack("QINFO", self.key))[0]
        f = dict(zip(info[::2], info[1::2]))
        return int(f[b"ready"]) + int(f[b"delayed"]) + int(f[b"in_flight"])

    def drop(self, conn: Conn) -> None:
        conn.call(pack("QDROP", self.key, "FORCE"))


class StreamWire:
    """The same operations on a Redis stream with consumer group GROUP:
    XADD, XREADGROUP ... STREAMS key >, XACK + XDEL."""

    kind = "redis"
    GROUP = "bench"

    def __init__(self, key: str) -> None:
        self.key = key

    def create(self, conn: Conn, cls: str) -> None:
        conn.call(pack("XGROUP", "CREATE", self.key, self.GROUP, "$", "MKSTREAM"))

    def push_batch(self, count: int) -> tuple[bytes, int]:
        return pack("XADD", self.key, "*", "d", payload()) * count, count

    def push_one(self) -> tuple[bytes, int]:
        data = pack("XADD", self.key, "*", "d", payload())
        return data, data.index(STAMP)

    def claim(self, consumer: str, count: int, block_ms: int | None) -> bytes:
        extra = ("BLOCK", block_ms) if block_ms is not None else ()
        return pack("XREADGROUP", "GROUP", self.GROUP, consumer, "COUNT", count, *extra, "STREAMS", self.key, ">")

    def claimed(self, reply) -> list[tuple[bytes, bytes]]:
        """(entry id, payload) per entry of an XREADGROUP reply."""
        out = []
        for _key, entries in reply or ():
            for entry_id, fields in entries:
                out.append((entry_id, fields[1]))
        return out

    def ack(self, handles: list[bytes]) -> tuple[bytes, int]:
        return pack("XACK", self.key, self.GROUP, *handles) + pack("XDEL", self.key, *handles), 2

    def live(self, conn: Conn) -> int:
        return int(conn.call(pack("XLEN", self.key))[0])

    def drop(self, conn: Conn) -> None:
        conn.call(pack("DEL", self.key))


# --- the servers ----------------------------------------------------------

@dataclass
class Endpoint:
    """Where one run's load goes, and the server process to account."""
    host: str
    port: int
    pid: int = 0
    auth: bytes | None = None
    key: str = "bench"
    replica_port: int = 0       # the replicated classes: the replica, for the lag sampler
    replica_pid: int = 0        # ... and its process, whose CPU is counted apart


class LeaseqServer:
    """A fresh ``leaseq serve`` per run (common.Daemon), or the daemon at
    ``url``: then each run uses a new queue, dropped afterwards, and the
    daemon is neither pinned nor stopped (it is not ours)."""

    kind = "leaseq"

    def __init__(self, work: str, server_cpus: set[int] | None, url: str | None = None,
                 replica_work: str | None = None) -> None:
        self.work = work
        self.replica_work = replica_work or work     # where a replica's data directory goes
        self.server_cpus = server_cpus
        self.url = url
        self.daemon: Daemon | None = None
        self.replica: Daemon | None = None
        self.runs = 0

    def start(self, cls: str) -> Endpoint:
        self.runs += 1
        if self.url:
            return self._attach()
        args = ("--min-replicas-to-ack", str(REPLICATED[cls])) if cls in REPLICATED else ()
        self.daemon = d = self._daemon("", args, pin=True)
        if cls in REPLICATED:
            # not pinned: on a machine of its own in production, here wherever the kernel finds room
            self.replica = self._daemon("-replica", ("--replicaof", f"{HOST} {d.port}"), pin=False,
                                        work=self.replica_work)
            wait_link(self.replica)
        return Endpoint(HOST, d.port, d.pid, replica_port=self.replica.port if self.replica else 0,
                        replica_pid=self.replica.pid if self.replica else 0)

    def _daemon(self, suffix: str, args: tuple, pin: bool, work: str | None = None) -> Daemon:
        name = f"leaseq-{self.runs}{suffix}"
        work = work or self.work
        d = Daemon(os.path.join(work, name), os.path.join(work, f"{name}.log"), args=args)
        d.start(timeout=120)
        if self.server_cpus and pin:
            pin_threads(d.pid, self.server_cpus)
        return d

    def _attach(self) -> Endpoint:
        u = urlsplit(self.url)
        auth = None
        if u.password is not None:
            auth = pack("AUTH", *([u.username] if u.username else []), u.password)
        ep = Endpoint(u.hostname or HOST, u.port or 6479, 0, auth, f"leaseq-bench-{uuid.uuid4().hex[:12]}")
        conn = Conn(ep.host, ep.port, ep.auth)
        try:
            info = conn.call(pack("INFO", "server"))[0].decode()
        finally:
            conn.close()
        pid = next((int(line.split(":", 1)[1]) for line in info.splitlines() if line.startswith("process_id:")), 0)
        if pid and os.path.exists(f"/proc/{pid}/stat"):
            ep.pid = pid
        return ep

    def post_mortem(self) -> str:
        """When the daemon this run started has exited: its exit status and
        the end of its log (empty while it runs, or at --url)."""
        d = self.daemon
        if d is None or d.proc is None or d.proc.poll() is None:
            return ""
        return (f"\nthe leaseq daemon (pid {d.pid}) had exited with {d.proc.returncode}; its log ends:\n"
                f"{d.log()[-3000:]}")

    def stop(self) -> None:
        for d in (self.replica, self.daemon):
            if d is not None:
                d.stop()
                shutil.rmtree(d.data_dir, ignore_errors=True)
        self.daemon = self.replica = None

    def kill(self) -> None:
        for d in (self.replica, self.daemon):
            if d is not None:
                d.kill()
        self.daemon = self.replica = None


def wait_link(replica: Daemon, timeout: float = 60.0) -> None:
    """Until the replica's link to its primary is up (its first sync done)."""
    deadline = time.monotonic() + timeout
    while replica.info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise RuntimeError(f"the replica's link did not come up in {timeout:.0f} s:\n{replica.log()[-2000:]}")
        time.sleep(0.02)


class LagSampler(threading.Thread):
    """Reads the primary's and the replica's replication offsets every
    ``LAG_SAMPLE_S``; ``lags_ms()`` is, for each replica sample, how long
    before it the primary had last been at an offset the replica had not
    reached: how far behind, in time, the replica was (0 when caught up).
    The resolution is the sampling period."""

    def __init__(self, ep: Endpoint) -> None:
        super().__init__(daemon=True, name="lag-sampler")
        self.primary = Conn(ep.host, ep.port, ep.auth)
        self.replica = Conn(ep.host, ep.replica_port, ep.auth)
        self.samples: list[tuple[float, int, int]] = []     # (time, primary offset, replica offset)
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(LAG_SAMPLE_S):
            primary = _offset(self.primary, "master_repl_offset")
            now = time.monotonic()
            self.samples.append((now, primary, _offset(self.replica, "slave_repl_offset")))

    def stop(self) -> list[float]:
        self.stopping.set()
        self.join(10)
        self.primary.close()
        self.replica.close()
        return self.lags_ms()

    def lags_ms(self) -> list[float]:
        """An upper bound of each lag: the primary wrote what the replica
        lacks after the sample before the first one that shows it written."""
        primaries = [primary for _, primary, _ in self.samples]      # never decreasing
        lags = []
        for i, (t, _, replica) in enumerate(self.samples):
            j = bisect.bisect_right(primaries, replica, 0, i + 1)
            lags.append((t - self.samples[max(j - 1, 0)][0]) * 1000 if j <= i else 0.0)
        return lags

    def period_ms(self) -> float:
        """The median time between samples: the lags' resolution."""
        times = [t for t, _, _ in self.samples]
        return statistics.median(b - a for a, b in zip(times, times[1:])) * 1000 if len(times) > 1 else math.nan


def _offset(conn: Conn, field: str) -> int:
    text = conn.call(pack("INFO", "replication"))[0].decode()
    return next(int(line.split(":", 1)[1]) for line in text.splitlines() if line.startswith(field + ":"))


# redis-server's persistence for each durability class
REDIS_PERSISTENCE = {
    "memory": ("--save", "", "--appendonly", "no"),
    "fsync": ("--save", "", "--appendonly", "yes", "--appendfsync", "always"),
}


class RedisServer:
    """A fresh redis-server per run on a free loopback port and a new data
    directory, configured for the durability class; stopped by its PID."""

    kind = "redis"

    def __init__(self, work: str, server_cpus: set[int] | None, binary: str) -> None:
        self.work = work
        self.server_cpus = server_cpus
        self.binary = binary
        self.proc: subprocess.Popen | None = None
        self.data_dir = ""
        self.runs = 0

    def start(self, cls: str) -> Endpoint:
        self.runs += 1
        self.data_dir = os.path.join(self.work, f"redis-{self.runs}")
        os.makedirs(self.data_dir)
        port = free_port()
        cmd = [self.binary, "--bind", HOST, "--port", str(port), "--protected-mode", "yes", "--daemonize", "no",
               "--dir", self.data_dir, "--logfile", os.path.join(self.data_dir, "redis.log"),
               *REDIS_PERSISTENCE[cls]]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        try:
            wait_pong(self.proc, port, time.monotonic() + 30, "redis-server")
        except RuntimeError:
            self.kill()
            raise
        if self.server_cpus:
            pin_threads(self.proc.pid, self.server_cpus)
        return Endpoint(HOST, port, self.proc.pid)

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL after 30 s; the data directory goes."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None


def redis_version(binary: str) -> str | None:
    """``redis-server --version``'s v=..., or None when it cannot run."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10,
                             stdin=subprocess.DEVNULL, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for word in out.split():
        if word.startswith("v="):
            return word[2:]
    return out.strip() or None


def wire_for(kind: str, key: str):
    return LeaseqWire(key) if kind == "leaseq" else StreamWire(key)


# --- the load processes ---------------------------------------------------
#
# Each function below runs in its own process on its own connection, after
# the start barrier; every loop is bounded by a count and by ``limit``
# seconds.  Each returns a dict with at least jobs, start_ns and end_ns.

def produce_batches(conn: Conn, wire, jobs: int, limit: float, **_) -> dict:
    """W1: push ``jobs`` in batches of BATCH, one command (or pipeline) per
    round trip; per-call latencies in ns."""
    full, full_n = wire.push_batch(BATCH)
    calls = array.array("q")
    done = 0
    start = time.monotonic_ns()
    deadline = start + int(limit * 1e9)
    while done < jobs and time.monotonic_ns() < deadline:
        k = min(BATCH, jobs - done)
        data, n = (full, full_n) if k == BATCH else wire.push_batch(k)
        t0 = time.monotonic_ns()
        conn.call(data, n)
        calls.append(time.monotonic_ns() - t0)
        done += k
    return {"jobs": done, "start_ns": start, "end_ns": time.monotonic_ns(), "calls_ns": calls.tobytes()}


def consume_batches(conn: Conn, wire, consumer: str, limit: float, **_) -> dict:
    """W2: claim BATCH (not blocking) → ack, until a claim finds nothing;
    per-cycle latencies in ns."""
    claim = wire.claim(consumer, BATCH, None)
    calls = array.array("q")
    done = 0
    start = time.monotonic_ns()
    deadline = start + int(limit * 1e9)
    while time.monotonic_ns() < deadline:
        t0 = time.monotonic_ns()
        jobs = wire.claimed(conn.call(claim)[0])
        if not jobs:
            break
        data, n = wire.ack([h for h, _p in jobs])
        conn.call(data, n)
        calls.append(time.monotonic_ns() - t0)
        done += len(jobs)
    return {"jobs": done, "start_ns": start, "end_ns": time.monotonic_ns(), "calls_ns": calls.tobytes()}


def produce_bounded(conn: Conn, wire, seconds: float, slot: int, pushed, acked, backlog: int, **_) -> dict:
    """W3 max: push batches for ``seconds``, holding back while more than
    ``backlog`` jobs are pushed and not yet acked (shared counters)."""
    data, n = wire.push_batch(BATCH)
    start = time.monotonic_ns()
    end = start + int(seconds * 1e9)
    done = 0
    while time.monotonic_ns() < end:
        if sum(pushed) - sum(acked) > backlog:
            time.sleep(0.0002)
            continue
        conn.call(data, n)
        done += BATCH
        pushed[slot] = done
    return {"jobs": done, "start_ns": start, "end_ns": time.monotonic_ns()}


def work_for(conn: Conn, wire, consumer: str, seconds: float, slot: int, acked, **_) -> dict:
    """W3 max: blocking claim of up to BATCH → ack, for ``seconds``."""
    claim = wire.claim(consumer, BATCH, BLOCK_MS)
    start = time.monotonic_ns()
    end = start + int(seconds * 1e9)
    done = 0
    while time.monotonic_ns() < end:
        jobs = wire.claimed(conn.call(claim)[0])
        if jobs:
            data, n = wire.ack([h for h, _p in jobs])
            conn.call(data, n)
            done += len(jobs)
            acked[slot] = done
    return {"jobs": done, "start_ns": start, "end_ns": time.monotonic_ns()}


def produce_at_rate(conn: Conn, wire, rate: float, phase: float, seconds: float, slot: int, pushed, done,
                    **_) -> dict:
    """W3 rate: one job per call at ``rate`` jobs/s, the k-th due at start +
    phase + k / rate (late sends go at once, none are skipped); the push
    time is stamped into the payload just before the send."""
    template, offset = wire.push_one()
    start = time.monotonic()
    count = int(rate * seconds)
    sent = 0
    try:
        while sent < count:
            due = start + phase + sent / rate
            now = time.monotonic()
            if now > start + seconds + DRAIN_GRACE:
                break
            if due > now:
                time.sleep(due - now)
            conn.call(stamped(template, offset))
            sent += 1
            pushed[slot] = sent
    finally:
        done[slot] = 1
    return {"jobs": sent, "start_ns": int(start * 1e9), "end_ns": time.monotonic_ns(), "due": count}


def work_until_drained(conn: Conn, wire, consumer: str, seconds: float, slot: int, claimed, pushed, done,
                       **_) -> dict:
    """W3 rate: blocking claims; for every job, claim time - push stamp.
    After ``seconds`` it goes on until every producer is done and every
    pushed job is claimed, for at most DRAIN_GRACE s more."""
    claim = wire.claim(consumer, BATCH, BLOCK_MS)
    latencies = array.array("q")
    start = time.monotonic_ns()
    window_end = start + int(seconds * 1e9)
    stop = window_end + int(DRAIN_GRACE * 1e9)
    total = in_window = 0
    while True:
        now = time.monotonic_ns()
        if now >= stop or (now >= window_end and all(done) and sum(claimed) >= sum(pushed)):
            break
        jobs = wire.claimed(conn.call(claim)[0])
        if not jobs:
            continue
        now = time.monotonic_ns()
        latencies.extend(now - stamp_of(p) for _h, p in jobs)
        data, n = wire.ack([h for h, _p in jobs])
        conn.call(data, n)
        total += len(jobs)
        in_window += len(jobs) if now <= window_end else 0
        claimed[slot] = total
    return {"jobs": total, "in_window": in_window, "start_ns": start, "end_ns": time.monotonic_ns(),
            "latencies_ns": latencies.tobytes()}


LOADS = {f.__name__: f for f in (produce_batches, consume_batches, produce_bounded, work_for, produce_at_rate,
                                  work_until_drained)}


def _load_process(name: str, kwargs: dict, ep: Endpoint, kind: str, cpus: set[int] | None, barrier, results,
                  index: int) -> None:
    """A load process: pin, connect, wait at the barrier, run, report."""
    out: dict
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        conn = Conn(ep.host, ep.port, ep.auth, timeout=max(30.0, BLOCK_MS / 1000 * 10))
        barrier.wait(STARTUP_TIMEOUT)
        t0 = time.process_time()
        out = LOADS[name](conn, wire_for(kind, ep.key), **kwargs)
        out["cpu_seconds"] = time.process_time() - t0
        conn.close()
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        barrier.abort()
        out = {"error": f"{name}: {type(e).__name__}: {e}"}
    results.put((index, out))


def run_load(specs: list[tuple[str, dict]], ep: Endpoint, kind: str, load_cpus: set[int] | None,
             limit: float) -> tuple[list[dict], dict]:
    """Start one process per (load function, kwargs), release them together
    and wait up to ``limit`` s; return their results and the run's
    accounting: wall seconds, the server's CPU seconds, and the CPU seconds
    of every other process on the machine (not the server, not this
    process or its load processes, which it reaps into its own count)."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(len(specs) + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=_load_process, args=(name, kw, ep, kind, load_cpus, barrier, results, i),
                         daemon=True, name=f"leaseq-bench-{name}-{i}") for i, (name, kw) in enumerate(specs)]
    for p in procs:
        p.start()
    outs: dict[int, dict] = {}
    server_cpus = placement()[0] or set(range(os.cpu_count() or 1))
    before, stolen, reads = cpu_by_process(), steal_seconds(server_cpus), read_calls(ep.pid)
    t0 = time.monotonic()
    try:
        try:
            barrier.wait(STARTUP_TIMEOUT)
        except threading.BrokenBarrierError:
            pass
        deadline = time.monotonic() + limit + STARTUP_TIMEOUT
        while len(outs) < len(procs) and time.monotonic() < deadline:
            try:
                i, out = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except stdqueue.Empty:
                break
            outs[i] = out
        wall = time.monotonic() - t0
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        results.close()
    after, stolen = cpu_by_process(), steal_seconds(server_cpus) - stolen
    reads = read_calls(ep.pid) - reads
    errors = [o["error"] for o in outs.values() if "error" in o]
    if errors or len(outs) < len(procs):
        raise RuntimeError("load failed: " + ("; ".join(errors[:4]) or f"{len(procs) - len(outs)} processes "
                                              f"reported nothing within {limit:.0f} s"))
    return [outs[i] for i in range(len(procs))], accounting(before, after, ep.pid, wall, stolen, reads,
                                                            ep.replica_pid)


def accounting(before: dict, after: dict, server_pid: int, wall: float, stolen: float = math.nan,
               reads: float = math.nan, replica_pid: int = 0) -> dict:
    """Server CPU and other processes' CPU between two cpu_by_process()
    snapshots (processes present in both; one that ended meanwhile counts
    in its parent once reaped), ``stolen``: the server CPUs' steal seconds
    meanwhile, and ``reads``: the server's read calls meanwhile.  A
    replicated class's replica is counted apart (``replica_cpu_s``), not
    among the other processes."""
    def used(pid: int) -> float:
        return after.get(pid, math.nan) - before.get(pid, math.nan) if pid else math.nan

    mine = {os.getpid(), server_pid, replica_pid}
    other = sum(after[p] - before[p] for p in before.keys() & after.keys() if p not in mine)
    return {"wall_s": wall, "server_cpu_s": used(server_pid), "other_cpu_s": max(other, 0.0), "steal_s": stolen,
            "reads": reads, "replica_cpu_s": used(replica_pid)}


# --- the workloads --------------------------------------------------------

@dataclass
class Settings:
    jobs: int
    seconds: float
    rate: int
    reps: int
    workloads: tuple
    classes: tuple
    load_cpus: set[int] | None
    limit: float = 120.0
    notes: list = field(default_factory=list)


def span_seconds(outs: list[dict]) -> float:
    """From the first process's start to the last one's end."""
    return (max(o["end_ns"] for o in outs) - min(o["start_ns"] for o in outs)) / 1e9


def ms_percentiles(ns: array.array, points=(50, 99, 99.9)) -> dict:
    values = sorted(ns)
    keys = {50: "p50_ms", 99: "p99_ms", 99.9: "p999_ms"}
    return {keys[p]: percentile(values, p) / 1e6 for p in points}


def gather(outs: list[dict], key: str) -> array.array:
    a = array.array("q")
    for o in outs:
        a.frombytes(o.get(key, b""))
    return a


def common_figures(jobs: int, span: float, acct: dict, outs: list[dict]) -> dict:
    """Server CPU (seconds, per job), the load generator's CPU and its share
    of one CPU, other processes' CPU as a share of one CPU, for every run."""
    cpu, wall = acct["server_cpu_s"], acct["wall_s"]
    load_cpu = sum(o["cpu_seconds"] for o in outs)
    return {"server_cpu_s": cpu, "server_cpu_us_per_job": cpu / jobs * 1e6 if jobs else math.nan,
            "load_cpu_s": load_cpu, "load_cpu_share": load_cpu / wall if wall else math.nan,
            "other_cpu_s": acct["other_cpu_s"], "other_cpu_pct": 100 * acct["other_cpu_s"] / wall if wall else math.nan,
            "steal_pct": 100 * acct.get("steal_s", math.nan) / wall if wall else math.nan,
            "server_reads_per_job": acct.get("reads", math.nan) / jobs if jobs else math.nan,
            "server_cpu_us_per_read": cpu / acct.get("reads", math.nan) * 1e6 if acct.get("reads") else math.nan,
            "wall_s": wall, "span_s": span,
            **({"replica_cpu_us_per_job": acct["replica_cpu_s"] / jobs * 1e6}
               if jobs and not math.isnan(acct.get("replica_cpu_s", math.nan)) else {})}


def w1(conn: Conn, ep: Endpoint, wire, kind: str, s: Settings) -> dict:
    per = [s.jobs // CONNS + (1 if i < s.jobs % CONNS else 0) for i in range(CONNS)]
    outs, acct = run_load([("produce_batches", {"jobs": n, "limit": s.limit}) for n in per], ep, kind,
                               s.load_cpus, s.limit)
    jobs = sum(o["jobs"] for o in outs)
    span = span_seconds(outs)
    live = wire.live(conn)
    return {"jobs": jobs, "jobs_per_s": jobs / span, **ms_percentiles(gather(outs, "calls_ns"), (50, 99)),
            "check": "ok" if live == s.jobs == jobs else f"{live} jobs in the queue after pushing {jobs} of {s.jobs}",
            **common_figures(jobs, span, acct, outs)}


def preload(conn: Conn, wire, jobs: int, groups: int = 0) -> float:
    """Push ``jobs`` over one connection, PRELOAD_WINDOW commands of
    PRELOAD_CHUNK jobs in flight (with ``groups``, job i in group i mod
    ``groups``, leaseq only); return the seconds taken."""
    t0 = time.monotonic()
    full, full_n = wire.push_batch(PRELOAD_CHUNK)
    done = 0
    while done < jobs:
        data, replies = b"", 0
        for _ in range(PRELOAD_WINDOW):
            k = min(PRELOAD_CHUNK, jobs - done)
            if k <= 0:
                break
            if groups:
                names = [b"g%d" % ((done + i) % groups) for i in range(k)]
                d, n = pack("QPUSHMANY", wire.key, k, *[payload()] * k, "GROUPS", *names), 1
            else:
                d, n = (full, full_n) if k == PRELOAD_CHUNK else wire.push_batch(k)
            data, replies, done = data + d, replies + n, done + k
        conn.call(data, replies)
    return time.monotonic() - t0


def w2(conn: Conn, ep: Endpoint, wire, kind: str, s: Settings) -> dict:
    return consume(conn, ep, wire, kind, s, preload(conn, wire, s.jobs))


def w2g(conn: Conn, ep: Endpoint, wire, kind: str, s: Settings) -> dict:
    """W2 on a queue with GROUP-CONCURRENCY 1 whose jobs are spread over GROUPS groups."""
    conn.call(pack("QALTER", wire.key, "GROUP-CONCURRENCY", 1))
    return consume(conn, ep, wire, kind, s, preload(conn, wire, s.jobs, GROUPS))


def consume(conn: Conn, ep: Endpoint, wire, kind: str, s: Settings, loaded: float) -> dict:
    """W2's timed part: CONNS connections claim BATCH → ack until a claim finds nothing."""
    outs, acct = run_load([("consume_batches", {"consumer": f"c{i}", "limit": s.limit}) for i in range(CONNS)],
                          ep, kind, s.load_cpus, s.limit)
    jobs = sum(o["jobs"] for o in outs)
    span = span_seconds(outs)
    live = wire.live(conn)
    return {"jobs": jobs, "jobs_per_s": jobs / span, "preload_s": loaded,
            **ms_percentiles(gather(outs, "calls_ns"), (50, 99)),
            "check": "ok" if live == 0 and jobs == s.jobs else f"{live} jobs left, {jobs} of {s.jobs} acked",
            **common_figures(jobs, span, acct, outs)}


def shared_counters(n: int):
    """Counters one slot per process (each writes only its own), so no lock."""
    return multiprocessing.get_context("fork").Array("q", n, lock=False)


def w3max(conn: Conn, ep: Endpoint, wire, kind: str, s: Settings) -> dict:
    pushed, acked = shared_counters(MAX_PRODUCERS), shared_counters(MAX_WORKERS)
    backlog = BACKLOG_PER_WORKER * MAX_WORKERS
    specs = [("produce_bounded", {"seconds": s.seconds, "slot": i, "pushed": pushed, "acked": acked,
                                  "backlog": backlog}) for i in range(MAX_PRODUCERS)]
    specs += [("work_for", {"consumer": f"w{i}", "seconds": s.seconds, "slot": i, "acked": acked})
              for i in range(MAX_WORKERS)]
    outs, acct = run_load(specs, ep, kind, s.load_cpus, s.seconds + s.limit)
    through = sum(o["jobs"] for o in outs[MAX_PRODUCERS:])
    span = span_seconds(outs)
    return {"jobs": through, "jobs_per_s": through / span,
            "pushed_per_s": sum(o["jobs"] for o in outs[:MAX_PRODUCERS]) / span, "backlog_limit": backlog,
            **common_figures(through, span, acct, outs)}


def w3rate(conn: Conn, ep: Endpoint, wire, kind: str, s: Settings) -> dict:
    pushed, claimed = shared_counters(RATE_PRODUCERS), shared_counters(RATE_WORKERS)
    done = shared_counters(RATE_PRODUCERS)
    each = s.rate / RATE_PRODUCERS
    specs = [("produce_at_rate", {"rate": each, "phase": i / s.rate, "seconds": s.seconds, "slot": i,
                                  "pushed": pushed, "done": done}) for i in range(RATE_PRODUCERS)]
    specs += [("work_until_drained", {"consumer": f"w{i}", "seconds": s.seconds, "slot": i, "claimed": claimed,
                                      "pushed": pushed, "done": done}) for i in range(RATE_WORKERS)]
    outs, acct = run_load(specs, ep, kind, s.load_cpus, s.seconds + DRAIN_GRACE + s.limit)
    producers, workers = outs[:RATE_PRODUCERS], outs[RATE_PRODUCERS:]
    sent = sum(o["jobs"] for o in producers)
    push_span = span_seconds(producers)
    pushed_per_s = sent / push_span
    claimed_per_s = sum(o["in_window"] for o in workers) / s.seconds
    lat = gather(workers, "latencies_ns")
    return {"target_per_s": s.rate, "jobs": sent, "pushed_per_s": pushed_per_s, "jobs_per_s": claimed_per_s,
            "claimed_total": sum(o["jobs"] for o in workers), "samples": len(lat),
            "sustained": pushed_per_s >= SUSTAINED * s.rate and claimed_per_s >= SUSTAINED * s.rate,
            **ms_percentiles(lat), **common_figures(sent, push_span, acct, outs)}


RUNNERS = {"w1": w1, "w2": w2, "w2g": w2g, "w3max": w3max, "w3rate": w3rate}


def run_one(server, workload: str, cls: str, s: Settings) -> dict:
    """One fresh server (or queue), one workload, one class; always stopped.
    A failed run says whether the daemon it started had exited, and how."""
    ep = server.start(cls)
    try:
        wire = wire_for(server.kind, ep.key)
        conn = Conn(ep.host, ep.port, ep.auth)
        try:
            wire.create(conn, cls)
            sampler = LagSampler(ep) if cls in LAG_SAMPLED and workload == "w3rate" else None
            if sampler:
                sampler.start()
            figures = RUNNERS[workload](conn, ep, wire, server.kind, s)
            if sampler:
                lags = sampler.stop()
                figures.update({"lag_p50_ms": percentile(lags, 50), "lag_p99_ms": percentile(lags, 99),
                                "lag_max_ms": max(lags, default=0.0), "lag_samples": len(lags),
                                "lag_resolution_ms": sampler.period_ms()})
            wire.drop(conn)     # a daemon at --url keeps running: leave nothing behind
        finally:
            conn.close()
    except (RuntimeError, OSError) as e:
        post_mortem = getattr(server, "post_mortem", None)      # (only leaseq's knows its daemon's log)
        raise RuntimeError(f"{e}{post_mortem() if post_mortem else ''}") from None
    finally:
        server.stop()
    return figures


# --- the whole run --------------------------------------------------------

def placement() -> tuple[set[int] | None, set[int] | None]:
    """(server CPUs, load CPUs): the first and second allowed CPU when
    there are two or more, else no pinning."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        return {cpus[0]}, {cpus[1]}
    return None, None


def leaseq_version() -> str:
    try:
        return version("leaseq")
    except PackageNotFoundError:
        return "unknown"


def machine_facts(server_cpus, load_cpus, redis_ver: str | None) -> dict:
    return {"cpus": os.cpu_count(), "server_cpus": sorted(server_cpus or []), "load_cpus": sorted(load_cpus or []),
            "python": platform.python_version(), "hiredis": hiredis.__version__, "redis_server": redis_ver,
            "leaseq": leaseq_version(), "platform": platform.platform(), "loadavg_start": os.getloadavg()}


def median_figures(runs: list[dict]) -> dict:
    """The median of each numeric figure over the reps; booleans as a count
    ("2/3"); other values from the first rep."""
    out: dict = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if isinstance(values[0], bool):
            out[key] = f"{sum(values)}/{len(values)}"
        elif isinstance(values[0], (int, float)):
            finite = [v for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
            out[key] = statistics.median(finite) if finite else math.nan
        elif key == "check":
            bad = [v for v in values if v != "ok"]
            out[key] = bad[0] if bad else "ok"
        else:
            out[key] = values[0]
    return out


def ratios(lq: dict, rd: dict | None) -> dict:
    if not rd:
        return {}
    out = {}
    for key, v in lq.items():
        w = rd.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(w, (int, float)) and w:
            out[key] = v / w
    return out


def run(jobs: int, seconds: float, rate: int, reps: int, workloads: tuple, classes: tuple, url: str | None,
        redis_binary: str, json_path: str | None, say=None, replica_dir: str | None = None) -> dict:
    say = say or progress
    server_cpus, load_cpus = placement()
    redis_path = shutil.which(redis_binary)
    redis_ver = redis_version(redis_path) if redis_path else None
    s = Settings(jobs, seconds, rate, reps, workloads, classes, load_cpus)
    s.notes += setup_notes(redis_binary if not redis_ver else None, load_cpus, url)
    result: dict = {"settings": settings_record(s, url), "machine": machine_facts(server_cpus, load_cpus, redis_ver)}
    work = tempfile.mkdtemp(prefix="leaseq-bench-queue-")
    replica_work = tempfile.mkdtemp(prefix="leaseq-bench-replica-", dir=replica_dir) if replica_dir else None
    if replica_dir:
        s.notes.append(f"the replicas' data directories are under {replica_dir}")
    servers = [LeaseqServer(work, server_cpus, url, replica_work)]
    if redis_ver:
        servers.append(RedisServer(work, server_cpus, redis_path))
    t0 = time.monotonic()
    try:
        runs = run_interleaved(servers, s, say)
    finally:
        for server in servers:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)
        if replica_work:
            shutil.rmtree(replica_work, ignore_errors=True)
    result["machine"]["loadavg_end"] = os.getloadavg()
    result["runs"] = runs
    result["results"] = summarize(runs, workloads, classes)
    result["notes"] = s.notes + noise_warning(runs) + load_warnings(runs) + check_warnings(runs)
    result["total_seconds"] = round(time.monotonic() - t0, 1)
    return publish(result, report, json_path)


def run_interleaved(servers: list, s: Settings, say) -> list[dict]:
    """Rep 1 of everything, then rep 2, ...; within a rep each workload and
    class runs on every server back to back, leaseq first in odd reps and
    redis first in even ones, so a slow spell of the machine hits both."""
    runs = []
    for rep in range(s.reps):
        order = servers if rep % 2 == 0 else servers[::-1]
        for workload in s.workloads:
            for cls in s.classes:
                for server in order:
                    if (workload in LEASEQ_ONLY or cls in REPLICATED) and server.kind != "leaseq":
                        continue
                    say(f"rep {rep + 1}/{s.reps}: {workload} {cls} {server.kind}")
                    figures = run_one(server, workload, cls, s)
                    runs.append({"rep": rep + 1, "workload": workload, "class": cls, "server": server.kind,
                                 **figures})
    return runs


def setup_notes(missing_redis: str | None, load_cpus, url: str | None) -> list[str]:
    notes = []
    if missing_redis:
        notes.append(f"redis-server not found ({missing_redis!r}): leaseq only; install it (Debian: apt-get "
                     f"install redis-server) for the side-by-side figures")
    if not load_cpus:
        notes.append("fewer than 2 CPUs: server and load are not pinned and share the CPU")
    if url:
        notes.append(f"leaseq at {where(url)}: not started, pinned or stopped by the benchmark; each run uses a "
                     f"new queue (dropped after it)")
    return notes


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be benchmarked, or None: the benchmark's traffic
    stays on this machine's loopback, where the server's CPU can be read."""
    u = urlsplit(url)
    if u.scheme not in ("redis", ""):
        return f"{url!r}: use redis://[[user]:password@]host:port"
    if (u.hostname or "") not in LOOPBACK:
        return f"{u.hostname!r} is not a loopback address: the benchmark only talks to 127.0.0.1"
    return None


def where(url: str) -> str:
    """host:port of a URL, without any password."""
    u = urlsplit(url)
    return f"{u.hostname}:{u.port or 6479}"


def settings_record(s: Settings, url: str | None) -> dict:
    return {
        "jobs": s.jobs, "seconds": s.seconds, "rate": s.rate, "reps": s.reps, "workloads": list(s.workloads),
        "classes": list(s.classes), "payload_bytes": PAYLOAD, "batch": BATCH, "connections": CONNS,
        "max_rate": {"producers": MAX_PRODUCERS, "workers": MAX_WORKERS,
                     "backlog_limit": BACKLOG_PER_WORKER * MAX_WORKERS, "block_ms": BLOCK_MS},
        "fixed_rate": {"producers": RATE_PRODUCERS, "workers": RATE_WORKERS, "block_ms": BLOCK_MS,
                       "sustained_share": SUSTAINED, "drain_grace_s": DRAIN_GRACE},
        "leaseq": where(url) if url else "started per run", "redis_args": REDIS_PERSISTENCE,
    }


def summarize(runs: list[dict], workloads, classes) -> dict:
    """results[workload][class] = {leaseq: medians, redis: medians or None,
    ratio: leaseq ÷ redis per numeric figure}."""
    out: dict = {}
    for w in workloads:
        out[w] = {}
        for c in classes:
            cell: dict = {}
            for kind in ("leaseq", "redis"):
                mine = [{k: v for k, v in r.items() if k not in ("rep", "workload", "class", "server")}
                        for r in runs if r["workload"] == w and r["class"] == c and r["server"] == kind]
                cell[kind] = median_figures(mine) if mine else None
            cell["ratio"] = ratios(cell["leaseq"], cell["redis"])
            out[w][c] = cell
    return out


def load_warnings(runs: list[dict]) -> list[str]:
    """Runs in which the load processes used ≥ LOAD_BOUND of their CPU: the
    load generator may have been the limit there, not the server."""
    return [f"load generator at {r['load_cpu_share']:.0%} of its CPU in {run_name(r)}: may be load-bound"
            for r in runs if r.get("load_cpu_share", 0) >= LOAD_BOUND]


def noise_warning(runs: list[dict]) -> list[str]:
    """One line for the runs during which other processes used ≥ NOISY of
    a CPU (each cell's median is a table row, each run's in the JSON)."""
    noisy = sorted((r for r in runs if r.get("other_cpu_pct", 0) >= 100 * NOISY), key=lambda r: -r["other_cpu_pct"])
    if not noisy:
        return []
    pcts = [r["other_cpu_pct"] for r in noisy]
    line = (f"other processes used {NOISY:.0%} of a CPU or more during {len(noisy)} of {len(runs)} runs "
            f"(median {statistics.median(pcts):.0f} %, most {pcts[0]:.0f} % in {run_name(noisy[0])}): "
            f"those figures are noisy; see the 'other processes' CPU %' rows")
    return [line]


def run_name(r: dict) -> str:
    return f"{r['workload']} {r['class']} {r['server']} rep {r['rep']}"


def check_warnings(runs: list[dict]) -> list[str]:
    return [f"check failed in {run_name(r)}: {r['check']}" for r in runs if r.get("check", "ok") != "ok"]


# --- the table ------------------------------------------------------------

# (figure key, label, better when the ratio is ...; None: no ratio, context only)
NOISE_ROWS = [("other_cpu_pct", "other processes' CPU %", None),
              ("steal_pct", "server CPU stolen by the host %", None)]
ROWS = {
    "w1": [("jobs_per_s", "jobs/s", ">1"), ("p99_ms", "push call p99 ms", "<1"),
           ("server_cpu_s", "server CPU s", "<1"), ("server_cpu_us_per_job", "server CPU us/job", "<1")],
    "w2": [("jobs_per_s", "jobs/s", ">1"), ("p99_ms", "claim+ack p99 ms", "<1"),
           ("server_cpu_s", "server CPU s", "<1"), ("server_cpu_us_per_job", "server CPU us/job", "<1")],
    "w2g": [("jobs_per_s", "jobs/s", ">1"), ("p99_ms", "claim+ack p99 ms", "<1"),
            ("server_cpu_s", "server CPU s", "<1"), ("server_cpu_us_per_job", "server CPU us/job", "<1")],
    "w3max": [("jobs_per_s", "jobs/s through", ">1"), ("server_cpu_s", "server CPU s", "<1"),
              ("server_cpu_us_per_job", "server CPU us/job", "<1")],
    "w3rate": [("jobs_per_s", "achieved jobs/s", ">1"), ("sustained", "target sustained (reps)", ""),
               ("p50_ms", "push->claim p50 ms", "<1"), ("p99_ms", "push->claim p99 ms", "<1"),
               ("p999_ms", "push->claim p999 ms", "<1"), ("server_cpu_s", "server CPU s", "<1"),
               ("server_cpu_us_per_job", "server CPU us/job", "<1"),
               ("server_reads_per_job", "server reads/job", None),
               ("server_cpu_us_per_read", "server CPU us/read", "<1")],
}


def table_rows(results: dict) -> list[list]:
    rows = []
    for w, by_class in results.items():
        for c, cell in by_class.items():
            lq, rd = cell["leaseq"], cell["redis"]
            for key, label, better in ROWS[w] + NOISE_ROWS:
                ratio = cell["ratio"].get(key) if rd and better is not None else None
                rows.append([TITLES[w], c, label, lq.get(key), rd.get(key) if rd else "-",
                             ratio if ratio is not None else "-", better if ratio is not None else ""])
    return rows


def report(r: dict) -> None:
    s, m = r["settings"], r["machine"]
    pin = (f"server on CPU {m['server_cpus'][0]}, load on CPU {m['load_cpus'][0]}" if m["load_cpus"]
           else "not pinned")
    load_start = " ".join(f"{x:.2f}" for x in m["loadavg_start"])
    load_end = " ".join(f"{x:.2f}" for x in m["loadavg_end"])
    print(f"machine: {m['cpus']} CPUs ({pin}), Python {m['python']}, hiredis {m['hiredis']}, "
          f"redis-server {m['redis_server'] or 'not installed'}, leaseq {m['leaseq']}; "
          f"load average {load_start} at start, {load_end} at end")
    for note in r["notes"]:
        print(f"note: {note}")
    title = (f"leaseq bench queue: {s['jobs']:,} jobs of {s['payload_bytes']} bytes (W1, W2), W3 {s['seconds']:g} s "
             f"each (fixed rate {s['rate']:,} jobs/s), median of {s['reps']} rep(s); fsync = leaseq DURABILITY fsync "
             f"vs redis appendfsync always, memory = DURABILITY memory vs redis without persistence; "
             f"ratio = leaseq / redis; {r['total_seconds']} s in all")
    print_grid(title, ["workload", "class", "figure", "leaseq", "redis", "leaseq/redis", "better"],
               table_rows(r["results"]), right={3, 4, 5})
    results = r["results"]
    if "w2g" in results and "w2" in results:
        for c, cell in results["w2g"].items():
            plain, grouped = results["w2"][c]["leaseq"]["jobs_per_s"], cell["leaseq"]["jobs_per_s"]
            print(f"W2g vs W2, leaseq {c}: {grouped:,.0f} vs {plain:,.0f} jobs/s = {grouped / plain:.2f} "
                  f"(groups take turns; redis has no groups)")
    rows = replication_rows(results)
    if rows:
        print_grid("leaseq replicated (one replica on this machine, not pinned) beside leaseq fsync of the same run; "
                   "lag (replicated-async) = how far behind the replica was, an upper bound at the sampler's resolution", ["workload", "class", "figure", "replicated", "fsync", "replicated/fsync"],
                   rows, right={3, 4, 5})


def replication_rows(results: dict) -> list[list]:
    """Each replicated class's throughput, push->claim latency and replica
    lag beside the fsync class's figure of the same run; the replica's CPU
    a job beside the unreplicated server's."""
    rows = []
    for w, by_class in results.items():
        plain = by_class.get("fsync", {}).get("leaseq")
        for c in REPLICATED:
            mine = by_class.get(c, {}).get("leaseq")
            if not mine:
                continue
            for key in ("jobs_per_s", "p50_ms", "p99_ms", "server_cpu_us_per_job", "replica_cpu_us_per_job",
                        "lag_p50_ms", "lag_p99_ms", "lag_max_ms", "lag_resolution_ms"):
                if key not in mine:
                    continue
                beside = "server_cpu_us_per_job" if key == "replica_cpu_us_per_job" else key
                base = plain.get(beside) if plain else None
                ratio = mine[key] / base if base and beside in plain and not key.startswith("lag") else "-"
                rows.append([TITLES[w], c, key, mine[key], base if base is not None else "-", ratio])
    return rows
