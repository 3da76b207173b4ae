"""Job commands: QPUSH, QPUSHMANY, QCLAIM, QACK, QNACK, QEXTEND, QGET."""

from __future__ import annotations

import random

from leaseq.storage import flow, plain, queries
from leaseq.storage.config import LEASE_MAX, LEASE_MIN
from leaseq.storage.job import CANCELLED, COMPLETED, DEAD, DELAYED, READY, Job
from leaseq.storage.queries import SCOPE_CODES
from leaseq.storage.queue import Queue

from . import errors
from .acl import require_queue
from .args import (OptionReader, group_name, in_range, meta_pairs, queue_name, remembered,
                   to_int)
from .claims import ClaimWait, claim_now
from .queues import DELAY_CAP, MS_MAX, get_or_create, lookup
from .replies import OK, Ints

MAX_COUNT = 1000
NACK_KEYWORDS = (b"DELAY", b"ERROR", b"DEAD")
U32 = (1 << 32) - 1
EXTEND_KEYWORDS = (b"LEASE",)
ACK_KEYWORDS = (b"RESULT",)
MAX_CONSUMER = 200
MAX_PARENTS = 100_000    # AFTER count
ID_MAX = (1 << 63) - 1
REPLACEABLE = (READY, DELAYED)    # KEY ... REPLACE changes a holder only before it is handed out
MAX_KEY = 65535           # the log stores a dedupe key's length in 16 bits


# -- producing ---------------------------------------------------------------------

class PushOptions:
    __slots__ = ("priority", "delay", "at", "keys", "scope", "max_deliveries", "expire_ms", "groups", "replace",
                 "after", "onfail_run", "meta")

    def __init__(self) -> None:
        self.priority = 5
        self.delay = None
        self.at = None
        self.keys = None          # one dedupe key per payload (KEY, or QPUSHMANY's KEYS)
        self.scope = b"queued"
        self.max_deliveries = 0
        self.expire_ms = 0
        self.groups = None        # one group per payload (GROUP for all, or QPUSHMANY's GROUPS)
        self.replace = False      # REPLACE: a ready or delayed holder of the key takes the new values
        self.after = None         # AFTER: [(queue name, job id)], the parents every job waits for
        self.onfail_run = None    # ONFAIL run (True) or fail (False); None: not given (fail)
        self.meta = None          # META: ((field, value), ...) for every job, or None

    def visible_at(self, now: int) -> int:
        if self.at is not None:
            return max(self.at, now)
        if self.delay:
            return now + self.delay
        return now


NO_OPTIONS = PushOptions()    # a push that gives none (most): shared, so never changed outside the parser


def parse_push_options(args: list, start: int, count: int, many: bool) -> PushOptions:
    """QPUSH / QPUSHMANY options; ``count`` jobs (KEYS takes that many keys).
    What it returns is read, never changed (it may be ``NO_OPTIONS``)."""
    if start == len(args):
        return NO_OPTIONS
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
        elif kw == b"KEY" and not many and opts.keys is None:
            opts.keys = [_key(r.value())]
        elif kw == b"KEYS" and many and opts.keys is None:
            opts.keys = [_key(r.value()) for _ in range(count)]
        elif kw == b"WHILE" and opts.keys is not None:
            scope = r.value().lower()
            if scope not in SCOPE_CODES:
                raise errors.BAD_SCOPE
            opts.scope = scope
        elif kw == b"MAXDELIVERIES":
            opts.max_deliveries = r.int_in("MAXDELIVERIES", 0, U32)
        elif kw == b"EXPIRE":
            opts.expire_ms = r.int_in("EXPIRE", 0, MS_MAX)
        elif kw == b"REPLACE":
            opts.replace = True
        elif kw == b"AFTER":
            n = r.int_in("AFTER count", 1, MAX_PARENTS)
            opts.after = [(queue_name(r.value()), in_range(r.value(), "AFTER id", 0, ID_MAX)) for _ in range(n)]
        elif kw == b"ONFAIL":
            word = r.value().lower()
            if word not in (b"run", b"fail"):
                raise errors.BAD_ONFAIL
            opts.onfail_run = word == b"run"
        elif kw == b"GROUP" and opts.groups is None:
            opts.groups = [group_name(r.value())] * count
        elif kw == b"GROUPS" and many and opts.groups is None:
            opts.groups = [group_name(r.value()) for _ in range(count)]
        elif kw == b"META":
            opts.meta = meta_pairs(r)
        else:
            r.unknown()
    if opts.replace and opts.keys is None:
        raise errors.REPLACE_WITHOUT_KEY
    if opts.onfail_run is not None and opts.after is None:
        raise errors.ONFAIL_WITHOUT_AFTER
    return opts


