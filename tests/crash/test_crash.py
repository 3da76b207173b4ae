"""Crash test: a concurrent workload against fsync queues while the daemon is
killed with SIGKILL at random moments, then a check of everything the clients
saw against docs/semantics.md §4 (§4.1, §4.2, §4.3, §4.5 and §4.8, and §4.9 job by
job); the comments in ``analyze`` say exactly what each check accepts.

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


# -- the check ----------------------------------------------------------------------------------

def analyze(world: World, exact_leases: bool):
    """Count violations of docs/semantics.md §4.1, §4.2, §4.3, §4.5, §4.8, §4.9
    (per job) and of plain integrity (payloads, duplicates, all-or-none pushes,
    QINFO vs QGET, error replies).

    Returns (violations per rule, details, stats)."""
    V = {"rule1": set(), "rule2": set(), "rule3": set(), "rule5": set(), "rule8": set(), "rule9": set(),
         "other": set()}
    details: list[str] = []
    stats = defaultdict(int)

    def bad(rule, key, text):
        if key not in V[rule] and len(details) < 40:
            details.append(f"{rule}: {text}")
        V[rule].add(key)

    audits = world.audits
    runs = sorted(audits)
    final = world.final_run

    def aud(run, job):
        return audits.get(run, {}).get(job)

    # -- index what was seen
    leases_of = defaultdict(list)             # job -> [Lease]
    payload_of = {}                           # job -> payload pushed
    push_of_payload = {}                      # payload -> Push
    for p in world.pushes:
        for pl in p.payloads:
            push_of_payload[pl] = p
        if p.ids is not None:
            if len(p.ids) != len(p.payloads) or len(set(p.ids)) != len(p.ids):
                bad("other", ("pushreply", id(p)), f"push reply {p.ids} for {len(p.payloads)} payloads")
            for i, pl in zip(p.ids, p.payloads):
                payload_of[(p.q, i)] = pl
    unknown_consumers = defaultdict(set)      # run -> consumers of QCLAIMs with lost replies
    fence = defaultdict(lambda: float("-inf"))  # run -> send time of the last fsync-acknowledged write
    for p in world.pushes:
        if p.ids is not None:
            fence[p.inc] = max(fence[p.inc], p.t_send)
    for o in world.ops:
        if o.kind == "ack" and o.success:
            fence[o.inc] = max(fence[o.inc], o.t_send)
    unknown_claims = defaultdict(list)        # run -> QCLAIMs with lost replies
    for c in world.claims:
        if c.unknown:
            unknown_consumers[c.inc].add(c.consumer.encode())
            unknown_claims[c.inc].append(c)
        for e in c.entries:
            leases_of[e.job].append(e)
    for job in leases_of:
        leases_of[job].sort(key=lambda e: e.order)

    # -- integrity: payloads, phantoms, duplicates, all-or-none, counters
    for c in world.claims:
        for e in c.entries:
            want = payload_of.get(e.job)
            if want is None:
                if e.payload not in push_of_payload:
                    bad("other", ("phantom", e.job), f"claimed job {e.job} with a payload nobody pushed")
                elif push_of_payload[e.payload].ids is not None or push_of_payload[e.payload].q != e.job[0]:
                    bad("other", ("dup", e.job), f"job {e.job} carries payload {e.payload!r} of another id")
                else:
                    payload_of[e.job] = e.payload
            elif want != e.payload:
                bad("other", ("payload", e.job), f"job {e.job} claimed with payload {e.payload!r}, pushed {want!r}")
    for run in runs:
        live = defaultdict(int)
        for job, g in audits[run].items():
            if g is None:
                continue
            live[job[0]] += 1
            want = payload_of.get(job)
            if want is None:
                p = push_of_payload.get(g["payload"])
                if p is None:
                    bad("other", ("phantom", job), f"audit {run}: job {job} with a payload nobody pushed")
                elif p.ids is not None or p.q != job[0]:
                    bad("other", ("dup", job), f"audit {run}: job {job} duplicates payload {g['payload']!r}")
                else:
                    payload_of[job] = g["payload"]
            elif want != g["payload"]:
                bad("other", ("payload", job), f"audit {run}: job {job} payload {g['payload']!r}, pushed {want!r}")
        for q, info in world.audit_info[run].items():
            counted = info["ready"] + info["delayed"] + info["in_flight"] + info["dead"]
            if counted != live[q]:
                bad("other", ("count", run, q),
                    f"audit {run}: QINFO {q} counts {counted} live jobs, QGET finds {live[q]}")
    seen_payloads = {pl: job for job, pl in payload_of.items()}
    dup_check = defaultdict(set)
    for job, pl in payload_of.items():
        dup_check[pl].add(job)
    for pl, jobs in dup_check.items():
        if len(jobs) > 1:
            bad("other", ("dup", pl), f"payload {pl!r} exists as several jobs {sorted(jobs)}")
    for p in world.pushes:
        if p.unknown:
            found = sum(1 for pl in p.payloads if pl in seen_payloads)
            stats["unknown pushes applied"] += bool(found)
            if found not in (0, len(p.payloads)):
                bad("other", ("atomic", id(p)),
                    f"QPUSHMANY with a lost reply applied {found} of {len(p.payloads)} jobs")
    if world.errors:
        for e in world.errors[:5]:
            bad("other", ("error", e), f"error reply: {e}")
        V["other"].update(("error", i) for i in range(len(world.errors)))
    if world.stop_rc != 0:
        bad("other", ("stop",), f"SIGTERM stop exited with {world.stop_rc}")

    # -- rule 1: an id returned by QPUSH/QPUSHMANY exists at every later audit, or was acked.
    # An ack whose reply was lost may have removed it, so it excuses absence too.
    acked_by = defaultdict(list)              # job -> [Op] acks that succeeded or have unknown outcome
    for o in world.ops:
        if o.kind == "ack" and (o.success or o.unknown):
            acked_by[o.lease.job].append(o)
    for p in world.pushes:
        if p.ids is None:
            continue
        for i in p.ids:
            job = (p.q, i)
            for run in runs:
                if run <= p.inc:
                    continue
                if aud(run, job) is None and not any(o.inc < run for o in acked_by[job]):
                    bad("rule1", job, f"job {job} (pushed in run {p.inc}) missing at audit {run}, never acked")

    # -- rule 2: after QACK replied >= 1, the job is gone at every later audit and no
    # lease of it is granted after that ack (any lease later in claim order than the
    # acked token, in the ack's run or later, came after the ack: before it, the acked
    # token would have been stale and the ack would have replied 0).
    for o in world.ops:
        if o.kind != "ack" or not o.success:
            continue
        job = o.lease.job
        for run in runs:
            if run > o.inc and aud(run, job) is not None:
                bad("rule2", job, f"job {job} acked in run {o.inc} is back at audit {run}: {aud(run, job)}")
        for e in leases_of[job]:
            if e is o.lease:
                continue
            if e.inc > o.inc or (e.inc == o.inc and e.order > o.lease.order):
                bad("rule2", job, f"job {job} acked (token {o.lease.token!r}, run {o.inc}) was leased "
                                  f"again: token {e.token!r} run {e.inc} deliveries {e.deliveries}")
    stats["acked jobs"] = len({o.lease.job for o in world.ops if o.kind == "ack" and o.success})

    # -- rule 3: for two leases A before B (claim order) of one job, B's claim (its
    # daemon time: deadline - LEASE) must not be before A's deadline as it stood:
    # QEXTEND *sets* the deadline (now + LEASE, it does not add), so that is the
    # result of A's last successful QEXTEND, or the claim's deadline; every
    # successful QEXTEND of A came before B's claim (after it, A's token was stale).
    # A QEXTEND of A with a lost reply may have set it too; it was not run before it
    # was sent, so its deadline is at least send time + LEASE: the bound used is the
    # lower of the two.  No overlap is a violation if A's lease was ended first by a
    # successful QNACK (or QACK: then rule 2 applies), or maybe by one whose reply
    # was lost.  With lease-durability async, claim and extend records may be lost
    # in a crash (docs/semantics.md §5.3): when B's run is later than A's, A's
    # lease is judged by what recovery restored, read from the audit that opened
    # B's run (A's claim lost if deliveries are below A's; else the audited
    # deadline, or a later QEXTEND of A in B's run).  Such excused overlaps are counted in the summary.
    def deadline_of(a: Lease, ops, base=None) -> float:
        """A's deadline (a lower bound) after ``ops``, starting from ``base``
        (default: the claim's deadline)."""
        end = a.deadline if base is None else base
        lowest_unknown = float("inf")
        for o in sorted((o for o in ops if o.kind == "extend"), key=lambda o: o.t_send):
            if o.success:
                end = o.result
                lowest_unknown = float("inf")
            elif o.unknown:
                lowest_unknown = min(lowest_unknown, int(o.t_send) + o.lease_ms)
        return min(end, lowest_unknown)

    for job, ls in leases_of.items():
        for i, a in enumerate(ls):
            a_end = deadline_of(a, a.ops)
            ended = any(o.success for o in a.ops if o.kind in ("ack", "nack"))
            maybe_ended = [o for o in a.ops if o.kind in ("ack", "nack") and o.unknown]
            for b in ls[i + 1:]:
                if b.token == a.token:
                    bad("other", ("token", b.token), f"token {b.token!r} handed out twice")
                    continue
                if b.start >= a_end or ended:
                    continue
                if any(o.inc < b.inc for o in maybe_ended):
                    continue
                if not exact_leases and b.inc > a.inc:
                    g = aud(b.inc, job)
                    if g is not None and g["deliveries"] < a.deliveries:
                        stats["overlaps from lost lease records"] += 1
                        continue                          # A's claim was not recovered
                    # recovery may only restore a deadline A really had (a lost QEXTEND)
                    had = {a.deadline} | {o.result for o in a.ops if o.kind == "extend" and o.success}
                    if g is not None and g.get("consumer") == a.consumer.encode() and (
                            g.get("deadline") in had or any(o.unknown for o in a.ops if o.kind == "extend")):
                        later = [o for o in a.ops if o.kind == "extend" and o.inc == b.inc]
                        if b.start >= deadline_of(a, later, base=g.get("deadline", 0)):
                            stats["overlaps from lost lease records"] += 1
                            continue
                bad("rule3", job, f"job {job}: token {b.token!r} (run {b.inc}) claimed at {b.start} "
                                  f"while token {a.token!r} (run {a.inc}) was leased until {a_end}")

    # -- rule 5: deliveries == distinct tokens handed out.
    # (a) Within one run the daemon's memory is authoritative, so the claim replies
    #     of a job in run k carry deliveries D+1, D+2, ... D+m exactly, where D is
    #     the job's deliveries at the audit that opened run k (0 if it was pushed
    #     during run k) and m the number of its tokens seen in run k.
    # (b) At the audit after run k, a job's deliveries D' counts the tokens of run k
    #     that recovery replayed, plus g = 1 if the job is leased to the consumer of
    #     a QCLAIM of run k whose reply was lost (a token handed out that nobody saw).
    #     With lease-durability fsync, and after the clean stop, nothing may be lost:
    #     D' == D + m + g.  With async lease records (docs/semantics.md §5.3, best
    #     effort) the lost claims are a suffix of the log, so
    #     D + m_durable <= D' <= D + m + g, where
    #     m_durable counts claims whose reply arrived before a later fsync-acked write
    #     of the same run was sent (that fsync covered them); D' never exceeds what
    #     was handed out.  Together: deliveries never counts a token that was not
    #     handed out, never loses an fsynced one, and is exact without crashes.
    by_run = defaultdict(lambda: defaultdict(list))
    for job, ls in leases_of.items():
        for e in ls:
            by_run[job][e.inc].append(e)
    jobs_seen = set(leases_of)
    for run in runs:
        jobs_seen.update(j for j, g in audits[run].items() if g is not None)
    for job in jobs_seen:
        for run in sorted(set(by_run[job]) | {r - 1 for r in runs if r >= 1}):
            start = aud(run, job)
            d0 = start["deliveries"] if start is not None else 0
            mine = by_run[job].get(run, [])
            got = sorted(e.deliveries for e in mine)
            want = list(range(d0 + 1, d0 + 1 + len(got)))
            if got != want:
                bad("rule5", job, f"job {job} run {run}: claim replies carry deliveries {got}, "
                                  f"expected {want} (audit at run start: {d0})")
            end = aud(run + 1, job)
            if end is None:
                continue
            g = 1 if end.get("consumer") in unknown_consumers[run] else 0
            stats["grants seen only by audit"] += g
            m = len(mine)
            # QGET names the consumer of the job's last lease; should it ever stop
            # doing so, a lost-reply QCLAIM on this queue in this run may account for one
            maybe = int("consumer" not in end and any(c.q == job[0] for c in unknown_claims[run]))
            if exact_leases or run + 1 == final or g:
                ok = d0 + m + g <= end["deliveries"] <= d0 + m + g + maybe
                expect = f"{d0 + m + g}"
            else:
                durable = sum(1 for e in mine if e.t_recv < fence[run])
                ok = d0 + durable <= end["deliveries"] <= d0 + m + maybe
                expect = f"{d0 + durable}..{d0 + m}"
                stats["claims lost in crashes"] += d0 + m - end["deliveries"] if ok else 0
            if not ok:
                bad("rule5", job, f"job {job}: deliveries {end['deliveries']} at audit {run + 1}, expected "
                                  f"{expect} (run {run}: {m} tokens seen, {g} unseen grant, start {d0})")

    # -- rule 9, per job: the live state recovery rebuilt is the state before the
    # stop.  Where nothing may be lost (lease-durability fsync, or a clean stop),
    # a job whose deliveries at an audit match its last known lease L must show L:
    # released (no lease) if a QNACK of L succeeded, else still L's consumer with
    # the deadline of L's last successful QEXTEND (or of its claim).
    for run in runs:
        if run == 0 or not (exact_leases or run == final):
            continue
        for job, g in audits[run].items():
            if g is None:
                continue
            ls = [e for e in leases_of.get(job, ()) if e.inc < run]
            if not ls or g["deliveries"] != ls[-1].deliveries:
                continue                      # rule 5 judges the count
            last = ls[-1]
            if not exact_leases and last.inc != run - 1:
                continue                      # an earlier crash may have lost its records
            done = [o for o in last.ops if o.inc < run]
            if any(o.unknown and o.kind in ("ack", "nack") for o in done):
                continue
            if any(o.success and o.kind == "nack" for o in done):
                if "consumer" in g or g["state"] == b"in_flight":
                    bad("rule9", (job, run), f"audit {run}: job {job} released by QNACK of {last.token!r} "
                                             f"is leased again: {g}")
                continue
            # the deadline is the last successful QEXTEND's (it sets, not adds), unless
            # a QEXTEND with a lost reply came after it
            exts = sorted((o for o in done if o.kind == "extend" and (o.success or o.unknown)),
                          key=lambda o: o.t_send)
            end = exts[-1].result if exts and exts[-1].success else last.deadline
            if exts and exts[-1].unknown:
                end = None
            if g.get("consumer") != last.consumer.encode() or (end is not None and g.get("deadline") != end):
                bad("rule9", (job, run), f"audit {run}: job {job} should hold lease {last.token!r} of "
                                         f"{last.consumer} until {end}: {g}")

    # -- rule 8: a QACK/QNACK/QEXTEND whose token was stale when sent must reply 0/nil.
    # Stale when sent: a later lease of the job had been granted before (claim time,
    # the daemon's ms clock floored, + 1 <= send time), or the token's own lease had
    # been ended by a successful QACK/QNACK whose reply had arrived.  With async
    # lease records a crash may lose that later claim or that nack, which revives the
    # token (docs/semantics.md §5.3); that is excused only across a crash, and for
    # a lost claim only if the audit after it shows the claim was indeed not
    # recovered.
    def claim_recovered(e: Lease) -> bool:
        g = aud(e.inc + 1, e.job)
        return g is None or g["deliveries"] >= e.deliveries

    for o in world.ops:
        if o.unknown:
            continue
        a = o.lease
        why = None
        for e in leases_of[a.job]:
            if e.order > a.order and e.start + 1 <= o.t_send:
                if exact_leases or e.inc == o.inc or claim_recovered(e):
                    why = f"re-claimed as {e.token!r} at {e.start}"
                    break
        if why is None:
            for p in a.ops:
                if p is o or not p.success or p.kind == "extend" or p.t_recv is None or p.t_recv >= o.t_send:
                    continue
                if p.kind == "ack" or exact_leases or p.inc == o.inc:
                    why = f"its lease ended by {p.kind} (run {p.inc})"
                    break
        if why is None:
            continue
        stats["stale ops checked"] += 1
        if o.success:
            bad("rule8", (a.token, o.kind, o.t_send),
                f"{o.kind} with stale token {a.token!r} of job {a.job} (run {o.inc}) replied {o.result}: {why}")

    counts = {k: len(v) for k, v in V.items()}
    return counts, details, stats


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
