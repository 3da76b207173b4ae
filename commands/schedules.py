"""Schedule commands: QSCHEDULE, QUNSCHEDULE, QSCHEDULES (docs/semantics.md §3.9)."""

from __future__ import annotations

from leaseq.storage.schedules import MISFIRES, OVERLAPS, BadSpec, Schedule, check_cron, first_tick

from . import errors
from .args import OptionReader, meta_pairs, queue_name
from .queues import MS_MAX, get_or_create, lookup
from .replies import Map

MAX_NAME = 200


def qschedule(client, args):
    """Create or replace a schedule; reply its next tick (ms epoch).  The
    same definition again changes nothing (its next tick stays)."""
    server = client.server
    name = queue_name(args[1])
    s = _parse(args, server.settings.max_payload)
    q = get_or_create(server, name)
    old = q.schedules.get(s.name)
    if old is not None and old.definition() == s.definition():
        return old.next
    s.next = first_tick(s, server.now_ms())
    server.store.timetable.define(q, s, server.now_ms())
    return s.next


def _parse(args: list, max_payload: int) -> Schedule:
    sname, payload = args[2], args[3]
    if not 1 <= len(sname) <= MAX_NAME:
        raise errors.bad_schedule_name(MAX_NAME)
    if len(payload) > max_payload:
        raise errors.too_big(len(payload), max_payload)
    s = Schedule(sname, payload)
    tz = None
    r = OptionReader(args, 4)
    for kw in r:
        r.once(kw)
        if kw == b"CRON" and not s.every:
            s.cron = r.value().decode(errors="replace").strip()
        elif kw == b"EVERY" and s.cron is None:
            s.every = r.int_in("EVERY", 1, MS_MAX)
        elif kw == b"TZ":
            tz = r.value().decode(errors="replace")
        elif kw == b"PRIORITY":
            s.priority = r.int_in("PRIORITY", 0, 9)
        elif kw == b"MISFIRE":
            s.misfire = _one_of(r.value(), MISFIRES, errors.BAD_MISFIRE)
        elif kw == b"OVERLAP":
            s.overlap = _one_of(r.value(), OVERLAPS, errors.BAD_OVERLAP)
        elif kw == b"META":
            s.meta = meta_pairs(r)
        else:
            r.unknown()
    if s.cron is None and not s.every:
        raise errors.CRON_OR_EVERY
    if tz is not None:
        if s.cron is None:
            raise errors.TZ_WITHOUT_CRON
        s.tz = tz
    if s.cron is not None:
        try:
            check_cron(s.cron, s.tz)
        except BadSpec as e:
            raise errors.bad_schedule(str(e)) from None
    return s


def _one_of(value: bytes, allowed: tuple, error):
    word = value.decode(errors="replace").lower()
    if word not in allowed:
        raise error
    return word


def qunschedule(client, args):
    server = client.server
    q = server.store.queues.get(queue_name(args[1]))
    if q is None:
        return 0
    return int(server.store.timetable.remove(q, args[2], server.now_ms()))


def qschedules(client, args):
    q = lookup(client.server, queue_name(args[1]))
    return [Map([(b"name", s.name), (b"spec", s.spec.encode()), (b"next", s.next), (b"last", s.last),
                 (b"fired", s.fired), (b"skipped", s.skipped), (b"misfire", s.misfire.encode()),
                 (b"overlap", s.overlap.encode()), (b"priority", s.priority), (b"payload", s.payload)]
                + ([(b"meta", Map(s.meta))] if s.meta is not None else []))
            for s in sorted(q.schedules.values(), key=lambda s: s.name)]
