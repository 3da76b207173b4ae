# cython: language_level=3
"""The compiled twin of ``storage.job.Job`` (docs/performance.md): the same
attributes and constructor, made in C: 80 bytes for the job (the pure one
is 128) and the payload's own length for its payload (a 128-byte payload
was a 176-byte ``bytes`` object).

- priority, deliveries, requeued and the state are C numbers, not
  pointers (``state`` reads back the very ``STATES`` object that was set,
  so ``job.state is READY`` holds);
- the payload is copied once into memory from Python's allocator, exactly
  its length; ``job.payload`` makes a ``bytes`` of it each time it is read
  (a claim's reply, QPEEK, a snapshot), and ``payload_len`` is its size
  without making one;
- the lease fields (token, deadline, consumer) live in a small ``_Lease``
  made when a claim first sets one and let go once all three are back at
  their defaults: the jobs waiting in ``ready``, most of the live ones,
  never have one (a job in flight costs 48 bytes more);
- a job is outside the cyclic collector's reach.  A job holds no
  reference cycle that refcounting cannot free: what it points at (numbers,
  byte strings, its ``JobExtra``) never points back at it, except a
  SESSION or QWORK holder (``extra.holder``), whose ``held`` table is
  emptied whenever it lets its jobs go (the lease ends, the connection
  closes, a disk fault drops the holdings).  So the collector need not
  track jobs, and its full collections no longer rescan every live job.

``storage/job.py`` holds the definition (``Job`` there, the rare fields in
``JobExtra``) and binds its name ``Job`` to this class when it was built and
LEASEQ_PURE is not 1; tests/unit/test_job_flavours.py checks that both
offer the same attributes.  ``push_jobs`` reads a PUSH record's plain jobs
straight into jobs of this class (a replica applies its primary's records
with it, and recovery replays the log with it); the same test file holds
it to the pure reader."""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.string cimport memcpy

import struct

from leaseq.storage.job import IN_FLIGHT, STATES, JobExtra, _extra_field, end_lease

cdef tuple _STATE_OF = (None,) + STATES                      # the C number -> the state
cdef dict _NUMBER_OF = {s: n for n, s in enumerate(_STATE_OF)}    # the state -> its C number
cdef Py_ssize_t _PAYLOAD_MAX = 0xFFFFFFFF
cdef unsigned char _IN_FLIGHT = _NUMBER_OF[IN_FLIGHT]


@cython.auto_pickle(False)
@cython.final
@cython.no_gc          # byte strings and an int: no cycles
cdef class _Lease:
    """A job's lease fields, made when a claim first sets one (a ready job
    that was never claimed has none): the token, the deadline, the consumer
    (the fields of both classes are declared in _job.pxd)."""


@cython.auto_pickle(False)
@cython.final
@cython.no_gc          # jobs hold no reference cycles (see above): the cyclic collector never scans them
cdef class Job:
    def __init__(self, id, payload, int priority, enqueued_at, visible_at, key=None, flags=0,
                 max_deliveries=0, expire_ms=0):
        cdef bytes b = payload if type(payload) is bytes else bytes(payload)
        _fill(self, id, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), priority, enqueued_at, visible_at)
        if key is not None or flags or max_deliveries or expire_ms:
            self.extra = JobExtra(key, flags, max_deliveries, expire_ms)

    def __dealloc__(self):
        PyMem_Free(self._payload)

    @property
    def payload(self):
        return PyBytes_FromStringAndSize(self._payload, self.payload_len)

    @payload.setter
    def payload(self, value):
        _keep(self, value)

    @property
    def token(self):
        return None if self._lease is None else self._lease.token

    @token.setter
    def token(self, value):
        if self._lease is not None or value is not None:
            _leased(self).token = value
            _settle(self)

    @property
    def deadline(self):
        return 0 if self._lease is None else self._lease.deadline

    @deadline.setter
    def deadline(self, value):
        if self._lease is not None or value != 0:
            _leased(self).deadline = value
            _settle(self)

    @property
    def consumer(self):
        return None if self._lease is None else self._lease.consumer

    @consumer.setter
    def consumer(self, value):
        if self._lease is not None or value is not None:
            _leased(self).consumer = value
            _settle(self)

    @property
    def state(self):
        return _STATE_OF[self._state]

    @state.setter
    def state(self, value):
        number = _NUMBER_OF.get(value)
        if number is None:
            raise ValueError(f"not a job state: {value!r}")
        self._state = number

    @property
    def requeued(self):
        return self._requeued != 0

    @requeued.setter
    def requeued(self, value):
        self._requeued = 1 if value else 0

    key = _extra_field("key", None)
    flags = _extra_field("flags", 0)
    max_deliveries = _extra_field("max_deliveries", 0)
    expire_ms = _extra_field("expire_ms", 0)
    last_error = _extra_field("last_error", None)
    origin = _extra_field("origin", None)
    retain_until = _extra_field("retain_until", 0)
    dead_reason = _extra_field("dead_reason", None)
    holder = _extra_field("holder", None)
    group = _extra_field("group", b"")
    schedule = _extra_field("schedule", None)
    tick = _extra_field("tick", 0)
    waiting_for = _extra_field("waiting_for", None)
    after_delay = _extra_field("after_delay", 0)
    onfail_run = _extra_field("onfail_run", False)
    failed_parent = _extra_field("failed_parent", None)
    progress = _extra_field("progress", None)
    meta = _extra_field("meta", None)


