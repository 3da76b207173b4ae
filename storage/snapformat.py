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
    version  u16  the snapshot's format version, currently 3 (its own
                  number, apart from the log's); version 1 files (before
                  SNAP_PLAIN existed: every job in SNAP_JOBS) and version 2
                  (a dead job's reason in ``bits``) still read
    flags    u16  reserved, 0
    covers   u64  the last segment number whose records it holds
    ts       u64  when it was taken
    crc      u32  CRC32C of the 28 bytes above

then frames exactly like a segment's, of these types (all integers
little-endian, as in the log):

20 SNAP_STORE  ``epoch u32, lease_seq u64, next_qid u32, clock_offset i64,
               frozen u8, frozen_at u64, count u32`` then ``count`` dropped
               queue names, each ``name_len u8, name, next_id u64`` (the
               first id a queue re-created under that name may use).  First.
21 SNAP_QUEUE  ``qid u32, next_id u64, id_mark u64, pushed u64, acked u64,
               nacked u64, lease_expired u64, dead_lettered u64,
               duplicates u64, name_len u8, name, config`` (JSON, as QUEUE).
22 SNAP_JOBS   ``qid u32, count u32`` then ``count`` jobs of that queue in
               ascending id order (every job that is not plain: see
               SNAP_PLAIN; in a version 1 file, every job), each a fixed part ``id u64,
               enqueued_at u64, visible_at u64, deadline u64,
               retain_until u64, expire_ms u64, max_deliveries u32,
               deliveries u32, priority u8, flags u8, state u8, bits u8,
               key_len u16, token_len u8, consumer_len u16, error_len u32,
               payload_len u32`` followed by ``key, token, consumer, error,
               payload``; when ``bits`` has ORIGIN, then ``src_id u64,
               deliveries u32, reason u8, source_len u8, source`` (the
               reason as DEAD's; with 5, parent-failed, then the parent:
               ``parent_id u64, parent_len u8, parent``, its queue).
               ``state``: bits 0-3 1 delayed, 2 ready, 3 in_flight, 4 dead,
               5 completed, 6 waiting, 7 cancelled; bits 4-7 the reason a
               job dead in its own queue died (0 none, else as DEAD; in
               versions 1 and 2 it was ``bits`` 3-4, which held only codes
               up to 3).  ``bits``: 1 requeued (became ready again),
               2 has an error (``error`` may be empty), 4 ORIGIN
               (dead-letter provenance), 32 GROUP: then
               ``group_len u16, group`` (after the provenance), 64 TICK:
               then ``tick u64, name_len u16, name``, the schedule tick
               that pushed the job (after the group), 128 AFTER: then the
               parents it waits for, as in PUSH (after the tick).
               ``flags`` bits 0-1 are the dedupe scope; bit 7 says that
               ``length u32, progress`` (QPROGRESS) follows the rest, and
               bit 6 that the job's META fields, as in PUSH, follow that
               (snapshots written before META never set it).  ``token`` is
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
33 SNAP_PLAIN  (version 2) ``qid u32, count u32`` (at most 65,536), then
               six run columns (below) of ``count`` plain jobs of that queue
               in ascending id order, then their payloads back to back, in
               the same order, and nothing after.
               A *plain* job is ready or delayed with no rare field (its
               ``extra`` is None: no key, flags, max-deliveries, expiry,
               error, provenance, group, schedule, parents, progress,
               META or retention), no lease token, no deadline and no consumer:
               what almost every live job is.  Every other job goes in
               SNAP_JOBS; a queue's jobs are written in ascending id order
               whatever their record, so SNAP_PLAIN and SNAP_JOBS frames of
               one queue alternate where plain and other jobs do.  The
               columns, in this order:

               ids          ``first u64``, then runs of consecutive ids;
                            a run's value is its first id minus the end
                            (last id + 1) of the run before it, the first
                            run's minus ``first`` (which the writer makes
                            the first id, so 0): unsigned
               enqueued_at  ``first u64``, then runs; a run's value is its
                            enqueued_at minus the one of the run before (the
                            first run's: minus ``first``, again its own
                            time), modulo 2**64 and taken as signed (-2**63
                            .. 2**63-1): adding the values up modulo 2**64
                            gives the times back (u64, as everywhere)
               visible_at   as enqueued_at
               kind         priority (bits 0-3, 0-9) | 16 requeued | 32
                            delayed (else ready): unsigned
               deliveries   unsigned
               payload_len  unsigned

               A column (after its ``first``, where it has one) is ``runs
               u32, widths u8``, then ``runs`` values, then ``runs``
               lengths.  A run is one value that ``length``
               consecutive jobs (length >= 1) share; the lengths of a
               column add up to ``count``.  ``widths`` bits 0-1 give the
               size of every value, bits 2-3 of every length, each as 0: 1
               byte, 1: 2, 2: 4, 3: 8 (the writer takes the smallest that
               fits); bits 4-7 are 0.  Values of a signed column are two's
               complement.  Jobs pushed together share their times, so a
               QPUSHMANY of 1,000 jobs is one run in every column, and a
               plain job costs little more than its payload (jobs pushed
               one at a time: a few bytes more, small deltas in a byte).  What a plain
               job does not carry is its default (no token, deadline 0, no
               consumer, no rare field).
