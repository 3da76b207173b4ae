"""The log's generations: what a reply waits for (``Ticket``) and when it
may go (``LogBuffer``), the rules of group commit.

Records are appended to ``LogBuffer.buffer`` during a turn; ``flush`` writes
them with one write, and each flush that writes something is one
*generation*.  An fsync started after generation *g* was written makes every
generation up to *g* durable (``start_sync`` / ``synced``).  A command's
reply waits on its ``Ticket``: the generation holding its records, and
whether that generation must be durable or only written.  The subclasses in
storage/wal.py say where the bytes go (segment files, or memory).

This module is one of the daemon's hot path: in the compiled flavour
Cython compiles this very file, with the types of logbuffer.pxd beside it
(``LogBuffer`` becomes a C type whose fields the committer and the
connection's turn read directly); the pure flavour runs it as it is
(docs/performance.md, "One source, two flavours").
"""

from __future__ import annotations

from typing import NamedTuple

from .frames import frame


class Ticket(NamedTuple):
    """What a command's reply waits for: ``generation`` written, and durable
    too when ``fsync`` is set.  ``own``: the command appended records of its
    own (False: it only read what other commands appended, ``settled_since``)."""

    generation: int
    fsync: bool
    own: bool = True


class LogBuffer:
    """Records waiting for the end of the turn, and the generations that say
    where they are (see the module docstring).  Subclasses write the bytes."""

    __slots__ = ("buffer", "_appended", "_last_sync_record", "_sync_gen", "_claim_sync_gen", "_blind_gen",
                 "_blind_until", "_written", "_covered", "_durable", "bytes_written", "last_fsync_ms", "stream",
                 "durable_bytes", "_ends", "ack_needed", "_replicated", "_repl_ends")

    def __init__(self) -> None:
        self.buffer: list[bytes] = []      # framed records appended, not yet written (read only outside)
        self._appended = 0         # records appended, ever
        self._last_sync_record = 0  # number of the latest appended record that needs fsync
        self._sync_gen = 0         # latest generation holding a record that needs fsync
        self._claim_sync_gen = 0   # ... one that a claim may depend on (all but the ``blind_until`` ones)
        self._blind_gen = 0        # latest generation holding a record that needs fsync and no
        self._blind_until = 0      # claim can see before this moment (the earliest of them, ms epoch)
        self._written = 0          # generations handed to write()
        self._covered = 0          # generations an fsync has been started for
        self._durable = 0          # generations known to be on disk
        self.bytes_written = 0
        self.last_fsync_ms = 0     # how long the last fsync took
        self.stream = None         # called with the bytes of each write (the replication stream), or None
        self.durable_bytes = 0     # of bytes_written, how many an fsync has made durable
        self._ends: list = []      # (generation, bytes_written after it) of the generations not yet durable
        self.ack_needed = False    # min-replicas-to-ack: a durable reply waits for replicas' disks too
        self._replicated = 0       # ... generations that many replicas have on disk (``replicated_to``)
        self._repl_ends: list = []  # (generation, bytes_written after it) not yet known replicated

    # loop thread ------------------------------------------------------------------

    def append(self, rtype: int, body: bytes, sync: bool, blind_until: int = 0) -> None:
        """``blind_until``: no claim can take or skip anything because of this
        record before that moment (an ack of jobs under live leases on a
        queue whose claims an ack cannot free, ``Store.ack``); 0: any claim may."""
        self.append_frame(frame(rtype, body), sync, blind_until)

    def append_frame(self, data: bytes, sync: bool, blind_until: int = 0) -> None:
        """``append`` of a record already framed (a replica writes the frames
        its primary sent as they came)."""
        self.buffer.append(data)
        self._appended += 1
        if sync:
            self._last_sync_record = self._appended
            generation = self._sync_gen = self._written + 1
            if not blind_until:
                self._claim_sync_gen = generation
            else:
                if self._blind_gen <= self._durable:        # the earlier ones are on disk: start afresh
                    self._blind_until = blind_until
                else:
                    self._blind_until = min(self._blind_until, blind_until)
                self._blind_gen = generation

    def mark(self) -> int:
        """A point in the stream of appends, for ``ticket_since``."""
        return self._appended

    def ticket_since(self, mark: int) -> Ticket | None:
        """The ticket of the records appended since ``mark`` (None: none were)."""
        if self._appended == mark:
            return None
        return _ticket(Ticket, (self._written + 1, self._last_sync_record > mark, True))

    def settled_since(self, mark: int, claim_at: int | None = None) -> Ticket | None:
        """The ticket of a reply that may show anything appended so far
        (``own`` when its command appended records since ``mark``): it
        waits until every record appended is written, and every one that
        needs fsync is durable, so that no reply ever shows a change the log
        may still refuse (docs/semantics.md §5.2).  None when all are.  A
        generation written after the one waiting for fsync joins that fsync
        (``sync_wanted``), so the reply waits for one fsync, not for the
        fsync-interval.

        ``claim_at``: the reply hands out jobs claimed at that moment, and
        shows nothing but them: it need not wait for the fsync of records
        no claim can see yet (``append``'s ``blind_until``)."""
        own = self._appended != mark
        generation = self._written + 1 if self.buffer else self._written
        if self._sync_gen > self._durable and (
                claim_at is None or self._claim_sync_gen > self._durable
                or (self._blind_gen > self._durable and claim_at >= self._blind_until)):
            self._sync_gen = generation
            return _ticket(Ticket, (generation, True, own))
        if self.buffer:
            return _ticket(Ticket, (generation, False, own))
        return None

    def reached(self, ticket: Ticket) -> bool:
        """Are the ticket's records written (and durable, if it needs fsync:
        on this disk, and with ``ack_needed`` on the replicas' too)?"""
        if ticket.fsync:
            return ticket.generation <= self._durable and (not self.ack_needed or ticket.generation <= self._replicated)
        return ticket.generation <= self._written

    def require_acks(self, on: bool) -> None:
        """``ack_needed`` from now on; what was written before counts as replicated."""
        if on != self.ack_needed:
            self.ack_needed = on
            self._replicated = self._written
            self._repl_ends = []

    def replicated_to(self, nbytes: int) -> bool:
        """Enough replicas have the first ``nbytes`` of what this log wrote on
        their disks: the generations that end there are replicated.  True
        when that let more generations go."""
        ends, before = self._repl_ends, self._replicated
        while ends and ends[0][1] <= nbytes:
            self._replicated = ends.pop(0)[0]
        return self._replicated != before

    def want_sync(self) -> bool:
        """Everything appended so far is to be covered by an fsync (WAITAOF):
        ``sync_wanted`` once it is written.  False when it is durable already."""
        generation = self._written + 1 if self.buffer else self._written
        if generation <= self._durable:
            return False
        self._sync_gen = max(self._sync_gen, generation)
        return True

    @property
    def pending(self) -> bool:
        """Records appended and not yet written."""
        return bool(self.buffer)

    @property
    def sync_wanted(self) -> bool:
        """A generation written holds a record that needs fsync, and no fsync
        started so far covers it."""
        return self._covered < self._sync_gen <= self._written

    @property
    def unsynced(self) -> bool:
        """Something written is not covered by an fsync yet."""
        return self._covered < self._written

    @property
    def written_generation(self) -> int:
        return self._written

    @property
    def durable_generation(self) -> int:
        return self._durable

    def flush(self) -> int:
        """Write the buffered records (one ``write``); return the generation."""
        if not self.buffer:
            return self._written
        buf = self.buffer
        data = b"".join(buf) if len(buf) > 1 else buf[0]
        self.buffer = []
        self._write(data)
        self.bytes_written += len(data)
        self._written += 1
        self._ends.append((self._written, self.bytes_written))
        if self.ack_needed:
            self._repl_ends.append((self._written, self.bytes_written))
        if self.stream is not None:
            self.stream(data)
        return self._written

    def start_sync(self) -> int:
        """An fsync is about to start: it covers every generation written so
        far.  Returns that generation, to hand to ``synced`` when it is done."""
        self._covered = self._written
        return self._written

    def synced(self, generation: int, duration_ms: int) -> None:
        """The fsync started for ``generation`` has returned."""
        self._durable = max(self._durable, generation)
        self.last_fsync_ms = duration_ms
        ends = self._ends
        while ends and ends[0][0] <= generation:
            self.durable_bytes = ends.pop(0)[1]

    def flush_and_sync(self) -> None:
        """Write and fsync everything now, on this thread (start-up, shutdown)."""
        self.flush()
        target = self.start_sync()
        self.sync()
        self.synced(target, 0)

    def _write(self, data: bytes) -> None:
        raise NotImplementedError

    # any thread ---------------------------------------------------------------------

    def sync(self) -> None:
        """Make everything written so far durable (blocking: run it off the loop)."""
        raise NotImplementedError

    def sync_fd(self) -> int:
        """When an fdatasync of one file is all ``sync`` would do now: that
        file's descriptor (the log's thread then runs it without the
        interpreter: ``daemon/_logthread.pyx``); else -1, and ``sync`` does
        the work."""
        return -1

    def info_fields(self) -> list[tuple[str, object]]:
        return [("wal_bytes_written", self.bytes_written),
                ("wal_write_generation", self._written),
                ("wal_durable_generation", self._durable),
                ("last_fsync_duration_ms", self.last_fsync_ms)]


# A Ticket made without NamedTuple's Python-level __new__ (one frame less a
# command; the same tuple).
_ticket = tuple.__new__