def _key(value: bytes) -> bytes:
    if len(value) > MAX_KEY:
        raise errors.key_too_long(MAX_KEY)
    return value


def _push(client, name: bytes, payloads: list, opts: PushOptions) -> list[int]:
    """Checks, then pushes the new jobs as one record (all or none); returns
    each payload's id: a new one, or the id of the job already holding its
    dedupe key in the WHILE scope (counted in ``duplicates``)."""
    server = client.server
    limit = server.settings.max_payload
    for p in payloads:
        if len(p) > limit:
            raise errors.too_big(len(p), limit)
    q = get_or_create(server, name)
    store = server.store
    now = server.now_ms()
    fresh, keys, groups = payloads, None, opts.groups
    resolved = None      # per payload: an existing id (> 0), or ~i for the i-th new job
    if opts.keys is not None:
        store.fold(q, now)
        fresh, keys, resolved, batch = [], [], [], {}
        kept_groups = []
        replacing: dict = {}                   # holder id -> (holder, new payload)
        for i, (p, key) in enumerate(zip(payloads, opts.keys)):
            holder = queries.duplicate_of(q, key, opts.scope)
            if holder is not None:
                resolved.append(holder.id)
                if opts.replace and holder.state in REPLACEABLE:
                    replacing[holder.id] = (holder, p)       # the last payload for a key wins
            elif key in batch:                 # the same key twice in one QPUSHMANY
                resolved.append(~batch[key])
                if opts.replace:
                    fresh[batch[key]] = p
            else:
                batch[key] = len(fresh)
                resolved.append(~len(fresh))
                fresh.append(p)
                keys.append(key)
                if groups is not None:
                    kept_groups.append(groups[i])
        if groups is not None:
            groups = kept_groups
    maxlen = q.config.maxlen
    if maxlen and queries.live(q) + len(fresh) > maxlen:
        raise errors.queue_full(q.name, maxlen)
    if opts.after is not None:
        return _push_after(client, q, fresh, keys, groups, opts, now, resolved, len(payloads))
    if opts is NO_OPTIONS and len(fresh) == 1:       # one job, no options (most pushes): the plain transition
        return [plain.push_one(store, q, fresh[0], NO_OPTIONS.priority, now)]
    first = 0
    if resolved is not None and replacing:
        with store.journal.transaction():        # replacements and new jobs: all or none
            visible_at = opts.visible_at(now) if opts.delay is not None or opts.at is not None else 0
            store.replace(q, list(replacing.values()), opts.priority, visible_at, now)
            first = _create(store, q, fresh, keys, groups, opts, now)
    elif fresh:
        first = _create(store, q, fresh, keys, groups, opts, now)
    if resolved is None:
        return list(range(first, first + len(fresh)))
    q.counters.duplicates += len(payloads) - len(fresh)
    return [first + ~r if r < 0 else r for r in resolved]


def _push_after(client, q: Queue, fresh: list, keys, groups, opts: PushOptions, now: int, resolved,
                count: int) -> list[int]:
    """A push with AFTER (docs/semantics.md §3.10): each new job waits for the
    parents still held; a parent already dead (unless ONFAIL run) dead-letters
    them at once, in the same transaction as the push."""
    store = client.server.store
    pending, failed = set(), False
    for name, jid in opts.after:
        require_queue(client, name, "R")
        pq = store.queues.get(name)
        if pq is None:
            continue                            # no longer held: done
        store.fold(pq, now)
        parent = pq.jobs.get(jid)
        if parent is None or parent.state is COMPLETED:
            continue
        if parent.state is DEAD or parent.state is CANCELLED:
            if opts.onfail_run:
                continue                        # ONFAIL run: a dead parent counts as done
            failed = True                       # it waits for the dead parent, and dies at once
        pending.add((pq.qid, jid))
    with store.journal.transaction():
        first = _create(store, q, fresh, keys, groups, opts, now, pending)
        if failed and fresh:
            store.deaths.dead_letter(q, [q.jobs[first + i] for i in range(len(fresh))], b"parent-failed", now)
    if resolved is None:
        return list(range(first, first + len(fresh)))
    q.counters.duplicates += count - len(fresh)
    return [first + ~r if r < 0 else r for r in resolved]


