"""The snapshot file's on-disk format: the one place it is defined (the log's
is ``storage.records``, whose framing snapshots share).

Snapshot files
--------------
A snapshot is the live state after every record of the segments up to and
including number ``covers``, in a file ``snap-<covers, 20 digits>.snap``
(written as ``.snap.tmp``, fsynced, renamed, directory fsynced).  Recovery
loads the newest snapshot that reads whole and replays the segments after
``covers``.  The file begins with a 32-byte header::

    magic    8s   b"LEASEQSN"
    version  u16  format version, currently 1
    flags    u16  reserved, 0
    covers   u64  the last segment number whose records it holds
    ts       u64  when it was taken
    crc      u32  CRC32C of the 28 bytes above

then frames exactly like a segment's, of these types:

20 SNAP_STORE  ``epoch u32, lease_seq u64, next_qid u32, clock_offset i64,
               frozen u8, frozen_at u64, count u32`` then ``count`` dropped
               queue names, each ``name_len u8, name, next_id u64`` (the
               first id a queue re-created under that name may use).  First.
21 SNAP_QUEUE  ``qid u32, next_id u64, id_mark u64, pushed u64, acked u64,
               nacked u64, lease_expired u64, dead_lettered u64,
               duplicates u64, name_len u8, name, config`` (JSON, as QUEUE).
22 SNAP_JOBS   ``qid u32, count u32`` then ``count`` jobs of that queue in
               ascending id order, each a fixed part ``id u64,
               enqueued_at u64, visible_at u64, deadline u64,
               retain_until u64, expire_ms u64, max_deliveries u32,
               deliveries u32, priority u8, flags u8, state u8, bits u8,
               key_len u16, token_len u8, consumer_len u16, error_len u32,
               payload_len u32`` followed by ``key, token, consumer, error,
               payload``; when ``bits`` has ORIGIN, then ``src_id u64,
               deliveries u32, reason u8, source_len u8, source``.
               ``state``: 1 delayed, 2 ready, 3 in_flight, 4 dead,
               5 completed, 6 waiting, 7 cancelled.  ``bits``: 1 requeued (became ready again),
               2 has an error (``error`` may be empty), 4 ORIGIN
               (dead-letter provenance), bits 3-4 the reason a job dead in
               its own queue died (0 none, else as DEAD), 32 GROUP: then
               ``group_len u16, group`` (after the provenance), 64 TICK:
               then ``tick u64, name_len u16, name``, the schedule tick
               that pushed the job (after the group), 128 AFTER: then the
               parents it waits for, as in PUSH (after the tick).
               ``flags`` bits 0-1 are the dedupe scope; bit 7 says that
               ``length u32, progress`` (QPROGRESS) follows the rest.  ``token`` is
               the job's current lease token (empty: none); an expired
               lease keeps it until the job is claimed again.  A queue's
               jobs may span several SNAP_JOBS frames; memory queues have
               none.
23 SNAP_END    ``queues u32, jobs u64``: last; a file without it is not a
               snapshot (a crash cut it short).
24 SNAP_GROUPS ``qid u32, next_turn u64, count u32`` then ``count`` x
               ``(turn u64, name_len u16, name)``: the round-robin turn of
               each group of a queue with groups (after its SNAP_JOBS).
25 SNAP_SCHEDULES ``qid u32`` then a UTF-8 JSON list of the queue's
               schedules, each as in a SCHEDULE record (after SNAP_QUEUE).
32 SNAP_RESULTS ``qid u32, count u32`` then ``count`` x ``(id u64, until
               u64, kind u8, length u32, bytes)``: how ended jobs ended
               (``storage.results``); kind 0: ``bytes`` is the result of an
               ack, else the job died or was cancelled and ``bytes`` is the
               reason (after the queue's SNAP_JOBS; the number skips the
               log's record types 26-31).
"""

from __future__ import annotations

import json
import struct

from crc32c import crc32c

from .records import REASON_CODES, REASONS, VERSION, FormatError, parents, read_parents

SNAP_STORE, SNAP_QUEUE, SNAP_JOBS, SNAP_END, SNAP_GROUPS, SNAP_SCHEDULES = range(20, 26)
SNAP_RESULTS = 32

