"""Crash test: a concurrent workload against fsync queues while the daemon is
killed with SIGKILL at random moments, then a check of everything the clients
saw against docs/semantics.md §4 (§4.1, §4.2, §4.3, §4.5 and §4.8, and §4.9 job by
job); the check is ``analyze`` in crash_rules.py, one checker per rule, whose
docstrings say exactly what each accepts.

Shape of a run (one per lease durability, ``LEASEQ_LEASE_DURABILITY``):

* producer threads push unique payloads with QPUSH and QPUSHMANY;
* worker threads QCLAIM ... COUNT n LEASE short BLOCK, then per job: ack
  (sometimes acking the same token twice), extend then ack or nack, nack, let
  the lease expire and come back later with the old token (QACK, QNACK or
  QEXTEND, the "late" ops that rule 8 is about), or work slower than the lease;
* the main thread kills the daemon (SIGKILL) after random delays, restarts it
  on the same directory and port, and *audits* the recovered state (QGET of
  every job id that may exist, QINFO) before any client reconnects; clients
  reconnect only through a gate the main thread holds while it kills, restarts
  and audits, so each connection belongs to exactly one daemon run
  ("incarnation") and every audit sees the state recovery produced;
* at the end the workload stops, the daemon is stopped cleanly (SIGTERM),
  restarted once more and audited a last time.

Everything is recorded client side with the daemon's replies and client wall
times (the daemon's clock is ``time.time()`` on the same machine).  A command
that failed with a connection error has an *unknown* outcome and is recorded as
such, never as a success.  Each worker's QCLAIM uses a consumer name of its own,
so an audit that finds a job leased to the consumer of a QCLAIM whose reply was
lost proves that lease was granted (a token handed out that no client saw).

The clients are a small RESP2 client (``Resp``) over one socket with hiredis's
reader: no connection pool, no automatic retry, no silent reconnect (redis-py
retries connection errors by default, which would turn an unknown outcome
into a duplicate).

Run with ``-s`` to see the summary line of each mode.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections import defaultdict, deque

import hiredis
import pytest

from crash_rules import analyze
from harness import HOST, Daemon, as_map

QUEUES = ("crash-a", "crash-b")
PRODUCERS = 3
WORKERS = 4
KILLS = 6
KILL_DELAY_S = (0.7, 2.6)        # random workload time before each kill
WORKLOAD_LIMIT_S = 40            # every client thread stops by then, whatever happens
MAX_PUSH_OPS = 3000              # per producer
MAX_WORKER_ITERATIONS = 5000     # per worker
LEASES_MS = (250, 300, 400)
SCAN_SLACK = 64                  # extra ids audited past the ids a run may have assigned
AUDIT_CHUNK = 400


def now_ms() -> float:
    return time.time() * 1000.0


# -- a minimal RESP2 client ------------------------------------------------------------------

class ReplyError(Exception):
    """An error reply (the command ran and was refused)."""


class Resp:
    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=2.0)
        self.sock.settimeout(timeout)
        self.timeout = timeout
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def _read(self):
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            if time.monotonic() > deadline:
                raise TimeoutError("no complete reply in time")
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("connection closed by the daemon")
            self.reader.feed(data)

    def call(self, *args):
        self.sock.sendall(hiredis.pack_command(args))
        reply = self._read()
        if isinstance(reply, hiredis.ReplyError):
            raise ReplyError(str(reply))
        return reply

    def pipeline(self, commands: list) -> list:
        out = []
        for i in range(0, len(commands), AUDIT_CHUNK):
            chunk = commands[i:i + AUDIT_CHUNK]
            self.sock.sendall(b"".join(hiredis.pack_command(tuple(c)) for c in chunk))
            out.extend(self._read() for _ in chunk)
        return out

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


# -- what the clients saw -----------------------------------------------------------------------

class Push:
    __slots__ = ("q", "inc", "payloads", "ids", "unknown", "t_send", "t_recv")

    def __init__(self, q, inc, payloads, t_send):
        self.q, self.inc, self.payloads, self.t_send = q, inc, payloads, t_send
        self.ids = None
        self.unknown = False
        self.t_recv = None


class Claim:
    """One QCLAIM command."""
    __slots__ = ("q", "inc", "consumer", "lease", "t_send", "t_recv", "unknown", "entries")

    def __init__(self, q, inc, consumer, lease, t_send):
        self.q, self.inc, self.consumer, self.lease, self.t_send = q, inc, consumer, lease, t_send
        self.t_recv = None
        self.unknown = False
        self.entries = []


class Lease:
    """One job of a claim reply: one token handed out."""
    __slots__ = ("job", "token", "deadline", "deliveries", "payload", "start", "inc", "t_recv",
                 "consumer", "ops")

    def __init__(self, claim: Claim, m: dict):
        self.job = (claim.q, m["id"])
        self.token = m["lease"]
        self.deadline = m["deadline"]
        self.deliveries = m["deliveries"]
        self.payload = m["payload"]
        self.start = m["deadline"] - claim.lease       # the daemon's clock at the claim
        self.inc = claim.inc
        self.t_recv = claim.t_recv
        self.consumer = claim.consumer
        self.ops = []

    @property
    def order(self):
        """Claim order of a job's leases: by run, then by deliveries (exact within a run)."""
        return (self.inc, self.deliveries)


