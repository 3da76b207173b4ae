"""One queue: its jobs and the transitions that move them between states.

Plain objects, no I/O and no clock: every function that depends on time takes
``now`` (ms epoch) as an argument, so live commands, log replay and tests
drive the same code.

``Queue`` holds ``jobs`` (id -> ``Job``, see ``storage.job``), its
``indexes`` (``storage.indexes``: which index holds a job in each state, and
the one way, ``Indexes.move``, to change a field that positions a job), its
``config`` (``storage.config``) and ``counters``.  Besides the indexes:
``keys`` maps each dedupe key to the ids of the jobs holding it (ascending;
usually one), and ``order`` is every id ever added in ascending order (ids
only grow, so appending keeps it sorted; ids of removed jobs are skipped and
compacted away), which QSCAN walks with a cursor.

What stays here beside the transitions is what they need: the ready head a
claim takes (``ready_head``), the lease a token names (``job_for_token``,
``jobs_for_tokens``: a token is good while its lease has not ended, and only
the transitions end leases), and the rule that says a job must not be
delivered again (``death_reason``, ``nobody_doomed``: ``Store.take_claimable``
dead-letters on the way).  Reads for inspection (QSCAN, INFO, the status
page, MEMORY USAGE, dedupe look-ups) are functions in ``storage.queries``.

A lease may have a *holder*: the connection whose SESSION claim or QWORK
stream holds it.  Whenever a lease ends (ack, nack, claim by someone else,
removal) the holder's ``lease_ended(job)`` is called (``job.end_lease``);
holders live in the daemon, the queue only calls them.  What reacts to a
job's *end* (results, dependants, QRESULT waiters, flow slots) is not
reached from here: the store's transitions take that step after the
queue's (``Store.ended``).

Expiry is lazy: ``fold(now)`` moves due delayed jobs and expired leases to
``ready`` when someone looks (a claim, an inspection).  A job whose lease
expired keeps its token until it is claimed again, so a slow worker can still
ack it; a new claim replaces the token and the old one becomes stale.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bands import band as ready_band
from .config import QueueConfig
from .indexes import Bulk, Indexes, band
from .flow import RateWindow
from .groups import Groups
from .job import CANCELLED, COMPLETED, DEAD, DELAYED, IN_FLIGHT, READY, WAITING, Job, end_lease, payload_sizes
from .jobtable import JobTable
from . import leasing
from .results import Results

NONE_EXPIRED: list = []       # fold's answer when no lease ran out (shared: never changed)


@dataclass(slots=True)
class Counters:
    pushed: int = 0
    acked: int = 0
    nacked: int = 0
    lease_expired: int = 0
    dead_lettered: int = 0
    duplicates: int = 0


class Queue:
    __slots__ = ("qid", "name", "config", "jobs", "indexes", "keys", "next_id", "id_mark", "counters", "dropped",
                 "payload_bytes", "rate_window", "schedules", "results", "durability")

    def __init__(self, qid: int, name: bytes, config: QueueConfig) -> None:
        self.qid = qid
        self.name = name
        self.config = config
        self.jobs = JobTable()    # id -> Job (storage/jobtable.py)
        self.indexes = Indexes()
        self.keys: dict[bytes, list[int]] = {}
        self.next_id = 1
        self.id_mark = 0          # ids below this are covered by a logged IDMARK
        self.counters = Counters()
        self.dropped = False
        self.payload_bytes = 0    # sum of the payloads of ``jobs`` (sizes the live data for snapshots)
        self.rate_window = RateWindow()   # recent hand-outs, for RATE (storage/flow.py)
        self.schedules: dict = {}         # name -> storage.schedules.Schedule
        self.results = Results()          # how ended jobs ended, for QRESULT (storage/results.py)

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

    # -- transitions (called by Store, live and during replay) ------------------------

    def use_groups(self) -> Groups:
        """The queue's groups (``storage.groups``), made when its first job with
        a GROUP arrives or a group rule is set, from every job it holds."""
        groups = self.indexes.groups
        if groups is None:
            groups = self.indexes.groups = Groups(self.config)
            for job in self.jobs.values():
                if job.state is not None:
                    groups.enter(job)
        return groups

    def add_many(self, jobs: list[Job], now: int) -> list[Job]:
        """New jobs (ascending ids, above every id so far): ready now, delayed
        until visible_at, or waiting for parents; returns the waiting ones."""
        groups = self.indexes.groups
        grouped = False
        waiting: list[Job] = []
        self.jobs.extend(jobs)
        delayed_add = self.indexes.delayed.add
        keys = self.keys
        ready: dict[int, list] = {}     # band -> ids, ascending and above every id so far
        for job in jobs:
            extra = job.extra           # (job.key, without the property's cost)
            if extra is not None and extra.waiting_for:
                job.state = WAITING             # for its parents (storage/deps.py)
                self.indexes.waiting.add(job.enqueued_at, job.id)
                waiting.append(job)
            elif job.visible_at > now:
                job.state = DELAYED
                delayed_add(job.visible_at, job.id)
            else:
                job.state = READY
                b = ready_band(job.priority, job.requeued)
                ids = ready.get(b)
                if ids is None:
                    ready[b] = [job.id]
                else:
                    ids.append(job.id)
            if extra is not None:
                if extra.key is not None:
                    keys.setdefault(extra.key, []).append(job.id)
                if extra.group:
                    grouped = True
        for b, ids in ready.items():
            self.indexes.ready.append_new(b, ids)
        self._added(jobs)
        if groups is not None:
            for job in jobs:
                groups.enter(job)
        elif grouped:
            self.use_groups()
        return waiting

    def _added(self, jobs: list[Job]) -> None:
        self.payload_bytes += payload_sizes(jobs)
        if jobs and jobs[-1].id >= self.next_id:
            self.next_id = jobs[-1].id + 1

    def restore(self, jobs: list[Job], ids: list[int], payload_bytes: int, bulk: Bulk) -> None:
        """Jobs read back from a snapshot, in ascending id order (``ids``
        theirs, ``payload_bytes`` the sum of their payloads), each with its
        state set: put them in the table and build every index in bulk
        (``Indexes.restore``).  Only the jobs of ``bulk.single`` may have
        rare fields (a key, a group): the others are plain."""
        self.jobs.put_many(ids, jobs)
        keys = self.keys
        grouped = False
        for job in bulk.single:
            extra = job.extra
            if extra is not None:
                if extra.key is not None:
                    keys.setdefault(extra.key, []).append(job.id)
                if extra.group:
                    grouped = True
        self.indexes.restore(jobs, bulk)
        self.payload_bytes += payload_bytes
        if ids and ids[-1] >= self.next_id:
            self.next_id = ids[-1] + 1
        if grouped and self.indexes.groups is None:
            self.use_groups()

    def complete_many(self, jobs: list[Job], now: int) -> None:
        """Acked: gone, or kept as completed for RETAIN-COMPLETED.  Without
        RETAIN-COMPLETED the jobs still in flight go in bulk: their lease
        entries leave the index per deadline (one claim's jobs share one),
        not one by one."""
        retain = self.config.retain_completed
        if retain:
            for job in jobs:
                end_lease(job)
                self.indexes.move(job, state=COMPLETED, retain_until=now + retain, deadline=0)
        else:
            leased = [job for job in jobs if job.state is IN_FLIGHT]
            for job in jobs:
                if job.state is not IN_FLIGHT:    # a lease that ran out, its token still good
                    self.remove(job)
            self._remove_leased(leased)
        self.counters.acked += len(jobs)

    def _remove_leased(self, jobs: list[Job]) -> None:
        """``remove`` for jobs in flight, with their lease entries in bulk."""
        groups = self.indexes.groups
        if groups is not None:
            for job in jobs:
                groups.leave(job)
        by_deadline, rare = leasing.drop_leases(jobs, self.jobs)
        for job in rare:
            self._forget_key(job)
        leases = self.indexes.leases
        for deadline, ids in by_deadline.items():
            leases.remove_many(deadline, ids)
        self.payload_bytes -= payload_sizes(jobs)
        self.jobs.compact()

    def release(self, job: Job, visible_at: int, now: int, error: bytes | None, has_error: bool,
                closed: bool = False) -> None:
        """Back to ready (or delayed until ``visible_at``), to be claimed again."""
        end_lease(job)
        state = DELAYED if visible_at > now else READY
        self.indexes.move(job, state=state, visible_at=visible_at if state is DELAYED else job.visible_at,
                          deadline=0, requeued=True)
        if has_error:
            job.last_error = error
        if not closed:
            self.counters.nacked += 1

    def replace(self, job: Job, payload: bytes, priority: int, visible_at: int, now: int) -> None:
        """KEY ... REPLACE: a ready or delayed job gets a new payload and
        priority, and, unless ``visible_at`` is 0, a new ready time."""
        if visible_at:
            state = DELAYED if visible_at > now else READY
            self.indexes.move(job, state=state, priority=priority, visible_at=visible_at)
        else:
            self.indexes.move(job, priority=priority)
        self.payload_bytes += len(payload) - job.payload_len
        job.payload = payload

    def wake_waiting(self, job: Job, now: int) -> None:
        """Its last parent is done: ready, or delayed by its DELAY counted from
        now (an AT in the future still holds)."""
        after = job.after_delay
        visible_at = now + after if after else max(job.visible_at, now)
        self.indexes.move(job, state=DELAYED if visible_at > now else READY, visible_at=visible_at)

    def bury(self, job: Job, reason: bytes, now: int) -> None:
        """Dead in this queue (no DEADLETTER), kept for RETAIN-DEAD."""
        end_lease(job)
        self.indexes.move(job, state=DEAD, retain_until=now + self.config.retain_dead, dead_reason=reason,
                          deadline=0)
        self.counters.dead_lettered += 1

    def cancel(self, job: Job, now: int) -> None:
        """QCANCEL: ended where it stands (its lease, if any, is over), kept
        like a dead job for RETAIN-DEAD."""
        end_lease(job)
        self.indexes.move(job, state=CANCELLED, retain_until=now + self.config.retain_dead, deadline=0)

    def revive(self, job: Job, now: int) -> None:
        """A dead job back to ready, its deliveries forgotten and its age
        restarted (QREDRIVE is a new enqueue: EXPIRE counts from now)."""
        self.indexes.move(job, state=READY, deliveries=0, requeued=True, dead_reason=None, retain_until=0,
                          enqueued_at=now)

    def remove(self, job: Job) -> None:
        """Gone, whatever its state (ack, QDEL, dead-lettered elsewhere, retention over)."""
        end_lease(job)
        self.indexes.remove(job)
        job.state = None
        del self.jobs[job.id]
        self.payload_bytes -= job.payload_len
        self._forget_key(job)
        self.jobs.compact()

    def remove_all(self) -> int:
        n = len(self.jobs)
        for job in self.jobs.values():
            if job.token is not None:
                end_lease(job)
        self.jobs.clear()
        self.payload_bytes = 0
        self.indexes.clear()
        self.results.clear()
        self.keys.clear()
        return n

    # -- lazy expiry -----------------------------------------------------------------------

    def due(self, now: int) -> bool:
        """Whether ``fold(now)`` has anything to do: a delayed job or a lease
        due, a retention over, groups to fold, a result to let go.  A claim
        that finds nothing due skips the fold (``storage.plain``)."""
        indexes = self.indexes
        at = now
        return (indexes.delayed.earliest <= at or indexes.leases.earliest <= at or indexes.dead.earliest <= at
                or indexes.completed.earliest <= at or indexes.cancelled.earliest <= at
                or indexes.groups is not None or bool(self.results.entries))

    def fold(self, now: int) -> list[int]:
        """Move due delayed jobs and expired leases to ready; let go of dead,
        cancelled and completed jobs whose retention is over, and of results
        whose RESULT-TTL is.  Returns the ids whose leases
        ran out (``Store.fold`` logs them).  It runs at every claim: when
        nothing is due it only compares each index's ``earliest`` with now."""
        indexes = self.indexes
        if indexes.delayed.earliest <= now:
            self._make_ready(indexes.delayed.pop_due(now))     # delayed jobs whose moment came
        expired: list[int] = NONE_EXPIRED
        leases = indexes.leases
        if leases.earliest <= now:
            expired = leases.pop_due(now)
            self._expired(expired)
        if indexes.dead.earliest <= now or indexes.completed.earliest <= now or indexes.cancelled.earliest <= now:
            self._retention_over(now)
        if indexes.groups is not None:
            indexes.groups.fold(now)
        if self.results.entries:              # (a dict's truth test: free when no result is kept)
            self.results.fold(now)
        return expired

    def _retention_over(self, now: int) -> None:
        """Dead, completed and cancelled jobs kept until now: let go."""
        jobs, indexes = self.jobs, self.indexes
        for index in (indexes.dead, indexes.completed, indexes.cancelled):
            if index.earliest <= now:
                for jid in index.pop_due(now):
                    job = jobs[jid]
                    job.state = None              # already out of its index
                    self.remove(job)

    def _expired(self, ids) -> None:
        """Leases out of ``leases`` that ran out: their jobs are ready again
        (the token still works until someone claims the job)."""
        self._make_ready(ids, requeued=True)
        self.counters.lease_expired += len(ids)

    def _make_ready(self, ids, requeued: bool = False) -> None:
        """Jobs already out of their time index (due delayed ones, expired
        leases: ``requeued``) go into ``ready``, and into their group's turn."""
        jobs = self.jobs
        ready_add = self.indexes.ready.add
        groups = self.indexes.groups
        for jid in ids:
            job = jobs[jid]
            if groups is not None:
                groups.leave(job, staying=True)
            job.state = READY
            if requeued:
                job.requeued = True
            ready_add(band(job), jid)
            if groups is not None:
                groups.enter(job)

    def expire(self, ids) -> None:
        """Replay of an EXPIRE record: the leases of these in-flight jobs ran
        out (ids no longer in flight are skipped)."""
        jobs = self.jobs
        leases = self.indexes.leases
        gone = []
        for jid in ids:
            job = jobs.get(jid)
            if job is not None and job.state is IN_FLIGHT:
                leases.remove(job.deadline, jid)
                gone.append(jid)
        self._expired(gone)

    # -- what the transitions read -----------------------------------------------------------

    def ready_head(self, count: int) -> list[Job]:
        """The first ``count`` ready jobs by priority and age, as they stand
        (QPEEK's order; with groups, claims take turns: ``claim_head``)."""
        jobs = self.jobs
        return [jobs[i] for i in self.indexes.ready.first(count)]

    def claim_head(self, count: int, now: int, doomed=None) -> list[Job]:
        """The next ``count`` jobs a claim would take now, as the group rules
        and turns allow (the queue's own limits are ``storage.flow``'s).
        ``doomed(job)``: the jobs the claim would dead-letter on the way,
        passed over (with groups they take no turn: ``Groups.first``)."""
        groups = self.indexes.groups
        jobs = self.jobs
        if groups is None:
            if doomed is None:
                return self.ready_head(count)
            out = []
            for i in self.indexes.ready:
                if len(out) == count:
                    break
                if not doomed(jobs[i]):
                    out.append(jobs[i])
            return out
        if doomed is None:
            return [jobs[i] for i in groups.first(count, now)]
        return [jobs[i] for i in groups.first(count, now, lambda i: doomed(jobs[i]))]

    def job_for_token(self, token: bytes) -> Job | None:
        """The job a token's lease is on, if that lease has not ended (else None)."""
        jobs = leasing.jobs_for_tokens(self.jobs, (token,))
        return jobs[0] if jobs else None

    def jobs_for_tokens(self, tokens) -> list[Job]:
        """The jobs whose leases these tokens still hold, each once, in token
        order; stale and unknown tokens are skipped (docs/semantics.md §4.8)."""
        return leasing.jobs_for_tokens(self.jobs, tokens)


def nobody_doomed(q: Queue, jobs: list[Job]) -> bool:
    """True when none of ``jobs`` can have a ``death_reason``: the queue
    sets no MAXDELIVERIES or EXPIRE and no job has its own (the common
    case, answered without looking at each job's rare fields)."""
    config = q.config
    if config.maxdeliveries or config.expire:
        return False
    for job in jobs:
        if job.extra is not None:
            return False
    return True


def death_reason(q: Queue, job: Job, now: int) -> bytes | None:
    """Why ``job`` must not be delivered again now, or None (docs/semantics.md §1.8: on the
    MAXDELIVERIES+1-th delivery, or when older than EXPIRE)."""
    limit = job.max_deliveries or q.config.maxdeliveries
    if limit and job.deliveries >= limit:
        return b"max-deliveries"
    expire = job.expire_ms or q.config.expire
    if expire and now - job.enqueued_at > expire:
        return b"expired"
    return None
