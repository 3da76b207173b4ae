# cython: language_level=3
"""The compiled twin of ``storage.job.Job`` (docs/performance.md): the same
attributes and constructor, made in C, and 16 bytes smaller per job
(priority, deliveries and requeued are C numbers, not pointers) and
outside the cyclic collector's reach: 96 bytes instead of 128.

A job holds no reference cycle that refcounting cannot free: what it
points at (its payload, numbers, byte strings, its ``JobExtra``) never
points back at it, except a SESSION or QWORK holder (``extra.holder``),
whose ``held`` table is emptied whenever it lets its jobs go (the lease
ends, the connection closes, a disk fault drops the holdings).  So the
collector need not track jobs, and its full collections no longer rescan
every live job.  ``storage/job.py`` holds the
definition (``Job`` there, the rare fields in ``JobExtra``) and binds its
name ``Job`` to this class when it was built and LEASEQ_PURE is not 1;
tests/unit/test_job_flavours.py checks that both offer the same attributes."""

cimport cython

from leaseq.storage.job import JobExtra, _extra_field


@cython.auto_pickle(False)
@cython.final
@cython.no_gc          # jobs hold no reference cycles (see below): the cyclic collector never scans them
cdef class Job:
    cdef public object id, payload, enqueued_at, visible_at, state, token, deadline, consumer, extra
    cdef public int deliveries
    cdef public signed char priority      # 0-9 (QPUSH ... PRIORITY)
    cdef unsigned char _requeued

    def __init__(self, id, payload, int priority, enqueued_at, visible_at, key=None, flags=0,
                 max_deliveries=0, expire_ms=0):
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
        self._requeued = 0
        if key is None and not flags and not max_deliveries and not expire_ms:
            self.extra = None
        else:
            self.extra = JobExtra(key, flags, max_deliveries, expire_ms)

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
