"""Reading the log back: recovery.

``read_log`` walks the segments in order and hands every record to an
``apply`` function.  A frame that fails in the newest segment, with no valid
frame after it, is a torn tail (a write cut short by a crash) and is
truncated; any other failure raises ``CorruptLog`` naming file and offset,
unless ``repair`` is set, in which case the bad bytes are skipped up to the
next valid frame, reported, and the segment is rewritten without them.
With ``modify=False`` (``leaseq check`` without ``--repair``) no file is
changed: the torn tail, a torn-header segment and what repair would drop are
only reported.

``Replayer`` is the ``apply`` of a daemon's start: it decodes each record and
calls the same ``Store`` transitions that live commands call, with the
store's journal off (nothing is logged twice), so recovered state and live
state come from one piece of code (docs/semantics.md §5.1).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from . import plain, records
from .config import MEMORY, QueueConfig
from .job import Job
from .queue import Queue
from .schedules import Schedule
from .store import Store
from .wal import fsync_directory, list_segments, segment_name

log = logging.getLogger(__name__)


class CorruptLog(RuntimeError):
    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(
            f"write-ahead log is corrupt in {path} at offset {offset}: {reason}. "
            f"Refusing to start; to drop the unreadable bytes and start anyway, use --repair")
        self.path = path
        self.offset = offset


@dataclass
class RecoveryReport:
    segments: int = 0
    records: int = 0
    bytes: int = 0
    truncated_bytes: int = 0
    skipped: list = field(default_factory=list)   # (path, offset, length) dropped by --repair
    last_segment: int = 0
    torn: list = field(default_factory=list)      # (path, offset, length) of torn tails / torn headers


def read_log(directory: str, apply, repair: bool = False, after: int = 0,
             modify: bool = True) -> RecoveryReport:
    """Call ``apply(rtype, body)`` for every record of the segments numbered
    above ``after`` (those a snapshot does not cover), in log order.  With
    ``modify`` False nothing on disk changes: what would be truncated,
    removed, moved aside or rewritten is only reported (``torn``,
    ``truncated_bytes``, ``skipped``)."""
    everything = list_segments(directory)
    segments = [(n, p) for n, p in everything if n > after]
    missing = first_gap(after, [n for n, _p in segments], directory)
    if missing is not None and not repair:
        raise CorruptLog(os.path.join(directory, segment_name(missing)), 0,
                         "this segment is missing (the segments after it need it)")
    reader = _LogReader(directory, apply, repair, modify)
    # A torn tail can only be in the last segment that holds records: segments
    # after it are empty or header-only (a rotation just before the crash).
    with_records = [i for i, (_n, p) in enumerate(segments) if os.path.getsize(p) > records.SEGMENT_HEADER_SIZE]
    last_with_records = with_records[-1] if with_records else len(segments) - 1
    for i, (number, path) in enumerate(segments):
        # The room the writer reserves (storage.wal) is cut off when a segment is sealed, and
        # that cut is durable before any record of the next segment is: room can be left in the
        # last segment with records, or in the one before it (a crash as it was sealed), not earlier.
        reader.segment(number, path, newest=i >= last_with_records, room_ok=i >= last_with_records - 1)
    # the next segment takes the number after the newest one left (a removed
    # torn one's number is used again, so no gap appears)
    reader.report.last_segment = max([n for n, p in everything if os.path.exists(p) and p not in reader.removed]
                                     + [after if after else 0])
    return reader.report


class _LogReader:
    """``read_log``'s steps for one segment: its header, its frames, and
    what ends them (the reserved room, a torn tail, damage)."""

    def __init__(self, directory: str, apply, repair: bool, modify: bool) -> None:
        self.directory, self.apply, self.repair, self.modify = directory, apply, repair, modify
        self.report = RecoveryReport()
        self.removed: set = set()

    def segment(self, number: int, path: str, newest: bool, room_ok: bool) -> None:
        with open(path, "rb") as f:
            data = f.read()
        self.report.segments += 1
        if not self._header_ok(number, path, data, newest):
            return
        data = self._frames(path, data, newest, room_ok)
        size = len(data)
        if self.repair:
            dropped = [s for s in self.report.skipped if s[0] == path]
            if self.modify:
                size = len(_rewrite_without_skipped(path, data, dropped))
            else:
                size -= sum(length for _p, _o, length in dropped)
        self.report.bytes += size

    def _header_ok(self, number: int, path: str, data: bytes, newest: bool) -> bool:
        """Whether the segment's header is whole and names it; a torn one
        of the newest segment is removed, any other refused (moved aside
        with --repair)."""
        report = self.report
        try:
            if records.check_segment_header(data) != number:
                raise records.FormatError("segment number in the header does not match the file name")
            return True
        except records.FormatError as e:
            if newest and len(data) < records.SEGMENT_HEADER_SIZE:
                # created, but the crash came before its header was complete
                report.truncated_bytes += len(data)
                report.torn.append((path, 0, len(data)))
                self.removed.add(path)
                if self.modify:
                    log.warning("removing empty segment %s (%d bytes, torn header)", path, len(data))
                    os.unlink(path)
                return False
            if not self.repair:
                raise CorruptLog(path, 0, str(e)) from None
            report.skipped.append((path, 0, len(data)))
            self.removed.add(path)
            if self.modify:
                os.replace(path, path + ".corrupt")
                fsync_directory(self.directory)
                log.error("--repair: segment %s has an unreadable header (%s); moved aside to %s.corrupt",
                          path, e, path)
            return False

    def _frames(self, path: str, data: bytes, newest: bool, room_ok: bool) -> bytes:
        """Apply the segment's records, in order, up to its end: the end of
        the file, the room the writer reserved, a torn tail of the newest
        segment, or (with --repair) past the damage.  Returns the bytes the
        segment keeps."""
        report = self.report
        offset = records.SEGMENT_HEADER_SIZE
        while True:
            offset = self._apply_from(path, data, offset)
            if offset >= len(data):
                return data
            if room_ok and records.reserved_from(data, offset):
                # the room the writer reserved (storage.wal): the end of the records, nothing torn
                if self.modify:
                    log.info("cutting %s at its last record, offset %d (%d bytes of reserved room)",
                             path, offset, len(data) - offset)
                    _truncate(path, offset)
                return data[:offset]
            resume = _next_valid_frame(data, offset + 1)
            if resume is None and newest:
                cut = len(data) - offset
                if self.modify:
                    room = cut - len(data[offset:].rstrip(b"\0"))     # zeros after it: reserved, never written
                    log.warning("truncating torn tail of %s at offset %d (%d bytes%s)", path, offset, cut,
                                f", the last {room} of them zeros" if room else "")
                    _truncate(path, offset)
                report.truncated_bytes += cut
                report.torn.append((path, offset, cut))
                return data[:offset]
            if not self.repair:
                raise CorruptLog(path, offset, "a record fails its checksum or is cut short")
            stop = len(data) if resume is None else resume
            if self.modify:
                log.error("--repair: skipping %d unreadable bytes of %s at offset %d", stop - offset, path, offset)
            report.skipped.append((path, offset, stop - offset))
            if resume is None:
                return data
            offset = resume

    def _apply_from(self, path: str, data: bytes, offset: int) -> int:
        """Apply the whole frames from ``offset`` on; where they stop."""
        for offset, rtype, body in records.iter_frames(data, offset):
            try:
                self.apply(rtype, body)
            except records.FormatError as e:
                # the checksum matched, so the bytes are as written: a bug or a newer format
                if not self.repair:
                    raise CorruptLog(path, offset, str(e)) from None
                log.error("--repair: skipping an undecodable %s record of %s at offset %d: %s",
                          records.NAMES.get(rtype, rtype), path, offset, e)
                self.report.skipped.append((path, offset, records.FRAME_SIZE + len(body)))
            self.report.records += 1
            offset += records.FRAME_SIZE + len(body)
        return offset


def _truncate(path: str, size: int) -> None:
    """Cut ``path`` to ``size`` bytes, durably."""
    with open(path, "r+b") as f:
        f.truncate(size)
        os.fsync(f.fileno())


def first_gap(after: int, numbers: list[int], directory: str) -> int | None:
    """The first segment number missing from ``after + 1`` up to the newest
    (one that --repair moved aside as ``.corrupt`` is not missing).  Without a
    snapshot (``after`` 0) the log starts at segment 1: compaction removes
    segments only once snapshots hold what they held."""
    if not numbers:
        return None
    expected = after + 1
    for n in numbers:
        while expected < n:
            if not os.path.exists(os.path.join(directory, segment_name(expected) + ".corrupt")):
                return expected
            expected += 1
        expected = n + 1
    return None


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
    """Offset of the first complete, checksum-valid frame at or after ``start``.
    A frame's type byte (its last) is never zero, so a run of zeros (the
    writer's reserved room) is stepped over at once, not byte by byte."""
    known = records.NAMES
    limit = len(data) - records.FRAME_SIZE
    unpack = records.FRAME.unpack_from
    type_at = records.FRAME_SIZE - 1
    off = start
    while off <= limit:
        _crc, length, rtype = unpack(data, off)
        if not rtype:
            off = records.next_nonzero(data, off + type_at) - type_at
            continue
        if rtype in known and off + records.FRAME_SIZE + length <= len(data) \
                and records.read_frame(data, off) is not None:
            return off
        off += 1
    return None