cdef int _fill(Job job, object id, const char *payload, Py_ssize_t size, int priority, object enqueued_at,
               object visible_at) except -1:
    """A new job's fields, none of the rare ones (``Job.__init__`` adds those)."""
    job.id = id
    _keep_bytes(job, payload, size)
    job.priority = priority
    job.enqueued_at = enqueued_at
    job.visible_at = visible_at
    job.deliveries = 0
    job._state = 0
    job._requeued = 0
    job.extra = None
    return 0


cdef int _keep(Job job, object payload) except -1:
    """Copy ``payload`` (bytes, or any bytes-like object) into a buffer of
    ``job``'s own, in place of the one it had (a function, not a method: a
    cdef method would cost every job a pointer to the class's table)."""
    cdef bytes b = payload if type(payload) is bytes else bytes(payload)
    return _keep_bytes(job, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))


cdef int _keep_bytes(Job job, const char *payload, Py_ssize_t n) except -1:
    """``_keep`` of the ``n`` bytes at ``payload``."""
    if n > _PAYLOAD_MAX:
        raise OverflowError("a job's payload is limited to 4 GiB")
    cdef char *buf = <char *>PyMem_Malloc(n if n else 1)
    if buf == NULL:
        raise MemoryError()
    memcpy(buf, payload, n)
    PyMem_Free(job._payload)
    job._payload = buf
    job.payload_len = <unsigned int>n
    return 0


cdef _Lease _leased(Job job):
    """The job's lease fields, made (all at their defaults) if it had none."""
    cdef _Lease lease = job._lease
    if lease is None:
        lease = job._lease = _Lease.__new__(_Lease)
        lease.token = None
        lease.deadline = 0
        lease.consumer = None
    return lease


cdef inline void _settle(Job job):
    """Let the lease fields go once all are back at their defaults (a job
    released with its consumer kept still has them)."""
    cdef _Lease lease = job._lease
    if lease.token is None and lease.consumer is None and lease.deadline == 0:
        job._lease = None


cdef inline int _hex(char *out, unsigned long long v) noexcept:
    """Write ``v`` in lower-case hex (no leading zeros) at ``out``; its length."""
    cdef char digits[16]
    cdef int n = 0, i
    while True:
        digits[n] = b"0123456789abcdef"[v & 15]
        n += 1
        v >>= 4
        if v == 0:
            break
    for i in range(n):
        out[i] = digits[n - 1 - i]
    return n


