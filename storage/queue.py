"""One queue: its jobs, its indexes and the rules that move jobs between states.

Plain objects, no I/O and no clock: every function that depends on time takes
``now`` (ms epoch) as an argument, so live commands, log replay and tests
drive the same code.

Indexes (sortedcontainers, with total, immutable keys; the job id breaks ties):

* ``ready``   a ``ReadyIndex`` of ids in claim order: higher priority first,
  then jobs that became ready again (expired lease, nack), then jobs never
  handed out, then ascending id (see ``storage.index``);
* ``delayed`` a ``TimeIndex`` by visible_at (see ``storage.index``);
* ``leases``  a ``TimeIndex`` by lease deadline.

* ``dead``      a ``TimeIndex`` of jobs dead in their own queue (no
  DEADLETTER), by the moment RETAIN-DEAD lets them go;
* ``completed`` a ``TimeIndex`` of acked jobs kept by RETAIN-COMPLETED, by the
  moment they go.

A job sits in exactly one index, the one its ``state`` names.  Its position
changes only through ``_move``: remove with the old key, change the fields,
add with the new key.

Besides the indexes: ``keys`` maps each dedupe key to the ids of the jobs
holding it (ascending; usually one), and ``order`` is
every id ever added in ascending order (ids only grow, so appending keeps it
sorted; ids of removed jobs are skipped and compacted away), which QSCAN
walks with a cursor.

A lease may have a *holder*: the connection whose SESSION claim or QWORK
stream holds it.  Whenever a lease ends (ack, nack, claim by someone else,
removal) the holder's ``lease_ended(job)`` is called; holders live in
the daemon, the queue only calls them.

Expiry is lazy: ``fold(now)`` moves due delayed jobs and expired leases to
``ready`` when someone looks (a claim, an inspection).  A job whose lease
expired keeps its token until it is claimed again, so a slow worker can still
ack it; a new claim replaces the token and the old one becomes stale.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import asdict, dataclass, replace
from itertools import islice

from .index import ReadyIndex, TimeIndex

DELAYED = b"delayed"
READY = b"ready"
IN_FLIGHT = b"in_flight"
DEAD = b"dead"
COMPLETED = b"completed"

FSYNC, ASYNC, MEMORY = "fsync", "async", "memory"
DURABILITIES = (FSYNC, ASYNC, MEMORY)

# What memory_estimate counts per live job beyond its payload, and per queue:
# `leaseq bench storage` measures 272-285 bytes per job (Job, its indexes and
# dict entries), and an empty queue's dicts, indexes and config about 4 KiB.
JOB_BYTES = 280
QUEUE_BYTES = 4096

LEASE_MIN, LEASE_MAX = 100, 86_400_000
NONE_EXPIRED: list = []       # fold's answer when no lease ran out (shared: never changed)


@dataclass(frozen=True)
class QueueConfig:
    """A queue's options (docs/semantics.md §3.1); the log stores them as JSON."""

    lease: int = 30_000
    maxdeliveries: int = 0
    deadletter: str | None = None
    backoff: tuple = (1000, 2.0, 1000)
    maxlen: int = 0
    expire: int = 0
    retain_completed: int = 0
    retain_dead: int = 604_800_000
    window: int = 0
    durability: str = FSYNC

    def to_json(self) -> dict:
        d = asdict(self)
        d["backoff"] = list(self.backoff)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "QueueConfig":
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in d.items() if k in known}
        if "backoff" in values:
            b = values["backoff"]
            values["backoff"] = (int(b[0]), float(b[1]), int(b[2]))
        return cls(**values)

    def with_options(self, **changes) -> "QueueConfig":
        return replace(self, **changes)


class Provenance:
    """Where a dead-lettered job came from (docs/semantics.md §1.8)."""

    __slots__ = ("source", "src_id", "deliveries", "reason")

    def __init__(self, source: bytes, src_id: int, deliveries: int, reason: bytes) -> None:
        self.source = source
        self.src_id = src_id
        self.deliveries = deliveries
        self.reason = reason