class Replayer:
    """Applies log records to a store through its live transitions, one
    function a record type (``STORE_RECORDS`` for the records about the
    store, ``QUEUE_RECORDS`` for those about one queue: their first field
    is its qid).  Records naming a queue or job that is gone (possible only
    after ``--repair`` dropped bytes) are skipped."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def apply(self, rtype: int, body: bytes) -> None:
        fields = records.decode(rtype, body)
        of_queue = QUEUE_RECORDS.get(rtype)           # (most records: asked first)
        if of_queue is not None:
            q = self.store.by_qid.get(fields[0])
            if q is not None:
                of_queue(self.store, q, fields)
            return
        if rtype == records.TXN:
            for inner_type, inner_body in fields[0]:
                self.apply(inner_type, inner_body)
            return
        of_store = STORE_RECORDS.get(rtype)
        if of_store is None:
            raise records.FormatError(f"record type {rtype} cannot be replayed")
        of_store(self.store, fields)


# -- the records about the store: (store, fields) ------------------------------------------------

def _boot(store: Store, fields) -> None:
    store.epoch, _ts = fields
    store.lease_seq = 0


def _ping(store: Store, fields) -> None:
    """A primary's keepalive in its stream (docs/replication.md): nothing to apply."""


def _clock(store: Store, fields) -> None:
    store.set_clock(*fields)


