"""The journal: where store transitions put their log records.

Every transition of ``Store`` hands its record to the journal, which decides
whether it is written at all, whether its reply must wait for fsync, and
whether it is held back to be written with others as one TXN record
(``transaction``: MULTI/EXEC, a QNACK that dead-letters, the dead-lettering a
claim does on its way).  The journal never answers anybody; the daemon asks
it for a command's ``Ticket`` (``mark`` before the command,
``ticket_since`` after) and holds the reply on that (docs/architecture.md).

What is logged, and whether a reply waits for fsync:

=========================  ===========  ==========  =========================
record                     fsync queue  async queue memory queue
=========================  ===========  ==========  =========================
QUEUE, DROP, IDMARK,       wait         wait        wait (queues, ids survive)
CLOCK, BOOT
PUSH, ACK, DEAD, REDRIVE,  wait         written     not written
MOVE, DEL
CLAIM, NACK, EXTEND        written *    written     not written
EXPIRE                     written      written     not written
=========================  ===========  ==========  =========================

(*) wait too with ``lease-durability fsync``.  "Written" records reach the
file at the end of the event-loop turn, before their replies are sent (so
they survive a crash of the process), and are fsynced within
``fsync-interval`` (docs/semantics.md §5.2, §5.3).

A journal without a log (``Journal(None)``) drops every record: that is how
recovery replays the log through the live transitions without writing it
again.

A journal with a ``history`` (storage/history.py) shows it the job records
it keeps that the history counts from, in every flavour (the plain
transitions' short ways hand their records here too): every CLAIM and CANCEL, and while a sampled
claim is in flight the records that end leases (ACK, NACK, EXPIRE, DEAD).
"""

from __future__ import annotations

from contextlib import contextmanager

from . import records
from .config import FSYNC, MEMORY
from .queue import Queue
from .logbuffer import LogBuffer, Ticket


_PUSH, _CLAIM, _CANCEL = records.PUSH, records.CLAIM, records.CANCEL


class Journal:
    __slots__ = ("log", "lease_sync", "_txn", "_txn_sync", "_txn_depth", "history")

    def __init__(self, log: LogBuffer | None = None, lease_sync: bool = False, history=None) -> None:
        if log is not None and not isinstance(log, LogBuffer):      # (the compiled flavour reads it as one)
            raise TypeError(f"a journal's log is a LogBuffer or None, not {type(log).__name__}")
        self.log = log
        self.lease_sync = lease_sync        # lease-durability fsync
        self._txn: list | None = None       # records of the open transaction
        self._txn_sync = False
        self._txn_depth = 0
        self.history = history if log is not None else None    # storage.history.History, or None: off

    # -- what a command's reply waits for (LogBuffer's methods of the same names; with no log, nothing) --

    def mark(self) -> int:
        """A point in the stream of records, for ``ticket_since``."""
        log = self.log
        return 0 if log is None else log.mark()

    def ticket_since(self, mark: int) -> Ticket | None:
        """What a reply waits for: the records appended since ``mark``."""
        log = self.log
        return None if log is None else log.ticket_since(mark)

    def settled_since(self, mark: int, claim_at: int | None = None) -> Ticket | None:
        """What a reply that may show the queues waits for: the records since
        ``mark`` and every one before them (``claim_at``: see LogBuffer)."""
        log = self.log
        return None if log is None else log.settled_since(mark, claim_at)

    # -- what transitions call -------------------------------------------------------------

    def logs_jobs_of(self, q: Queue) -> bool:
        """Whether records about ``q``'s jobs are kept (not for memory queues)."""
        return self.log is not None and q.durability is not MEMORY

    def job_record(self, q: Queue, rtype: int, body: bytes, lease: bool = False, blind_until: int = 0) -> None:
        """A record about jobs of ``q``; ``lease``: a CLAIM, NACK or EXTEND;
        ``blind_until``: no claim can see it before that moment
        (``LogBuffer.append``; inside a transaction it is ignored)."""
        if self.log is None or q.durability is MEMORY:
            return
        h = self.history
        if h is not None and (rtype == _CLAIM or rtype == _CANCEL or (h.sampled and rtype != _PUSH)):
            h.seen(q, rtype, body)    # (an ACK, NACK ... matters only while a sampled claim is in flight)
        self._emit(rtype, body, q.durability is FSYNC and (not lease or self.lease_sync), blind_until)

    def note_record(self, q: Queue, rtype: int, body: bytes) -> None:
        """A record nobody's reply waits for (EXPIRE): written unless ``q``
        is a memory queue, never fsync-waited."""
        if self.log is None or q.durability is MEMORY:
            return
        h = self.history
        if h is not None and h.sampled:     # (EXPIRE: it drops a sampled claim's time)
            h.seen(q, rtype, body)
        self._emit(rtype, body, False)

    def meta_record(self, rtype: int, body: bytes) -> None:
        """A record about queues, ids or the clock: always written and fsynced."""
        if self.log is not None:
            self._emit(rtype, body, True)

    def stream_record(self, rtype: int, body: bytes) -> None:
        """A record about nothing that the log carries to the replicas
        (PING: daemon/liveness.py): written, never fsync-waited."""
        if self.log is not None:
            self._emit(rtype, body, False)

    def begin(self) -> None:
        """Hold the records of the following transitions for one TXN record,
        applied all or none (nestable: only the outermost ``commit`` emits)."""
        if self._txn is None:
            self._txn = []
            self._txn_sync = False
        self._txn_depth += 1

    def commit(self) -> None:
        self._txn_depth -= 1
        if self._txn_depth:
            return
        got, sync = self._txn, self._txn_sync
        self._txn = None
        if len(got) == 1:
            self._emit(got[0][0], got[0][1], sync)
        elif got:
            self._emit(records.TXN, records.txn(got), sync)

    @contextmanager
    def transaction(self):
        """``begin`` ... ``commit`` around a block (commit also if it raises)."""
        self.begin()
        try:
            yield
        finally:
            self.commit()

    def _emit(self, rtype: int, body: bytes, sync: bool, blind_until: int = 0) -> None:
        if self._txn is not None:
            self._txn.append((rtype, body))
            self._txn_sync = self._txn_sync or sync
        else:
            self.log.append(rtype, body, sync, blind_until)

    # -- what the daemon asks -------------------------------------------------------------

    def claimed(self, clock, take, limit: int):
        """Call ``take(limit)``, a claim whose result hands out jobs (served to
        a parked claimer, sent to a work stream); return its result and the
        ticket it waits for (``settled_since`` at ``clock.now()`` read after
        the claim: None when nothing it may show can still be refused)."""
        mark = self.mark()
        result = take(limit)
        return result, self.settled_since(mark, clock.now())