class JobExtra:
    """The fields most jobs never set, apart from ``Job`` so that a plain job
    stays small (a million live jobs: 64 bytes each saved)."""

    __slots__ = ("key", "flags", "max_deliveries", "expire_ms", "last_error", "origin", "retain_until",
                 "dead_reason", "holder")

    def __init__(self, key=None, flags=0, max_deliveries=0, expire_ms=0) -> None:
        self.key = key
        self.flags = flags
        self.max_deliveries = max_deliveries
        self.expire_ms = expire_ms
        self.last_error = None
        self.origin = None
        self.retain_until = 0
        self.dead_reason = None
        self.holder = None


def _extra_field(name: str, default):
    """A ``Job`` attribute kept in its ``JobExtra``, made only when a job sets
    it to something other than ``default``."""
    def get(job):
        extra = job.extra
        return default if extra is None else getattr(extra, name)

    def set_(job, value):
        extra = job.extra
        if extra is None:
            if value is default or (value == default and type(value) is type(default)):
                return
            extra = job.extra = JobExtra()
        setattr(extra, name, value)

    return property(get, set_)


class Job:
    __slots__ = ("id", "payload", "priority", "enqueued_at", "visible_at", "deliveries", "state", "token",
                 "deadline", "consumer", "requeued", "extra")

    def __init__(self, id: int, payload: bytes, priority: int, enqueued_at: int, visible_at: int,
                 key: bytes | None = None, flags: int = 0, max_deliveries: int = 0, expire_ms: int = 0) -> None:
        self.id = id
        self.payload = payload
        self.priority = priority
        self.enqueued_at = enqueued_at
        self.visible_at = visible_at
        self.deliveries = 0
        self.state = None
        self.token = None
        self.deadline = 0
        self.consumer = None
        self.requeued = False
        self.extra = (None if key is None and not flags and not max_deliveries and not expire_ms
                      else JobExtra(key, flags, max_deliveries, expire_ms))

    key = _extra_field("key", None)
    flags = _extra_field("flags", 0)
    max_deliveries = _extra_field("max_deliveries", 0)
    expire_ms = _extra_field("expire_ms", 0)
    last_error = _extra_field("last_error", None)
    origin = _extra_field("origin", None)
    retain_until = _extra_field("retain_until", 0)
    dead_reason = _extra_field("dead_reason", None)
    holder = _extra_field("holder", None)


@dataclass
class Counters:
    pushed: int = 0
    acked: int = 0
    nacked: int = 0
    lease_expired: int = 0
    dead_lettered: int = 0
    duplicates: int = 0


# dedupe scopes (docs/semantics.md §3.2): the states in which an existing job with the key counts
SCOPES = {
    b"queued": (DELAYED, READY),
    b"active": (DELAYED, READY, IN_FLIGHT),
    b"exists": (DELAYED, READY, IN_FLIGHT, DEAD, COMPLETED),
}
SCOPE_CODES = {b"queued": 0, b"active": 1, b"exists": 2}


