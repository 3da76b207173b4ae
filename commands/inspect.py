"""Inspection and repair: QGET, QPEEK, QSCAN, QDEL, QPURGE, QREDRIVE."""

from __future__ import annotations

from leaseq.storage import queries
from leaseq.storage.job import (
    CANCELLED,
    COMPLETED,
    DEAD,
    DELAYED,
    IN_FLIGHT,
    READY,
    WAITING,
    Job,
)
from leaseq.storage.queue import Queue

from . import errors
from .acl import require_queue
from .args import OptionReader, in_range, queue_name, to_int
from .claims import optional_items
from .glob import compile_glob
from .queues import get_or_create, lookup
from .replies import Map

STATES = {b"delayed": DELAYED, b"ready": READY, b"in_flight": IN_FLIGHT, b"dead": DEAD, b"completed": COMPLETED,
          b"waiting": WAITING, b"cancelled": CANCELLED}
ID_MAX = (1 << 63) - 1


def inspect_reply(job: Job, store=None) -> Map:
    """A job as an operator sees it: its state and every field it has.  The
    lease token is not shown (it would let anyone complete the job)."""
    items = [
        (b"id", job.id),
        (b"state", job.state),
        (b"payload", job.payload),
        (b"priority", job.priority),
        (b"enqueued_at", job.enqueued_at),
        (b"visible_at", job.visible_at),
        (b"deliveries", job.deliveries),
    ]
    if job.token is not None and job.deadline:
        items += [(b"deadline", job.deadline), (b"consumer", job.consumer)]
    if job.max_deliveries:
        items.append((b"maxdeliveries", job.max_deliveries))
    if job.expire_ms:
        items.append((b"expire", job.expire_ms))
    if job.dead_reason is not None:
        items.append((b"dead_reason", job.dead_reason))
    if job.retain_until:
        items.append((b"retained_until", job.retain_until))
    if job.state is WAITING and store is not None:
        items.append((b"waiting_for", _parents(store, job)))
    if job.progress is not None:
        items.append((b"progress", job.progress))
    return Map(items + optional_items(job))


def _parents(store, job: Job) -> list:
    """The parents a waiting job still waits for: queue, id, queue, id ..."""
    out: list = []
    for qid, jid in sorted(job.waiting_for):
        pq = store.by_qid.get(qid)
        out += [pq.name if pq is not None else b"", jid]
    return out


def _queue(client, args) -> Queue:
    server = client.server
    q = lookup(server, queue_name(args[1]))
    server.store.fold(q, server.now_ms())
    return q


def qget(client, args):
    """The job as it stands, with its ``result`` if it was acked with one;
    an acked job that has left the queue but whose result is still kept
    (RESULT-TTL) shows as ``id``, ``state`` completed, ``result`` and
    ``result_until``.  (A dead or cancelled job that has left shows as nil,
    as before; QRESULT still says how it ended.)"""
    q = _queue(client, args)
    jid = in_range(args[2], "id", 0, ID_MAX)
    job = q.jobs.get(jid)
    ending = q.results.get(jid)
    if job is None:
        if ending is None or ending.value is None:
            return None
        return Map([(b"id", jid), (b"state", COMPLETED), (b"result", ending.value), (b"result_until", ending.until)])
    reply = inspect_reply(job, client.server.store)
    if ending is not None and ending.value is not None and job.state is COMPLETED:
        reply.items.append((b"result", ending.value))
    return reply


def qpeek(client, args):
    q = _queue(client, args)
    count = 1
    r = OptionReader(args, 2)
    for kw in r:
        r.once(kw)
        if kw == b"COUNT":
            count = r.int_in("COUNT", 1, 1000)
        else:
            r.unknown()
    return [inspect_reply(job) for job in q.ready_head(count)]


MAX_PATTERN = 1024          # bytes of a MATCH, META or ERROR glob


class JobFilter:
    """QSCAN's filters (docs/commands.md): ``state``, and globs on the
    payload (MATCH), on one META field's value (META field glob: a job
    without that field does not match) and on ``last_error`` (ERROR: a job
    with no error does not match).  Every filter given must hold.  The
    status page's search (daemon/search.py) reads jobs with the same one."""

    __slots__ = ("error", "keep", "match", "meta", "state")

    def __init__(self, state: bytes | None = None, match: bytes | None = None,
                 meta: tuple[bytes, bytes] | None = None, error: bytes | None = None) -> None:
        for pattern in (match, error, meta[1] if meta else None):
            if pattern is not None and len(pattern) > MAX_PATTERN:
                raise errors.pattern_too_long(MAX_PATTERN)
        self.state, self.match, self.meta, self.error = state, match, meta, error
        self.keep = self._predicate()

    def _predicate(self):
        """One function of a job, or None when no glob is given (state is
        checked apart, as it is the cheapest)."""
        tests = []
        if self.match is not None:
            payload_ok = compile_glob(self.match)
            tests.append(lambda job: payload_ok(job.payload))
        if self.meta is not None:
            field, value_ok = self.meta[0], compile_glob(self.meta[1])

            def meta_ok(job):
                for name, value in job.meta or ():
                    if name == field:
                        return value_ok(value)
                return False
            tests.append(meta_ok)
        if self.error is not None:
            error_ok = compile_glob(self.error)
            tests.append(lambda job: job.last_error is not None and error_ok(job.last_error))
        if not tests:
            return None
        if len(tests) == 1:
            return tests[0]
        return lambda job: all(test(job) for test in tests)

    def __call__(self, job: Job) -> bool:
        return (self.state is None or job.state is self.state) and (self.keep is None or self.keep(job))