def _queue(store: Store, fields) -> None:
    qid, ts, name, config = fields
    config = QueueConfig.from_json(config)
    q = store.by_qid.get(qid)
    if q is None:
        store.create_queue(name, config, ts, qid)
    else:
        store.set_config(q, config, ts)


# -- the records about one queue: (store, its queue, fields) ------------------------------------

def _push(store: Store, q: Queue, fields) -> None:
    _qid, ts, jobs = fields
    plain.arrive(store, q, jobs, ts)      # (Store.push without a record: the store replaying logs none)


def _claim(store: Store, q: Queue, fields) -> None:
    _qid, ts, deadline, first_seq, consumer, ids, _deliveries = fields
    indexes = q.indexes
    front = indexes.groups is None and indexes.ready.first(len(ids)) == list(ids)   # (a plain claim's jobs)
    store.claim(q, _jobs(q, ids), deadline, consumer, ts, first_seq, front)


def _expire(store: Store, q: Queue, fields) -> None:
    store.apply_expire(q, fields[2])


def _ack(store: Store, q: Queue, fields) -> None:
    _qid, ts, ids = fields
    plain.ack(store, q, _jobs(q, ids), ts)


def _nack(store: Store, q: Queue, fields) -> None:
    _qid, ts, visible_at, error, ids, closed = fields
    store.nack(q, _jobs(q, ids), visible_at, error, ts, closed)


def _extend(store: Store, q: Queue, fields) -> None:
    _qid, ts, deadline, ids = fields
    store.extend(q, _jobs(q, ids), deadline, ts)


def _idmark(store: Store, q: Queue, fields) -> None:
    q.id_mark = fields[1]


