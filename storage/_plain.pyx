# cython: language_level=3
"""The compiled twin of ``storage.plain`` on a *plain* queue (docs/performance.md, "The plain transitions"):
``push_one`` (a QPUSH of one job without options), ``claim_next`` (what a
claim changes: ``take_claimable``, then ``claim`` of what it took) and
``ack_tokens`` (a QACK without RESULT).  The functions of the same names in
storage/plain.py are their definitions; each of these answers what its definition
would, or None, decided before anything changes: then the definition runs.

At one job per command a job's life is these three, and in Python each is
a dozen small functions (``push`` -> ``arrive`` -> ``Queue.add_many`` ...):
their calls and frames cost more than the work.  Here each is one C
function over the same objects: the compiled job table, indexes and job
loops (``storage._jobtable``, ``storage._index``, ``storage._job``), the
queue's counters, the store's woken set, the journal's records.

Plain means: the queue has no groups (and so no group rules), no pause,
CONCURRENCY or RATE (``QueueConfig.limited``), no MAXDELIVERIES or EXPIRE;
a push needs no new IDMARK (one in 65,536); the jobs claimed or acked have
none of the rare fields (``Job.extra``: a key, an error, a holder ...), the
jobs acked are all in flight, their queue keeps no completed jobs, and no
job waits for another (``Store.deps``).  Everything else goes the
ordinary way.  tests/unit/test_lane.py runs generated command sequences
with this module (and the plain lane) and without, and holds them to the
same replies, records and store; it imports the module directly, so with
LEASEQ_PURE=1 it is held to the pure ``Job``, job table and indexes too."""

from leaseq.storage import records
from leaseq.storage.config import FSYNC, MEMORY
from leaseq.storage.job import IN_FLIGHT, READY, Job, payload_sizes
from leaseq.storage.leasing import drop_leases, jobs_for_tokens, lease_tokens, take_leases

cdef int PUSH = records.PUSH, CLAIM = records.CLAIM, ACK = records.ACK


cdef inline bint _logged(journal, q):
    """``Journal.logs_jobs_of``."""
    return journal.log is not None and q.durability is not MEMORY


def push_one(store, q, payload, int priority, now):
    """``plain.push_one`` on a plain queue: the new job's id, or None."""
    indexes = q.indexes
    if indexes.groups is not None:
        return None
    jid = q.next_id
    if jid + 1 > q.id_mark:                  # take_ids logs an IDMARK first
        return None
    job = Job(jid, payload, priority, now, now)
    journal = store.journal
    logged = _logged(journal, q)
    body = records.push(q.qid, now, [job]) if logged else None     # encoded first, as push does
    q.next_id = jid + 1
    job.state = READY
    q.jobs.extend([job])
    indexes.ready.append_new((9 - priority) * 2 + 1, [jid])         # band(job): never requeued
    q.payload_bytes += len(<bytes>payload)
    q.counters.pushed += 1
    store.woken.add(q)
    if logged:
        journal.job_record(q, PUSH, body)
    return jid


def claim_next(store, q, now, Py_ssize_t count, deadline, consumer):
    """``plain.claim_next`` on a plain queue: the jobs leased, or None."""
    indexes = q.indexes
    config = q.config
    if indexes.groups is not None or config.limited or config.maxdeliveries or config.expire:
        return None
    if (indexes.delayed.earliest <= now or indexes.leases.earliest <= now or indexes.dead.earliest <= now
            or indexes.completed.earliest <= now or indexes.cancelled.earliest <= now or q.results.entries):
        store.fold(q, now)                   # the ordinary fold, which logs the leases that ran out
    ready = indexes.ready
    ids = ready.first(count)
    if not ids:
        return []
    table = q.jobs
    jobs = [table[i] for i in ids]
    for job in jobs:
        if job.extra is not None:            # its own MAXDELIVERIES or EXPIRE, a holder ...
            return None
    # Store.claim(..., front=True)
    cdef Py_ssize_t n = len(jobs)
    first_seq = store.lease_seq + 1
    store.lease_seq = first_seq + n - 1
    tokens = lease_tokens(jobs, store.epoch, first_seq)
    ready.pop_first(n)
    ids = take_leases(jobs, tokens, deadline, consumer)
    indexes.leases.add_many(deadline, ids)
    journal = store.journal
    if _logged(journal, q):
        journal.job_record(q, CLAIM, records.claim(q.qid, now, deadline, first_seq, consumer, ids,
                                                   [job.deliveries for job in jobs]), lease=True)
    return jobs


def ack_tokens(store, q, tokens, now):
    """``plain.ack_tokens`` on a plain queue: how many jobs were completed, or None."""
    config = q.config
    if config.retain_completed or q.indexes.groups is not None or store.deps.children:
        return None
    jobs = jobs_for_tokens(q.jobs, tokens)
    if not jobs:
        return 0
    blind_until = None                       # _unseen_by_claims_until: the earliest deadline
    for job in jobs:
        if job.extra is not None or job.state is not IN_FLIGHT:
            return None
        if blind_until is None or job.deadline < blind_until:
            blind_until = job.deadline
    has_slots = config.concurrency or config.group_concurrency
    if has_slots or q.durability is not FSYNC:
        blind_until = 0
    # Queue.complete_many: all in flight, none kept
    indexes = q.indexes
    by_deadline, _rare = drop_leases(jobs, q.jobs)
    leases = indexes.leases
    for deadline, ids in by_deadline.items():
        leases.remove_many(deadline, ids)
    q.payload_bytes -= payload_sizes(jobs)
    q.jobs.compact()
    q.counters.acked += len(jobs)
    journal = store.journal
    if _logged(journal, q):
        journal.job_record(q, ACK, records.ack(q.qid, now, [job.id for job in jobs]), blind_until=blind_until)
    endings = store.endings
    if endings.watched:
        endings.ended(q, jobs)
    if has_slots:
        store.woken.add(q)                   # a slot is free: a blocked claimer may take it
    return len(jobs)