"""

from __future__ import annotations

import json
import struct
from functools import lru_cache
from itertools import accumulate, chain, count, groupby, repeat
from operator import add, mul, sub

from crc32c import crc32c

from .frames import header_fields
from .records import PARENT_FAILED_AS_PARENT, REASON_CODES, REASONS, FormatError, meta, parents, read_meta, read_parents

SNAP_STORE, SNAP_QUEUE, SNAP_JOBS, SNAP_END, SNAP_GROUPS, SNAP_SCHEDULES = range(20, 26)
SNAP_RESULTS = 32
SNAP_PLAIN = 33               # (the log's PING is 34; 35 is the next number neither uses)

SNAPSHOT_VERSION = 3          # what ``snapshot_header`` writes
READ_VERSIONS = (1, 2, 3)     # what ``check_snapshot_header`` accepts (1: no SNAP_PLAIN; 1, 2: the dead reason in bits)

SNAPSHOT_MAGIC = b"LEASEQSN"
SNAPSHOT_HEADER = struct.Struct("<8sHHQQ")
SNAPSHOT_HEADER_SIZE = SNAPSHOT_HEADER.size + 4
_SNAP_STORE = struct.Struct("<IQIqBQI")
_SNAP_QUEUE = struct.Struct("<IQQQQQQQQB")
_SNAP_JOB = struct.Struct("<QQQQQQIIBBBBHBHII")
_SNAP_ORIGIN = struct.Struct("<QIBB")
_SNAP_PARENT = struct.Struct("<QB")
_SNAP_END = struct.Struct("<IQ")
SNAP_REQUEUED, SNAP_ERROR, SNAP_ORIGIN, SNAP_GROUP, SNAP_TICK, SNAP_AFTER = 1, 2, 4, 32, 64, 128
FLAG_PROGRESS = 128           # in a SNAP_JOBS job's flags byte
FLAG_META = 64                # in a SNAP_JOBS job's flags byte
_U32 = struct.Struct("<I")
_TICK = struct.Struct("<QH")
_SNAP_GROUPS = struct.Struct("<IQI")
_SNAP_TURN = struct.Struct("<QH")
_U16 = struct.Struct("<H")
_SNAP_RESULT = struct.Struct("<QQBI")
_SNAP_PLAIN = struct.Struct("<II")
_U64 = struct.Struct("<Q")
_RUNS = struct.Struct("<IB")
PLAIN_PRIORITY, PLAIN_REQUEUED, PLAIN_DELAYED = 15, 16, 32     # a SNAP_PLAIN job's kind
PLAIN_MAX_JOBS = 1 << 16                                        # in one SNAP_PLAIN record
_WRAP, _HALF, _MASK = 1 << 64, 1 << 63, (1 << 64) - 1           # times are u64: deltas modulo 2**64
_WIDTHS = (1, 2, 4, 8)                                          # by width code
_FORMATS = {False: "BHIQ", True: "bhiq"}                        # signed -> struct code by width code


def snapshot_header(covers: int, ts: int) -> bytes:
    head = SNAPSHOT_HEADER.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, 0, covers, ts)
    return head + struct.pack("<I", crc32c(head))


def check_snapshot_header(data: bytes) -> tuple[int, int, int]:
    """Return ``(version, covers, ts)``, or raise FormatError."""
    magic, version, _flags, covers, ts = header_fields(data, SNAPSHOT_HEADER, "snapshot")
    if magic != SNAPSHOT_MAGIC:
        raise FormatError("not a leaseq snapshot (bad magic)")
    if version not in READ_VERSIONS:
        raise FormatError(f"snapshot format version {version} is not supported (this daemon reads versions "
                          f"{', '.join(map(str, READ_VERSIONS))}; a newer leaseq wrote it?)")
    return version, covers, ts


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
                          job.flags | (FLAG_PROGRESS if job.progress is not None else 0)
                          | (FLAG_META if job.meta is not None else 0), state | (dead_code << 4),
                          bits, len(key), len(token), len(consumer), len(error), job.payload_len)
    parts = [head, key, token, consumer, error, job.payload]
    origin = job.origin
    if origin is not None:
        parent = origin.parent
        # a parent-failed provenance without a parent came from an older log: it is the parent's own
        code = PARENT_FAILED_AS_PARENT if parent is None and origin.reason == b"parent-failed" \
            else REASON_CODES[origin.reason]
        parts.append(_SNAP_ORIGIN.pack(origin.src_id, origin.deliveries, code, len(origin.source)) + origin.source)
        if parent is not None:
            parts.append(_SNAP_PARENT.pack(parent[1], len(parent[0])) + parent[0])
    if bits & SNAP_GROUP:
        parts.append(_U16.pack(len(job.group)) + job.group)
    if bits & SNAP_TICK:
        parts.append(_TICK.pack(job.tick, len(job.schedule)) + job.schedule)
    if bits & SNAP_AFTER:
        parts.append(parents(job.after_delay, job.onfail_run, job.waiting_for))
    if job.progress is not None:
        parts.append(_U32.pack(len(job.progress)) + job.progress)
    if job.meta is not None:
        parts.append(meta(job.meta))
    return b"".join(parts)


def snap_jobs(qid: int, parts: list) -> bytes:
    """A SNAP_JOBS body from ``snap_job`` results."""
    return struct.pack("<II", qid, len(parts)) + b"".join(parts)


def iter_snap_jobs(b: bytes, version: int = SNAPSHOT_VERSION):
    """``qid`` and an iterator of job tuples ``(id, enqueued_at, visible_at,
    deadline, retain_until, expire_ms, max_deliveries, deliveries, priority,
    flags, state, bits, dead, key, token, consumer, error, payload, origin,
    group, scheduled, after, progress, meta)``, where ``dead`` is the reason code of a job
    dead in its own queue (0 none), ``origin`` None or ``(source, src_id,
    deliveries, reason, parent)``; ``key``, ``token``, ``consumer``,
    ``error`` are None when absent.  ``version``: the file's."""
    try:
        qid, count = struct.unpack_from("<II", b)
    except struct.error as e:
        raise FormatError(f"SNAP_JOBS record does not decode: {e}") from None
    return qid, _snap_jobs(b, count, version >= 3)