def _create(store, q: Queue, fresh: list, keys, groups, opts: PushOptions, now: int, parents=None) -> int:
    """Push the new jobs of a QPUSH / QPUSHMANY as one record; the first id.
    ``parents``: the (qid, id) each job waits for (AFTER)."""
    first = 0
    if fresh:
        first = store.take_ids(q, len(fresh))
        visible_at = opts.visible_at(now)
        prio, maxd, expire = opts.priority, opts.max_deliveries, opts.expire_ms
        if keys is None:
            jobs = [Job(first + i, p, prio, now, visible_at, None, 0, maxd, expire) for i, p in enumerate(fresh)]
        else:
            flags = SCOPE_CODES[opts.scope]
            jobs = [Job(first + i, p, prio, now, visible_at, k, flags, maxd, expire)
                    for i, (p, k) in enumerate(zip(fresh, keys))]
        if groups is not None:
            for job, group in zip(jobs, groups):
                if group:
                    job.group = group
        if opts.meta is not None:
            meta = opts.meta
            for job in jobs:
                job.meta = meta           # (one tuple for all the jobs of a push)
        if parents:
            for job in jobs:
                job.waiting_for = set(parents)
                job.after_delay = opts.delay or 0
                job.onfail_run = bool(opts.onfail_run)
        store.push(q, jobs, now)
    return first


def qpush(client, args):
    name = queue_name(args[1])
    opts = parse_push_options(args, 3, 1, False)
    return _push(client, name, [args[2]], opts)[0]


def qpushmany(client, args):
    name = queue_name(args[1])
    count = to_int(args[2])
    if count < 1:
        raise errors.out_of_range("count", 1, client.server.settings.max_args)
    if len(args) < 3 + count:
        raise errors.wrong_arity("qpushmany")
    opts = parse_push_options(args, 3 + count, count, many=True)
    return Ints(_push(client, name, args[3:3 + count], opts))


# -- claiming -----------------------------------------------------------------------

def _has_claimable(server, q) -> bool:
    now = server.now_ms()
    server.store.fold(q, now)
    return bool(flow.claimable(q, now, 1))


@remembered
def _claim_options(args: list, start: int) -> tuple[int, int | None, int | None, bool, bool]:
    count, lease_ms, block, session, compact = 1, None, None, False, False
    r = OptionReader(args, start)
    for kw in r:
        r.once(kw)
        if kw == b"COUNT":
            count = r.int_in("COUNT", 1, MAX_COUNT)
        elif kw == b"LEASE":
            lease_ms = r.int_clamped("LEASE", LEASE_MIN, LEASE_MAX)
        elif kw == b"BLOCK":
            block = r.int_in("BLOCK", 0, MS_MAX)
        elif kw == b"SESSION":
            session = True
        elif kw == b"COMPACT":
            compact = True
        else:
            r.unknown()
    return count, lease_ms, block, session, compact


def _consumer(value: bytes) -> bytes:
    if not 1 <= len(value) <= MAX_CONSUMER:
        raise errors.bad_consumer(MAX_CONSUMER)
    return value


def qclaim(client, args):
    server = client.server
    name = queue_name(args[1])
    consumer = _consumer(args[2])
    count, lease_ms, block, session, compact = _claim_options(args, 3)
    q = get_or_create(server, name)
    if lease_ms is None:
        lease_ms = q.config.lease
    holder = client.holdings.session() if session else None
    if q.config.window and not client.in_exec and _has_claimable(server, q):
        # jobs are waiting: gather a cohort for WINDOW ms, then divide evenly
        return ClaimWait(server, q, consumer, count, lease_ms, block, holder, cohort=True, compact=compact)
    jobs = claim_now(server, q, consumer, count, lease_ms, holder, compact)
    if jobs or block is None or client.in_exec:
        return jobs
    return ClaimWait(server, q, consumer, count, lease_ms, block, holder, False, compact)


class WorkRequest:
    """A work stream: the daemon keeps up to ``max`` jobs of ``queue`` leased
    to this connection and sends each as a push message: ``["job", queue,
    job]`` for QWORK, or, when ``channel`` is set (SUBSCRIBE "QWORK ..."),
    the pub/sub message ``["message", channel, job as JSON]``."""

    __slots__ = ("queue", "consumer", "max", "lease_ms", "channel")

    def __init__(self, queue: Queue, consumer: bytes, max_jobs: int, lease_ms: int,
                 channel: bytes | None = None) -> None:
        self.queue = queue
        self.consumer = consumer
        self.max = max_jobs
        self.lease_ms = lease_ms
        self.channel = channel


def work_request(client, args: list, channel: bytes | None = None) -> WorkRequest:
    """The stream a ``QWORK queue consumer [MAX n] [LEASE ms]`` asks for
    (creating the queue when auto-create allows, once the arguments are
    known good)."""
    name = queue_name(args[1])
    consumer = _consumer(args[2])
    max_jobs, lease_ms = 1, None
    r = OptionReader(args, 3)
    for kw in r:
        r.once(kw)
        if kw == b"MAX":
            max_jobs = r.int_in("MAX", 1, MAX_COUNT)
        elif kw == b"LEASE":
            lease_ms = r.int_clamped("LEASE", LEASE_MIN, LEASE_MAX)
        else:
            r.unknown()
    if client.holdings.works_through_another_stream(name, channel):
        raise errors.stream_conflict(name)
    q = get_or_create(client.server, name)
    return WorkRequest(q, consumer, max_jobs, q.config.lease if lease_ms is None else lease_ms, channel)


