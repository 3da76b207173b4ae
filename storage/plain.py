"""What a plain command changes, as one function each: a QPUSH of one job
without options (``push_one``), a claim (``claim_next``; ``claimable``, what
a serve of parked claims deals out) and a QACK without RESULT
(``ack_tokens``).

At one job per command a job's life is these three, and they are where the
daemon spends its time (a replica's too: replayed PUSH records of one job
arrive by ``arrive``, ACK records by ``ack``, as recovery's), so each takes a short way on a *plain* queue: one
function over the queue's parts (its job table, indexes and counters, the
store's woken set, the journal's records) instead of the dozen small
transitions of ``Store`` (``push`` -> ``arrive`` -> ``Queue.add_many``
...), whose calls cost more than the work.  The short way changes exactly
what those transitions would; anything it does not cover goes the way of
``Store``, decided before anything changes.  Plain means: the queue has
no groups (and so no group rules), no pause, CONCURRENCY or RATE
(``QueueConfig.limited``), no MAXDELIVERIES or EXPIRE; a push needs no new
IDMARK (one in 65,536); the jobs claimed or acked have none of the rare
fields (``Job.extra``: a key, an error, a holder ...), the jobs acked are
all in flight, their queue keeps no completed jobs, and no job waits for
another (``Store.deps``).

One source: Cython compiles this file as it is, with the C types of
plain.pxd beside it (docs/performance.md, "One source, two flavours"); the
pure flavour runs the same text.  tests/unit/test_short_ways.py runs
generated command sequences with the short ways (``SHORT``) and without,
and holds them to the same replies, records and store."""

from __future__ import annotations

from . import flow, records
from .bands import band
from .config import FSYNC
from .job import IN_FLIGHT, READY, Job, payload_sizes
from .leasing import drop_leases, jobs_for_tokens, lease_tokens, take_leases
from .results import ACKED
from .store import unseen_by_claims_until

SHORT = True        # take the short ways on plain queues (tests turn it off to compare)


def push_one(store, q, payload: bytes, priority: int, now: int) -> int:
    """One job with no options but ``priority``: ``take_ids``, then ``push``;
    the job's id."""
    jid = q.next_id
    if not SHORT or q.indexes.groups is not None or jid + 1 > q.id_mark:    # (take_ids logs an IDMARK first)
        jid = store.take_ids(q, 1)
        store.push(q, [Job(jid, payload, priority, now, now)], now)
        return jid
    job = Job(jid, payload, priority, now, now)
    journal = store.journal
    logged = journal.logs_jobs_of(q)
    body = records.push(q.qid, now, [job]) if logged else b""     # encoded first, as push does
    _arrive_ready(store, q, job)
    if logged:
        journal.job_record(q, records.PUSH, body)
    return jid


def arrive(store, q, jobs: list, now: int) -> None:
    """``Store.arrive(q, jobs, now)``, the short way for one job ready now,
    without rare fields, on a queue without groups (a replayed PUSH
    record's, as ``push_one`` takes it)."""
    if SHORT and len(jobs) == 1 and q.indexes.groups is None:
        job = jobs[0]
        if job.extra is None and job.visible_at <= now and job.id >= q.next_id:
            _arrive_ready(store, q, job)
            return
    store.arrive(q, jobs, now)


def _arrive_ready(store, q, job) -> None:
    """``Store.arrive`` of one job ready now, without rare fields, above
    every id of ``q`` so far, on a queue without groups."""
    q.next_id = job.id + 1
    job.state = READY
    q.jobs.extend([job])
    ready = q.indexes.ready
    ready.append_new(band(job.priority, False), (job.id,))
    q.payload_bytes += job.payload_len
    q.counters.pushed += 1
    store.woken.add(q)


def claimable(store, q, now: int, want: int) -> int:
    """What a serve of parked claims asks before it deals jobs out: the
    fold, then how many of ``want`` jobs the rules let out now."""
    if SHORT and _claims_plainly(q):
        _fold(store, q, now)
        return min(want, len(q.indexes.ready))
    store.fold(q, now)
    return flow.claimable(q, now, want)


