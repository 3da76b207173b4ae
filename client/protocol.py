"""What leaseq.client sends and how it reads the answers, with no I/O.

The thread flavour (``queue.py``) and the asyncio flavour (``aio.py``) both
build their commands here and parse the replies here, so the two differ
only in how the bytes travel.  redis-py does the protocol itself; this
module turns Python arguments into leaseq's options and leaseq's replies
into Python values:

- a job map is a RESP3 map (redis-py's default since version 8) or, in
  RESP2, a flat ``[field, value, ...]`` list; both become a ``Job``;
- replies are read undecoded (``decode_responses`` off), because payloads
  and dedupe keys are bytes, binary-safe; texts are decoded here.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Union

from .tracing import with_trace_context

Payload = Union[bytes, bytearray, memoryview, str]


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """One claimed job: what QCLAIM answers, plus the queue it came from.

    ``lease`` is the token that acks, nacks and extends it; ``deadline`` is
    when the lease runs out (ms since the epoch, on the daemon's clock).
    ``payload``, ``key`` and ``group`` are bytes, as pushed.  The
    ``dead_letter_*`` fields say where a dead-lettered job came from (and,
    for one that died with a parent it waited for, ``dead_letter_parent``,
    that parent's queue and id);
    ``schedule`` and ``tick`` which schedule's tick pushed it.  ``meta`` is
    the job's META as pushed (``push(..., meta={...})``), names and values
    as str (bytes that are not UTF-8 read with replacement characters), or
    None when it has none.  Fields a newer daemon
    may add are kept in ``extra`` rather than refused.  ``cancelled`` is a
    ``threading.Event`` a ``Worker`` sets when its heartbeat finds the job
    cancelled (QCANCEL): its lease gone and its state ``cancelled``.
    """

    queue: str
    id: int
    payload: bytes
    lease: str
    deadline: int
    deliveries: int
    priority: int
    enqueued_at: int
    key: bytes | None = None
    last_error: str | None = None
    dead_letter_from: str | None = None
    dead_letter_src_id: int | None = None
    dead_letter_deliveries: int | None = None
    dead_letter_reason: str | None = None
    dead_letter_parent: tuple[str, int] | None = None
    group: bytes | None = None
    schedule: str | None = None
    tick: int | None = None
    meta: Mapping[str, str] | None = dataclasses.field(default=None, hash=False)   # (a dict: not hashable)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, hash=False, repr=False)
    # set by a Worker's heartbeat when the job is found cancelled (QCANCEL); a long handler
    # checks it (``job.cancelled.is_set()``) and gives up
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event, compare=False, hash=False,
                                                   repr=False)


# how each field QCLAIM names (docs/semantics.md §2.1) becomes a Job attribute
_JOB_FIELDS = {"id": int, "payload": bytes, "lease": _text, "deadline": int, "deliveries": int, "priority": int,
               "enqueued_at": int, "key": bytes, "last_error": _text, "dead_letter_from": _text,
               "dead_letter_src_id": int, "dead_letter_deliveries": int, "dead_letter_reason": _text,
               "dead_letter_parent": lambda pair: (_text(pair[0]), int(pair[1])),
               "group": bytes, "schedule": _text, "tick": int, "meta": lambda m: parse_meta(m)}   # (defined below)


# -- producing ------------------------------------------------------------------------------------

def push_command(queue: str, payload: Payload, *, priority: int | None = None, delay_ms: int | None = None,
                 at_ms: int | None = None, key: bytes | str | None = None, key_scope: str | None = None,
                 replace: bool = False, max_deliveries: int | None = None, expire_ms: int | None = None,
                 group: bytes | str | None = None, after: Iterable | None = None, on_fail: str | None = None,
                 meta: Mapping | None = None) -> list:
    """QPUSH's arguments.  ``None`` leaves an option to the daemon's default;
    the daemon checks the values and answers errors for bad ones."""
    _check_payload(payload)
    args = ["QPUSH", queue, payload]
    if key is not None:
        args += ["KEY", key]
    args += _push_options(priority, delay_ms, at_ms, key is not None, key_scope, replace, max_deliveries, expire_ms,
                          after, on_fail)
    return args + (["GROUP", group] if group is not None else []) + meta_args(meta)


def push_many_command(queue: str, payloads: list[Payload], *, keys: list[bytes | str] | None = None,
                      key_scope: str | None = None, replace: bool = False, priority: int | None = None,
                      delay_ms: int | None = None, at_ms: int | None = None, max_deliveries: int | None = None,
                      expire_ms: int | None = None, group: bytes | str | None = None,
                      groups: list[bytes | str] | None = None, after: Iterable | None = None,
                      on_fail: str | None = None, meta: Mapping | None = None) -> list:
    """QPUSHMANY's arguments: one job per payload, ``keys`` one dedupe key
    per payload, ``groups`` one group per payload (or ``group`` for all),
    the other options (``meta`` too) for all of them."""
    for payload in payloads:
        _check_payload(payload)
    args = ["QPUSHMANY", queue, len(payloads), *payloads]
    if keys is not None:
        args += ["KEYS", *_one_each(keys, payloads, "keys", "key")]
    args += _push_options(priority, delay_ms, at_ms, keys is not None, key_scope, replace, max_deliveries, expire_ms,
                          after, on_fail)
    if group is not None and groups is not None:
        raise ValueError("give group (for every job) or groups (one per payload), not both")
    if group is not None:
        args += ["GROUP", group]
    elif groups is not None:
        args += ["GROUPS", *_one_each(groups, payloads, "groups", "group")]
    return args + meta_args(meta)


def meta_args(meta: Mapping | None) -> list:
    """``META field value ...`` for a mapping of names to values (str or
    bytes), last among the options as the daemon wants it, with the current
    trace context added (``traceparent``, client/tracing.py: a push or a
    schedule made inside a span carries it; a field the caller gives wins);
    nothing for None or an empty mapping outside a span.  The daemon checks
    the limits (32 fields, names of 1 to 64 bytes, 8 KiB in all) and names
    what is wrong."""
    meta = with_trace_context(meta)
    if not meta:
        return []
    if not isinstance(meta, Mapping):
        raise TypeError(f"meta is a mapping of field names to values, not {type(meta).__name__}")
    args: list = ["META"]
    for name, value in meta.items():
        for part in (name, value):
            if not isinstance(part, (str, bytes)):
                raise TypeError(f"meta's names and values are str or bytes, not {type(part).__name__} "
                                f"({name!r}: {value!r})")
        args += [name, value]
    return args


def parse_meta(reply: Any) -> dict[str, str]:
    """A job's ``meta`` (a RESP3 map or RESP2's flat list) as a dict of str."""
    return {k: _text(v) for k, v in as_map(reply).items()}


def _one_each(values: list, payloads: list, name: str, one: str) -> list:
    if len(values) != len(payloads):
        raise ValueError(f"{name} must hold one {one} per payload: {len(values)} {name} for {len(payloads)} payloads")
    return list(values)


def _push_options(priority, delay_ms, at_ms, keyed: bool, key_scope, replace, max_deliveries, expire_ms,
                  after, on_fail) -> list:
    """The options QPUSH and QPUSHMANY share.  The mistakes the daemon would
    only call ``syntax error`` are named here instead."""
    if delay_ms is not None and at_ms is not None:
        raise ValueError("give delay_ms or at_ms, not both")
    if key_scope is not None and not keyed:
        raise ValueError("key_scope applies to a dedupe key: give key (or keys) too")
    if replace and not keyed:
        raise ValueError("replace applies to a dedupe key: give key (or keys) too")
    if on_fail is not None and after is None:
        raise ValueError("on_fail applies to parents: give after too")
    options = {"WHILE": key_scope, "PRIORITY": priority, "DELAY": delay_ms, "AT": at_ms,
               "MAXDELIVERIES": max_deliveries, "EXPIRE": expire_ms, "ONFAIL": on_fail}
    args = [part for name, value in options.items() if value is not None for part in (name, value)]
    if replace:
        args.append("REPLACE")
    if after is not None:
        parents = [_parent(p) for p in after]
        if not parents:
            raise ValueError("after needs at least one parent")
        args += ["AFTER", len(parents), *(x for pair in parents for x in pair)]
    return args


def _parent(parent) -> tuple:
    """A parent for AFTER: a ``Job`` (its queue and id) or a ``(queue, id)`` pair."""
    if isinstance(parent, Job):
        return parent.queue, parent.id
    queue, job_id = parent
    return queue, job_id


def _check_payload(payload: object) -> None:
    """Only bytes and str: redis-py would turn a number into its text, and a
    dict or list has no single encoding, so the caller picks one (JSON,
    msgpack, ...)."""
    if not isinstance(payload, (bytes, bytearray, memoryview, str)):
        raise TypeError(f"a payload is bytes or str, not {type(payload).__name__}; encode it first "
                        f"(json.dumps, for example)")


# -- claiming and completing ----------------------------------------------------------------------

# -- queues and schedules --------------------------------------------------------------------------

# queue option -> (QCREATE/QALTER token, how many values: pairs are given as (n, ms))
QUEUE_OPTIONS = {"lease_ms": ("LEASE", 1), "max_deliveries": ("MAXDELIVERIES", 1), "dead_letter": ("DEADLETTER", 1),
                 "backoff": ("BACKOFF", 3), "max_len": ("MAXLEN", 1), "expire_ms": ("EXPIRE", 1),
                 "retain_completed_ms": ("RETAIN-COMPLETED", 1), "retain_dead_ms": ("RETAIN-DEAD", 1),
                 "window_ms": ("WINDOW", 1), "durability": ("DURABILITY", 1), "rate": ("RATE", 2),
                 "concurrency": ("CONCURRENCY", 1), "group_concurrency": ("GROUP-CONCURRENCY", 1),
                 "group_rate": ("GROUP-RATE", 2)}


def queue_command(command: str, queue: str, options: Mapping[str, Any]) -> list:
    """QCREATE's or QALTER's arguments from keyword options (``rate=(10, 1000)``,
    ``concurrency=4``, ``group_rate=None`` leaves it; ``0`` or ``"OFF"`` removes
    a limit)."""
    args = [command, queue]
    for name, value in options.items():
        if name not in QUEUE_OPTIONS:
            raise TypeError(f"unknown queue option {name!r}: one of {', '.join(QUEUE_OPTIONS)}")
        if value is None:
            continue
        token, width = QUEUE_OPTIONS[name]
        values = [value] if width == 1 or value in (0, "OFF", "off") else list(value)
        if width > 1 and len(values) not in (1, width):
            raise ValueError(f"{name} takes {width} values, as ({', '.join(['n', 'ms'][:width])})")
        args += [token, *values]
    return args


def pause_command(command: str, queue: str, group: bytes | str | None) -> list:
    return [command, queue] + (["GROUP", group] if group is not None else [])


def schedule_command(queue: str, name: str, payload: Payload, *, cron: str | None = None, tz: str | None = None,
                     every_ms: int | None = None, priority: int | None = None, misfire: str | None = None,
                     overlap: str | None = None, meta: Mapping | None = None) -> list:
    """QSCHEDULE's arguments: ``cron`` (with ``tz``) or ``every_ms``;
    ``meta``: the META of every job the schedule pushes."""
    _check_payload(payload)
    if (cron is None) == (every_ms is None):
        raise ValueError("give cron or every_ms (one of them)")
    args = ["QSCHEDULE", queue, name, payload] + (["CRON", cron] if cron is not None else ["EVERY", every_ms])
    options = {"TZ": tz, "PRIORITY": priority, "MISFIRE": misfire, "OVERLAP": overlap}
    return (args + [part for key, value in options.items() if value is not None for part in (key, value)]
            + meta_args(meta))


def parse_schedules(reply: list) -> list[dict[str, Any]]:
    """QSCHEDULES' reply: one dict per schedule, texts as str, the payload
    bytes, ``meta`` (when the schedule has one) a dict of str."""
    out = []
    for item in reply:
        fields = as_map(item)
        out.append({k: parse_meta(v) if k == "meta" else v if k == "payload" or not isinstance(v, bytes)
                    else _text(v) for k, v in fields.items()})
    return out


def claim_command(queue: str, consumer: str, count: int = 1, lease_ms: int | None = None,
                  block_ms: int | None = None, compact: bool = False) -> list:
    """QCLAIM's arguments; ``compact`` asks for each job as an array of
    values (``parse_jobs(..., compact=True)`` reads it)."""
    args = ["QCLAIM", queue, consumer, "COUNT", count]
    if lease_ms is not None:
        args += ["LEASE", lease_ms]
    if block_ms is not None:
        args += ["BLOCK", block_ms]
    if compact:
        args.append("COMPACT")
    return args


def claim_socket_timeout(block_ms: int | None, socket_timeout: float | None) -> float | None:
    """The socket timeout for a claim that may wait ``block_ms``: the wait
    plus the client's own ``socket_timeout`` (what any reply may take).

    A blocked QCLAIM does not extend redis-py's timeout.  With a timeout
    shorter than BLOCK, redis-py would give up, reconnect and send the claim
    again, and a job leased just as the socket gave up would reach nobody
    until its lease ran out (docs/tour.md, "A worker loop").  ``None`` (no
    timeout) stays ``None``, and so does ``BLOCK 0``, which waits for ever.
    """
    if socket_timeout is None or block_ms == 0:
        return None
    return (block_ms or 0) / 1000 + socket_timeout


def token_of(job: Job | str) -> str:
    """A lease token, from a ``Job`` or given as is."""
    return job.lease if isinstance(job, Job) else job


def ack_command(queue: str, job: Job | str, result: Any = None) -> list:
    """QACK; ``result`` (not None) is kept as the job's result (``result_value``)."""
    args = ["QACK", queue, token_of(job)]
    if result is not None:
        args += ["RESULT", result_value(result)]
    return args


def result_value(value: Any) -> bytes | str:
    """A result as sent: bytes and str as they are, anything else as JSON
    (a handler may return a dict); ``TypeError`` if it is not JSON-able."""
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return value
    return json.dumps(value, separators=(",", ":"))


def result_command(queue: str, job_id: int, block_ms: int | None = None) -> list:
    args = ["QRESULT", queue, job_id]
    if block_ms is not None:
        args += ["BLOCK", block_ms]
    return args


def nack_command(queue: str, job: Job | str, error: str | None = None, delay_ms: int | None = None,
                 dead: bool = False) -> list:
    args = ["QNACK", queue, token_of(job)]
    if delay_ms is not None:
        args += ["DELAY", delay_ms]
    if error is not None:
        args += ["ERROR", error]
    if dead:
        args.append("DEAD")
    return args


def extend_command(queue: str, jobs: Iterable[Job | str], lease_ms: int | None = None) -> list:
    args = ["QEXTEND", queue, *(token_of(j) for j in jobs)]
    if lease_ms is not None:
        args += ["LEASE", lease_ms]
    return args


# -- replies ------------------------------------------------------------------------------------

def as_map(reply: Any) -> dict[str, Any]:
    """A map reply with str keys: a RESP3 dict, or RESP2's flat
    ``[field, value, field, value, ...]``."""
    if not isinstance(reply, dict):
        reply = dict(zip(reply[::2], reply[1::2]))
    return {_text(k): v for k, v in reply.items()}


def parse_jobs(queue: str, reply: list, compact: bool = False) -> list[Job]:
    """QCLAIM's reply: a list of job maps (empty when nothing was claimed),
    or with ``compact`` (QCLAIM ... COMPACT) of job arrays."""
    if compact:
        return [parse_compact_job(queue, item) for item in reply]
    return [parse_job(queue, item) for item in reply]


def parse_compact_job(queue: str, item: list) -> Job:
    """A job of QCLAIM ... COMPACT: ``[id, payload, lease, deadline,
    deliveries, priority, enqueued_at]``, then a map of its other fields
    when it has any (docs/semantics.md §2.1)."""
    if len(item) == 7:
        return Job(queue, item[0], item[1], item[2].decode(), item[3], item[4], item[5], item[6])
    fields = as_map(item[7])
    known = {name: convert(fields.pop(name)) for name, convert in _JOB_FIELDS.items()
             if fields.get(name) is not None}
    return Job(queue, item[0], item[1], item[2].decode(), item[3], item[4], item[5], item[6], **known,
               extra=fields)


def parse_job(queue: str, reply: Any) -> Job:
    fields = as_map(reply)
    known = {name: convert(fields.pop(name)) for name, convert in _JOB_FIELDS.items()
             if fields.get(name) is not None}
    return Job(queue=queue, **known, extra=fields)


def parse_info(reply: Any) -> dict[str, Any]:
    """QINFO's reply as a dict: counters and limits stay ints, texts become
    str, and ``backoff_exponent``, which the daemon sends as text because
    RESP2 has no floats, becomes a float."""
    info = {name: _text(value) if isinstance(value, bytes) else value for name, value in as_map(reply).items()}
    if isinstance(info.get("backoff_exponent"), str):
        info["backoff_exponent"] = float(info["backoff_exponent"])
    return info


def check_raw_replies(connection_kwargs: Mapping[str, Any]) -> None:
    """Refuse a redis-py client that decodes replies: payloads are bytes,
    and a binary payload would fail to decode inside redis-py."""
    if connection_kwargs.get("decode_responses"):
        raise ValueError("leaseq.client reads payloads as bytes: give it a redis client without "
                         "decode_responses=True")
