"""Job commands: QPUSH, QPUSHMANY, QCLAIM, QACK, QNACK, QEXTEND, QGET."""

from __future__ import annotations

import random

from leaseq.storage.queue import LEASE_MAX, LEASE_MIN, Job, Queue

from . import errors
from .args import OptionReader, in_range, queue_name, to_int
from .queues import DELAY_CAP, MS_MAX, get_or_create, lookup
from .replies import Map, Record, Shape

MAX_COUNT = 1000
NACK_KEYWORDS = (b"DELAY", b"ERROR")
EXTEND_KEYWORDS = (b"LEASE",)
MAX_CONSUMER = 200


# -- producing ---------------------------------------------------------------------

class PushOptions:
    __slots__ = ("priority", "delay", "at")

    def __init__(self) -> None:
        self.priority = 5
        self.delay = None
        self.at = None

    def visible_at(self, now: int) -> int:
        if self.at is not None:
            return max(self.at, now)
        if self.delay:
            return now + self.delay
        return now


def parse_push_options(args: list, start: int) -> PushOptions:
    opts = PushOptions()
    r = OptionReader(args, start)
    for kw in r:
        r.once(kw)
        if kw == b"PRIORITY":
            opts.priority = r.int_in("PRIORITY", 0, 9)
        elif kw == b"DELAY" and opts.at is None:
            opts.delay = r.int_in("DELAY", 0, MS_MAX)
        elif kw == b"AT" and opts.delay is None:
            opts.at = r.int_in("AT", 0, MS_MAX)
        else:
            r.unknown()
    return opts


def _push(client, name: bytes, payloads: list, opts: PushOptions) -> int:
    """Checks, then pushes all ``payloads`` as one record; returns the first id."""
    server = client.server
    limit = server.settings.max_payload
    for p in payloads:
        if len(p) > limit:
            raise errors.too_big(len(p), limit)
    q = get_or_create(server, name)
    maxlen = q.config.maxlen
    if maxlen and q.live + len(payloads) > maxlen:
        raise errors.queue_full(q.name, maxlen)
    store = server.store
    now = server.now_ms()
    visible_at = opts.visible_at(now)
    first = store.take_ids(q, len(payloads))
    prio = opts.priority
    store.push(q, [Job(first + i, p, prio, now, visible_at) for i, p in enumerate(payloads)], now)
    return first


def qpush(client, args):
    name = queue_name(args[1])
    opts = parse_push_options(args, 3)
    return _push(client, name, [args[2]], opts)


def qpushmany(client, args):
    name = queue_name(args[1])
    count = to_int(args[2])
    if count < 1:
        raise errors.out_of_range("count", 1, client.server.settings.max_args)
    if len(args) < 3 + count:
        raise errors.wrong_arity("qpushmany")
    opts = parse_push_options(args, 3 + count)
    first = _push(client, name, args[3:3 + count], opts)
    return list(range(first, first + count))


# -- claiming -----------------------------------------------------------------------

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


def job_reply(job: Job) -> Record:
    """A claimed job: id, payload, lease (the token), deadline, deliveries,
    priority, enqueued_at, then key and last_error when the job has them."""
    values = (job.id, job.payload, job.token, job.deadline, job.deliveries, job.priority, job.enqueued_at)
    key, error = job.key, job.last_error
    if key is None and error is None:
        return Record(PLAIN_JOB, values)
    if key is not None:
        values += (key,)
    if error is not None:
        values += (error,)
    return Record(JOB_SHAPES[key is not None, error is not None], values)


def claim_now(server, q: Queue, consumer: bytes, count: int, lease_ms: int) -> list:
    now = server.now_ms()
    jobs = q.claimable(now, count)
    if not jobs:
        return []
    server.store.claim(q, jobs, now + lease_ms, consumer, now, front=True)
    return [job_reply(j) for j in jobs]


class ClaimWait:
    """A QCLAIM ... BLOCK that found nothing: the daemon parks it on its queue
    and calls ``take`` when jobs may be claimable, or ``expired`` at its timeout."""

    __slots__ = ("server", "queue", "consumer", "count", "lease_ms", "timeout_ms")

    def __init__(self, server, queue: Queue, consumer: bytes, count: int, lease_ms: int, timeout_ms: int):
        self.server = server
        self.queue = queue
        self.consumer = consumer
        self.count = count
        self.lease_ms = lease_ms
        self.timeout_ms = timeout_ms

    def take(self, limit: int) -> list:
        """Claim up to ``min(limit, count)`` jobs; an empty list means none."""
        return claim_now(self.server, self.queue, self.consumer, min(limit, self.count), self.lease_ms)

    def expired(self) -> list:
        return []

    def dropped(self):
        return errors.queue_dropped(self.queue.name)


