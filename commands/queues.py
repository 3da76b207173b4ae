"""Queue commands: QCREATE, QALTER, QDROP, QLIST, QINFO, QLEN, QPAUSE, QRESUME."""

from __future__ import annotations


from leaseq.storage import flow, queries
from leaseq.storage.config import DURABILITIES, LEASE_MAX, LEASE_MIN, MEMORY, QueueConfig
from leaseq.storage.queue import Queue

from . import errors
from .acl import require_queue
from .args import OptionReader, group_name, in_range, queue_name, to_float
from .glob import compile_glob
from .replies import OK, Map

U32 = (1 << 32) - 1
MS_MAX = 1 << 53          # any millisecond span: ~285,000 years
DELAY_CAP = 86_400_000    # BACKOFF never waits longer than a day


def lookup(server, name: bytes) -> Queue:
    q = server.store.queues.get(name)
    if q is None:
        raise errors.no_queue(name)
    return q


def get_or_create(server, name: bytes) -> Queue:
    """The queue, created with the server's defaults if ``auto-create`` allows."""
    q = server.store.queues.get(name)
    if q is None:
        if not server.settings.auto_create:
            raise errors.no_queue(name)
        q = server.store.create_queue(name, default_config(server), server.now_ms())
    return q


def default_config(server) -> QueueConfig:
    """Options of queues created without any (the server keeps it in step
    with ``default-durability``)."""
    return server.store.default_config


def parse_config(args: list, start: int, name: bytes, base: QueueConfig) -> QueueConfig:
    """Apply the options in ``args[start:]`` (docs/semantics.md §3.1) to ``base``."""
    r = OptionReader(args, start)
    changes: dict = {}
    for kw in r:
        r.once(kw)
        if kw == b"LEASE":
            changes["lease"] = r.int_clamped("LEASE", LEASE_MIN, LEASE_MAX)
        elif kw == b"MAXDELIVERIES":
            changes["maxdeliveries"] = r.int_in("MAXDELIVERIES", 0, U32)
        elif kw == b"DEADLETTER":
            target = r.value()
            if target == b"":
                changes["deadletter"] = None
            else:
                if queue_name(target) == name:
                    raise errors.deadletter_self(name)
                changes["deadletter"] = target.decode()
        elif kw == b"BACKOFF":
            base_ms = in_range(r.value(), "BACKOFF base-ms", 0, DELAY_CAP)
            exponent = to_float(r.value(), "BACKOFF exponent")
            if not 0 <= exponent <= 10:
                raise errors.BACKOFF_EXPONENT
            jitter = in_range(r.value(), "BACKOFF jitter-ms", 0, DELAY_CAP)
            changes["backoff"] = (base_ms, exponent, jitter)
        elif kw == b"MAXLEN":
            changes["maxlen"] = r.int_in("MAXLEN", 0, 1 << 62)
        elif kw == b"EXPIRE":
            changes["expire"] = r.int_in("EXPIRE", 0, MS_MAX)
        elif kw == b"RETAIN-COMPLETED":
            changes["retain_completed"] = r.int_in("RETAIN-COMPLETED", 0, MS_MAX)
        elif kw == b"RETAIN-DEAD":
            changes["retain_dead"] = r.int_in("RETAIN-DEAD", 0, MS_MAX)
        elif kw == b"RESULT-TTL":
            changes["result_ttl"] = r.int_in("RESULT-TTL", 0, MS_MAX)
        elif kw == b"WINDOW":
            changes["window"] = r.int_in("WINDOW", 0, 60_000)
        elif kw == b"RATE":
            changes["rate"] = _rate(r)
        elif kw == b"CONCURRENCY":
            changes["concurrency"] = _off_or(r, "CONCURRENCY", 1, U32)
        elif kw == b"GROUP-CONCURRENCY":
            changes["group_concurrency"] = _off_or(r, "GROUP-CONCURRENCY", 1, U32)
        elif kw == b"GROUP-RATE":
            changes["group_rate"] = _rate(r, "GROUP-RATE")
        elif kw == b"DURABILITY":
            d = r.value().lower().decode(errors="replace")
            if d not in DURABILITIES:
                raise errors.BAD_DURABILITY
            changes["durability"] = d
        else:
            r.unknown()
    return base.with_options(**changes)


def _off_or(r: OptionReader, option: str, low: int, high: int) -> int:
    """A limit's value: ``OFF`` or ``0`` removes it (0), else ``low``..``high``."""
    v = r.value()
    if v.upper() == b"OFF" or v == b"0":
        return 0
    return in_range(v, option, low, high)


def _rate(r: OptionReader, option: str = "RATE") -> tuple:
    """``RATE n ms`` (or ``GROUP-RATE n ms``); ``OFF`` or ``0`` (a window
    after the 0 may follow, and is then ignored) removes the limit."""
    n = _off_or(r, f"{option} n", 1, U32)
    if not n:
        following = r.peek()
        if following is not None and following.isdigit():
            r.value()
        return (0, 0)
    return (n, r.int_in(f"{option} ms", 1, MS_MAX))


