"""QHISTORY: a queue's minutes as the daemon's history keeps them
(storage/history.py; docs/operations.md, "History").

``QHISTORY queue [FROM ms] [TO ms]`` answers one map a kept minute, oldest
first, from FROM (default 0) to TO (default now), both ms epoch and both
included: ``minute`` (the minute's start, ms epoch) and the fields of
``storage.history.FIELDS``.  A minute in which the queue had no job and saw
no change is not kept, so it is not listed.  A queue that does not exist
and has no kept minute is -NOQUEUE; one dropped within ``history-hours``
still answers its minutes.
"""

from __future__ import annotations

from leaseq.storage.history import FIELDS

from . import errors
from .args import OptionReader, queue_name
from .queues import MS_MAX
from .replies import Map

COLUMNS = ("minute",) + FIELDS           # of each minute listed
KEYS = tuple(c.encode() for c in COLUMNS)


def window(server, lo: int | None = None, hi: int | None = None) -> tuple[int, int]:
    """FROM and TO as given, or by default 0 and now (the daemon's clock)."""
    return 0 if lo is None else lo, server.now_ms() if hi is None else hi


def minutes(server, name: bytes, lo: int, hi: int) -> list[dict] | None:
    """The kept minutes of queue ``name`` from ``lo`` to ``hi`` (ms epoch,
    both included), oldest first, each ``{column: value}`` in ``COLUMNS``'
    order; None for a queue that does not exist and has no kept minute."""
    history = server.history
    if name not in server.store.queues and not history.has(name):
        return None
    return [dict(zip(COLUMNS, (minute,) + row)) for minute, row in history.rows(name, lo, hi)]


def qhistory(client, args):
    server = client.server
    name = queue_name(args[1])
    lo = hi = None
    r = OptionReader(args, 2)
    for kw in r:
        r.once(kw)
        if kw == b"FROM":
            lo = r.int_in("FROM", 0, MS_MAX)
        elif kw == b"TO":
            hi = r.int_in("TO", 0, MS_MAX)
        else:
            r.unknown()
    found = minutes(server, name, *window(server, lo, hi))
    if found is None:
        raise errors.no_queue(name)
    return [Map(list(zip(KEYS, m.values()))) for m in found]
