"""Segment files: appending, group commit, locking and reading back.

Writing (``WriteAheadLog``) is split in two so the event loop never waits
for the disk:

* ``append()`` adds a framed record to an in-memory buffer (no system call);
* ``flush()`` writes the whole buffer with one ``write`` at the end of an
  event-loop turn, on the loop thread (a write to the page cache), and
  returns the *generation* it wrote;
* ``sync()`` runs ``fdatasync`` in a worker thread; when it returns,
  every generation written before it started is durable.

The daemon answers commands on ``fsync`` queues only once their generation
is durable; one ``fdatasync`` covers every turn written while the previous
one ran (group commit).

Reading (``read_log``) walks the segments in order for recovery: a frame that
fails in the newest segment, with no valid frame after it, is a torn tail and
is truncated; any other failure raises ``CorruptLog`` naming file and offset,
unless ``repair`` is set, in which case the bad bytes are skipped up to the
next valid frame and reported.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from dataclasses import dataclass, field

from . import records

log = logging.getLogger(__name__)

SEGMENT_PREFIX = "seg-"
SEGMENT_SUFFIX = ".wal"


def segment_name(number: int) -> str:
    return f"{SEGMENT_PREFIX}{number:020d}{SEGMENT_SUFFIX}"


def list_segments(directory: str) -> list[tuple[int, str]]:
    found = []
    for name in os.listdir(directory):
        if name.startswith(SEGMENT_PREFIX) and name.endswith(SEGMENT_SUFFIX):
            digits = name[len(SEGMENT_PREFIX):-len(SEGMENT_SUFFIX)]
            if digits.isdigit():
                found.append((int(digits), os.path.join(directory, name)))
    return sorted(found)


class DirectoryLocked(RuntimeError):
    pass


class CorruptLog(RuntimeError):
    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(
            f"write-ahead log is corrupt in {path} at offset {offset}: {reason}. "
            f"Refusing to start; to drop the unreadable bytes and start anyway, use --repair")
        self.path = path
        self.offset = offset


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


# -- reading -------------------------------------------------------------------

@dataclass
class RecoveryReport:
    segments: int = 0
    records: int = 0
    bytes: int = 0
    truncated_bytes: int = 0
    skipped: list = field(default_factory=list)   # (path, offset, length) dropped by --repair
    last_segment: int = 0


def read_log(directory: str, apply, repair: bool = False) -> RecoveryReport:
    """Call ``apply(rtype, body)`` for every record, in log order."""
    report = RecoveryReport()
    segments = list_segments(directory)
    # A torn tail can only be in the last segment that holds records: segments
    # after it are empty or header-only (a rotation just before the crash).
    with_records = [i for i, (_n, p) in enumerate(segments) if os.path.getsize(p) > records.SEGMENT_HEADER_SIZE]
    last_with_records = with_records[-1] if with_records else len(segments) - 1
    for i, (number, path) in enumerate(segments):
        newest = i >= last_with_records
        with open(path, "rb") as f:
            data = f.read()
        report.segments += 1
        report.last_segment = number
        try:
            if records.check_segment_header(data) != number:
                raise records.FormatError("segment number in the header does not match the file name")
        except records.FormatError as e:
            if newest and len(data) < records.SEGMENT_HEADER_SIZE:
                # created, but the crash came before its header was complete
                log.warning("removing empty segment %s (%d bytes, torn header)", path, len(data))
                report.truncated_bytes += len(data)
                os.unlink(path)
                continue
            if not repair:
                raise CorruptLog(path, 0, str(e)) from None
            report.skipped.append((path, 0, len(data)))
            os.replace(path, path + ".corrupt")
            fsync_directory(directory)
            log.error("--repair: segment %s has an unreadable header (%s); moved aside to %s.corrupt",
                      path, e, path)
            continue
        offset = records.SEGMENT_HEADER_SIZE
        while True:
            for offset, rtype, body in records.iter_frames(data, offset):
                try:
                    apply(rtype, body)
                except records.FormatError as e:
                    # the checksum matched, so the bytes are as written: a bug or a newer format
                    if not repair:
                        raise CorruptLog(path, offset, str(e)) from None
                    log.error("--repair: skipping an undecodable %s record of %s at offset %d: %s",
                              records.NAMES.get(rtype, rtype), path, offset, e)
                    report.skipped.append((path, offset, records.FRAME_SIZE + len(body)))
                report.records += 1
                offset += records.FRAME_SIZE + len(body)
            if offset >= len(data):
                break
            resume = _next_valid_frame(data, offset + 1)
            if resume is None and newest:
                cut = len(data) - offset
                log.warning("truncating torn tail of %s at offset %d (%d bytes)", path, offset, cut)
                with open(path, "r+b") as f:
                    f.truncate(offset)
                    os.fsync(f.fileno())
                report.truncated_bytes += cut
                data = data[:offset]
                break
            if not repair:
                raise CorruptLog(path, offset, "a record fails its checksum or is cut short")
            stop = len(data) if resume is None else resume
            log.error("--repair: skipping %d unreadable bytes of %s at offset %d", stop - offset, path, offset)
            report.skipped.append((path, offset, stop - offset))
            if resume is None:
                break
            offset = resume
        if repair:
            data = _rewrite_without_skipped(path, data, [s for s in report.skipped if s[0] == path])
        report.bytes += len(data)
    return report


def _rewrite_without_skipped(path: str, data: bytes, skipped: list) -> bytes:
    """--repair: replace the segment by its readable records, atomically, so
    the next start needs no repair (the dropped ranges are in the log)."""
    if not skipped:
        return data
    keep, at = [], 0
    for _path, start, length in sorted(skipped, key=lambda s: s[1]):
        keep.append(data[at:start])
        at = start + length
    keep.append(data[at:])
    clean = b"".join(keep)
    tmp = path + ".repair"
    with open(tmp, "wb") as f:
        f.write(clean)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(os.path.dirname(path) or ".")
    log.warning("--repair: rewrote %s without the %d unreadable bytes", path, len(data) - len(clean))
    return clean


def _next_valid_frame(data: bytes, start: int):
    """Offset of the first complete, checksum-valid frame at or after ``start``."""
    known = records.NAMES
    limit = len(data) - records.FRAME_SIZE
    unpack = records.FRAME.unpack_from
    for off in range(start, limit + 1):
        _crc, length, rtype = unpack(data, off)
        if rtype in known and off + records.FRAME_SIZE + length <= len(data) \
                and records.read_frame(data, off) is not None:
            return off
    return None


# -- writing -------------------------------------------------------------------

class WriteAheadLog:
    """Appends framed records to the newest segment (see module docstring)."""

    def __init__(self, directory: str, segment_size: int, first_segment: int) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self._buffer: list[bytes] = []
        self.written_gen = 0        # generations handed to write()
        self.durable_gen = 0        # generations known to be on disk
        self.wants_sync = False     # something written needs fsync before its reply
        self.unsynced = False       # something written is not yet fsynced
        self.bytes_written = 0
        self.last_fsync_ms = 0
        self._lock = threading.Lock()
        self._retired: list[int] = []   # fds of full segments, to fsync and close
        self._dir_dirty = False
        self._fd = -1
        self._size = 0
        self.segment_number = first_segment
        self._open_segment(first_segment)

    # loop thread ---------------------------------------------------------------

    def append(self, rtype: int, body: bytes, sync: bool) -> None:
        data = records.frame(rtype, body)
        self._buffer.append(data)
        if sync:
            self.wants_sync = True

    @property
    def pending(self) -> bool:
        return bool(self._buffer)

    @property
    def next_gen(self) -> int:
        """The generation that records appended now will be written in."""
        return self.written_gen + 1

    def flush(self) -> int:
        """Write the buffered records (one ``write``); return the generation."""
        if not self._buffer:
            return self.written_gen
        data = b"".join(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
        self._buffer = []
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._size += len(data)
        self.bytes_written += len(data)
        self.unsynced = True
        self.written_gen += 1
        if self._size >= self.segment_size:
            self._rotate()
        return self.written_gen

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

    def _rotate(self) -> None:
        self._open_segment(self.segment_number + 1)
        log.info("started segment %s", segment_name(self.segment_number))

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
        self.flush()
        self.sync()
        with self._lock:
            os.close(self._fd)
            self._fd = -1