def claim_next(store, q, now: int, count: int, deadline: int, consumer: bytes) -> list:
    """A claim's whole change: ``take_claimable``, then ``claim`` of the jobs
    it took (leased until ``deadline``); those jobs."""
    if SHORT and _claims_plainly(q):
        _fold(store, q, now)
        ready = q.indexes.ready
        ids = ready.first(count)
        if not ids:
            return []
        table = q.jobs
        jobs = [table[i] for i in ids]
        if _all_plain(jobs):
            _lease_front(store, q, jobs, now, deadline, consumer)
            return jobs
    jobs = store.take_claimable(q, now, count)
    if jobs:
        store.claim(q, jobs, deadline, consumer, now, front=True)
    return jobs


def ack_tokens(store, q, tokens, now: int) -> int:
    """QACK without RESULT: the jobs these tokens still hold, completed
    (``ack``); how many."""
    jobs = jobs_for_tokens(q.jobs, tokens)
    if jobs:
        ack(store, q, jobs, now)
    return len(jobs)


def ack(store, q, jobs: list, now: int) -> None:
    """``Store.ack(q, jobs, now)``, the short way when the jobs are all in
    flight on a plain queue (a QACK's, and an ACK record's replayed)."""
    if (SHORT and not q.config.retain_completed and q.indexes.groups is None and not store.deps.children
            and _all_in_flight(jobs)):
        _complete(store, q, jobs, now)
    else:
        store.ack(q, jobs, now)


def _claims_plainly(q) -> bool:
    """Whether a claim of ``q`` is plain: no groups, nothing that limits
    (``limited``), no MAXDELIVERIES or EXPIRE."""
    config = q.config
    return not (q.indexes.groups is not None or config.limited or config.maxdeliveries or config.expire)


def _fold(store, q, now: int) -> None:
    """``Store.fold(q, now)``, called only when something in ``q`` is due
    (``Queue.due``: a fold with nothing due changes nothing)."""
    if q.due(now):
        store.fold(q, now)                   # the ordinary fold, which logs the leases that ran out


def _all_plain(jobs: list) -> bool:
    """None of ``jobs`` has a rare field (its own MAXDELIVERIES ...)."""
    for job in jobs:
        if job.extra is not None:
            return False
    return True


def _all_in_flight(jobs: list) -> bool:
    """Every one of ``jobs`` is in flight, without rare fields."""
    for job in jobs:
        if job.extra is not None or job.state is not IN_FLIGHT:
            return False
    return True


def _lease_front(store, q, jobs: list, now: int, deadline: int, consumer: bytes) -> None:
    """``Store.claim(q, jobs, ..., front=True)`` on a plain queue: the jobs
    are the head of ``ready``, and the queue keeps no rate window."""
    n = len(jobs)
    first_seq = store.lease_seq + 1
    store.lease_seq = first_seq + n - 1
    tokens = lease_tokens(jobs, store.epoch, first_seq)
    indexes = q.indexes
    ready = indexes.ready
    ready.pop_first(n)
    ids = take_leases(jobs, tokens, deadline, consumer)
    indexes.leases.add_many(deadline, ids)
    journal = store.journal
    if journal.logs_jobs_of(q):
        journal.job_record(q, records.CLAIM, records.claim(q.qid, now, deadline, first_seq, consumer, ids,
                                                           [job.deliveries for job in jobs]), lease=True)


def _complete(store, q, jobs: list, now: int) -> None:
    """``Store.ack(q, jobs, now)`` of jobs all in flight, on a queue that keeps
    none and whose jobs nobody waits for (``Queue.complete_many`` in bulk)."""
    journal = store.journal
    logged = journal.logs_jobs_of(q)
    blind_until = unseen_by_claims_until(q, jobs) if logged and q.durability is FSYNC else 0
    table = q.jobs
    by_deadline, _rare = drop_leases(jobs, table)
    indexes = q.indexes
    leases = indexes.leases
    for deadline, ids in by_deadline.items():
        leases.remove_many(deadline, ids)
    q.payload_bytes -= payload_sizes(jobs)
    table.compact()
    q.counters.acked += len(jobs)
    store.ended(q, jobs, ACKED, now)     # the one step of a job's end
    if logged:
        journal.job_record(q, records.ACK, records.ack(q.qid, now, [job.id for job in jobs]),
                           lease=False, blind_until=blind_until)
