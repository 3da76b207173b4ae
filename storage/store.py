"""The store: every queue, and the one set of functions that change them.

Commands decide *what* happens (which jobs a claim gets, what a nack's delay
is) and then call a transition here: ``push``, ``claim``, ``ack``, ``nack``,
``extend``, ``fold``, ``delete``, ``create_queue``, ``set_config``,
``drop_queue``, ``take_ids``, ``set_clock``; the transitions of jobs that
end without an ack (dead letters, and the ways back from them) are
``store.deaths``' (``storage.deaths``), schedules ``store.timetable``'s and
dependencies ``store.deps``'.  Each transition changes the in-memory state and hands the
matching log record to the store's ``Journal`` (``storage.journal``: which
records are written and which replies wait for fsync).  Recovery
(``storage.recovery``) decodes the same records and calls the same
transitions with a journal that writes nothing, so live state and
recovered state come from one piece of code.

Every transition that ends jobs (an ack, a deletion, a drop, a death, a
cancel) changes their state, then takes the one step of a job's end,
``ended``, where what reacts to an end takes part in a fixed order
(results, dependants, waiters, flow slots: docs/architecture.md, "A job's
end"), and then writes its records.

The store knows nothing of files or sockets: a data directory
(``storage.datadir``) gives it a journal over the write-ahead log; a
``Journal(MemoryLog())`` runs it in memory.  Queues whose ready jobs or next
due moment changed are collected for the daemon, which takes them with
``take_woken`` at the end of the event-loop turn to serve blocked claimers.
"""

from __future__ import annotations

from . import flow, leasing, records, results
from .config import ASYNC, FSYNC, MEMORY, QueueConfig
from .job import IN_FLIGHT, READY, Job
from .journal import Journal
from .queue import Queue, death_reason, nobody_doomed
from .deaths import Deaths
from .deps import NOBODY_DOOMED, Deps
from .results import ACKED, DELETED, DROPPED, EndWatch
from .schedules import Timetable

# ids are reserved in blocks: one fsynced IDMARK record per block per queue
ID_BLOCK = 1 << 16


