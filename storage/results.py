"""A queue's results: what QRESULT answers after a job has ended
(docs/semantics.md §3.4, §3.11).

``Results`` maps a job id to how the job ended, kept for the queue's
RESULT-TTL from that moment: the value an ack gave with ``RESULT``, or the
reason a job died or was cancelled (so that QRESULT can say ``-DEAD`` after
the job itself has left its queue for a dead-letter queue, or its
RETAIN-DEAD ran out).  An ack without RESULT keeps nothing.  Entries are let
go by ``fold`` once their time is over, like retained jobs.

Entries come from a job's end (``keep``, the results' part in
``Store.ended``: an ack with RESULT, a death, a cancel), live and in replay
alike, from a RESULT record in replay, and from snapshots (SNAP_RESULTS);
``bytes`` is what the values hold, counted with the queue's payloads in its
memory.

``ACKED`` ... ``CANCELLED`` say how jobs ended, the ``how`` of
``Store.ended`` (docs/architecture.md, "A job's end").
"""

from __future__ import annotations

from .index import TimeIndex

# how jobs ended: the ``how`` of ``Store.ended``
ACKED = b"acked"            # QACK (with the ack's RESULT value as the step's ``detail``, if any)
DELETED = b"deleted"        # QDEL, QPURGE
DROPPED = b"dropped"        # QDROP of their queue
DIED = b"died"              # dead-lettered or dead in place (the reason as ``detail``)
CANCELLED = b"cancelled"    # QCANCEL (and its reason, the step's ``detail``, kept for QRESULT)


class Ending:
    """How a job ended: ``value`` (bytes) when it was acked with a result,
    else ``reason`` (why it died, or b"cancelled"); kept ``until`` (ms epoch)."""

    __slots__ = ("until", "value", "reason")

    def __init__(self, until: int, value: bytes | None, reason: bytes | None) -> None:
        self.until = until
        self.value = value
        self.reason = reason


class Results:
    __slots__ = ("entries", "expiry", "bytes")

    def __init__(self) -> None:
        self.entries: dict[int, Ending] = {}
        self.expiry = TimeIndex()     # (until, id)
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, jid: int) -> Ending | None:
        return self.entries.get(jid)

    def put(self, jid: int, until: int, value: bytes | None = None, reason: bytes | None = None) -> None:
        """Keep how job ``jid`` ended until ``until`` (replacing what was kept)."""
        old = self.entries.get(jid)
        if old is not None:
            self.expiry.remove(old.until, jid)
            self.bytes -= len(old.value or b"")
        self.entries[jid] = Ending(until, value, reason)
        self.expiry.add(until, jid)
        self.bytes += len(value or b"")

    def fold(self, now: int) -> None:
        """Let go of the entries whose time is over."""
        expiry = self.expiry
        if expiry.earliest <= now:
            entries = self.entries
            for jid in expiry.pop_due(now):
                self.bytes -= len(entries.pop(jid).value or b"")

    def clear(self) -> None:
        self.entries.clear()
        self.expiry = TimeIndex()
        self.bytes = 0


def kept_until(q, ts: int) -> int | None:
    """Until when a result of ``q`` given at ``ts`` is kept (its RESULT-TTL
    on); None: the queue keeps none (RESULT-TTL 0)."""
    ttl = q.config.result_ttl
    return ts + ttl if ttl else None


def keep(q, jobs, how: bytes, detail: bytes, ts: int) -> None:
    """The results' part in a job's end (``Store.ended``, which calls it only
    when there is a ``detail``): how ``jobs`` of ``q`` ended, kept for the
    queue's RESULT-TTL from ``ts``: an ack's value (the one job's), or the
    reason a death or a cancel gives."""
    until = kept_until(q, ts)
    if until is None:
        return
    results = q.results
    if how is ACKED:
        results.put(jobs[0].id, until, value=detail)
        return
    for job in jobs:
        results.put(job.id, until, reason=detail)


class EndWatch:
    """The jobs whose end someone waits for (QRESULT BLOCK, ``daemon.resultwaits``),
    as ``(qid, id)`` in ``watched``, and whom to ``tell(q, id)`` when one ends.
    The waiters' part in a job's end: ``Store.ended`` calls ``ended`` (for an
    ack, a death, a cancel, a deletion; a drop answers its waiters itself)
    only while ``watched`` is not empty: a set's truth test is all an ack
    pays when nobody waits."""

    __slots__ = ("watched", "tell")

    def __init__(self) -> None:
        self.watched: set = set()
        self.tell = None

    def ended(self, q, jobs) -> None:
        watched = self.watched
        for job in jobs:
            if (q.qid, job.id) in watched:
                self.tell(q, job.id)