def parse_state(name: bytes) -> bytes:
    state = STATES.get(name.lower())
    if state is None:
        raise errors.BAD_STATE
    return state


def qscan(client, args):
    """SCAN style: cursor 0 starts and ends; jobs are visited in ascending id
    order and the cursor is the last id looked at, so a job present for the
    whole scan is returned exactly once.  COUNT bounds the jobs looked at,
    not the matches: with filters a call may return fewer jobs, or none,
    and a cursor to go on from, as Redis's SCAN MATCH does."""
    q = _queue(client, args)
    cursor = to_int(args[2])
    if cursor < 0:
        raise errors.INVALID_CURSOR
    count, state, match, meta, error = 10, None, None, None, None
    r = OptionReader(args, 3)
    for kw in r:
        r.once(kw)
        if kw == b"COUNT":
            count = r.int_in("COUNT", 1, 100_000)
        elif kw == b"STATE":
            state = parse_state(r.value())
        elif kw == b"MATCH":
            match = r.value()
        elif kw == b"META":
            meta = (r.value(), r.value())
        elif kw == b"ERROR":
            error = r.value()
        else:
            r.unknown()
    keep = JobFilter(match=match, meta=meta, error=error).keep
    nxt, jobs = queries.scan(q, cursor, count, state, keep)
    return [str(nxt).encode(), [inspect_reply(j, client.server.store) for j in jobs]]


def qdel(client, args):
    server = client.server
    q = _queue(client, args)
    ids = {in_range(a, "id", 0, ID_MAX) for a in args[2:]}
    jobs = [q.jobs[i] for i in sorted(ids) if i in q.jobs]
    if jobs:
        server.store.delete(q, jobs, server.now_ms())
    return len(jobs)


PURGE_STATES = {b"READY": (READY,), b"DELAYED": (DELAYED,), b"DEAD": (DEAD,), b"COMPLETED": (COMPLETED,),
                b"WAITING": (WAITING,), b"CANCELLED": (CANCELLED,),
                b"ALL": (READY, DELAYED, DEAD, COMPLETED, IN_FLIGHT, WAITING, CANCELLED)}


def qpurge(client, args):
    """QPURGE queue [READY] [DELAYED] [DEAD] [COMPLETED] [WAITING] [CANCELLED] [ALL]; no state
    named means READY and DELAYED.  In-flight jobs go only with ALL."""
    server = client.server
    q = _queue(client, args)
    states: set = set()
    for a in args[2:]:
        kw = a.upper()
        if kw not in PURGE_STATES:
            raise errors.SYNTAX
        states.update(PURGE_STATES[kw])
    if not states:
        states = {READY, DELAYED}
    jobs = [job for job in q.jobs.values() if job.state in states]
    if jobs:
        server.store.delete(q, jobs, server.now_ms(), purge=True)
    return len(jobs)


def redrivable(job: Job) -> bool:
    """Whether QREDRIVE ID takes ``job``: a dead job (back to ready), or a
    ready one that came as a dead letter (back to its source queue)."""
    return job.state is DEAD or (job.state is READY and job.origin is not None)


def qredrive(client, args):
    """The dead jobs of the queue back to ready (deliveries 0); and, on a
    dead-letter queue, its ready jobs back to their source queues.  ``ID
    id [id ...]``: only those jobs (the status page's retry of one dead
    letter, and of a search's matches, a slice at a time); ``ID`` takes
    every argument after it."""
    server = client.server
    q = _queue(client, args)
    limit = only = None
    r = OptionReader(args, 2)
    for kw in r:
        r.once(kw)
        if kw == b"COUNT" and only is None:
            limit = r.int_in("COUNT", 1, 1 << 62)
        elif kw == b"ID" and limit is None:
            only = [in_range(a, "id", 0, ID_MAX) for a in r.rest()]
            if not only:
                raise errors.SYNTAX
        else:
            r.unknown()
    store = server.store
    now = server.now_ms()
    by_source: dict[bytes, list] = {}
    if only is not None:
        server.store.fold(q, now)
        dead = []
        for jid in sorted(set(only)):
            job = q.jobs.get(jid)
            if job is None or not redrivable(job):
                continue
            if job.state is DEAD:
                dead.append(job)
            else:
                by_source.setdefault(job.origin.source, []).append(job)
        left = 0
    else:
        dead = [q.jobs[jid] for _, jid in q.indexes.dead][:limit]
        left = None if limit is None else limit - len(dead)
    if left is None or left > 0:
        server.store.fold(q, now)
        for job in q.ready_head(len(q.indexes.ready)):
            if job.origin is not None:
                by_source.setdefault(job.origin.source, []).append(job)
                if left is not None:
                    left -= 1
                    if not left:
                        break
    by_source.pop(q.name, None)
    # check and resolve (or create) every source first: a refusal must change nothing
    for name in by_source:
        require_queue(client, name)
    sources = {name: get_or_create(server, name) for name in by_source}
    moved = len(dead)
    with store.journal.transaction():
        if dead:
            store.deaths.redrive(q, dead, now)
        for name, jobs in by_source.items():
            store.deaths.move_back(q, jobs, sources[name], now)
            moved += len(jobs)
    return moved
