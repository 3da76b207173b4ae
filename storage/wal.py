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

``LogBuffer`` (storage/logbuffer.py) holds that bookkeeping; ``WriteAheadLog`` writes the
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
import time
from . import records
from .logbuffer import LogBuffer, Ticket  # noqa: F401  (Ticket: where the daemon imports it from)

log = logging.getLogger(__name__)

SEGMENT_PREFIX = "seg-"
RESERVE = 256 << 10   # bytes of room a segment file is given at a time, ahead of its writes (zeros written)
_ZEROS = bytes(RESERVE)
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


def sizes_of(paths) -> list[int]:
    """The sizes of the files ``paths`` that are still there: compaction
    removes segments in a thread of its own (daemon/snapshots.py), so one
    listed a moment ago may be gone (INFO and /metrics count the rest)."""
    sizes = []
    for path in paths:
        try:
            sizes.append(os.path.getsize(path))
        except FileNotFoundError:
            pass
    return sizes


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


def fsync_path(path: str) -> None:
    """fsync a file or a directory by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: str) -> None:
    fsync_path(directory)


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


class Faults:
    """Errors to pretend the disk returns (DEBUG FAULT, for tests only): an
    errno for writes (after half the bytes went out), one for fsyncs and one
    for reserving room in a segment file; 0 means none.  ``slow``:
    milliseconds each fsync of the log waits first (a slow disk)."""

    __slots__ = ("write", "fsync", "reserve", "slow")

    def __init__(self) -> None:
        self.write = 0
        self.fsync = 0
        self.reserve = 0
        self.slow = 0


class WriteAheadLog(LogBuffer):
    """Appends framed records to the newest segment file of ``directory``.

    The file is given room ahead of the writes, ``RESERVE`` bytes of zeros
    at a time, written, so that a write into it changes neither the file's
    size nor its allocation: its fdatasync has only the data to flush.  An
    fdatasync after a write that grew the file has the new size to make
    durable too, and one after a write into room reserved with
    ``posix_fallocate`` (as this log did before) turns unwritten extents
    into written ones, which the file system commits through its journal
    (docs/performance.md, "Room reserved ahead of the log's writes", "Zeros
    written ahead of the log's writes").  A segment is cut to its last record when it is sealed
    and at a clean close; after a crash the room left is zeros after the
    last record, which readers take as the segment's end
    (``records.reserved_from``)."""

    def __init__(self, directory: str, segment_size: int, first_segment: int) -> None:
        super().__init__()
        self.directory = directory
        self._segment_size = segment_size
        self._lock = threading.Lock()
        self._retired: list[int] = []   # fds of full segments, to fsync and close
        self._dir_dirty = False
        self._fd = -1
        self._size = 0           # where the last write ended
        self._reached = 0        # ... or the bytes of one that failed part way
        self._room = 0           # where the file ends: the room reserved past _size
        self._reserving = True   # False for the rest of a segment after a reservation failed
        self.segment_number = first_segment
        self.faults = Faults()
        self._syncing_at = (first_segment, records.SEGMENT_HEADER_SIZE)
        self.durable_at = (first_segment, 0)   # (segment, size) the last good fsync covered
        self.written_at = (first_segment, records.SEGMENT_HEADER_SIZE)   # ... the last whole write ended at
        self._open_segment(first_segment)

    def set_segment_size(self, size: int) -> None:
        """Takes effect at the next write (the current segment is compared then)."""
        self._segment_size = size

    # loop thread ---------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        at = self._size
        if at + len(view) > self._room and self._reserving:
            self._reserve(at + len(view))
        fault = self.faults.write
        if fault:
            self._reached = at + os.pwrite(self._fd, view[:len(view) // 2], at)   # a write cut short, then the error
            raise OSError(fault, os.strerror(fault))
        try:
            while view:
                n = os.pwrite(self._fd, view, at)
                view = view[n:]
                at += n
        except OSError:
            self._reached = at
            raise
        self._size = self._reached = at
        if at > self._room:          # the file grew: no room was reserved, or this write ran past it
            self._room = at
        self.written_at = (self.segment_number, self._size)
        if self._size >= self._segment_size:
            self._open_segment(self.segment_number + 1)
            log.info("started segment %s", segment_name(self.segment_number))

    def _reserve(self, end: int) -> None:
        """Room in the file up to ``end`` at least: ``RESERVE`` bytes of zeros
        (no more than a segment's size) written after the room it has, or,
        for a write that runs further than that, after the write's end (the
        write makes its own blocks).  When the file system refuses, the
        writes of this segment grow the file, as they would without: that
        costs time, not safety."""
        grow = min(RESERVE, self._segment_size)
        start = self._room if end <= self._room + grow else end
        room = start + grow
        at = start
        try:
            fault = self.faults.reserve
            if fault:
                raise OSError(fault, os.strerror(fault))
            zeros = memoryview(_ZEROS)
            while at < room:
                at += os.pwrite(self._fd, zeros[:room - at], at)
        except OSError as e:
            if at > start:               # zeros written part way: room all the same (a seal cuts them off)
                self._room = at
            self._reserving = False
            log.warning("cannot reserve room in %s (%s): its writes grow the file instead",
                        segment_name(self.segment_number), e.strerror or e)
            return
        self._room = room

    def _seal(self) -> None:
        """Cut the current file at its last record (the room after it goes)."""
        if self._fd >= 0 and self._room > self._size:
            os.ftruncate(self._fd, self._size)
        self._room = self._size

    def rotate(self) -> int:
        """Start a new segment now (the buffer must be flushed); return the
        number of the segment just sealed."""
        assert not self.pending, "flush before rotating"
        sealed = self.segment_number
        self._open_segment(sealed + 1)
        log.info("started segment %s", segment_name(self.segment_number))
        return sealed

    def _open_segment(self, number: int) -> None:
        self._seal()
        path = os.path.join(self.directory, segment_name(number))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            header = records.segment_header(number)
            if os.write(fd, header) != len(header):
                raise OSError(errno.ENOSPC, "segment header cut short")
        except OSError:
            os.close(fd)
            os.unlink(path)
            raise
        with self._lock:
            if self._fd >= 0:
                self._retired.append(self._fd)
            self._fd = fd
            self._dir_dirty = True
        self._size = self._reached = self._room = records.SEGMENT_HEADER_SIZE
        self._reserving = True
        self.segment_number = number

    # worker thread ----------------------------------------------------------------

    def start_sync(self) -> int:
        self._syncing_at = (self.segment_number, self._size)
        return super().start_sync()

    def synced(self, generation: int, duration_ms: int) -> None:
        super().synced(generation, duration_ms)
        self.durable_at = max(self.durable_at, self._syncing_at)

    def sync_fd(self) -> int:
        """The segment being written, when an fdatasync of it is all ``sync``
        has to do: no sealed segment to sync and close, no new file's name
        to make durable in the directory, no fault or slowness to pretend.
        Asked on the loop's thread between fsyncs (none runs meanwhile)."""
        with self._lock:
            if self._retired or self._dir_dirty or self.faults.fsync or self.faults.slow:
                return -1
            return self._fd

    def sync(self) -> None:
        """fdatasync everything written so far (blocking: run it off the loop)."""
        with self._lock:
            fds = self._retired + [self._fd]
            retired = self._retired
            self._retired = []
            dir_dirty = self._dir_dirty
            self._dir_dirty = False
        fault, slow = self.faults.fsync, self.faults.slow
        if slow:
            time.sleep(slow / 1000)
        if fault:
            raise OSError(fault, os.strerror(fault))
        for fd in fds:
            os.fdatasync(fd)
        for fd in retired:
            os.close(fd)
        if dir_dirty:
            fsync_directory(self.directory)

    def discard(self) -> None:
        """A log whose first records never became durable (its BOOT failed):
        close it and remove its segment."""
        with self._lock:
            fds = self._retired + ([self._fd] if self._fd >= 0 else [])
            self._retired = []
            self._fd = -1
        for fd in fds:
            os.close(fd)
        try:
            os.unlink(os.path.join(self.directory, segment_name(self.segment_number)))
        except OSError:
            pass

    def cut_back(self, fsync_failed: bool) -> list[str]:
        """After a failed write or fsync: let go of every file descriptor and
        cut the log back.  After a failed write, to the end of the last whole
        write, if an fsync of what lies before it then succeeds; after a
        failed fsync (or that one), to what the last good fsync covered.  A
        file whose fsync failed is never fsynced again as if its pages were
        safe: what it held past that point is dropped, and writing goes on in
        a new segment (``storage.datadir.DataDir.resume``).  Returns what was
        dropped, one line each.  Raises OSError when the disk refuses even
        this; call it again later."""
        with self._lock:
            fds = self._retired + ([self._fd] if self._fd >= 0 else [])
            self._retired = []
            self._fd = -1
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if not fsync_failed and self.written_at > self.durable_at:
            dropped = self._truncate_after(*self.written_at)
            try:
                for number, path in list_segments(self.directory):
                    if number >= self.durable_at[0]:
                        fsync_path(path)
                fsync_directory(self.directory)
                return dropped
            except OSError as e:
                log.error("fsync after a failed write failed too (%s): cutting back to the last good fsync", e)
        dropped = self._truncate_after(*self.durable_at)
        fsync_directory(self.directory)
        return dropped

    def _truncate_after(self, segment: int, size: int) -> list[str]:
        """Remove the segments after ``segment`` and cut it at ``size``."""
        dropped = []
        for number, path in list_segments(self.directory):
            if number > segment:
                dropped.append(f"{segment_name(number)}: {os.path.getsize(path)} bytes (the whole segment)")
                os.unlink(path)
            elif number == segment:
                have = os.path.getsize(path)
                keep = max(size, records.SEGMENT_HEADER_SIZE)
                written = min(have, self._reached) if number == self.segment_number else have    # not the room
                if written > keep:
                    dropped.append(f"{segment_name(number)}: {written - keep} bytes from offset {keep}")
                if have > keep:
                    fd = os.open(path, os.O_WRONLY)
                    try:
                        os.ftruncate(fd, keep)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
        return dropped

    def close(self) -> None:
        self.flush_and_sync()
        with self._lock:
            if self._fd >= 0:
                try:
                    self._seal()
                    os.fdatasync(self._fd)
                except OSError as e:     # the room stays: readers take it as the end anyway
                    log.warning("cannot cut %s at its last record: %s", segment_name(self.segment_number), e)
                os.close(self._fd)
            self._fd = -1

    def unlinked(self) -> bool:
        """Whether the segment being written was removed from the directory:
        its file then lives on only through this descriptor, and a crash
        would lose it (daemon/dirwatch.py)."""
        fd = self._fd
        return fd >= 0 and os.fstat(fd).st_nlink == 0

    def segments_and_bytes(self) -> tuple[int, int]:
        """(segment files, bytes of records in them): the current file's
        reserved room is not counted.  With the directory gone (removed
        under the daemon), the one being written is all there is."""
        try:
            files = list_segments(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            files = []
        sizes = sizes_of(path for number, path in files if number != self.segment_number)
        return len(sizes) + 1, sum(sizes) + self._size

    def info_fields(self) -> list[tuple[str, object]]:
        segments, size = self.segments_and_bytes()
        return [("wal_segments", segments),
                ("wal_current_segment", self.segment_number),
                ("wal_bytes", size)] + super().info_fields()
