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
from leaseq.storage import job as _job_module
from leaseq.storage.job import IN_FLIGHT, READY, Job, payload_sizes
from leaseq.storage.leasing import drop_leases, jobs_for_tokens, lease_tokens, take_leases

cdef int PUSH = records.PUSH, CLAIM = records.CLAIM, ACK = records.ACK
# ``payload_sizes`` of the compiled jobs is ``sum(map(_PAYLOAD_LEN, jobs))``
# (storage/job.py): here without its Python frame
cdef object _PAYLOAD_LEN = _job_module._PAYLOAD_LEN
cdef bint _LENS = payload_sizes is _job_module._compiled_payload_sizes

include "_slots.pxi"

from libc.stdint cimport int64_t
from leaseq.storage._index cimport ReadyIndex, TimeIndex
from leaseq.storage.bands cimport band                       # compiled from storage/bands.py
from leaseq.storage.indexes cimport Indexes                  # compiled from storage/indexes.py
from leaseq.storage.queue cimport Queue                      # compiled from storage/queue.py
from leaseq.storage.store cimport Store                      # compiled from storage/store.py
from leaseq.storage cimport _job as cjob

# The compiled indexes and jobs are called as C (their .pxd files); the pure
# ones, which tests/unit/test_lane.py holds this module to with
# LEASEQ_PURE=1, by their methods and storage.leasing's functions.
cdef bint _CJOBS = Job is cjob.Job       # storage.job's Job is the compiled one

cdef inline bint _due(index, int64_t now) except -1:
    """``index.earliest <= now``."""
    if type(index) is TimeIndex:
        return (<TimeIndex>index).earliest <= now
    return index.earliest <= now


cdef inline object _first(ready, Py_ssize_t count):
    """``ready.first(count)``."""
    if type(ready) is ReadyIndex:
        return (<ReadyIndex>ready).first_ids(count)
    return ready.first(count)


cdef inline int _pop_first(ready, Py_ssize_t count) except -1:
    """``ready.pop_first(count)``."""
    if type(ready) is ReadyIndex:
        (<ReadyIndex>ready).pop_ids(count)
    else:
        ready.pop_first(count)
    return 0


cdef inline int _append_new(ready, int band, jids) except -1:
    """``ready.append_new(band, jids)``."""
    if type(ready) is ReadyIndex:
        (<ReadyIndex>ready).add_ids(band, jids)
    else:
        ready.append_new(band, jids)
    return 0


cdef inline int _add_many(index, int64_t when, jids) except -1:
    """``index.add_many(when, jids)``."""
    if type(index) is TimeIndex:
        (<TimeIndex>index).add_ids(when, jids)
    else:
        index.add_many(when, jids)
    return 0


cdef inline int _remove_many(index, int64_t when, jids) except -1:
    """``index.remove_many(when, jids)``."""
    if type(index) is TimeIndex:
        (<TimeIndex>index).remove_ids(when, jids)
    else:
        index.remove_many(when, jids)
    return 0


# What the three read and change of the store, the queue and its parts
# (``Slots``: at the offset, after one comparison of the class)
cdef Slots CONFIG = Slots("leaseq.storage.config.QueueConfig",
                          ("limited", "maxdeliveries", "expire", "retain_completed", "concurrency",
                           "group_concurrency"))
cdef enum:
    K_LIMITED, K_MAXDELIVERIES, K_EXPIRE, K_RETAIN_COMPLETED, K_CONCURRENCY, K_GROUP_CONCURRENCY
cdef Slots COUNTERS = Slots("leaseq.storage.queue.Counters", ("pushed", "acked"))
cdef Slots JOURNAL = Slots("leaseq.storage.journal.Journal", ("log",))
cdef Slots RESULTS = Slots("leaseq.storage.results.Results", ("entries",))
cdef Slots DEPS = Slots("leaseq.storage.deps.Deps", ("children",))
cdef Slots ENDINGS = Slots("leaseq.storage.results.EndWatch", ("watched",))


