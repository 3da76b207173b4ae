"""What a claim hands out: the reply of a claimed job (``job_reply``, and
``job_replies`` for many, made in C when ``storage/_job.pyx`` is built; with
COMPACT, ``compact_replies``),
``claim_now``, a claim served at once, and ``ClaimWait``, a QCLAIM parked
until jobs come or its BLOCK runs out.  ``ClaimWait`` is a C type in the
compiled flavour (commands/claims.pxd), read as C by the daemon's waits
(daemon/blocking.py) and the job handlers (commands/jobs.py)."""

from __future__ import annotations

import functools

from leaseq.storage import plain
from leaseq.storage.flavour import compiled_twin
from leaseq.storage.job import Job
from leaseq.storage.queue import Queue

from . import errors
from .replies import Map, Record, Shape

_JOB_FIELDS = [(b"id", "int"), (b"payload", "bulk"), (b"lease", "bulk"), (b"deadline", "int"),
               (b"deliveries", "int"), (b"priority", "int"), (b"enqueued_at", "int")]
# the shape of a claimed job, by (has key, has last_error)
JOB_SHAPES = {
    (False, False): Shape(_JOB_FIELDS),
    (True, False): Shape(_JOB_FIELDS + [(b"key", "bulk")]),
    (False, True): Shape(_JOB_FIELDS + [(b"last_error", "bulk")]),
    (True, True): Shape(_JOB_FIELDS + [(b"key", "bulk"), (b"last_error", "bulk")]),
}
PLAIN_JOB = JOB_SHAPES[False, False]


def job_reply(job: Job):
    """A claimed job: id, payload, lease (the token), deadline, deliveries,
    priority, enqueued_at, then group, schedule and tick, key, last_error,
    dead-letter provenance and meta when the job has them."""
    values = (job.id, job.payload, job.token, job.deadline, job.deliveries, job.priority, job.enqueued_at)
    extra = job.extra
    if extra is None:                           # no key, error or provenance: the plain shape
        return Record(PLAIN_JOB, values)
    key, error = extra.key, extra.last_error
    if extra.origin is not None or extra.group or extra.schedule is not None or extra.meta is not None:
        return Map(list(zip(PLAIN_JOB.keys, values)) + optional_items(job))
    if key is None and error is None:
        return Record(PLAIN_JOB, values)
    if key is not None:
        values += (key,)
    if error is not None:
        values += (error,)
    return Record(JOB_SHAPES[key is not None, error is not None], values)


def job_replies(jobs: list[Job]) -> list:
    """``job_reply`` of each claimed job (compiled: the plain ones made in C)."""
    return [job_reply(j) for j in jobs]


_twin = compiled_twin("leaseq.storage._job")
if _twin is not None:
    job_replies = functools.partial(_twin.job_replies, Record, PLAIN_JOB, job_reply)   # noqa: F811


def compact_replies(jobs: list[Job]) -> list:
    """QCLAIM ... COMPACT: each job as an array of the values of the seven
    fields every claimed job has, in the map's order and without its keys
    (id, payload, lease, deadline, deliveries, priority, enqueued_at),
    followed, only for a job that has any, by a map of its other fields
    (``optional_items``).  A client reads a job by position, without
    building a map of fourteen elements (docs/semantics.md §2.1)."""
    out = []
    for job in jobs:
        values = (job.id, job.payload, job.token, job.deadline, job.deliveries, job.priority, job.enqueued_at)
        if job.extra is not None:
            rare = optional_items(job)
            if rare:
                values += (Map(rare),)
        out.append(values)
    return out


def optional_items(job: Job) -> list:
    items = []
    if job.group:
        items.append((b"group", job.group))
    if job.schedule is not None:
        items += [(b"schedule", job.schedule), (b"tick", job.tick)]
    if job.key is not None:
        items.append((b"key", job.key))
    if job.last_error is not None:
        items.append((b"last_error", job.last_error))
    o = job.origin
    if o is not None:
        items += [(b"dead_letter_from", o.source), (b"dead_letter_src_id", o.src_id),
                  (b"dead_letter_deliveries", o.deliveries), (b"dead_letter_reason", o.reason)]
        if o.parent is not None:                 # (parent-failed: the parent whose death took it along)
            items.append((b"dead_letter_parent", list(o.parent)))
    meta = job.meta
    if meta is not None:
        items.append((b"meta", Map(meta)))
    return items


def claim_now(server, q: Queue, consumer: bytes, count: int, lease_ms: int, holder=None,
              compact: bool = False) -> list:
    """Lease up to ``count`` jobs now (dead-lettering any that must not be
    delivered again); ``holder`` gets the leases (SESSION, QWORK);
    ``compact``: the jobs as ``compact_replies`` makes them."""
    now = server.now_ms()
    jobs = plain.claim_next(server.store, q, now, count, now + lease_ms, consumer)
    if not jobs:
        return []
    if holder is not None:
        for job in jobs:
            holder.hold(q, job)
    return compact_replies(jobs) if compact else job_replies(jobs)


class ClaimWait:
    """A QCLAIM the daemon must park on its queue: one that found nothing and
    may BLOCK, or one that found jobs on a queue with a WINDOW (``cohort``),
    which waits for the window to close and then gets its share.  The daemon
    calls ``take`` when jobs may be claimable and ``expired`` at its timeout.
    ``timeout_ms`` None: not blocking (a cohort claim that gets nothing
    answers an empty array).  ``compact``: QCLAIM ... COMPACT."""

    __slots__ = ("server", "queue", "consumer", "count", "lease_ms", "timeout_ms", "holder", "cohort", "compact")

    def __init__(self, server, queue: Queue, consumer: bytes, count: int, lease_ms: int, timeout_ms,
                 holder=None, cohort: bool = False, compact: bool = False):
        self.server = server
        self.queue = queue
        self.consumer = consumer
        self.count = count
        self.lease_ms = lease_ms
        self.timeout_ms = timeout_ms
        self.holder = holder
        self.cohort = cohort
        self.compact = compact

    def take(self, limit: int) -> list:
        """Claim up to ``min(limit, count)`` jobs; an empty list means none."""
        return claim_now(self.server, self.queue, self.consumer, min(limit, self.count), self.lease_ms,
                         self.holder, self.compact)

    def expired(self) -> list:
        return []

    def dropped(self):
        return errors.queue_dropped(self.queue.name)