def _snap_jobs(b: bytes, count: int, dead_in_state: bool):
    unpack = _SNAP_JOB.unpack_from
    size = _SNAP_JOB.size
    off = 8
    end = len(b)
    try:
        for _ in range(count):
            (jid, enq, vis, deadline, retain, expire, maxd, deliveries, prio, flags, state, bits,
             klen, tlen, clen, elen, plen) = unpack(b, off)
            off += size
            if dead_in_state:
                state, dead = state & 15, state >> 4
            else:
                dead, bits = bits >> 3 & 3, bits & ~24
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
                source = b[off:off + slen]
                off += slen
                parent = None
                if reason == REASON_CODES[b"parent-failed"]:          # (5: the parent follows)
                    parent_id, nlen = _SNAP_PARENT.unpack_from(b, off)
                    off += _SNAP_PARENT.size
                    parent = (b[off:off + nlen], parent_id)
                    off += nlen
                origin = (source, src_id, odel, REASONS[reason], parent)
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
            fields = None
            if flags & FLAG_META:
                fields, off = read_meta(b, off)
                flags &= ~FLAG_META
            if off > end:
                raise FormatError("SNAP_JOBS record is cut short")
            yield (jid, enq, vis, deadline, retain, expire, maxd, deliveries, prio, flags, state, bits, dead,
                   key, token, consumer, error, payload, origin, group, scheduled, after, progress, fields)
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


