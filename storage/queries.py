"""Reads of one queue for those who inspect it: QSCAN, QINFO and INFO,
/metrics and the status page, MEMORY USAGE, QPUSH's dedupe look-up and
MAXLEN check.  Functions of a ``Queue``; none changes it, except
``claimable``, which folds first (lazy expiry, unlogged).

The reads the transitions themselves need (the ready head, the job a token
names, the death rule) stay with them in ``storage.queue``.
"""

from __future__ import annotations

from itertools import islice

from .job import CANCELLED, COMPLETED, DEAD, DELAYED, IN_FLIGHT, READY, WAITING, Job
from .job import COMPILED as JOB_COMPILED
from .jobtable import COMPILED as TABLE_COMPILED
from .queue import Queue

# What memory_estimate counts per live job beyond its payload, and per queue:
# `leaseq bench storage` measures 135-142 bytes per job with the compiled Job
# and job table, 270-280 with the pure ones (Job, the payload's bytes object,
# its indexes and dict entries), and an empty queue's dicts, indexes and
# config about 4 KiB.
JOB_BYTES = 150 if JOB_COMPILED and TABLE_COMPILED else 280
QUEUE_BYTES = 4096

# dedupe scopes (docs/semantics.md §3.2): the states in which an existing job with the key counts
SCOPES = {
    b"queued": (DELAYED, READY, WAITING),
    b"active": (DELAYED, READY, WAITING, IN_FLIGHT),
    b"exists": (DELAYED, READY, WAITING, IN_FLIGHT, DEAD, COMPLETED, CANCELLED),
}
SCOPE_CODES = {b"queued": 0, b"active": 1, b"exists": 2}


def claimable(q: Queue, now: int, count: int) -> list[Job]:
    """The next ``count`` jobs in claim order after folding, groups taking
    turns (unlogged: the daemon folds through ``Store.fold`` and reads
    ``Queue.claim_head``)."""
    q.fold(now)
    return q.claim_head(count, now)


def live(q: Queue) -> int:
    """Jobs still to be done: ready, delayed, waiting or in flight (what MAXLEN bounds)."""
    indexes = q.indexes
    return len(indexes.ready) + len(indexes.delayed) + len(indexes.leases) + len(indexes.waiting)


def group_count(q: Queue) -> int:
    """Groups holding live jobs (QINFO's ``groups``): 0 for a queue without
    groups, 1 while all its jobs are in the group ""."""
    groups = q.indexes.groups
    if groups is None:
        return 1 if live(q) else 0
    return len(groups.members)


def duplicate_of(q: Queue, key: bytes, scope: bytes) -> Job | None:
    """The newest job holding dedupe ``key`` whose state is in ``scope``
    (call after ``fold``), if any."""
    states = SCOPES[scope]
    for jid in reversed(q.keys.get(key, ())):
        job = q.jobs[jid]
        if job.state in states:
            return job
    return None


def scan(q: Queue, cursor: int, count: int, state: bytes | None = None, keep=None) -> tuple[int, list[Job]]:
    """Jobs with id > ``cursor`` in ascending id order, at most ``count``
    looked at, those in ``state`` (any when None) that ``keep(job)`` is
    true of (all when ``keep`` is None: QSCAN's MATCH, META and ERROR);
    returns (next cursor, jobs), next cursor 0 at the end."""
    cursor, jobs = q.jobs.scan(cursor, count)
    if state is not None:
        jobs = [job for job in jobs if job.state is state]
    if keep is not None:
        jobs = list(filter(keep, jobs))
    return cursor, jobs


def memory_estimate(q: Queue) -> int:
    """Bytes this queue holds, estimated: its payloads plus what each job
    costs beyond its payload (``JOB_BYTES``, measured by ``leaseq bench
    storage``) plus the queue's own structures, and the results it keeps
    (their bytes, and an entry's cost counted as a job's).  MEMORY USAGE
    answers it."""
    results = q.results
    return QUEUE_BYTES + q.payload_bytes + JOB_BYTES * len(q.jobs) + results.bytes + JOB_BYTES * len(results)


def summary(q: Queue) -> str:
    """One line of counts, as INFO's queues section shows it."""
    counts = ",".join(f"{state}={n}" for state, n in q.indexes.counts().items())
    return f"{counts},durability={q.config.durability}"


def latest_buried(q: Queue, count: int) -> list[Job]:
    """Up to ``count`` jobs dead in this queue, the last buried first
    (``dead`` is ordered by when RETAIN-DEAD lets them go, which follows
    when they died while RETAIN-DEAD is unchanged)."""
    return [q.jobs[jid] for jid in q.indexes.dead.last(count)]


def latest_dead_lettered(q: Queue, count: int, look_at: int) -> list[Job]:
    """Up to ``count`` jobs that came here as dead letters (they carry
    their provenance), newest first, among the ``look_at`` newest jobs:
    a dead-letter queue is appended to, so its recent arrivals are at the
    end of ``jobs`` (ascending ids), and the look stays bounded."""
    found = []
    for job in islice(q.jobs.newest(), look_at):
        if job.origin is not None:
            found.append(job)
            if len(found) == count:
                break
    return found


def oldest_ready_age(q: Queue, now: int) -> int:
    """Age of the ready job pushed first.  Ids follow enqueue order, so it is
    the smallest id, found at the start of one of the 20 priority bands."""
    first = q.indexes.ready.oldest()
    return 0 if first is None else max(0, now - q.jobs[first].enqueued_at)