# Client libraries (CLIENT SETINFO LIB-NAME) that never hand QWORK's push
# frames to the application: ioredis takes a RESP2 array for the reply to its
# next command and drops RESP3 pushes; node-redis 4 crashes on the array and
# 5/6 drop the push.  A job leased to them would be seen by nobody.
PUSH_BLIND = ("ioredis", "node-redis")


def qwork(client, args):
    if client.lib_name.startswith(PUSH_BLIND):
        raise errors.qwork_unreadable(client.lib_name)
    client.holdings.start_work(work_request(client, args))
    return OK


# -- completing ------------------------------------------------------------------------

def _split_tokens(args: list, keywords: tuple) -> int:
    """Index of the first option keyword after the tokens (tokens never equal
    one).  Every keyword starts with a letter, and a lease token with a hex
    digit (a digit for most: ids 1 to 9, 16 to 159 ...): an argument whose
    first byte is below b"A" is a token without upper-casing it (a QACK of
    100 tokens makes no 100 copies)."""
    i, n = 2, len(args)
    while i < n:
        a = args[i]
        if a and a[0] >= 65 and a.upper() in keywords:
            break
        i += 1
    if i == 2:
        raise errors.wrong_arity(args[0].decode(errors="replace"))
    return i


def qack(client, args):
    """QACK queue token [token ...] [RESULT value]: RESULT (one token only)
    completes the job with a result, kept for the queue's RESULT-TTL."""
    server = client.server
    q = lookup(server, queue_name(args[1]))
    end = _split_tokens(args, ACK_KEYWORDS)
    result = None
    if end < len(args):
        if end + 2 != len(args):
            raise errors.SYNTAX
        if end != 3:
            raise errors.RESULT_ONE_TOKEN
        result = args[end + 1]
        if len(result) > server.settings.max_payload:
            raise errors.too_big(len(result), server.settings.max_payload)
    if result is None:
        return plain.ack_tokens(server.store, q, args[2:end], server.now_ms())
    jobs = q.jobs_for_tokens(args[2:end])
    if jobs:
        server.store.ack(q, jobs, server.now_ms(), result)
    return len(jobs)


def backoff_delay(q: Queue, job: Job) -> int:
    """docs/semantics.md §3.1: base x deliveries^exponent + random(0, jitter), capped at a day."""
    base, exponent, jitter = q.config.backoff
    delay = base * (max(job.deliveries, 1) ** exponent)
    if jitter:
        delay += random.randint(0, jitter)
    return int(min(delay, DELAY_CAP))


def qnack(client, args):
    server = client.server
    q = lookup(server, queue_name(args[1]))
    end = _split_tokens(args, NACK_KEYWORDS)
    delay, error, dead = None, None, False
    r = OptionReader(args, end)
    for kw in r:
        r.once(kw)
        if kw == b"DELAY":
            delay = r.int_in("DELAY", 0, MS_MAX)
        elif kw == b"ERROR":
            error = r.value()
        elif kw == b"DEAD":
            dead = True
        else:
            r.unknown()
    if dead and delay is not None:
        raise errors.DELAY_AND_DEAD
    jobs = q.jobs_for_tokens(args[2:end])
    if not jobs:
        return 0
    store = server.store
    now = server.now_ms()
    with store.journal.transaction():
        if dead:
            # release with the error (so last_error is logged), then dead-letter: one record
            store.nack(q, jobs, now, error, now)
            store.deaths.dead_letter(q, jobs, b"nack", now)
        elif delay is not None:
            store.nack(q, jobs, now + delay, error, now)
        else:
            groups: dict[int, list] = {}
            for job in jobs:
                groups.setdefault(now + backoff_delay(q, job), []).append(job)
            for visible_at, group in groups.items():
                store.nack(q, group, visible_at, error, now)
    return len(jobs)


MAX_PROGRESS = 65536      # QPROGRESS: a progress report, not a payload


def qprogress(client, args):
    """QPROGRESS queue token value: the lease holder's latest progress; 1, or
    0 when the token is stale.  It does not extend the lease."""
    server = client.server
    q = lookup(server, queue_name(args[1]))
    value = args[3]
    if len(value) > MAX_PROGRESS:
        raise errors.progress_too_long(len(value), MAX_PROGRESS)
    job = q.job_for_token(args[2])
    if job is None:
        return 0
    server.store.progress(q, job, value, server.now_ms())
    return 1


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
    jobs = q.jobs_for_tokens(tokens)
    if jobs:
        server.store.extend(q, jobs, deadline, now)
    return [deadline if q.job_for_token(t) is not None else None for t in tokens]