# -- SNAP_PLAIN: plain jobs column by column, in runs -----------------------------------


def snap_plain(qid: int, ids: list, enqueued: list, visible: list, kinds: list, deliveries: list,
               payloads: list) -> bytes:
    """A SNAP_PLAIN body from the columns of plain jobs in ascending id
    order (``kinds``: priority | PLAIN_REQUEUED | PLAIN_DELAYED)."""
    starts, lengths = _id_runs(ids)
    first = starts[0] if starts else 0
    before = chain((first,), map(add, starts, lengths))    # the end of the run before (the first: first)
    parts = [_SNAP_PLAIN.pack(qid, len(ids)), _U64.pack(first),
             _column(list(map(sub, starts, before)), lengths, False)]
    for column, delta in ((enqueued, True), (visible, True), (kinds, False), (deliveries, False),
                          (list(map(len, payloads)), False)):
        values, lengths = _runs(column)
        if delta:                                           # modulo 2**64, as a signed 8-byte value fits
            first = values[0] if values else 0
            parts.append(_U64.pack(first))
            values = [(d + _HALF) % _WRAP - _HALF for d in map(sub, values, chain((first,), values))]
        parts.append(_column(values, lengths, delta))
    parts.extend(payloads)
    return b"".join(parts)


def _id_runs(ids: list) -> tuple[list, list]:
    """Runs of consecutive ids: (first ids, lengths)."""
    starts, lengths = [], []
    at = 0
    for base, run in groupby(map(sub, ids, count())):       # constant along consecutive ids
        n = len(list(run))
        starts.append(base + at)
        lengths.append(n)
        at += n
    return starts, lengths


def _runs(column: list) -> tuple[list, list]:
    """Runs of equal values: (values, lengths)."""
    values, lengths = [], []
    for value, run in groupby(column):
        values.append(value)
        lengths.append(len(list(run)))
    return values, lengths


def _width(low: int, high: int, signed: bool) -> int:
    """The code of the smallest width that holds ``low`` .. ``high``."""
    for code, size in enumerate(_WIDTHS):
        bits = size * 8 - signed
        if -(signed << bits) <= low and high < 1 << bits:
            return code
    raise ValueError(f"a SNAP_PLAIN value does not fit in 8 bytes: {low} .. {high}")


def _column(values: list, lengths: list, signed: bool) -> bytes:
    vcode = _width(min(values), max(values), signed) if values else 0
    lcode = _width(0, max(lengths), False) if lengths else 0
    k = len(values)
    return (_RUNS.pack(k, vcode | lcode << 2) + struct.pack(f"<{k}{_FORMATS[signed][vcode]}", *values)
            + struct.pack(f"<{k}{_FORMATS[False][lcode]}", *lengths))


