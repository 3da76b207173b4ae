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

KEYS = (b"minute",) + tuple(f.encode() for f in FIELDS)


def qhistory(client, args):
    server = client.server
    name = queue_name(args[1])
    lo, hi = 0, server.now_ms()
    r = OptionReader(args, 2)
    for kw in r:
        r.once(kw)
        if kw == b"FROM":
            lo = r.int_in("FROM", 0, MS_MAX)
        elif kw == b"TO":
            hi = r.int_in("TO", 0, MS_MAX)
        else:
            r.unknown()
    history = server.history
    if name not in server.store.queues and not history.has(name):
        raise errors.no_queue(name)
    return [Map(list(zip(KEYS, (minute,) + row))) for minute, row in history.rows(name, lo, hi)]