def qclaim(client, args):
    server = client.server
    name = queue_name(args[1])
    consumer = args[2]
    if not 1 <= len(consumer) <= MAX_CONSUMER:
        raise errors.err(f"consumer name must be 1-{MAX_CONSUMER} bytes")
    count, lease_ms, block = 1, None, None
    r = OptionReader(args, 3)
    for kw in r:
        r.once(kw)
        if kw == b"COUNT":
            count = r.int_in("COUNT", 1, MAX_COUNT)
        elif kw == b"LEASE":
            lease_ms = r.int_clamped("LEASE", LEASE_MIN, LEASE_MAX)
        elif kw == b"BLOCK":
            block = r.int_in("BLOCK", 0, MS_MAX)
        else:
            r.unknown()
    q = get_or_create(server, name)
    if lease_ms is None:
        lease_ms = q.config.lease
    jobs = claim_now(server, q, consumer, count, lease_ms)
    if jobs or block is None or client.in_exec:
        return jobs
    return ClaimWait(server, q, consumer, count, lease_ms, block)


# -- completing ------------------------------------------------------------------------

def _split_tokens(args: list, keywords: tuple) -> int:
    """Index of the first option keyword after the tokens (tokens never equal one)."""
    i = 2
    while i < len(args) and args[i].upper() not in keywords:
        i += 1
    if i == 2:
        raise errors.wrong_arity(args[0].decode(errors="replace"))
    return i


def _live_jobs(q: Queue, tokens) -> list[Job]:
    """The jobs whose leases these tokens still hold; stale tokens are skipped."""
    jobs = []
    seen = set()
    for token in tokens:
        job = q.job_for_token(token)
        if job is not None and job.id not in seen:
            seen.add(job.id)
            jobs.append(job)
    return jobs


def qack(client, args):
    server = client.server
    q = lookup(server, queue_name(args[1]))
    jobs = _live_jobs(q, args[2:])
    if jobs:
        server.store.ack(q, jobs, server.now_ms())
    return len(jobs)


def backoff_delay(q: Queue, job: Job) -> int:
    """SPEC 3.1: base x deliveries^exponent + random(0, jitter), capped at a day."""
    base, exponent, jitter = q.config.backoff
    delay = base * (max(job.deliveries, 1) ** exponent)
    if jitter:
        delay += random.randint(0, jitter)
    return int(min(delay, DELAY_CAP))


def qnack(client, args):
    server = client.server
    q = lookup(server, queue_name(args[1]))
    end = _split_tokens(args, NACK_KEYWORDS)
    delay, error = None, None
    r = OptionReader(args, end)
    for kw in r:
        r.once(kw)
        if kw == b"DELAY":
            delay = r.int_in("DELAY", 0, MS_MAX)
        elif kw == b"ERROR":
            error = r.value()
        else:
            r.unknown()
    jobs = _live_jobs(q, args[2:end])
    if not jobs:
        return 0
    store = server.store
    now = server.now_ms()
    if delay is not None:
        store.nack(q, jobs, now + delay, error, now)
        return len(jobs)
    groups: dict[int, list] = {}
    for job in jobs:
        groups.setdefault(now + backoff_delay(q, job), []).append(job)
    store.begin()
    try:
        for visible_at, group in groups.items():
            store.nack(q, group, visible_at, error, now)
    finally:
        store.commit()
    return len(jobs)


def qextend(client, args):
    server = client.server
    q = lookup(server, queue_name(args[1]))
    end = _split_tokens(args, EXTEND_KEYWORDS)
    lease_ms = q.config.lease
    r = OptionReader(args, end)
    for kw in r:
        r.once(kw)
        if kw == b"LEASE":
            lease_ms = r.int_clamped("LEASE", LEASE_MIN, LEASE_MAX)
        else:
            r.unknown()
    tokens = args[2:end]
    now = server.now_ms()
    deadline = now + lease_ms
    jobs = _live_jobs(q, tokens)
    if jobs:
        server.store.extend(q, jobs, deadline, now)
    return [deadline if q.job_for_token(t) is not None else None for t in tokens]


# -- inspecting --------------------------------------------------------------------------

def inspect_reply(job: Job) -> Map:
    items = [
        (b"id", job.id),
        (b"state", job.state),
        (b"payload", job.payload),
        (b"priority", job.priority),
        (b"enqueued_at", job.enqueued_at),
        (b"visible_at", job.visible_at),
        (b"deliveries", job.deliveries),
    ]
    if job.deadline and job.token is not None:
        items.append((b"deadline", job.deadline))
        items.append((b"consumer", job.consumer))
    if job.key is not None:
        items.append((b"key", job.key))
    if job.last_error is not None:
        items.append((b"last_error", job.last_error))
    return Map(items)


def qget(client, args):
    server = client.server
    q = lookup(server, queue_name(args[1]))
    job_id = in_range(args[2], "id", 0, (1 << 63) - 1)
    q.fold(server.now_ms())
    job = q.jobs.get(job_id)
    return None if job is None else inspect_reply(job)