SNAPSHOT_MAGIC = b"LEASEQSN"
SNAPSHOT_HEADER = struct.Struct("<8sHHQQ")
SNAPSHOT_HEADER_SIZE = SNAPSHOT_HEADER.size + 4
_SNAP_STORE = struct.Struct("<IQIqBQI")
_SNAP_QUEUE = struct.Struct("<IQQQQQQQQB")
_SNAP_JOB = struct.Struct("<QQQQQQIIBBBBHBHII")
_SNAP_ORIGIN = struct.Struct("<QIBB")
_SNAP_END = struct.Struct("<IQ")
SNAP_REQUEUED, SNAP_ERROR, SNAP_ORIGIN, SNAP_GROUP, SNAP_TICK, SNAP_AFTER = 1, 2, 4, 32, 64, 128
FLAG_PROGRESS = 128           # in a SNAP_JOBS job's flags byte
_U32 = struct.Struct("<I")
_TICK = struct.Struct("<QH")
_SNAP_GROUPS = struct.Struct("<IQI")
_SNAP_TURN = struct.Struct("<QH")
_U16 = struct.Struct("<H")
_SNAP_RESULT = struct.Struct("<QQBI")


def snapshot_header(covers: int, ts: int) -> bytes:
    head = SNAPSHOT_HEADER.pack(SNAPSHOT_MAGIC, VERSION, 0, covers, ts)
    return head + struct.pack("<I", crc32c(head))


def check_snapshot_header(data: bytes) -> tuple[int, int]:
    """Return ``(covers, ts)``, or raise FormatError."""
    if len(data) < SNAPSHOT_HEADER_SIZE:
        raise FormatError("snapshot header is short")
    head = data[:SNAPSHOT_HEADER.size]
    (crc,) = struct.unpack_from("<I", data, SNAPSHOT_HEADER.size)
    if crc32c(head) != crc:
        raise FormatError("snapshot header checksum mismatch")
    magic, version, _flags, covers, ts = SNAPSHOT_HEADER.unpack(head)
    if magic != SNAPSHOT_MAGIC:
        raise FormatError("not a leaseq snapshot (bad magic)")
    if version != VERSION:
        raise FormatError(f"snapshot format version {version} is not supported (this daemon reads {VERSION})")
    return covers, ts


# -- snapshot bodies ----------------------------------------------------------------


def snap_store(epoch: int, lease_seq: int, next_qid: int, clock_state, dropped: dict) -> bytes:
    offset, frozen, frozen_at = clock_state
    parts = [_SNAP_STORE.pack(epoch, lease_seq, next_qid, offset, 1 if frozen else 0, frozen_at, len(dropped))]
    for name, mark in dropped.items():
        parts.append(struct.pack("<B", len(name)) + name + struct.pack("<Q", mark))
    return b"".join(parts)


def decode_snap_store(b: bytes) -> tuple:
    """``(epoch, lease_seq, next_qid, (offset, frozen, frozen_at), {name: next_id})``"""
    try:
        epoch, lease_seq, next_qid, offset, frozen, frozen_at, count = _SNAP_STORE.unpack_from(b)
        off = _SNAP_STORE.size
        dropped = {}
        for _ in range(count):
            n = b[off]
            name = b[off + 1:off + 1 + n]
            (mark,) = struct.unpack_from("<Q", b, off + 1 + n)
            dropped[name] = mark
            off += 9 + n
    except (struct.error, IndexError) as e:
        raise FormatError(f"SNAP_STORE record does not decode: {e}") from None
    if off != len(b):
        raise FormatError("SNAP_STORE record length does not match its names")
    return epoch, lease_seq, next_qid, (offset, bool(frozen), frozen_at), dropped


def snap_queue(qid: int, next_id: int, id_mark: int, counters: tuple, name: bytes, config: dict) -> bytes:
    """``counters``: pushed, acked, nacked, lease_expired, dead_lettered, duplicates."""
    return (_SNAP_QUEUE.pack(qid, next_id, id_mark, *counters, len(name)) + name
            + json.dumps(config, sort_keys=True).encode())


