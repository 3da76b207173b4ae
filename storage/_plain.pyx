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
cdef Slots STORE = Slots("leaseq.storage.store.Store",
                         ("journal", "woken", "lease_seq", "epoch", "deps", "endings"))
cdef enum:
    ST_JOURNAL, ST_WOKEN, ST_LEASE_SEQ, ST_EPOCH, ST_DEPS, ST_ENDINGS
cdef Slots QUEUE = Slots("leaseq.storage.queue.Queue",
                         ("indexes", "config", "next_id", "id_mark", "jobs", "payload_bytes", "counters", "qid",
                          "durability", "results"))
cdef enum:
    Q_INDEXES, Q_CONFIG, Q_NEXT_ID, Q_ID_MARK, Q_JOBS, Q_PAYLOAD_BYTES, Q_COUNTERS, Q_QID, Q_DURABILITY, Q_RESULTS
cdef Slots INDEXES = Slots("leaseq.storage.indexes.Indexes",
                           ("groups", "ready", "delayed", "leases", "dead", "completed", "cancelled"))
cdef enum:
    I_GROUPS, I_READY, I_DELAYED, I_LEASES, I_DEAD, I_COMPLETED, I_CANCELLED
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


cdef inline bint _logged(journal, q) except -1:
    """``Journal.logs_jobs_of``."""
    return get(JOURNAL, journal, 0) is not None and get(QUEUE, q, Q_DURABILITY) is not MEMORY


def push_one(store, q, payload, int priority, now):
    """``plain.push_one`` on a plain queue: the new job's id, or None."""
    return c_push_one(store, q, payload, priority, now)


cdef object c_push_one(store, q, payload, int priority, now):
    """``push_one`` (what daemon._lane calls)."""
    indexes = get(QUEUE, q, Q_INDEXES)
    if get(INDEXES, indexes, I_GROUPS) is not None:
        return None
    jid = get(QUEUE, q, Q_NEXT_ID)
    if jid + 1 > get(QUEUE, q, Q_ID_MARK):   # take_ids logs an IDMARK first
        return None
    job = _new_job(jid, payload, priority, now)
    journal = get(STORE, store, ST_JOURNAL)
    logged = _logged(journal, q)
    body = records.push(get(QUEUE, q, Q_QID), now, [job]) if logged else None     # encoded first, as push does
    put(QUEUE, q, Q_NEXT_ID, jid + 1)
    job.state = READY
    get(QUEUE, q, Q_JOBS).extend([job])
    ready = get(INDEXES, indexes, I_READY)
    _append_new(ready, band(priority, False), (jid,))
    put(QUEUE, q, Q_PAYLOAD_BYTES, get(QUEUE, q, Q_PAYLOAD_BYTES) + len(<bytes>payload))
    counters = get(QUEUE, q, Q_COUNTERS)
    put(COUNTERS, counters, 0, get(COUNTERS, counters, 0) + 1)
    (<set>get(STORE, store, ST_WOKEN)).add(q)
    if logged:
        journal.job_record(q, PUSH, body)
    return jid


cdef inline bint _claims_plainly(indexes, q) except -1:
    """Whether a claim of ``q`` is plain: no groups, nothing that limits
    (``limited``), no MAXDELIVERIES or EXPIRE."""
    config = get(QUEUE, q, Q_CONFIG)
    return not (get(INDEXES, indexes, I_GROUPS) is not None or get(CONFIG, config, K_LIMITED)
                or get(CONFIG, config, K_MAXDELIVERIES) or get(CONFIG, config, K_EXPIRE))


cdef int _fold(store, q, indexes, now) except -1:
    """``Store.fold(q, now)``, called only when something in ``q`` is due
    (a fold with nothing due changes nothing)."""
    cdef int64_t at = now
    if (_due(get(INDEXES, indexes, I_DELAYED), at) or _due(get(INDEXES, indexes, I_LEASES), at)
            or _due(get(INDEXES, indexes, I_DEAD), at) or _due(get(INDEXES, indexes, I_COMPLETED), at)
            or _due(get(INDEXES, indexes, I_CANCELLED), at) or get(RESULTS, get(QUEUE, q, Q_RESULTS), 0)):
        store.fold(q, now)                   # the ordinary fold, which logs the leases that ran out
    return 0


def claimable(store, q, now, Py_ssize_t want):
    """``plain.claimable`` on a plain queue: how many of ``want`` jobs a
    claim could take now, after the fold; or None."""
    return c_claimable(store, q, now, want)