class Op:
    """QACK / QNACK / QEXTEND with one token."""
    __slots__ = ("kind", "lease", "inc", "t_send", "t_recv", "result", "unknown", "late", "lease_ms")

    def __init__(self, kind, lease, inc, t_send, late, lease_ms=None):
        self.kind, self.lease, self.inc, self.t_send, self.late = kind, lease, inc, t_send, late
        self.lease_ms = lease_ms            # QEXTEND ... LEASE ms
        self.t_recv = None
        self.result = None
        self.unknown = False

    @property
    def success(self) -> bool:
        if self.unknown:
            return False
        if self.kind == "extend":
            return self.result is not None
        return self.result >= 1


class World:
    def __init__(self, port: int, seed: int) -> None:
        self.port = port
        self.seed = seed
        self.lock = threading.Lock()
        self.gate = threading.Lock()        # held by the main thread: kill, restart, audit
        self.stop = threading.Event()
        self.limit = time.monotonic() + WORKLOAD_LIMIT_S
        self.inc = 0
        self.pushes: list[Push] = []
        self.claims: list[Claim] = []
        self.ops: list[Op] = []
        self.errors: list[str] = []
        self.attempted = defaultdict(int)   # (queue, run) -> jobs a push was tried for
        self.start_id: dict = {}            # (queue, run) -> QINFO next_id when the run started
        self.audits: dict = {}              # run -> {(queue, id): QGET map or None}
        self.audit_info: dict = {}          # run -> {queue: QINFO map}
        self.known_ids: set = set()
        self.late: deque = deque()          # (not before, Lease): leases left to expire
        self.kills = 0
        self.final_run = None
        self.stop_rc = None

    def running(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.limit

    def connect(self):
        """A new connection and the run it belongs to (None when stopping)."""
        while self.running():
            if not self.gate.acquire(timeout=1.0):
                continue
            try:
                inc = self.inc
                try:
                    return Resp(self.port), inc
                except OSError:
                    pass
            finally:
                self.gate.release()
            time.sleep(0.02)
        return None, None

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)


# -- client threads -------------------------------------------------------------------------------

def guarded(world: World, fn, *args) -> None:
    """Thread body: an unexpected exception is recorded (the test fails), not lost."""
    try:
        fn(*args)
    except Exception:
        import traceback
        world.error(traceback.format_exc())


def producer(world: World, n: int) -> None:
    rng = random.Random(world.seed * 1000 + n)
    conn, inc = None, None
    seq = 0
    for _ in range(MAX_PUSH_OPS):
        if not world.running():
            break
        if conn is None:
            conn, inc = world.connect()
            if conn is None:
                break
        q = rng.choice(QUEUES)
        k = 1 if rng.random() < 0.5 else rng.randint(2, 8)
        payloads = [b"P%d.%d.%d" % (n, seq, i) for i in range(k)]
        seq += 1
        with world.lock:
            world.attempted[(q, inc)] += k
        rec = Push(q, inc, payloads, now_ms())
        try:
            if k == 1:
                ids = [conn.call("QPUSH", q, payloads[0])]
            else:
                ids = conn.call("QPUSHMANY", q, k, *payloads)
            rec.t_recv = now_ms()
            rec.ids = list(ids)
        except ReplyError as e:
            world.error(f"producer {n}: {e}")
        except OSError:
            rec.unknown = True
            conn.close()
            conn = None
        with world.lock:
            world.pushes.append(rec)
            if rec.ids:
                world.known_ids.update((q, i) for i in rec.ids)
        time.sleep(rng.uniform(0.005, 0.04))
    if conn is not None:
        conn.close()