# The job loops of storage.leasing, as C when the jobs are the compiled ones
cdef inline object _new_job(jid, payload, int priority, now):
    return cjob.c_new_job(jid, payload, priority, now) if _CJOBS else Job(jid, payload, priority, now, now)


cdef inline object _lease_tokens(jobs, epoch, first_seq):
    return cjob.c_lease_tokens(jobs, epoch, first_seq) if _CJOBS else lease_tokens(jobs, epoch, first_seq)


cdef inline object _take_leases(jobs, tokens, deadline, consumer):
    return (cjob.c_take_leases(jobs, tokens, deadline, consumer) if _CJOBS
            else take_leases(jobs, tokens, deadline, consumer))


cdef inline object _jobs_for_tokens(table, tokens):
    return cjob.c_jobs_for_tokens(table, tokens) if _CJOBS else jobs_for_tokens(table, tokens)


cdef inline tuple _drop_leases(jobs, table):
    return cjob.c_drop_leases(jobs, table) if _CJOBS else drop_leases(jobs, table)


cdef inline bint _logged(journal, Queue q) except -1:
    """``Journal.logs_jobs_of``."""
    return get(JOURNAL, journal, 0) is not None and q.durability is not MEMORY


def push_one(Store store, Queue q, payload, int priority, now):
    """``plain.push_one`` on a plain queue: the new job's id, or None."""
    return c_push_one(store, q, payload, priority, now)


cdef object c_push_one(Store store, Queue q, payload, int priority, now):
    """``push_one`` (what daemon._lane calls)."""
    cdef Indexes indexes = q.indexes
    if indexes.groups is not None:
        return None
    jid = q.next_id
    if jid + 1 > q.id_mark:   # take_ids logs an IDMARK first
        return None
    job = _new_job(jid, payload, priority, now)
    journal = store.journal
    logged = _logged(journal, q)
    body = records.push(q.qid, now, [job]) if logged else None     # encoded first, as push does
    q.next_id = jid + 1
    job.state = READY
    q.jobs.extend([job])
    ready = indexes.ready
    _append_new(ready, band(priority, False), (jid,))
    q.payload_bytes = q.payload_bytes + len(<bytes>payload)
    counters = q.counters
    put(COUNTERS, counters, 0, get(COUNTERS, counters, 0) + 1)
    store.woken.add(q)
    if logged:
        journal.job_record(q, PUSH, body)
    return jid


cdef inline bint _claims_plainly(Indexes indexes, Queue q) except -1:
    """Whether a claim of ``q`` is plain: no groups, nothing that limits
    (``limited``), no MAXDELIVERIES or EXPIRE."""
    config = q.config
    return not (indexes.groups is not None or get(CONFIG, config, K_LIMITED)
                or get(CONFIG, config, K_MAXDELIVERIES) or get(CONFIG, config, K_EXPIRE))


cdef int _fold(Store store, Queue q, Indexes indexes, now) except -1:
    """``Store.fold(q, now)``, called only when something in ``q`` is due
    (a fold with nothing due changes nothing)."""
    cdef int64_t at = now
    if (_due(indexes.delayed, at) or _due(indexes.leases, at)
            or _due(indexes.dead, at) or _due(indexes.completed, at)
            or _due(indexes.cancelled, at) or get(RESULTS, q.results, 0)):
        store.fold(q, now)                   # the ordinary fold, which logs the leases that ran out
    return 0


def claimable(Store store, Queue q, now, Py_ssize_t want):
    """``plain.claimable`` on a plain queue: how many of ``want`` jobs a
    claim could take now, after the fold; or None."""
    return c_claimable(store, q, now, want)


cdef object c_claimable(Store store, Queue q, now, Py_ssize_t want):
    """``claimable`` (what daemon._lane calls)."""
    cdef Indexes indexes = q.indexes
    if not _claims_plainly(indexes, q):
        return None
    _fold(store, q, indexes, now)
    return min(want, len(indexes.ready))