cdef object c_claimable(store, q, now, Py_ssize_t want):
    """``claimable`` (what daemon._lane calls)."""
    indexes = get(QUEUE, q, Q_INDEXES)
    if not _claims_plainly(indexes, q):
        return None
    _fold(store, q, indexes, now)
    return min(want, len(get(INDEXES, indexes, I_READY)))


def claim_next(store, q, now, Py_ssize_t count, deadline, consumer):
    """``plain.claim_next`` on a plain queue: the jobs leased, or None."""
    return c_claim_next(store, q, now, count, deadline, consumer)


cdef object c_claim_next(store, q, now, Py_ssize_t count, deadline, consumer):
    """``claim_next`` (what daemon._lane calls)."""
    indexes = get(QUEUE, q, Q_INDEXES)
    if not _claims_plainly(indexes, q):
        return None
    _fold(store, q, indexes, now)
    ready = get(INDEXES, indexes, I_READY)
    ids = _first(ready, count)
    if not ids:
        return []
    table = get(QUEUE, q, Q_JOBS)
    jobs = [table[i] for i in ids]
    for job in jobs:
        if (<cjob.Job>job).extra is not None if _CJOBS else job.extra is not None:   # its own MAXDELIVERIES ...
            return None
    # Store.claim(..., front=True)
    cdef Py_ssize_t n = len(jobs)
    first_seq = get(STORE, store, ST_LEASE_SEQ) + 1
    put(STORE, store, ST_LEASE_SEQ, first_seq + n - 1)
    epoch = get(STORE, store, ST_EPOCH)
    tokens = _lease_tokens(jobs, epoch, first_seq)
    _pop_first(ready, n)
    ids = _take_leases(jobs, tokens, deadline, consumer)
    leases = get(INDEXES, indexes, I_LEASES)
    _add_many(leases, deadline, ids)
    journal = get(STORE, store, ST_JOURNAL)
    if _logged(journal, q):
        journal.job_record(q, CLAIM, records.claim(get(QUEUE, q, Q_QID), now, deadline, first_seq, consumer, ids,
                                                   [job.deliveries for job in jobs]), lease=True)
    return jobs


def ack_tokens(store, q, tokens, now):
    """``plain.ack_tokens`` on a plain queue: how many jobs were completed, or None."""
    return c_ack_tokens(store, q, tokens, now)


cdef object c_ack_tokens(store, q, tokens, now):
    """``ack_tokens`` (what daemon._lane calls)."""
    config = get(QUEUE, q, Q_CONFIG)
    indexes = get(QUEUE, q, Q_INDEXES)
    if (get(CONFIG, config, K_RETAIN_COMPLETED) or get(INDEXES, indexes, I_GROUPS) is not None
            or get(DEPS, get(STORE, store, ST_DEPS), 0)):
        return None
    table = get(QUEUE, q, Q_JOBS)
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
    if has_slots or get(QUEUE, q, Q_DURABILITY) is not FSYNC:
        blind_until = 0
    # Queue.complete_many: all in flight, none kept
    by_deadline, _rare = _drop_leases(jobs, table)
    leases = get(INDEXES, indexes, I_LEASES)
    for deadline, ids in by_deadline.items():
        _remove_many(leases, deadline, ids)
    put(QUEUE, q, Q_PAYLOAD_BYTES, get(QUEUE, q, Q_PAYLOAD_BYTES)
        - (sum(map(_PAYLOAD_LEN, jobs)) if _LENS else payload_sizes(jobs)))
    table.compact()
    counters = get(QUEUE, q, Q_COUNTERS)
    put(COUNTERS, counters, 1, get(COUNTERS, counters, 1) + len(jobs))
    journal = get(STORE, store, ST_JOURNAL)
    if _logged(journal, q):
        journal.job_record(q, ACK, records.ack(get(QUEUE, q, Q_QID), now, [job.id for job in jobs]),
                           blind_until=blind_until)
    endings = get(STORE, store, ST_ENDINGS)
    if get(ENDINGS, endings, 0):
        endings.ended(q, jobs)
    if has_slots:
        (<set>get(STORE, store, ST_WOKEN)).add(q)     # a slot is free: a blocked claimer may take it
    return len(jobs)


def layouts():
    """The ``Slots`` this module reads through (tests/unit/test_slots.py)."""
    return [STORE, QUEUE, INDEXES, CONFIG, COUNTERS, JOURNAL, RESULTS, DEPS, ENDINGS]