def _read_column(b: bytes, off: int, n: int, signed: bool) -> tuple[tuple, tuple, int]:
    """``(values, lengths, next offset)`` of the column at ``off`` of ``n`` jobs."""
    k, widths = _RUNS.unpack_from(b, off)
    if widths >> 4:
        raise FormatError(f"SNAP_PLAIN column has unknown widths {widths:#x}")
    off += _RUNS.size
    values = struct.unpack_from(f"<{k}{_FORMATS[signed][widths & 3]}", b, off)
    off += k * _WIDTHS[widths & 3]
    lengths = struct.unpack_from(f"<{k}{_FORMATS[False][widths >> 2]}", b, off)
    off += k * _WIDTHS[widths >> 2]
    if sum(lengths) != n or (k and min(lengths) < 1):
        raise FormatError(f"SNAP_PLAIN column's runs do not add up to its {n} jobs")
    return values, lengths, off


@lru_cache(maxsize=16)
def _same_sizes(size: int, run: int) -> struct.Struct:
    """``run`` byte strings of ``size`` bytes each, cut out in one call (half
    the time of a slice each)."""
    return struct.Struct("<" + f"{size}s" * run)


def expand(values, lengths) -> list:
    """One entry per job: each run's value ``length`` times (the same object)."""
    if lengths.count(1) == len(lengths):        # (runs of one job: no repeat each)
        return list(values)
    return list(chain.from_iterable(map(repeat, values, lengths)))


def decode_snap_plain(b: bytes) -> tuple:
    """``(qid, ids, enqueued, visible, kinds, deliveries, payloads,
    payload_bytes)``: ``ids``, ``enqueued``, ``visible`` and ``payloads``
    one entry per job (a run's time is one int object); ``kinds`` and
    ``deliveries`` as their runs, ``(values, lengths)``."""
    try:
        qid, n = _SNAP_PLAIN.unpack_from(b)
        if n > PLAIN_MAX_JOBS:
            raise FormatError(f"SNAP_PLAIN holds more than {PLAIN_MAX_JOBS} jobs")
        (first,) = _U64.unpack_from(b, _SNAP_PLAIN.size)
        gaps, lengths, off = _read_column(b, _SNAP_PLAIN.size + 8, n, False)
        ends = list(accumulate(map(add, gaps, lengths), initial=first))[1:]
        if gaps and first + gaps[0] < 1:
            raise FormatError("SNAP_PLAIN has job id 0")
        ids = list(chain.from_iterable(map(range, map(sub, ends, lengths), ends)))
        times = []
        for _ in range(2):
            (first,) = _U64.unpack_from(b, off)
            deltas, runs, off = _read_column(b, off + 8, n, True)
            values = list(accumulate(deltas, initial=first))[1:]
            if values and (min(values) < 0 or max(values) > _MASK):     # (wrapped round 2**64)
                values = [t & _MASK for t in values]
            times.append(expand(values, runs))
        kinds = _read_column(b, off, n, False)
        off = kinds[2]
        if any(v >> 6 or v & PLAIN_PRIORITY > 9 for v in set(kinds[0])):
            raise FormatError("SNAP_PLAIN has an unknown kind of job")
        deliveries = _read_column(b, off, n, False)
        sizes, runs, off = _read_column(b, deliveries[2], n, False)
        payload_bytes = sum(map(mul, sizes, runs))
        if off + payload_bytes != len(b):
            raise FormatError("SNAP_PLAIN record length does not match its payloads")
        payloads = []
        for size, run in zip(sizes, runs):
            if run == 1:
                payloads.append(b[off:off + size])
            else:
                payloads += _same_sizes(size, run).unpack_from(b, off)
            off += size * run
    except struct.error as e:
        raise FormatError(f"SNAP_PLAIN record does not decode: {e}") from None
    return qid, ids, times[0], times[1], kinds[:2], deliveries[:2], payloads, payload_bytes