def decode_snap_queue(b: bytes) -> tuple:
    """``(qid, next_id, id_mark, counters, name, config)``"""
    try:
        qid, next_id, id_mark, *counters, n = _SNAP_QUEUE.unpack_from(b)
        name = b[_SNAP_QUEUE.size:_SNAP_QUEUE.size + n]
        config = json.loads(b[_SNAP_QUEUE.size + n:].decode())
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"SNAP_QUEUE record does not decode: {e}") from None
    return qid, next_id, id_mark, tuple(counters), name, config


def snap_job(job, state: int, bits: int, dead_code: int) -> bytes:
    """One job of a SNAP_JOBS body (``job`` has the fields of ``storage.job.Job``)."""
    key = job.key or b""
    token = job.token or b""
    consumer = job.consumer or b""
    error = job.last_error or b""
    head = _SNAP_JOB.pack(job.id, job.enqueued_at, job.visible_at, job.deadline, job.retain_until, job.expire_ms,
                          job.max_deliveries, job.deliveries, job.priority,
                          job.flags | (FLAG_PROGRESS if job.progress is not None else 0), state,
                          bits | (dead_code << 3), len(key), len(token), len(consumer), len(error),
                          len(job.payload))
    parts = [head, key, token, consumer, error, job.payload]
    origin = job.origin
    if origin is not None:
        parts.append(_SNAP_ORIGIN.pack(origin.src_id, origin.deliveries, REASON_CODES[origin.reason],
                                       len(origin.source)) + origin.source)
    if bits & SNAP_GROUP:
        parts.append(_U16.pack(len(job.group)) + job.group)
    if bits & SNAP_TICK:
        parts.append(_TICK.pack(job.tick, len(job.schedule)) + job.schedule)
    if bits & SNAP_AFTER:
        parts.append(parents(job.after_delay, job.onfail_run, job.waiting_for))
    if job.progress is not None:
        parts.append(_U32.pack(len(job.progress)) + job.progress)
    return b"".join(parts)


def snap_jobs(qid: int, parts: list) -> bytes:
    """A SNAP_JOBS body from ``snap_job`` results."""
    return struct.pack("<II", qid, len(parts)) + b"".join(parts)


def iter_snap_jobs(b: bytes):
    """``qid`` and an iterator of job tuples ``(id, enqueued_at, visible_at,
    deadline, retain_until, expire_ms, max_deliveries, deliveries, priority,
    flags, state, bits, key, token, consumer, error, payload, origin)``, where
    ``origin`` is None or ``(source, src_id, deliveries, reason)``; ``key``,
    ``token``, ``consumer``, ``error`` are None when absent."""
    try:
        qid, count = struct.unpack_from("<II", b)
    except struct.error as e:
        raise FormatError(f"SNAP_JOBS record does not decode: {e}") from None
    return qid, _snap_jobs(b, count)


def _snap_jobs(b: bytes, count: int):
    unpack = _SNAP_JOB.unpack_from
    size = _SNAP_JOB.size
    off = 8
    end = len(b)
    try:
        for _ in range(count):
            (jid, enq, vis, deadline, retain, expire, maxd, deliveries, prio, flags, state, bits,
             klen, tlen, clen, elen, plen) = unpack(b, off)
            off += size
            key = b[off:off + klen] if klen else None
            off += klen
            token = b[off:off + tlen] if tlen else None
            off += tlen
            consumer = b[off:off + clen] if clen else None
            off += clen
            error = b[off:off + elen] if bits & SNAP_ERROR else None
            off += elen
            payload = b[off:off + plen]
            off += plen
            origin = None
            if bits & SNAP_ORIGIN:
                src_id, odel, reason, slen = _SNAP_ORIGIN.unpack_from(b, off)
                off += _SNAP_ORIGIN.size
                origin = (b[off:off + slen], src_id, odel, REASONS[reason])
                off += slen
            group = b""
            if bits & SNAP_GROUP:
                (glen,) = _U16.unpack_from(b, off)
                group = b[off + 2:off + 2 + glen]
                off += 2 + glen
            scheduled = None
            if bits & SNAP_TICK:
                tick, nlen = _TICK.unpack_from(b, off)
                off += _TICK.size
                scheduled = (b[off:off + nlen], tick)
                off += nlen
            after = None
            if bits & SNAP_AFTER:
                after, off = read_parents(b, off)
            progress = None
            if flags & FLAG_PROGRESS:
                (plen,) = _U32.unpack_from(b, off)
                progress = b[off + 4:off + 4 + plen]
                off += 4 + plen
                flags &= ~FLAG_PROGRESS
            if off > end:
                raise FormatError("SNAP_JOBS record is cut short")
            yield (jid, enq, vis, deadline, retain, expire, maxd, deliveries, prio, flags, state, bits,
                   key, token, consumer, error, payload, origin, group, scheduled, after, progress)
    except (struct.error, KeyError) as e:
        raise FormatError(f"SNAP_JOBS record does not decode: {e}") from None
    if off != end:
        raise FormatError("SNAP_JOBS record length does not match its jobs")