def _dead(store: Store, q: Queue, fields) -> None:
    _qid, ts, reason, target_qid, pairs = fields
    _moved(store, q, target_qid, pairs,
           lambda target, kept: store.deaths.apply_dead(q, ts, records.REASONS[reason], target, kept,
                                                        _survives(target),
                                                        reason == records.PARENT_FAILED_AS_PARENT))


def _redrive(store: Store, q: Queue, fields) -> None:
    _qid, ts, ids = fields
    store.deaths.redrive(q, _jobs(q, ids), ts)


def _move(store: Store, q: Queue, fields) -> None:
    _qid, ts, target_qid, pairs = fields
    _moved(store, q, target_qid, pairs,
           lambda source, kept: store.deaths.apply_move(q, ts, source, kept, _survives(source)))


def _delete(store: Store, q: Queue, fields) -> None:
    _qid, ts, ids = fields
    store.delete(q, _jobs(q, ids), ts)


def _purge(store: Store, q: Queue, fields) -> None:
    _qid, ts, ids = fields
    store.delete(q, _jobs(q, ids), ts, purge=True)


def _drop(store: Store, q: Queue, fields) -> None:
    store.drop_queue(q, fields[1])


def _progress(store: Store, q: Queue, fields) -> None:
    _qid, ts, jid, value = fields
    if jid in q.jobs:
        store.progress(q, q.jobs[jid], value, ts)


def _result(store: Store, q: Queue, fields) -> None:
    _qid, _ts, jid, until, value = fields
    q.results.put(jid, until, value=value)             # (the ACK before it ended the job)


def _cancel(store: Store, q: Queue, fields) -> None:
    _qid, ts, ids = fields
    store.deaths.apply_cancel(q, _jobs(q, ids), ts)    # its children's DEAD records follow


def _release(store: Store, q: Queue, fields) -> None:
    """For readers of the log: the record before it released them here."""


def _replace(store: Store, q: Queue, fields) -> None:
    _qid, ts, visible_at, priority, pairs = fields
    store.replace(q, [(q.jobs[i], p) for i, p in pairs if i in q.jobs], priority, visible_at, ts)


def _schedule(store: Store, q: Queue, fields) -> None:
    store.timetable.apply_define(q, Schedule.from_json(fields[2]))


def _unschedule(store: Store, q: Queue, fields) -> None:
    store.timetable.apply_remove(q, fields[2])


def _fire(store: Store, q: Queue, fields) -> None:
    _qid, ts, name, next_tick, skipped, pairs = fields
    schedule = q.schedules.get(name)
    if schedule is not None:
        store.timetable.apply_fire(q, schedule, ts, pairs, next_tick, skipped)


STORE_RECORDS = {records.BOOT: _boot, records.CLOCK: _clock, records.QUEUE: _queue, records.PING: _ping}

QUEUE_RECORDS = {
    records.PUSH: _push, records.CLAIM: _claim, records.EXPIRE: _expire, records.ACK: _ack,
    records.NACK: _nack, records.EXTEND: _extend, records.IDMARK: _idmark, records.DEAD: _dead,
    records.REDRIVE: _redrive, records.MOVE: _move, records.DEL: _delete, records.PURGE: _purge,
    records.DROP: _drop, records.PROGRESS: _progress, records.RESULT: _result, records.CANCEL: _cancel,
    records.RELEASE: _release, records.REPLACE: _replace, records.SCHEDULE: _schedule,
    records.UNSCHEDULE: _unschedule, records.FIRE: _fire,
}


def _moved(store: Store, q: Queue, target_qid: int, pairs, apply) -> None:
    """DEAD and MOVE: jobs leaving ``q`` (for queue ``target_qid``, 0 = none)."""
    target = store.by_qid.get(target_qid) if target_qid else None
    pairs = [p for p in pairs if p[0] in q.jobs]
    if target_qid and target is None:       # only after --repair dropped its QUEUE record
        for jid, _ in pairs:
            q.remove(q.jobs[jid])
        return
    apply(target, pairs)


def _survives(target: Queue | None) -> bool:
    """Jobs moved into a memory queue are not brought back by a restart."""
    return target is None or target.durability is not MEMORY


def _jobs(q: Queue, ids) -> list[Job]:
    return q.jobs.present(ids)