class Queue:
    def __init__(self, qid: int, name: bytes, config: QueueConfig) -> None:
        self.qid = qid
        self.name = name
        self.config = config
        self.jobs: dict[int, Job] = {}
        self.ready = ReadyIndex()
        self.delayed = TimeIndex()
        self.leases = TimeIndex()
        self.dead = TimeIndex()
        self.completed = TimeIndex()
        self.keys: dict[bytes, list[int]] = {}
        self.order: list[int] = []
        self.next_id = 1
        self.id_mark = 0          # ids below this are covered by a logged IDMARK
        self.counters = Counters()
        self.dropped = False
        self.payload_bytes = 0    # sum of the payloads of ``jobs`` (sizes the live data for snapshots)

    # -- indexes -----------------------------------------------------------------

    @staticmethod
    def _band(job: Job) -> int:
        return (9 - job.priority) * 2 + (0 if job.requeued else 1)      # ReadyIndex.band

    def _index(self, job: Job) -> None:
        s = job.state
        if s is READY:
            self.ready.add(self._band(job), job.id)
        elif s is IN_FLIGHT:
            self.leases.add(job.deadline, job.id)
        elif s is DELAYED:
            self.delayed.add(job.visible_at, job.id)
        elif s is DEAD:
            self.dead.add(job.retain_until, job.id)
        elif s is COMPLETED:
            self.completed.add(job.retain_until, job.id)

    def _unindex(self, job: Job) -> None:
        s = job.state
        if s is READY:
            self.ready.remove(self._band(job), job.id)
        elif s is IN_FLIGHT:
            self.leases.remove(job.deadline, job.id)
        elif s is DELAYED:
            self.delayed.remove(job.visible_at, job.id)
        elif s is DEAD:
            self.dead.remove(job.retain_until, job.id)
        elif s is COMPLETED:
            self.completed.remove(job.retain_until, job.id)

    def _move(self, job: Job, **fields) -> None:
        """The one way to change fields that position a job: remove, change, re-add."""
        self._unindex(job)
        for name, value in fields.items():
            setattr(job, name, value)
        self._index(job)

    @staticmethod
    def _end_lease(job: Job) -> None:
        """The job's current lease is over: drop the token, tell its holder
        (read from the job's rare fields directly: this runs for every ack)."""
        job.token = None
        extra = job.extra
        if extra is not None and extra.holder is not None:
            holder, extra.holder = extra.holder, None
            holder.lease_ended(job)

    def _forget_key(self, job: Job) -> None:
        """A job leaving: its dedupe key no longer points at it."""
        extra = job.extra
        if extra is None or extra.key is None:
            return
        holders = self.keys.get(extra.key)
        if holders is not None and job.id in holders:
            holders.remove(job.id)
            if not holders:
                del self.keys[extra.key]

    def _compact_order(self) -> None:
        if len(self.order) > 2 * len(self.jobs) + 4096:
            self.order = list(self.jobs)      # dict order is ascending id order

    # -- transitions (called by Store, live and during replay) ------------------------

    def add_many(self, jobs: list[Job], now: int) -> None:
        """New jobs (ascending ids, above every id so far): ready now, or delayed
        until visible_at."""
        table = self.jobs
        delayed_add = self.delayed.add
        keys = self.keys
        ready: dict[int, list] = {}     # band -> ids, ascending and above every id so far
        for job in jobs:
            table[job.id] = job
            if job.visible_at > now:
                job.state = DELAYED
                delayed_add(job.visible_at, job.id)
            else:
                job.state = READY
                band = (9 - job.priority) * 2 + (0 if job.requeued else 1)
                ids = ready.get(band)
                if ids is None:
                    ready[band] = [job.id]
                else:
                    ids.append(job.id)
            extra = job.extra           # (job.key, without the property's cost)
            if extra is not None and extra.key is not None:
                keys.setdefault(extra.key, []).append(job.id)
        for band, ids in ready.items():
            self.ready.append_new(band, ids)
        self.payload_bytes += sum(len(job.payload) for job in jobs)
        self.order.extend(job.id for job in jobs)
        if jobs and jobs[-1].id >= self.next_id:
            self.next_id = jobs[-1].id + 1

    def restore(self, jobs: list[Job]) -> None:
        """Jobs read back from a snapshot, in ascending id order, each with its
        state set: put them in the table and build every index in bulk."""
        table = self.jobs
        keys = self.keys
        ready: dict[int, list] = {}
        for job in jobs:
            table[job.id] = job
            s = job.state
            if s is READY:
                ready.setdefault(self._band(job), []).append(job.id)
            elif s is IN_FLIGHT:
                self.leases.add(job.deadline, job.id)
            elif s is DELAYED:
                self.delayed.add(job.visible_at, job.id)
            else:
                (self.dead if s is DEAD else self.completed).add(job.retain_until, job.id)
            extra = job.extra
            if extra is not None and extra.key is not None:
                keys.setdefault(extra.key, []).append(job.id)
        for band, ids in ready.items():
            self.ready.update(band, ids)
        self.payload_bytes += sum(len(job.payload) for job in jobs)
        self.order.extend(job.id for job in jobs)
        if jobs and jobs[-1].id >= self.next_id:
            self.next_id = jobs[-1].id + 1

    def lease(self, job: Job, token: bytes, deadline: int, consumer: bytes) -> None:
        if job.token is not None:
            self._end_lease(job)
        self._move(job, state=IN_FLIGHT, token=token, deadline=deadline, consumer=consumer)
        job.deliveries += 1

    def lease_front(self, jobs: list, tokens, deadline: int, consumer: bytes) -> None:
        """``lease`` for jobs that are exactly the first ``len(jobs)`` ready ones."""
        self.ready.pop_first(len(jobs))
        for job, token in zip(jobs, tokens):
            if job.token is not None:         # an expired lease, now replaced
                self._end_lease(job)
            job.state = IN_FLIGHT
            job.token = token
            job.deadline = deadline
            job.consumer = consumer
            job.deliveries += 1
        self.leases.add_many(deadline, [job.id for job in jobs])

    def complete_many(self, jobs: list[Job], now: int) -> None:
        """``complete`` of every job of one QACK.  Without RETAIN-COMPLETED the
        jobs still in flight go in bulk: their lease entries leave the index
        per deadline (one claim's jobs share one), not one by one."""
        if self.config.retain_completed:
            for job in jobs:
                self.complete(job, now)
            return
        leased = [job for job in jobs if job.state is IN_FLIGHT]
        for job in jobs:
            if job.state is not IN_FLIGHT:    # a lease that ran out, its token still good
                self.remove(job)
        self._remove_leased(leased)
        self.counters.acked += len(jobs)

    def _remove_leased(self, jobs: list[Job]) -> None:
        """``remove`` for jobs in flight, with their lease entries in bulk."""
        by_deadline: dict[int, list] = {}
        table = self.jobs
        for job in jobs:
            self._end_lease(job)
            by_deadline.setdefault(job.deadline, []).append(job.id)
            job.state = None
            del table[job.id]
            self._forget_key(job)
        for deadline, ids in by_deadline.items():
            self.leases.remove_many(deadline, ids)
        self.payload_bytes -= sum(len(job.payload) for job in jobs)
        self._compact_order()

    def complete(self, job: Job, now: int) -> None:
        """Acked: gone, or kept as completed for RETAIN-COMPLETED."""
        retain = self.config.retain_completed
        if retain:
            self._end_lease(job)
            self._move(job, state=COMPLETED, retain_until=now + retain, deadline=0)
        else:
            self.remove(job)            # ends the lease too
        self.counters.acked += 1

    def release(self, job: Job, visible_at: int, now: int, error: bytes | None, has_error: bool,
                closed: bool = False) -> None:
        """Back to ready (or delayed until ``visible_at``), to be claimed again."""
        self._end_lease(job)
        state = DELAYED if visible_at > now else READY
        self._move(job, state=state, visible_at=visible_at if state is DELAYED else job.visible_at,
                   deadline=0, requeued=True)
        if has_error:
            job.last_error = error
        if not closed:
            self.counters.nacked += 1

    def extend(self, job: Job, deadline: int) -> None:
        self._move(job, state=IN_FLIGHT, deadline=deadline)

    def bury(self, job: Job, reason: bytes, now: int) -> None:
        """Dead in this queue (no DEADLETTER), kept for RETAIN-DEAD."""
        self._end_lease(job)
        self._move(job, state=DEAD, retain_until=now + self.config.retain_dead, dead_reason=reason,
                   deadline=0)
        self.counters.dead_lettered += 1

    def revive(self, job: Job, now: int) -> None:
        """A dead job back to ready, its deliveries forgotten and its age
        restarted (QREDRIVE is a new enqueue: EXPIRE counts from now)."""
        self._move(job, state=READY, deliveries=0, requeued=True, dead_reason=None, retain_until=0,
                   enqueued_at=now)

    def remove(self, job: Job) -> None:
        """Gone, whatever its state (ack, QDEL, dead-lettered elsewhere, retention over)."""
        self._end_lease(job)
        self._unindex(job)
        job.state = None
        del self.jobs[job.id]
        self.payload_bytes -= len(job.payload)
        self._forget_key(job)
        self._compact_order()

    def remove_all(self) -> int:
        n = len(self.jobs)
        for job in self.jobs.values():
            if job.token is not None:
                self._end_lease(job)
        self.jobs.clear()
        self.payload_bytes = 0
        self.ready.clear()
        self.delayed.clear()
        self.leases.clear()
        self.dead.clear()
        self.completed.clear()
        self.keys.clear()
        self.order.clear()
        return n

    # -- lazy expiry -----------------------------------------------------------------------

    def fold(self, now: int) -> list[int]:
        """Move due delayed jobs and expired leases to ready; let go of dead and
        completed jobs whose retention is over.  Returns the ids whose leases
        ran out (``Store.fold`` logs them)."""
        jobs = self.jobs
        ready_add = self.ready.add
        if self.delayed and self.delayed.first() <= now:
            for jid in self.delayed.pop_due(now):
                job = jobs[jid]
                job.state = READY
                ready_add(self._band(job), jid)
        expired: list[int] = NONE_EXPIRED
        if self.leases and self.leases.first() <= now:
            expired = self.leases.pop_due(now)
            self._expired(expired)
        for index in (self.dead, self.completed):
            if index and index.first() <= now:
                for jid in index.pop_due(now):
                    job = jobs[jid]
                    job.state = None              # already out of its index
                    self.remove(job)
        return expired

    def _expired(self, ids) -> None:
        """Leases out of ``leases`` that ran out: their jobs are ready again
        (the token still works until someone claims the job)."""
        jobs = self.jobs
        ready_add = self.ready.add
        for jid in ids:
            job = jobs[jid]
            job.state = READY
            job.requeued = True
            ready_add(self._band(job), jid)
        self.counters.lease_expired += len(ids)

    def expire(self, ids) -> None:
        """Replay of an EXPIRE record: the leases of these in-flight jobs ran
        out (ids no longer in flight are skipped)."""
        jobs = self.jobs
        gone = []
        for jid in ids:
            job = jobs.get(jid)
            if job is not None and job.state is IN_FLIGHT:
                self.leases.remove(job.deadline, jid)
                gone.append(jid)
        self._expired(gone)

    def next_due(self) -> int | None:
        """The next moment (ms epoch) at which a job becomes claimable by time."""
        a, b = self.delayed.first(), self.leases.first()
        if a is None:
            return b
        return a if b is None or a < b else b

    # -- queries -------------------------------------------------------------------------

    def claimable(self, now: int, count: int) -> list[Job]:
        """The next ``count`` jobs in claim order after folding (unlogged: the
        daemon folds through ``Store.fold`` and reads ``ready_head``)."""
        self.fold(now)
        return self.ready_head(count)

    def ready_head(self, count: int) -> list[Job]:
        """The first ``count`` ready jobs in claim order, as they stand."""
        jobs = self.jobs
        return [jobs[i] for i in self.ready.first(count)]

    def nobody_doomed(self, jobs: list[Job]) -> bool:
        """True when none of ``jobs`` can have a ``death_reason``: the queue
        sets no MAXDELIVERIES or EXPIRE and no job has its own (the common
        case, answered without looking at each job's rare fields)."""
        config = self.config
        return not config.maxdeliveries and not config.expire and all(job.extra is None for job in jobs)

    def death_reason(self, job: Job, now: int) -> bytes | None:
        """Why ``job`` must not be delivered again now, or None (docs/semantics.md §1.8: on the
        MAXDELIVERIES+1-th delivery, or when older than EXPIRE)."""
        limit = job.max_deliveries or self.config.maxdeliveries
        if limit and job.deliveries >= limit:
            return b"max-deliveries"
        expire = job.expire_ms or self.config.expire
        if expire and now - job.enqueued_at > expire:
            return b"expired"
        return None

    def job_for_token(self, token: bytes) -> Job | None:
        """The job a token's lease is on, if that lease has not ended (else None)."""
        head, _, _ = token.partition(b".")
        try:
            job = self.jobs.get(int(head, 16))
        except ValueError:
            return None
        if job is not None and job.token == token:
            return job
        return None

    def jobs_for_tokens(self, tokens) -> list[Job]:
        """The jobs whose leases these tokens still hold, each once, in token
        order; stale and unknown tokens are skipped (docs/semantics.md §4.8)."""
        jobs, seen = [], set()
        for token in tokens:
            job = self.job_for_token(token)
            if job is not None and job.id not in seen:
                seen.add(job.id)
                jobs.append(job)
        return jobs

    def duplicate_of(self, key: bytes, scope: bytes) -> Job | None:
        """The newest job holding dedupe ``key`` whose state is in ``scope``
        (call after ``fold``), if any."""
        states = SCOPES[scope]
        for jid in reversed(self.keys.get(key, ())):
            job = self.jobs[jid]
            if job.state in states:
                return job
        return None

    def scan(self, cursor: int, count: int, state: bytes | None) -> tuple[int, list[Job]]:
        """Jobs with id > ``cursor`` in ascending id order, at most ``count``
        looked at; returns (next cursor, jobs), next cursor 0 at the end."""
        order = self.order
        i = bisect_right(order, cursor)
        jobs = self.jobs
        found: list[Job] = []
        end = min(i + count, len(order))
        for jid in order[i:end]:
            job = jobs.get(jid)
            if job is not None and (state is None or job.state is state):
                found.append(job)
        return (order[end - 1] if end < len(order) else 0), found

    @property
    def live(self) -> int:
        return len(self.ready) + len(self.delayed) + len(self.leases)

    def counts(self) -> dict[str, int]:
        """Jobs by state, as they stand (nothing folded): what INFO, /metrics
        and the status page show."""
        return {"ready": len(self.ready), "delayed": len(self.delayed), "in_flight": len(self.leases),
                "dead": len(self.dead), "completed": len(self.completed)}

    def memory_estimate(self) -> int:
        """Bytes this queue holds, estimated: its payloads plus what each job
        costs beyond its payload (``JOB_BYTES``, measured by ``leaseq bench
        storage``) plus the queue's own structures.  MEMORY USAGE answers it."""
        return QUEUE_BYTES + self.payload_bytes + JOB_BYTES * len(self.jobs)

    def summary(self) -> str:
        """One line of counts, as INFO's queues section shows it."""
        counts = ",".join(f"{state}={n}" for state, n in self.counts().items())
        return f"{counts},durability={self.config.durability}"

    def latest_buried(self, count: int) -> list[Job]:
        """Up to ``count`` jobs dead in this queue, the last buried first
        (``dead`` is ordered by when RETAIN-DEAD lets them go, which follows
        when they died while RETAIN-DEAD is unchanged)."""
        return [self.jobs[jid] for jid in self.dead.last(count)]

    def latest_dead_lettered(self, count: int, look_at: int) -> list[Job]:
        """Up to ``count`` jobs that came here as dead letters (they carry
        their provenance), newest first, among the ``look_at`` newest jobs:
        a dead-letter queue is appended to, so its recent arrivals are at the
        end of ``jobs`` (ascending ids), and the look stays bounded."""
        found = []
        for job in islice(reversed(self.jobs.values()), look_at):
            if job.origin is not None:
                found.append(job)
                if len(found) == count:
                    break
        return found

    def oldest_ready_age(self, now: int) -> int:
        """Age of the ready job pushed first.  Ids follow enqueue order, so it is
        the smallest id, found at the start of one of the 20 priority bands."""
        first = self.ready.oldest()
        return 0 if first is None else max(0, now - self.jobs[first].enqueued_at)