def claim_next(Store store, Queue q, now, Py_ssize_t count, deadline, consumer):
    """``plain.claim_next`` on a plain queue: the jobs leased, or None."""
    return c_claim_next(store, q, now, count, deadline, consumer)


cdef object c_claim_next(Store store, Queue q, now, Py_ssize_t count, deadline, consumer):
    """``claim_next`` (what daemon._lane calls)."""
    cdef Indexes indexes = q.indexes
    if not _claims_plainly(indexes, q):
        return None
    _fold(store, q, indexes, now)
    ready = indexes.ready
    ids = _first(ready, count)
    if not ids:
        return []
    table = q.jobs
    jobs = [table[i] for i in ids]
    for job in jobs:
        if (<cjob.Job>job).extra is not None if _CJOBS else job.extra is not None:   # its own MAXDELIVERIES ...
            return None
    # Store.claim(..., front=True)
    cdef Py_ssize_t n = len(jobs)
    first_seq = store.lease_seq + 1
    store.lease_seq = first_seq + n - 1
    epoch = store.epoch
    tokens = _lease_tokens(jobs, epoch, first_seq)
    _pop_first(ready, n)
    ids = _take_leases(jobs, tokens, deadline, consumer)
    leases = indexes.leases
    _add_many(leases, deadline, ids)
    journal = store.journal
    if _logged(journal, q):
        journal.job_record(q, CLAIM, records.claim(q.qid, now, deadline, first_seq, consumer, ids,
                                                   [job.deliveries for job in jobs]), lease=True)
    return jobs


def ack_tokens(Store store, Queue q, tokens, now):
    """``plain.ack_tokens`` on a plain queue: how many jobs were completed, or None."""
    return c_ack_tokens(store, q, tokens, now)


cdef object c_ack_tokens(Store store, Queue q, tokens, now):
    """``ack_tokens`` (what daemon._lane calls)."""
    config = q.config
    cdef Indexes indexes = q.indexes
    if (get(CONFIG, config, K_RETAIN_COMPLETED) or indexes.groups is not None
            or get(DEPS, store.deps, 0)):
        return None
    table = q.jobs
    jobs = _jobs_for_tokens(table, tokens)
    if not jobs:
        return 0
    blind_until = None                       # _unseen_by_claims_until: the earliest deadline
    for job in jobs:
        if _CJOBS:
            deadline = cjob.c_acked_deadline(job)
            if deadline is None:             # a rare field, or not in flight
                return None
        elif job.extra is not None or job.state is not IN_FLIGHT:
            return None
        else:
            deadline = job.deadline
        if blind_until is None or deadline < blind_until:
            blind_until = deadline
    has_slots = get(CONFIG, config, K_CONCURRENCY) or get(CONFIG, config, K_GROUP_CONCURRENCY)
    if has_slots or q.durability is not FSYNC:
        blind_until = 0
    # Queue.complete_many: all in flight, none kept
    by_deadline, _rare = _drop_leases(jobs, table)
    leases = indexes.leases
    for deadline, ids in by_deadline.items():
        _remove_many(leases, deadline, ids)
    q.payload_bytes = (q.payload_bytes
        - (sum(map(_PAYLOAD_LEN, jobs)) if _LENS else payload_sizes(jobs)))
    table.compact()
    counters = q.counters
    put(COUNTERS, counters, 1, get(COUNTERS, counters, 1) + len(jobs))
    journal = store.journal
    if _logged(journal, q):
        journal.job_record(q, ACK, records.ack(q.qid, now, [job.id for job in jobs]),
                           blind_until=blind_until)
    endings = store.endings
    if get(ENDINGS, endings, 0):
        endings.ended(q, jobs)
    if has_slots:
        store.woken.add(q)     # a slot is free: a blocked claimer may take it
    return len(jobs)


def layouts():
    """The ``Slots`` this module reads through (tests/unit/test_slots.py)."""
    return [CONFIG, COUNTERS, JOURNAL, RESULTS, DEPS, ENDINGS]