def _config_from(client, args: list, name: bytes, base: QueueConfig) -> QueueConfig:
    """The options of QCREATE/QALTER applied to ``base``; a DEADLETTER queue
    they name must be one the user may write (docs/semantics.md §7)."""
    config = parse_config(args, 2, name, base)
    if config.deadletter is not None and config.deadletter != base.deadletter:
        require_queue(client, config.deadletter.encode())
    return config


def qcreate(client, args):
    server = client.server
    name = queue_name(args[1])
    config = _config_from(client, args, name, default_config(server))
    q = server.store.queues.get(name)
    if q is not None:
        if q.config.same_options(config):
            return OK
        raise errors.queue_exists(name)
    server.store.create_queue(name, config, server.now_ms())
    return OK


def qalter(client, args):
    server = client.server
    q = lookup(server, queue_name(args[1]))
    config = _config_from(client, args, q.name, q.config)
    if (config.durability == MEMORY) != (q.config.durability == MEMORY):
        raise errors.durability_change(q.name)
    if config != q.config:
        server.store.set_config(q, config, server.now_ms())
    return OK


def qdrop(client, args):
    server = client.server
    q = lookup(server, queue_name(args[1]))
    force = False
    for extra in args[2:]:
        if extra.upper() != b"FORCE":
            raise errors.SYNTAX
        force = True
    if q.jobs and not force:
        raise errors.not_empty(q.name, len(q.jobs))
    removed = server.store.drop_queue(q, server.now_ms())
    server.queue_dropped(q)
    return removed


def qlist(client, args):
    r = OptionReader(args, 1)
    pattern, after, count = None, None, 100
    for kw in r:
        r.once(kw)
        if kw == b"MATCH":
            pattern = r.value()
        elif kw == b"AFTER":
            after = r.value()
        elif kw == b"COUNT":
            count = r.int_in("COUNT", 1, 1000)
        else:
            r.unknown()
    wanted = compile_glob(pattern) if pattern is not None else None
    names = []
    for name in sorted(client.server.store.queues):
        if after is not None and name <= after:
            continue
        if wanted is not None and not wanted(name):
            continue
        names.append(name)
        if len(names) >= count:
            break
    return names


def config_items(config: QueueConfig) -> list:
    base, exponent, jitter = config.backoff
    return [
        (b"lease", config.lease),
        (b"maxdeliveries", config.maxdeliveries),
        (b"deadletter", config.deadletter.encode() if config.deadletter else None),
        (b"backoff_base", base),
        (b"backoff_exponent", repr(float(exponent)).encode()),
        (b"backoff_jitter", jitter),
        (b"maxlen", config.maxlen),
        (b"expire", config.expire),
        (b"retain_completed", config.retain_completed),
        (b"retain_dead", config.retain_dead),
        (b"result_ttl", config.result_ttl),
        (b"window", config.window),
        (b"durability", config.durability.encode()),
        (b"rate", config.rate[0]),
        (b"rate_ms", config.rate[1]),
        (b"concurrency", config.concurrency),
        (b"paused", int(config.paused)),
        (b"group_concurrency", config.group_concurrency),
        (b"group_rate", config.group_rate[0]),
        (b"group_rate_ms", config.group_rate[1]),
        (b"paused_groups", len(config.paused_groups)),
    ]


def qinfo(client, args):
    server = client.server
    return Map(info_items(server, lookup(server, queue_name(args[1]))))


def info_items(server, q) -> list[tuple[bytes, object]]:
    """QINFO's fields of ``q``, in order (also ``GET /api/queues``)."""
    now = server.now_ms()
    server.store.fold(q, now)
    c = q.counters
    counts = [(state.encode(), n) for state, n in q.indexes.counts().items()]   # ready .. completed
    return [(b"name", q.name)] + config_items(q.config) + counts + [
        (b"pushed", c.pushed),
        (b"acked", c.acked),
        (b"nacked", c.nacked),
        (b"lease_expired", c.lease_expired),
        (b"dead_lettered", c.dead_lettered),
        (b"duplicates", c.duplicates),
        (b"oldest_ready_age_ms", queries.oldest_ready_age(q, now)),
        (b"consumers_blocked", server.blocked_on(q)),
        (b"next_id", q.next_id),
        (b"throttled", flow.throttled(q, now)),
        (b"groups", queries.group_count(q)),
    ]


def qpause(client, args):
    """Claims and work streams hand out nothing from the queue (or from one
    group of it) until QRESUME; pushes, acks, nacks and extends go on.  Kept
    with the queue's options, so it lasts across restarts."""
    return _set_paused(client, args, True)


def qresume(client, args):
    return _set_paused(client, args, False)


def _set_paused(client, args, paused: bool):
    server = client.server
    name = queue_name(args[1])
    group = None
    r = OptionReader(args, 2)
    for kw in r:
        r.once(kw)
        if kw == b"GROUP":
            group = group_name(r.value())
        else:
            r.unknown()
    q = lookup(server, name)
    config = q.config
    if group is None:
        config = config.with_options(paused=paused)
    elif paused:
        config = config.with_options(paused_groups=config.paused_groups | {group})
    else:
        config = config.with_options(paused_groups=config.paused_groups - {group})
    if config != q.config:
        server.store.set_config(q, config, server.now_ms())
    return OK


def qlen(client, args):
    server = client.server
    q = lookup(server, queue_name(args[1]))
    server.store.fold(q, server.now_ms())
    return len(q.indexes.ready)