def snap_groups(qid: int, next_turn: int, turns: dict) -> bytes:
    """A SNAP_GROUPS body: ``turns`` maps each group name to its turn."""
    parts = [_SNAP_GROUPS.pack(qid, next_turn, len(turns))]
    for name, turn in turns.items():
        parts.append(_SNAP_TURN.pack(turn, len(name)) + name)
    return b"".join(parts)


def decode_snap_groups(b: bytes) -> tuple:
    """``(qid, next_turn, {name: turn})``"""
    try:
        qid, next_turn, count = _SNAP_GROUPS.unpack_from(b)
        off = _SNAP_GROUPS.size
        turns = {}
        for _ in range(count):
            turn, n = _SNAP_TURN.unpack_from(b, off)
            off += _SNAP_TURN.size
            turns[b[off:off + n]] = turn
            off += n
    except struct.error as e:
        raise FormatError(f"SNAP_GROUPS record does not decode: {e}") from None
    if off != len(b):
        raise FormatError("SNAP_GROUPS record length does not match its groups")
    return qid, next_turn, turns


def snap_schedules(qid: int, schedules: list) -> bytes:
    """A SNAP_SCHEDULES body: ``schedules`` as JSON objects."""
    return struct.pack("<I", qid) + json.dumps(schedules, sort_keys=True).encode()


def decode_snap_schedules(b: bytes) -> tuple:
    """``(qid, [schedule as a JSON object])``"""
    try:
        (qid,) = struct.unpack_from("<I", b)
        schedules = json.loads(b[4:].decode())
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"SNAP_SCHEDULES record does not decode: {e}") from None
    if not isinstance(schedules, list):
        raise FormatError("SNAP_SCHEDULES record does not hold a list")
    return qid, schedules


def snap_end(queues: int, jobs: int) -> bytes:
    return _SNAP_END.pack(queues, jobs)


def decode_snap_end(b: bytes) -> tuple:
    if len(b) != _SNAP_END.size:
        raise FormatError("SNAP_END record has the wrong size")
    return _SNAP_END.unpack(b)


def snap_results(qid: int, entries: dict) -> bytes:
    """A SNAP_RESULTS body from a queue's ``Results.entries``."""
    parts = [struct.pack("<II", qid, len(entries))]
    for jid, e in entries.items():
        data = e.value if e.value is not None else e.reason
        parts.append(_SNAP_RESULT.pack(jid, e.until, 0 if e.value is not None else 1, len(data)) + data)
    return b"".join(parts)


def decode_snap_results(b: bytes) -> tuple:
    """``(qid, [(id, until, value, reason)])``, one of value and reason None."""
    rows = []
    try:
        qid, count = struct.unpack_from("<II", b)
        off = 8
        for _ in range(count):
            jid, until, kind, n = _SNAP_RESULT.unpack_from(b, off)
            off += _SNAP_RESULT.size
            data = b[off:off + n]
            off += n
            rows.append((jid, until, data, None) if kind == 0 else (jid, until, None, data))
    except struct.error as e:
        raise FormatError(f"SNAP_RESULTS record does not decode: {e}") from None
    if off != len(b):
        raise FormatError("SNAP_RESULTS record length does not match its entries")
    return qid, rows