class Worker:
    def __init__(self, world: World, n: int) -> None:
        self.world = world
        self.n = n
        self.rng = random.Random(world.seed * 1000 + 100 + n)
        self.conn = None
        self.inc = None
        self.claims = 0

    def op(self, kind: str, lease: Lease, *extra, late: bool = False) -> Op:
        """Run one QACK/QNACK/QEXTEND and record it; connection errors propagate."""
        q = lease.job[0]
        cmd = {"ack": "QACK", "nack": "QNACK", "extend": "QEXTEND"}[kind]
        rec = Op(kind, lease, self.inc, now_ms(), late, extra[1] if kind == "extend" else None)
        try:
            reply = self.conn.call(cmd, q, lease.token, *extra)
            rec.t_recv = now_ms()
            rec.result = reply[0] if kind == "extend" else reply
        except ReplyError as e:
            self.world.error(f"worker {self.n}: {cmd}: {e}")
            rec = None
        except OSError:
            rec.unknown = True
            raise
        finally:
            if rec is not None:
                with self.world.lock:
                    self.world.ops.append(rec)
                    lease.ops.append(rec)
        return rec

    def handle(self, lease: Lease, claim_lease_ms: int) -> None:
        rng = self.rng
        r = rng.random()
        if r < 0.48:
            o = self.op("ack", lease)
            if o and o.success and rng.random() < 0.15:
                self.op("ack", lease)                  # acking twice: must be 0
        elif r < 0.60:
            self.op("extend", lease, "LEASE", rng.choice((300, 450, 600)))
            if rng.random() < 0.7:
                self.op("ack", lease)
            else:
                self.nack(lease, rng.choice((0, 100)))
        elif r < 0.68:
            # extend, keep holding it, finish it later (a late op)
            o = self.op("extend", lease, "LEASE", rng.choice((500, 700, 900)))
            with self.world.lock:
                self.world.late.append((time.monotonic() + rng.uniform(0.1, 1.2), lease))
        elif r < 0.80:
            self.nack(lease, rng.choice((0, 0, 50, 200)))
        elif r < 0.97:
            # leave it: the lease runs out; come back later with this token
            with self.world.lock:
                self.world.late.append((time.monotonic() + rng.uniform(0.15, 1.2), lease))
        else:
            # slower than the lease, then ack (stale if someone re-claimed it meanwhile)
            time.sleep((claim_lease_ms + rng.uniform(-50, 150)) / 1000.0)
            self.op("ack", lease)

    def nack(self, lease: Lease, delay: int) -> None:
        o = self.op("nack", lease, "DELAY", delay)
        if o and o.success and self.rng.random() < 0.25:
            # a released token must stay stale: try it again later
            with self.world.lock:
                self.world.late.append((time.monotonic() + self.rng.uniform(0.05, 1.0), lease))

    def late_op(self) -> None:
        with self.world.lock:
            if not self.world.late or self.world.late[0][0] > time.monotonic():
                return
            _t, lease = self.world.late.popleft()
        r = self.rng.random()
        if r < 0.5:
            self.op("ack", lease, late=True)
        elif r < 0.75:
            self.op("nack", lease, "DELAY", 0, late=True)
        else:
            o = self.op("extend", lease, "LEASE", 300, late=True)
            if o and o.success:
                self.op("ack", lease, late=True)

    def run(self) -> None:
        world = self.world
        rng = self.rng
        pending: list = []
        for _ in range(MAX_WORKER_ITERATIONS):
            if not world.running():
                break
            if self.conn is None:
                self.conn, self.inc = world.connect()
                if self.conn is None:
                    break
            try:
                if rng.random() < 0.35:
                    self.late_op()
                q = rng.choice(QUEUES)
                consumer = f"w{self.n}-{self.claims}"
                self.claims += 1
                lease_ms = rng.choice(LEASES_MS)
                count = rng.randint(1, 5)
                claim = Claim(q, self.inc, consumer, lease_ms, now_ms())
                try:
                    reply = self.conn.call("QCLAIM", q, consumer, "COUNT", count, "LEASE", lease_ms,
                                           "BLOCK", 100)
                    claim.t_recv = now_ms()
                    claim.entries = [Lease(claim, as_map(m, str_keys=True)) for m in reply]
                except OSError:
                    claim.unknown = True
                    raise
                finally:
                    with world.lock:
                        world.claims.append(claim)
                        world.known_ids.update(e.job for e in claim.entries)
                pending = list(claim.entries)
                while pending:
                    self.handle(pending[0], lease_ms)
                    pending.pop(0)
            except ReplyError as e:
                world.error(f"worker {self.n}: {e}")
            except OSError:
                self.conn.close()
                self.conn = None
                # leases this worker never got to: use their tokens late, maybe after the restart
                with world.lock:
                    for lease in pending:
                        world.late.append((time.monotonic() + rng.uniform(0.0, 0.8), lease))
                pending = []
        if self.conn is not None:
            self.conn.close()


