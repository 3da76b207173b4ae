"""The write side of the log: buffering, generations, group commit, segments.

Writing is split in two so the event loop never waits for the disk:

* ``append()`` adds a framed record to an in-memory buffer (no system call);
* ``flush()`` writes the whole buffer with one ``write`` at the end of an
  event-loop turn, on the loop thread (a write to the page cache).  Each
  flush that writes something is one *generation*;
* ``sync()`` runs ``fdatasync`` in a worker thread; ``start_sync()`` before
  it names the generation it will make durable, ``synced()`` after it says
  that generation is now durable.

A command's records travel as a ``Ticket``: the generation that will carry
them and whether its reply must wait until that generation is durable (an
``fsync`` queue) or only written.  ``mark()`` before a command and
``ticket_since(mark)`` after it give the command's ticket (None when it
appended nothing); ``reached(ticket)`` says when its reply may go.  One
``fdatasync`` covers every generation written before it started, so all the
turns written while one fsync runs share the next one (group commit).

``LogBuffer`` holds that bookkeeping; ``WriteAheadLog`` writes the
generations to segment files, ``MemoryLog`` keeps them in memory (a store
driven without a data directory, as the unit tests do).  Reading the log
back is ``storage.recovery``; the bytes are defined in ``storage.records``.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from typing import NamedTuple

from . import records

log = logging.getLogger(__name__)

SEGMENT_PREFIX = "seg-"
SEGMENT_SUFFIX = ".wal"


def segment_name(number: int) -> str:
    return f"{SEGMENT_PREFIX}{number:020d}{SEGMENT_SUFFIX}"


def numbered_files(directory: str, prefix: str, suffix: str) -> list[tuple[int, str]]:
    """``(number, path)`` of the files named ``<prefix><digits><suffix>``, in
    number order (segments, snapshots)."""
    found = []
    for name in os.listdir(directory):
        if name.startswith(prefix) and name.endswith(suffix):
            digits = name[len(prefix):-len(suffix)]
            if digits.isdigit():
                found.append((int(digits), os.path.join(directory, name)))
    return sorted(found)


def list_segments(directory: str) -> list[tuple[int, str]]:
    return numbered_files(directory, SEGMENT_PREFIX, SEGMENT_SUFFIX)


class DirectoryLocked(RuntimeError):
    pass


def lock_directory(directory: str) -> int:
    """Take an exclusive lock on ``directory/LOCK``; return its fd (keep it open)."""
    path = os.path.join(directory, "LOCK")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise DirectoryLocked(
                f"data directory {directory} is in use by another leaseq (pid {holder}); "
                f"refusing to start") from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Ticket(NamedTuple):
    """What a command's reply waits for: ``generation`` written, and durable
    too when ``fsync`` is set."""

    generation: int
    fsync: bool


class LogBuffer:
    """Records waiting for the end of the turn, and the generations that say
    where they are (see the module docstring).  Subclasses write the bytes."""

    def __init__(self) -> None:
        self._buffer: list[bytes] = []
        self._appended = 0         # records appended, ever
        self._last_sync_record = 0  # number of the latest appended record that needs fsync
        self._sync_gen = 0         # latest generation holding a record that needs fsync
        self._written = 0          # generations handed to write()
        self._covered = 0          # generations an fsync has been started for
        self._durable = 0          # generations known to be on disk
        self.bytes_written = 0
        self.last_fsync_ms = 0     # how long the last fsync took

    # loop thread ------------------------------------------------------------------

    def append(self, rtype: int, body: bytes, sync: bool) -> None:
        self._buffer.append(records.frame(rtype, body))
        self._appended += 1
        if sync:
            self._last_sync_record = self._appended
            self._sync_gen = self._written + 1

    def mark(self) -> int:
        """A point in the stream of appends, for ``ticket_since``."""
        return self._appended

    def ticket_since(self, mark: int) -> Ticket | None:
        """The ticket of the records appended since ``mark`` (None: none were)."""
        if self._appended == mark:
            return None
        return Ticket(self._written + 1, self._last_sync_record > mark)

    def reached(self, ticket: Ticket) -> bool:
        """Are the ticket's records written (and durable, if it needs fsync)?"""
        return ticket.generation <= (self._durable if ticket.fsync else self._written)

    @property
    def pending(self) -> bool:
        """Records appended and not yet written."""
        return bool(self._buffer)

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
        if not self._buffer:
            return self._written
        buf = self._buffer
        data = b"".join(buf) if len(buf) > 1 else buf[0]
        self._buffer = []
        self._write(data)
        self.bytes_written += len(data)
        self._written += 1
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

    def info_fields(self) -> list[tuple[str, object]]:
        return [("wal_bytes_written", self.bytes_written),
                ("wal_write_generation", self._written),
                ("wal_durable_generation", self._durable),
                ("last_fsync_duration_ms", self.last_fsync_ms)]


