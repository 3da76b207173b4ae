"""A job: its fields, its state and the end of its lease.

``Job`` keeps the fields every job has in slots; the fields most jobs never
set live in a ``JobExtra`` made only when one of them is set (a plain job
stays small).  The class here is the definition; when its compiled twin
(``_job.pyx``, the same attributes made in C, 48 bytes smaller, with the
payload in a buffer of its own rather than a ``bytes`` object) was built
and LEASEQ_PURE is not 1, the name ``Job`` is bound to that one
(``COMPILED``).  ``Provenance`` is where a dead-lettered job came from.

A job's ``state`` is one of ``STATES`` (``None`` once it has left its queue);
which index of its queue holds it in each state is ``storage.indexes``'
table.
"""

from __future__ import annotations

from operator import attrgetter

from .flavour import compiled_twin

DELAYED = b"delayed"
READY = b"ready"
IN_FLIGHT = b"in_flight"
DEAD = b"dead"
COMPLETED = b"completed"
WAITING = b"waiting"          # for parents (AFTER, docs/semantics.md §3.10)
CANCELLED = b"cancelled"      # QCANCEL (docs/semantics.md §3.11): ended, kept like dead jobs
STATES = (READY, DELAYED, IN_FLIGHT, DEAD, COMPLETED, WAITING, CANCELLED)


class Provenance:
    """Where a dead-lettered job came from (docs/semantics.md §1.8): its
    queue, its id there, its deliveries and why it died; ``parent``, for a
    job that died because a parent it waited for (AFTER) did, that parent
    as ``(queue name, id)``."""

    __slots__ = ("source", "src_id", "deliveries", "reason", "parent")

    def __init__(self, source: bytes, src_id: int, deliveries: int, reason: bytes,
                 parent: tuple[bytes, int] | None = None) -> None:
        self.source = source
        self.src_id = src_id
        self.deliveries = deliveries
        self.reason = reason
        self.parent = parent


class JobExtra:
    """The fields most jobs never set, apart from ``Job`` so that a plain job
    stays small (a million live jobs: 64 bytes each saved)."""

    __slots__ = ("key", "flags", "max_deliveries", "expire_ms", "last_error", "origin", "retain_until",
                 "dead_reason", "holder", "group", "schedule", "tick", "waiting_for", "after_delay", "onfail_run",
                 "failed_parent", "progress", "meta")

    def __init__(self, key=None, flags=0, max_deliveries=0, expire_ms=0) -> None:
        self.key = key
        self.flags = flags
        self.max_deliveries = max_deliveries
        self.expire_ms = expire_ms
        self.last_error = None
        self.origin = None
        self.retain_until = 0
        self.dead_reason = None
        self.holder = None
        self.group = b""          # GROUP (docs/semantics.md §3.8); b"": the group ""
        self.schedule = None      # the schedule whose tick pushed the job (§3.9) ...
        self.tick = 0             # ... and that tick (ms epoch)
        self.waiting_for = None   # AFTER (§3.10): the parents still held, as {(qid, id)}
        self.after_delay = 0      # its DELAY, counted from the moment the last parent is done
        self.onfail_run = False   # ONFAIL run: a parent that dies counts as done
        self.failed_parent = None # Provenance of the parent whose death dooms it (while it is dead-lettered)
        self.progress = None      # QPROGRESS: the holder's latest report (bytes)
        self.meta = None          # META (§3.12): ((field, value), ...) as pushed, shared by the jobs of one push


def _extra_field(name: str, default):
    """A ``Job`` attribute kept in its ``JobExtra``, made only when a job sets
    it to something other than ``default``."""
    def get(job):
        extra = job.extra
        return default if extra is None else getattr(extra, name)

    def set_(job, value):
        extra = job.extra
        if extra is None:
            if value is default or (value == default and type(value) is type(default)):
                return
            extra = job.extra = JobExtra()
        setattr(extra, name, value)

    return property(get, set_)


class Job:
    __slots__ = ("id", "payload", "priority", "enqueued_at", "visible_at", "deliveries", "state", "token",
                 "deadline", "consumer", "requeued", "extra")

    def __init__(self, id: int, payload: bytes, priority: int, enqueued_at: int, visible_at: int,
                 key: bytes | None = None, flags: int = 0, max_deliveries: int = 0, expire_ms: int = 0) -> None:
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
        self.requeued = False
        self.extra = (None if key is None and not flags and not max_deliveries and not expire_ms
                      else JobExtra(key, flags, max_deliveries, expire_ms))

    @property
    def payload_len(self) -> int:
        """The payload's size (the compiled job answers it without making the
        payload's ``bytes``)."""
        return len(self.payload)

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


def end_lease(job: Job) -> None:
    """The job's current lease is over: drop the token, tell its holder
    (read from the job's rare fields directly: this runs for every ack)."""
    job.token = None
    extra = job.extra
    if extra is not None and extra.holder is not None:
        holder, extra.holder = extra.holder, None
        holder.lease_ended(job)


def _pure_payload_sizes(jobs) -> int:
    return sum(map(len, map(_PAYLOAD, jobs)))


def _pure_push_jobs(body: bytes, offset: int, count: int, ts: int, job_at) -> tuple[list, int]:
    jobs = []
    for _ in range(count):
        job, offset = job_at(body, offset, ts)
        jobs.append(job)
    return jobs, offset


_PAYLOAD = attrgetter("payload")
PureJob = Job
payload_sizes = _pure_payload_sizes     # the sum of the payload sizes of ``jobs`` (compiled: its loop over payload_len)
# the ``count`` jobs of a PUSH record's body from ``offset`` on, each ``job_at(body, offset, ts)``'s, and the
# offset after them (``records._d_push``; compiled: plain jobs read and made in C, the others job_at's)
push_jobs = _pure_push_jobs
_twin = compiled_twin("leaseq.storage._job")   # (it imports JobExtra and _extra_field from here)
COMPILED = _twin is not None
if COMPILED:
    Job = _twin.Job     # noqa: F811
    payload_sizes = _twin.payload_sizes     # noqa: F811
    push_jobs = _twin.push_jobs     # noqa: F811