# -- audits -------------------------------------------------------------------------------------

def audit(world: World, run: int) -> None:
    """QGET every job that may exist, before any client of ``run`` connects.

    Ids are assigned consecutively from QINFO's ``next_id`` within a run, so the
    ids a run may have assigned are ``[start, start + pushed-or-tried + slack)``;
    ids seen in replies are added in case that assumption ever breaks."""
    conn = Resp(world.port, timeout=30)
    try:
        info = {}
        for q in QUEUES:
            info[q] = as_map(conn.call("QINFO", q), str_keys=True)
            world.start_id[(q, run)] = info[q]["next_id"]
        with world.lock:
            keys = set(world.known_ids)
            attempted = dict(world.attempted)
        for (q, r), first in list(world.start_id.items()):
            if r < run:
                keys.update((q, i) for i in range(first, first + attempted.get((q, r), 0) + SCAN_SLACK))
        keys = sorted(keys)
        replies = conn.pipeline([("QGET", q, i) for q, i in keys])
    finally:
        conn.close()
    world.audits[run] = {k: (None if r is None else as_map(r, str_keys=True)) for k, r in zip(keys, replies)}
    world.audit_info[run] = info


# -- the test -------------------------------------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("lease_durability", ["async", "fsync"])
def test_kill9_during_concurrent_workload(tmp_path, lease_durability):
    seed = int(os.environ.get("LEASEQ_CRASH_SEED") or time.time_ns() % 1_000_000_007)
    rng = random.Random(seed)
    d = Daemon(tmp_path / "data", env={"LEASEQ_LEASE_DURABILITY": lease_durability})
    t0 = time.monotonic()
    threads: list[threading.Thread] = []
    world = None
    try:
        d.start()
        world = World(d.port, seed)
        admin = Resp(d.port)
        for q in QUEUES:
            assert admin.call("QCREATE", q, "DURABILITY", "fsync", "LEASE", 1000) == b"OK"
        admin.close()
        audit(world, 0)

        threads = [threading.Thread(target=guarded, args=(world, producer, world, n), daemon=True)
                   for n in range(PRODUCERS)]
        threads += [threading.Thread(target=guarded, args=(world, Worker(world, n).run), daemon=True)
                    for n in range(WORKERS)]
        for t in threads:
            t.start()

        for _ in range(KILLS):
            time.sleep(rng.uniform(*KILL_DELAY_S))     # a random moment, not a condition
            with world.gate:
                d.kill()
                world.kills += 1
                d.restart()
                audit(world, world.inc + 1)
                world.inc += 1

        time.sleep(rng.uniform(0.3, 1.0))
        world.stop.set()
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "a client thread did not stop"
        with world.gate:
            world.stop_rc = d.stop()
            d.restart()
            audit(world, world.inc + 1)
            world.inc += 1
            world.final_run = world.inc
        d.stop()
    finally:
        if world is not None:
            world.stop.set()
        d.kill()
        for t in threads:
            t.join(10)

    counts, details, stats = analyze(world, exact_leases=lease_durability == "fsync")
    pushed = sum(len(p.ids) for p in world.pushes if p.ids)
    unknown_pushes = sum(1 for p in world.pushes if p.unknown)
    tokens = sum(len(c.entries) for c in world.claims)
    print(f"\ncrash[lease-durability={lease_durability}] seed={seed}: jobs pushed={pushed} "
          f"(+{unknown_pushes} pushes with lost replies, {stats['unknown pushes applied']} applied), "
          f"acked={stats['acked jobs']}, tokens={tokens}, kills={world.kills}, "
          f"runs={world.inc + 1}, ops={len(world.ops)} (late {sum(o.late for o in world.ops)}, "
          f"unknown {sum(o.unknown for o in world.ops)}), stale ops checked={stats['stale ops checked']}, "
          f"unseen grants={stats['grants seen only by audit']}, "
          f"claims lost in crashes={stats['claims lost in crashes']}, "
          f"lost-lease overlaps excused={stats['overlaps from lost lease records']}, "
          f"{time.monotonic() - t0:.1f} s; violations: " + " ".join(f"{k}={v}" for k, v in counts.items()))
    for line in details:
        print("  " + line)
    assert world.kills >= 5
    assert pushed > 0 and stats["acked jobs"] > 0 and stats["stale ops checked"] > 0, \
        "the workload did not exercise the rules"
    assert counts == {k: 0 for k in counts}, "\n".join(details) + "\n" + d.log()[-4000:]