class MemoryLog(LogBuffer):
    """A log kept in memory: ``data`` is the bytes a segment would hold after
    its header, and every write is durable at once."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def _write(self, data: bytes) -> None:
        self.data += data

    def sync(self) -> None:
        pass

    def records(self) -> list[tuple[int, bytes]]:
        """Every record written so far, as ``(type, body)``."""
        return [(rtype, body) for _off, rtype, body in records.iter_frames(bytes(self.data), 0)]


class WriteAheadLog(LogBuffer):
    """Appends framed records to the newest segment file of ``directory``."""

    def __init__(self, directory: str, segment_size: int, first_segment: int) -> None:
        super().__init__()
        self.directory = directory
        self._segment_size = segment_size
        self._lock = threading.Lock()
        self._retired: list[int] = []   # fds of full segments, to fsync and close
        self._dir_dirty = False
        self._fd = -1
        self._size = 0
        self.segment_number = first_segment
        self._open_segment(first_segment)

    def set_segment_size(self, size: int) -> None:
        """Takes effect at the next write (the current segment is compared then)."""
        self._segment_size = size

    # loop thread ---------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._size += len(data)
        if self._size >= self._segment_size:
            self._open_segment(self.segment_number + 1)
            log.info("started segment %s", segment_name(self.segment_number))

    def rotate(self) -> int:
        """Start a new segment now (the buffer must be flushed); return the
        number of the segment just sealed."""
        assert not self.pending, "flush before rotating"
        sealed = self.segment_number
        self._open_segment(sealed + 1)
        log.info("started segment %s", segment_name(self.segment_number))
        return sealed

    def _open_segment(self, number: int) -> None:
        path = os.path.join(self.directory, segment_name(number))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        os.write(fd, records.segment_header(number))
        with self._lock:
            if self._fd >= 0:
                self._retired.append(self._fd)
            self._fd = fd
            self._dir_dirty = True
        self._size = records.SEGMENT_HEADER_SIZE
        self.segment_number = number

    # worker thread ----------------------------------------------------------------

    def sync(self) -> None:
        """fdatasync everything written so far (blocking: run it off the loop)."""
        with self._lock:
            fds = self._retired + [self._fd]
            retired = self._retired
            self._retired = []
            dir_dirty = self._dir_dirty
            self._dir_dirty = False
        for fd in fds:
            os.fdatasync(fd)
        for fd in retired:
            os.close(fd)
        if dir_dirty:
            fsync_directory(self.directory)

    def close(self) -> None:
        self.flush_and_sync()
        with self._lock:
            os.close(self._fd)
            self._fd = -1

    def info_fields(self) -> list[tuple[str, object]]:
        segments = [path for _n, path in list_segments(self.directory)]
        return [("wal_segments", len(segments)),
                ("wal_current_segment", self.segment_number),
                ("wal_bytes", sum(os.path.getsize(p) for p in segments))] + super().info_fields()