cdef inline unsigned long long _u64(const unsigned char *p) noexcept:
    """The little-endian u64 at ``p`` (the log's byte order on any machine)."""
    cdef unsigned long long v = 0
    cdef int i
    for i in range(7, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef inline unsigned int _u32(const unsigned char *p) noexcept:
    return p[0] | (<unsigned int>p[1] << 8) | (<unsigned int>p[2] << 16) | (<unsigned int>p[3] << 24)


def push_jobs(object record, Py_ssize_t offset, Py_ssize_t count, object ts, job_at):
    """``storage.job.push_jobs``: the ``count`` jobs of a PUSH record's
    ``body`` from ``offset`` on, and the offset after them.  A plain job
    (no key, flags, max deliveries or expiry: the record's ``flags``,
    ``key_len``, ``max_deliveries`` and ``expire_ms`` all zero) is read and
    made here, its payload copied once, straight from the body; any other
    is ``job_at(body, offset, ts)``'s, as in the pure loop.  The layout is
    ``records._JOB``'s (36 bytes, little-endian), then the payload."""
    cdef bytes body = record if type(record) is bytes else bytes(record)
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(body)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(body), i
    cdef unsigned long long visible_at, t = ts
    cdef unsigned int payload_len
    cdef list jobs = []
    cdef Job job
    for i in range(count):
        if offset < 0 or size - offset < 36:
            raise struct.error(f"a PUSH job at {offset} runs past the record's end ({size})")
        if (p[offset + 17] or _u32(p + offset + 18) or _u64(p + offset + 22)    # flags, max_deliveries, expire_ms
                or p[offset + 30] or p[offset + 31]):                          # key_len
            job, offset = job_at(body, offset, ts)
            jobs.append(job)
            continue
        payload_len = _u32(p + offset + 32)
        if size - offset - 36 < payload_len:
            raise struct.error(f"a PUSH job's payload at {offset} runs past the record's end ({size})")
        visible_at = _u64(p + offset + 8)
        job = Job.__new__(Job)
        _fill(job, _u64(p + offset), <const char *>p + offset + 36, payload_len, <int>p[offset + 16], ts,
              ts if visible_at == t else visible_at)          # (a job ready at once shares the int ts)
        offset += 36 + payload_len
        jobs.append(job)
    return jobs, offset


def payload_sizes(jobs):
    """``storage.job.payload_sizes``: the sum of the jobs' payload sizes
    (of any job that has a ``payload_len``; of this Job's as C)."""
    cdef unsigned long long total = 0
    for job in jobs:
        total += (<Job>job).payload_len if type(job) is Job else job.payload_len
    return total


def lease_tokens(jobs, unsigned long long epoch, unsigned long long first_seq):
    """``storage.leasing``'s ``TOKEN`` for a new lease on each of ``jobs``,
    the lease numbers counting from ``first_seq``, written digit by digit
    (a bytes ``%`` per token was 8 % of W2's claims and acks in a profile)."""
    cdef char buf[64]
    cdef char mid[20]
    cdef Job job
    cdef unsigned long long seq = first_seq
    cdef int n, m
    mid[0] = b"."
    m = 1 + _hex(mid + 1, epoch)
    mid[m] = b"."
    m += 1
    out = []
    for job in jobs:
        n = _hex(buf, job.id)
        memcpy(buf + n, mid, m)
        n += m
        n += _hex(buf + n, seq)
        out.append(PyBytes_FromStringAndSize(buf, n))
        seq += 1
    return out


# -- the per-job loops of a claim and an ack (storage.leasing has their pure twins and says what they do) --

def take_leases(jobs, tokens, deadline, consumer):
    """``leasing.take_leases``: each job in flight under its token, with
    ``deadline`` and ``consumer``, one more delivery; the jobs' ids."""
    cdef Job job
    cdef _Lease lease
    ids = []
    for job, token in zip(jobs, tokens):
        lease = job._lease
        if lease is not None and lease.token is not None:   # an expired lease, now replaced
            end_lease(job)
        lease = _leased(job)
        lease.token = token
        lease.deadline = deadline
        lease.consumer = consumer
        job._state = _IN_FLIGHT
        job.deliveries += 1
        ids.append(job.id)
    return ids


def drop_leases(jobs, table):
    """``leasing.drop_leases``: jobs in flight leave ``table`` with their
    leases ended; their ids by deadline, and the jobs with rare fields."""
    cdef Job job
    cdef _Lease lease
    cdef dict by_deadline = {}
    cdef list ids
    rare = []
    for job in jobs:
        if job.extra is not None:
            end_lease(job)                 # (tells a SESSION or QWORK holder)
            rare.append(job)
        elif job._lease is not None:
            job._lease.token = None
            _settle(job)
        lease = job._lease
        deadline = 0 if lease is None else lease.deadline
        ids = by_deadline.get(deadline)
        if ids is None:
            ids = by_deadline[deadline] = []
        ids.append(job.id)
        job._state = 0
        del table[job.id]
    return by_deadline, rare


def jobs_for_tokens(table, tokens):
    """``leasing.jobs_for_tokens``: the jobs of ``table`` whose leases these
    tokens hold, each once, in token order.  The id is read from the hex
    digits before the first dot; anything else there names no job (a head
    ``int(head, 16)`` would also take, such as upper-case digits, cannot
    equal a token the daemon made, so both twins skip it)."""
    cdef bytes token
    cdef const unsigned char *s
    cdef Py_ssize_t n, i
    cdef unsigned long long jid
    cdef unsigned char c
    cdef Job job
    cdef set seen = set()
    out = []
    get = table.get
    for token in tokens:
        s = <const unsigned char *>PyBytes_AS_STRING(token)
        n = PyBytes_GET_SIZE(token)
        jid = 0
        i = 0
        while i < n and i < 17:
            c = s[i]
            if c >= 48 and c <= 57:
                jid = (jid << 4) | (c - 48)
            elif c >= 97 and c <= 102:
                jid = (jid << 4) | (c - 87)
            else:
                break
            i += 1
        if i == 0 or i == 17 or i == n or s[i] != 46:   # no digits, too many, or no dot after them
            continue
        found = get(jid)
        if found is None:
            continue
        job = found
        if job._lease is None or job._lease.token != token or job.id in seen:
            continue
        seen.add(job.id)
        out.append(job)
    return out


def job_replies(record, plain, job_reply, jobs):
    """``commands.claims.job_replies``: the reply of each claimed job; a job
    with no rare fields as ``record(plain, values)`` made here (``record`` is
    ``commands.replies.Record``: its two slots are set here, as its
    ``__init__`` sets them), the others by ``job_reply``."""
    cdef Job job
    cdef _Lease lease
    out = []
    for job in jobs:
        lease = job._lease
        if job.extra is not None or lease is None:
            out.append(job_reply(job))
            continue
        reply = record.__new__(record)       # record(plain, values), without a Python frame for __init__
        reply.shape = plain
        reply.values = (job.id, PyBytes_FromStringAndSize(job._payload, job.payload_len), lease.token,
                        lease.deadline, job.deliveries, job.priority, job.enqueued_at)
        out.append(reply)
    return out