class Store:
    # (__weakref__: the unit tests keep their stand-ins' state in weak dictionaries keyed by store)
    __slots__ = ("__weakref__", "queues", "by_qid", "next_qid", "dropped_marks", "epoch", "lease_seq", "journal",
                 "default_config", "clock", "woken", "timetable", "deps", "deaths", "endings", "following")

    def __init__(self, journal: Journal | None = None) -> None:
        self.queues: dict[bytes, Queue] = {}
        self.by_qid: dict[int, Queue] = {}
        self.next_qid = 1
        self.dropped_marks: dict[bytes, int] = {}   # name -> first id a re-created queue may use
        self.epoch = 0
        self.lease_seq = 0
        self.journal = journal if journal is not None else Journal()
        self.default_config = QueueConfig()     # for dead-letter queues created on demand
        self.clock = (0, False, 0)              # DEBUG clock: offset ms, frozen, frozen at
        self.woken: set[Queue] = set()          # queues whose ready jobs or next due moment changed (read, not changed, outside)
        self.timetable = Timetable(self)        # every queue's schedules (storage/schedules.py)
        self.deps = Deps(self)                  # which jobs wait for which (storage/deps.py)
        self.deaths = Deaths(self)              # dead letters and the ways back (storage/deaths.py)
        self.endings = EndWatch()               # jobs whose end someone waits for (storage/results.py)
        self.following = False                  # a replica's: it changes only as its primary's records say

    # -- the boundaries of a run ------------------------------------------------------

    def boot(self, now: int, at_least: int = 0) -> None:
        """A new run begins (after recovery): the next epoch, so that every
        token of this run is new; its BOOT record is fsynced before anything
        is served.  ``at_least``: a promoted replica's (daemon/replication.py)."""
        for q in self.queues.values():
            q.next_id = max(q.next_id, q.id_mark)
        self.epoch = max(self.epoch + 1, at_least)
        self.lease_seq = 0
        self.journal.meta_record(records.BOOT, records.boot(self.epoch, now))

    def record_id_marks(self) -> None:
        """A clean stop: log exact id marks, so the next run leaves no gap."""
        for q in self.queues.values():
            if q.next_id != q.id_mark:
                q.id_mark = q.next_id
                self.journal.meta_record(records.IDMARK, records.idmark(q.qid, q.next_id))

    def wake(self, q: Queue) -> None:
        """``q``'s ready jobs changed outside its own transitions (a parent elsewhere was done)."""
        self.woken.add(q)

    def take_woken(self) -> set[Queue]:
        """The queues woken since the last call (and forget them)."""
        woken, self.woken = self.woken, set()
        return woken

    # -- queues -------------------------------------------------------------------------

    def create_queue(self, name: bytes, config: QueueConfig, ts: int, qid: int | None = None) -> Queue:
        if qid is None:
            qid = self.next_qid
        self.next_qid = max(self.next_qid, qid + 1)
        q = Queue(qid, name, config)
        q.next_id = q.id_mark = self.dropped_marks.pop(name, 1)
        _set_durability(q)
        if config.grouped:
            q.use_groups()
        self.queues[name] = q
        self.by_qid[qid] = q
        self.journal.meta_record(records.QUEUE, records.queue(qid, ts, name, config.to_json()))
        return q

    def set_config(self, q: Queue, config: QueueConfig, ts: int) -> None:
        """QALTER, QPAUSE, QRESUME: new options (a limit or a pause lifted may
        let blocked claimers take jobs now)."""
        if config.rate != q.config.rate:
            q.rate_window = flow.RateWindow()      # a RATE set or changed starts with an empty window
        q.config = config
        _set_durability(q)
        if q.indexes.groups is not None:
            q.indexes.groups.reconfigure(config, ts)
        elif config.grouped:
            q.use_groups()
        self.journal.meta_record(records.QUEUE, records.queue(q.qid, ts, q.name, config.to_json()))
        self.woken.add(q)

    def drop_queue(self, q: Queue, ts: int) -> int:
        del self.queues[q.name]
        del self.by_qid[q.qid]
        q.dropped = True
        # a queue re-created under this name continues above every id handed out
        self.dropped_marks[q.name] = max(q.next_id, q.id_mark)
        self.woken.discard(q)
        self.timetable.queue_dropped(q)
        jobs = list(q.jobs.values()) if self.deps.children else []
        n = q.remove_all()
        self.ended(q, jobs, DROPPED, ts)
        with self.journal.transaction():
            self.journal.meta_record(records.DROP, records.drop(q.qid, ts))
            self.log_released(ts)
        return n

    def take_ids(self, q: Queue, n: int) -> int:
        """Reserve ``n`` consecutive job ids; return the first."""
        first = q.next_id
        end = first + n
        if end > q.id_mark:
            q.id_mark = end + ID_BLOCK
            self.journal.meta_record(records.IDMARK, records.idmark(q.qid, q.id_mark))
        q.next_id = end
        return first

    # -- jobs ----------------------------------------------------------------------------

    def push(self, q: Queue, jobs: list[Job], ts: int) -> None:
        # encode first: a bad job changes nothing (a memory queue's pushes are
        # not encoded at all: the handlers checked every field's range)
        logged = self.journal.logs_jobs_of(q)
        body = records.push(q.qid, ts, jobs) if logged else b""
        self.arrive(q, jobs, ts)
        if logged:
            self.journal.job_record(q, records.PUSH, body)

    def arrive(self, q: Queue, jobs: list[Job], ts: int) -> None:
        """New jobs enter ``q``: a push's change (a schedule's FIRE makes it too)."""
        waiting = q.add_many(jobs, ts)
        q.counters.pushed += len(jobs)
        self.woken.add(q)
        if waiting:
            self.deps.add(q, waiting)

    def replace(self, q: Queue, pairs: list, priority: int, visible_at: int, ts: int) -> None:
        """KEY ... REPLACE: ``pairs`` (ready or delayed job, new payload); see
        ``Queue.replace``."""
        body = records.replace(q.qid, ts, visible_at, priority, [(job.id, p) for job, p in pairs])
        for job, payload in pairs:
            q.replace(job, payload, priority, visible_at, ts)
        self.journal.job_record(q, records.REPLACE, body)
        self.woken.add(q)

    def claim(self, q: Queue, jobs: list[Job], deadline: int, consumer: bytes, ts: int,
              first_seq: int | None = None, front: bool = False) -> None:
        """Lease ``jobs``; each gets a new token (``job.token``).  ``front``: the
        jobs are exactly ``q.ready_head()``'s answer (the head of ``ready``;
        never so on a queue with groups, whose claims take turns)."""
        if first_seq is None:
            first_seq = self.lease_seq + 1
        self.lease_seq = max(self.lease_seq, first_seq + len(jobs) - 1)
        epoch = self.epoch
        tokens = leasing.lease_tokens(jobs, epoch, first_seq)
        if q.indexes.groups is not None and all(job.state is READY for job in jobs):
            leasing.lease_grouped(q, jobs, tokens, deadline, consumer, ts)
        elif front and q.indexes.groups is None:
            leasing.lease_front(q, jobs, tokens, deadline, consumer)
        else:
            for job, token in zip(jobs, tokens):
                leasing.lease(q, job, token, deadline, consumer)
            if q.indexes.groups is not None:      # (replay: a job whose lost EXPIRE left it in flight)
                q.indexes.groups.served(jobs, ts)
        if self.journal.logs_jobs_of(q):        # (a memory queue's record would be built to be dropped)
            self.journal.job_record(q, records.CLAIM, records.claim(q.qid, ts, deadline, first_seq, consumer,
                                                                    [j.id for j in jobs], [j.deliveries for j in jobs]),
                                    lease=True)
        flow.handed_out(q, ts, len(jobs))

    def ack(self, q: Queue, jobs: list[Job], ts: int, result: bytes | None = None) -> None:
        """Completed; ``result``: the one job's result (QACK ... RESULT), kept
        for the queue's RESULT-TTL, in a RESULT record of the ACK's transaction."""
        waited_on = bool(self.deps.children)      # (before the end's step, which forgets the jobs' children)
        # (only an fsync queue's plain ACK record can be blind: skip the look at the jobs otherwise)
        blind_until = (unseen_by_claims_until(q, jobs) if q.durability is FSYNC and result is None
                       and not waited_on and self.journal.logs_jobs_of(q) else 0)
        q.complete_many(jobs, ts)
        self.ended(q, jobs, ACKED, ts, result)
        if waited_on or result is not None:
            with self.journal.transaction():
                self.journal.job_record(q, records.ACK, records.ack(q.qid, ts, [j.id for j in jobs]))
                until = results.kept_until(q, ts) if result is not None else None
                if until is not None:      # (kept by the end's step)
                    self.journal.job_record(q, records.RESULT, records.result(q.qid, ts, jobs[0].id, until, result))
                self.log_released(ts)
        elif self.journal.logs_jobs_of(q):
            self.journal.job_record(q, records.ACK, records.ack(q.qid, ts, [j.id for j in jobs]),
                                    blind_until=blind_until)

    def nack(self, q: Queue, jobs: list[Job], visible_at: int, error: bytes | None, ts: int,
             closed: bool = False) -> None:
        """Release leases (``closed``: because the holding connection closed)."""
        for job in jobs:
            q.release(job, visible_at, ts, error, error is not None, closed)
        if self.journal.logs_jobs_of(q):
            self.journal.job_record(q, records.NACK, records.nack(q.qid, ts, visible_at, error, [j.id for j in jobs],
                                                                  closed), lease=True)
        self.woken.add(q)

    def progress(self, q: Queue, job: Job, value: bytes, ts: int) -> None:
        """QPROGRESS: the job's latest progress (a lease record: it does not extend the lease)."""
        job.progress = value
        self.journal.job_record(q, records.PROGRESS, records.progress(q.qid, ts, job.id, value), lease=True)

    def extend(self, q: Queue, jobs: list[Job], deadline: int, ts: int) -> None:
        for job in jobs:
            leasing.extend(q, job, deadline)
        if self.journal.logs_jobs_of(q):
            self.journal.job_record(q, records.EXTEND, records.extend(q.qid, ts, deadline, [j.id for j in jobs]),
                                    lease=True)
        self.woken.add(q)   # a shortened lease moves the moment blocked claimers wake

    # -- expiry, deletion ----------------------------------------------------

    def fold(self, q: Queue, now: int) -> None:
        """Lazy expiry (``Queue.fold``); the leases found run out are logged
        (EXPIRE: written, never waited for).  A replica's store does not
        fold: its primary's records say what ran out, and when (as the log
        does to recovery)."""
        if self.following:
            return
        expired = q.fold(now)
        if expired:
            self.journal.note_record(q, records.EXPIRE, records.expire(q.qid, now, expired))
            self.woken.add(q)

    def apply_expire(self, q: Queue, ids) -> None:
        """Replay of an EXPIRE record."""
        q.expire(ids)

    def take_claimable(self, q: Queue, now: int, count: int) -> list[Job]:
        """The next ``count`` jobs that may be delivered, in claim order.  A job
        that would be delivered one time too many, or is older than EXPIRE, is
        dead-lettered on the way instead (docs/semantics.md §1.8) and the next one is taken:
        it takes no group's turn, so its group's next job comes at the same turn (§3.8).
        The jobs dead-lettered on the way go in the order the claim reached them."""
        while True:
            self.fold(q, now)
            allowed = flow.allowance(q, now)
            if allowed is not None and allowed < count:
                count = allowed
                if not count:
                    return []
            jobs = q.claim_head(count, now)
            if nobody_doomed(q, jobs) or all(death_reason(q, job, now) is None for job in jobs):
                return jobs
            dying: list = []            # (job, reason) in the order the claim reaches them

            def doomed(job: Job) -> bool:
                reason = death_reason(q, job, now)
                if reason is not None:
                    dying.append((job, reason))
                return reason is not None

            q.claim_head(count, now, doomed)
            with self.journal.transaction():
                for reason, run in _runs(dying):
                    self.deaths.dead_letter(q, run, reason, now)

    def log_released(self, ts: int) -> None:
        """RELEASE records for the children the transition under way released
        (storage/deps.py), for readers of the log."""
        for cq, ids in self.deps.take_released().items():
            self.journal.job_record(cq, records.RELEASE, records.release(cq.qid, ts, ids))

    def delete(self, q: Queue, jobs: list[Job], ts: int, purge: bool = False) -> None:
        """Jobs removed whatever their state (QDEL; QPURGE with ``purge``);
        leases become stale."""
        for job in jobs:
            q.remove(job)
        self.ended(q, jobs, DELETED, ts)
        with self.journal.transaction():
            self.journal.job_record(q, records.PURGE if purge else records.DEL,
                                    records.delete(q.qid, ts, [j.id for j in jobs]))
            self.log_released(ts)

    # -- a job's end ---------------------------------------------------------------------

    def ended(self, q: Queue, jobs: list[Job], how: bytes, ts: int, detail: bytes | None = None):
        """The one step of a job's end: ``jobs`` of ``q`` just ended ``how``
        (``storage.results``: ACKED, DELETED, DROPPED, DIED, CANCELLED), the
        change of their state done; ``detail``: an ack's RESULT value, a
        death's or a cancel's reason (b"cancelled").  Every transition that ends jobs calls it, live and
        in replay alike (docs/architecture.md, "A job's end"); what reacts
        to an end takes part here, in this order, each only when its flag
        says it has something to do:

        1. results (``results.keep``): how they ended, for QRESULT;
        2. dependants (``Deps.ended``, while any job waits for another):
           children released, or marked to die with them;
        3. waiters (``EndWatch.ended``, while a QRESULT BLOCK waits);
        4. flow slots (``flow.has_slots``): a freed slot wakes the queue.

        (A drop takes part only in 2: its queue is gone.)  It writes no
        record: the transition writes its own, then those of what the step
        caused (RESULT, the doomed children's DEAD, RELEASE).  Returns the
        children that must die with the jobs, ``[(queue, [child, ...])]``."""
        doomed = NOBODY_DOOMED
        if detail is not None:
            results.keep(q, jobs, how, detail, ts)
        if self.deps.children:
            doomed = self.deps.ended(q, jobs, how, ts)
        if self.endings.watched and how is not DROPPED:
            self.endings.ended(q, jobs)
        if q.config.slots and how is not DROPPED:       # (flow.has_slots)
            self.woken.add(q)       # a slot is free: a blocked claimer may take it
        return doomed

    def set_clock(self, offset: int, frozen: bool, frozen_at: int) -> None:
        """The DEBUG clock, logged so a restart keeps the test's time."""
        self.clock = (offset, frozen, frozen_at)
        self.journal.meta_record(records.CLOCK, records.clock(offset, frozen, frozen_at))


def unseen_by_claims_until(q: Queue, jobs: list[Job]) -> int:
    """Until when no claim can tell whether the ack of ``jobs`` happened
    (0: a claim may at once), for ``LogBuffer.settled_since``: jobs in flight are
    claimable again only at the end of their leases, and on a queue without
    CONCURRENCY, group rules or groups an ack frees no claim's way.  (A job
    some child waits for is acked in a transaction, which never uses this.)"""
    if flow.has_slots(q) or q.indexes.groups is not None:
        return 0
    until = None
    for job in jobs:
        if job.state is not IN_FLIGHT:
            return 0
        if until is None or job.deadline < until:
            until = job.deadline
    return until or 0


def _runs(dying: list) -> list:
    """(reason, jobs) for each run of consecutive ``(job, reason)`` pairs with
    the same reason: one DEAD record each, in order."""
    runs: list = []
    for job, reason in dying:
        if runs and runs[-1][0] == reason:
            runs[-1][1].append(job)
        else:
            runs.append((reason, [job]))
    return runs


def _set_durability(q: Queue) -> None:
    d = q.config.durability
    q.durability = FSYNC if d == FSYNC else ASYNC if d == ASYNC else MEMORY
