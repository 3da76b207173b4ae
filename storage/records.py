"""The write-ahead log's records: the one place their types and bodies are
defined (the segment files and frames that carry them: storage/frames.py).

All integers are little-endian (``struct`` format ``'<'``).  Times are
milliseconds since the Unix epoch (u64).  Nothing is pickled.

Segments and frames
-------------------
A record travels in a *frame* (CRC32C, length, type, body) inside a
segment file; both are defined in storage/frames.py.  This module defines
what a frame's type and body mean.

Record types and bodies
-----------------------
``qid`` is the queue's number, assigned when the queue is created (names are
not repeated in every record); ``ts`` is when the change happened.

1 BOOT     ``epoch u32, ts u64``.  Written and fsynced at every start before
           anything is served.  Lease tokens contain the epoch, which makes
           them unique across restarts.
2 QUEUE    ``qid u32, ts u64, name_len u8, name, config``: create a queue or
           replace its configuration.  ``config`` is the rest of the body,
           a UTF-8 JSON object of option name -> value (rare records; JSON
           keeps them readable and open to new options).
3 DROP     ``qid u32, ts u64``: the queue and all its jobs are gone.
4 PUSH     ``qid u32, ts u64, count u32`` then ``count`` jobs, each
           ``id u64, visible_at u64, priority u8, flags u8,
           max_deliveries u32, expire_ms u64, key_len u16, payload_len u32,
           key, payload``.  ``ts`` is every job's ``enqueued_at``.  ``flags``
           bits 0-1 hold the dedupe scope of the key (0 queued, 1 active,
           2 exists); bit 2 says that ``group_len u16, group`` (the job's
           GROUP) follows the key; bit 3 that ``after_delay u64, onfail u8,
           count u32, (qid u32, id u64) x count`` (the parents it waits
           for, AFTER) follows that; bit 4 that ``count u8, (name_len u8,
           name, value_len u16, value) x count`` (the job's META fields in
           the order given) follows that.  Logs written before META have
           bit 4 clear everywhere and read as they always did.  One record
           per QPUSH / QPUSHMANY: all jobs or none.
5 CLAIM    ``qid u32, ts u64, deadline u64, first_seq u64, count u32,
           consumer_len u16, consumer, ids u64 x count`` and, written since
           0.2, ``deliveries u32 x count``: leases granted; job ``ids[i]``
           gets token (epoch of the last BOOT, first_seq + i) and one more
           delivery (``deliveries[i]`` is its count after this one; a body
           without them, from an older log, reads as well).
6 ACK      ``qid u32, ts u64, count u32, ids u64 x count``: jobs completed.
7 NACK     ``qid u32, ts u64, visible_at u64, flags u8, count u32,
           error_len u32, error, ids u64 x count``: leases released; the jobs
           are ready again at ``visible_at``.  ``flags`` bit 0: ``error`` is
           set (an empty error is a real value); bit 1: released because the
           connection holding a SESSION or QWORK lease closed (not a nack).
8 EXTEND   ``qid u32, ts u64, deadline u64, count u32, ids u64 x count``:
           leases get a new deadline.
9 IDMARK   ``qid u32, next_id u64``: ids below ``next_id`` may have been
           handed out; a restarted queue never assigns one of them again
           (jobs of memory queues are not logged, their ids still are not
           reused).
10 TXN     ``count u32`` then ``count`` inner records, each
           ``type u8, length u32, body``: applied all or none (MULTI/EXEC).
           The frame's CRC covers them all; inner records carry none.
11 DEAD    ``qid u32, ts u64, reason u8, target u32, count u32, pairs``:
           jobs that must not be delivered again (reason 1 max-deliveries,
           2 nack, 3 expired, 5 parent-failed: a parent it waited for died;
           4 is parent-failed as logs before 2026-11-27 wrote it, where the
           child took its parent's provenance, and replays so).  ``target`` 0: they stay in their queue in
           state dead.  Otherwise they move to queue ``target`` (the
           DEADLETTER queue) with provenance; ``pairs`` is ``count`` x
           ``(id u64, new id u64)``, the new id in the target (0 when target
           is 0).
12 REDRIVE ``qid u32, ts u64, count u32, ids u64 x count``: dead jobs back to
           ready in their own queue, deliveries reset to 0.
13 MOVE    ``qid u32, ts u64, target u32, count u32, pairs`` (as DEAD): ready
           jobs of a dead-letter queue back to their source queue ``target``
           as new ready jobs (provenance dropped, deliveries 0).
14 DEL     ``qid u32, ts u64, count u32, ids u64 x count``: jobs removed
           whatever their state (QDEL, QPURGE).
15 CLOCK   ``offset i64, frozen u8, frozen_at u64``: the DEBUG clock (only
           with enable-debug-command), so a restart keeps test time.
16 EXPIRE  ``qid u32, ts u64, count u32, ids u64 x count`` (as ACK): leases
           that ran out, noticed at ``ts`` (expiry is lazy: when a claim or
           an inspection looked); the jobs are ready again.  Written, never
           waited for: a crash may lose it, and the next look finds the
           lease expired again.
17 PURGE   ``qid u32, ts u64, count u32, ids u64 x count`` (as ACK): jobs
           removed by QPURGE (DEL is QDEL's).
18 SCHEDULE ``qid u32, ts u64`` then the schedule as a UTF-8 JSON object
           (``storage.schedules.Schedule``; its name and payload as latin-1
           text, one character per byte): create or replace it.
19 UNSCHEDULE ``qid u32, ts u64, name_len u16, name``: the schedule is gone.
26 FIRE    ``qid u32, ts u64, next u64, skipped u32, name_len u16, name,
           count u32`` then ``count`` x ``(id u64, tick u64)``: the
           schedule's due ticks at ``ts``: a job ``id`` pushed for each
           ``tick`` (payload and priority the schedule's, ``enqueued_at``
           ``ts``), ``skipped`` ticks that pushed none, and the schedule's
           next tick.  One record, so a crash keeps both or neither.
28 RELEASE ``qid u32, ts u64, count u32, ids u64 x count`` (as ACK): jobs of
           this queue that waited for parents (AFTER) and are ready now, in
           the transaction of the record that finished their last parent.
           For readers of the log: replay derives the release from that
           record and skips this one.
29 PROGRESS ``qid u32, ts u64, id u64, length u32, value``: the holder of
           the job's lease reported its progress (QPROGRESS); written as a
           lease record (``lease-durability``).
27 REPLACE ``qid u32, ts u64, visible_at u64, priority u8, count u32`` then
           ``count`` x ``(id u64, payload_len u32, payload)``: KEY ...
           REPLACE found these ready or delayed jobs: each gets the payload,
           the priority and, unless ``visible_at`` is 0, that ready time.
30 RESULT  ``qid u32, ts u64, id u64, until u64, length u32, value``: the
           job was acked with this result (QACK ... RESULT), kept until
           ``until``; in the ACK's transaction.
31 CANCEL  ``qid u32, ts u64, count u32, ids u64 x count`` (as ACK): QCANCEL
           ended these jobs (state cancelled); children waiting on them die
           in DEAD records of the same transaction.
34 PING    ``ts u64``: nothing happened.  A primary writes one when its
           replication stream (which is its log) has carried nothing for
           ``repl-ping-replica-period`` seconds while replicas follow it,
           so that a replica hears from a primary that is alive but idle
           and can tell a hung or unreachable one by silence
           (``repl-timeout``; docs/replication.md).  Replay skips it.

Readers skip nothing: an unknown type is corruption, so a newer daemon's log
is refused by an older one rather than half-read.

"""

from __future__ import annotations

import functools
import json
import struct

# the containers, defined in storage/frames.py (read here as records.<name> by the rest of the daemon)
from .frames import (FRAME, FRAME_SIZE, MAGIC, SEGMENT_HEADER, SEGMENT_HEADER_SIZE, VERSION,  # noqa: F401
                     FormatError, check_segment_header, frame, iter_frames, next_nonzero, read_frame,
                     reserved_from, segment_header)
from . import job as _job
from .job import Job

BOOT, QUEUE, DROP, PUSH, CLAIM, ACK, NACK, EXTEND, IDMARK, TXN, DEAD, REDRIVE, MOVE, DEL, CLOCK, EXPIRE, PURGE = \
    range(1, 18)
SCHEDULE, UNSCHEDULE, FIRE, REPLACE, RELEASE, PROGRESS, RESULT, CANCEL = 18, 19, 26, 27, 28, 29, 30, 31
PING = 34
# (20-25, 32 and 33: snapshot records)
NAMES = {BOOT: "BOOT", QUEUE: "QUEUE", DROP: "DROP", PUSH: "PUSH", CLAIM: "CLAIM", ACK: "ACK",
         NACK: "NACK", EXTEND: "EXTEND", IDMARK: "IDMARK", TXN: "TXN", DEAD: "DEAD", REDRIVE: "REDRIVE",
         MOVE: "MOVE", DEL: "DEL", CLOCK: "CLOCK", EXPIRE: "EXPIRE", PURGE: "PURGE",
         SCHEDULE: "SCHEDULE", UNSCHEDULE: "UNSCHEDULE", FIRE: "FIRE", REPLACE: "REPLACE",
         RELEASE: "RELEASE", PROGRESS: "PROGRESS", RESULT: "RESULT", CANCEL: "CANCEL", PING: "PING"}
NACK_ERROR, NACK_CLOSED = 1, 2
PUSH_GROUP = 4            # a PUSH job's flags bit: its group follows the key
REASONS = {1: b"max-deliveries", 2: b"nack", 3: b"expired", 4: b"parent-failed", 5: b"parent-failed"}
PARENT_FAILED_AS_PARENT = 4   # (DEAD's reason as written before 2026-11-27: the parent's provenance)
PUSH_AFTER = 8            # a PUSH job's flags bit: its parents follow (AFTER)
PUSH_META = 16            # a PUSH job's flags bit: its META fields follow (after the parents)
REASON_CODES = {b"max-deliveries": 1, b"nack": 2, b"expired": 3, b"parent-failed": 5}     # what is written

_BOOT = struct.Struct("<IQ")
_QUEUE = struct.Struct("<IQB")
_DROP = struct.Struct("<IQ")
_PUSH = struct.Struct("<IQI")
_JOB = struct.Struct("<QQBBIQHI")
_CLAIM = struct.Struct("<IQQQIH")
_ACK = struct.Struct("<IQI")
_NACK = struct.Struct("<IQQBII")
_EXTEND = struct.Struct("<IQQI")
_IDMARK = struct.Struct("<IQ")
_DEAD = struct.Struct("<IQBII")
_MOVE = struct.Struct("<IQII")
_CLOCK = struct.Struct("<qBQ")
_INNER = struct.Struct("<BI")
_TS = struct.Struct("<IQ")
_FIRE = struct.Struct("<IQQIH")
_REPLACE = struct.Struct("<IQQBI")
_REPLACED = struct.Struct("<QI")
_PROGRESS = struct.Struct("<IQQI")
_RESULT = struct.Struct("<IQQQI")
_U16 = struct.Struct("<H")
_AFTER = struct.Struct("<QBI")
_PARENT = struct.Struct("<IQ")
_META_NAME = struct.Struct("<B")
_PING = struct.Struct("<Q")


def _at(layout: struct.Struct, i: int) -> int:
    """Where the ``i``-th field of ``layout`` (little-endian, one letter a
    field, no padding) starts in a body."""
    return struct.calcsize("<" + layout.format[1:1 + i])


# Where a reader that does not decode a whole body (the history's sampling of
# claims, storage/history.py) finds a field: every record about a queue
# starts with its qid (u32) and ts (u64); ACK, CANCEL, EXPIRE (and the
# others shaped as ACK) go on with a count and that many ids.
TS_AT = _at(_TS, 1)
CLAIM_COUNT_AT, CLAIM_CONSUMER_LEN_AT, CLAIM_CONSUMER_AT = _at(_CLAIM, 4), _at(_CLAIM, 5), _CLAIM.size
IDS_COUNT_AT, IDS_AT = _at(_ACK, 2), _ACK.size
NACK_COUNT_AT, NACK_ERROR_LEN_AT, NACK_ERROR_AT = _at(_NACK, 4), _at(_NACK, 5), _NACK.size
DEAD_COUNT_AT, DEAD_PAIRS_AT = _at(_DEAD, 4), _DEAD.size


# The id and count lists of records: one Struct per length, made once (a
# format string built and looked up at every record cost more than the
# pack); functools' cache keeps the lengths used last.
_LENGTHS_KEPT = 1024


@functools.lru_cache(maxsize=_LENGTHS_KEPT)
def _u64s(n: int) -> struct.Struct:
    """The Struct of ``n`` little-endian unsigned 64-bit integers (ids)."""
    return struct.Struct("<%dQ" % n)


@functools.lru_cache(maxsize=_LENGTHS_KEPT)
def _u32s(n: int) -> struct.Struct:
    """The Struct of ``n`` little-endian unsigned 32-bit integers (deliveries)."""
    return struct.Struct("<%dI" % n)



# -- bodies --------------------------------------------------------------------

def boot(epoch: int, ts: int) -> bytes:
    return _BOOT.pack(epoch, ts)


def ping(ts: int) -> bytes:
    return _PING.pack(ts)


def queue(qid: int, ts: int, name: bytes, config: dict) -> bytes:
    return _QUEUE.pack(qid, ts, len(name)) + name + json.dumps(config, sort_keys=True).encode()


def drop(qid: int, ts: int) -> bytes:
    return _DROP.pack(qid, ts)


def push(qid: int, ts: int, jobs) -> bytes:
    """``jobs``: ``Job`` objects (id, visible_at, priority, payload, and the
    rare key, flags, max_deliveries, expire_ms and group in ``extra``)."""
    parts = [_PUSH.pack(qid, ts, len(jobs))]
    pack = _JOB.pack
    append = parts.append
    for j in jobs:
        payload = j.payload
        extra = j.extra             # the rare fields, read once (Job's properties cost a call each)
        if extra is None:
            append(pack(j.id, j.visible_at, j.priority, 0, 0, 0, 0, len(payload)))
        else:
            key = extra.key or b""
            group = extra.group
            after = extra.waiting_for
            fields = extra.meta
            append(pack(j.id, j.visible_at, j.priority,
                        extra.flags | (PUSH_GROUP if group else 0) | (PUSH_AFTER if after else 0)
                        | (PUSH_META if fields is not None else 0),
                        extra.max_deliveries, extra.expire_ms, len(key), len(payload)))
            if key:
                append(key)
            if group:
                append(_U16.pack(len(group)) + group)
            if after:
                append(parents(extra.after_delay, extra.onfail_run, after))
            if fields is not None:
                append(meta(fields))
        append(payload)
    return b"".join(parts)


def meta(fields) -> bytes:
    """A job's META (PUSH records and snapshots): ``count u8``, then each
    field as ``name_len u8, name, value_len u16, value`` (the limits of
    docs/semantics.md §3.12 keep every length within its width)."""
    parts = [_META_NAME.pack(len(fields))]
    for name, value in fields:
        parts.append(_META_NAME.pack(len(name)) + name + _U16.pack(len(value)) + value)
    return b"".join(parts)


def read_meta(b: bytes, off: int) -> tuple:
    """``(((name, value), ...), next offset)``"""
    (count,) = _META_NAME.unpack_from(b, off)
    off += 1
    fields = []
    for _ in range(count):
        (n,) = _META_NAME.unpack_from(b, off)
        name = b[off + 1:off + 1 + n]
        off += 1 + n
        (v,) = _U16.unpack_from(b, off)
        fields.append((name, b[off + 2:off + 2 + v]))
        off += 2 + v
    if off > len(b):
        raise FormatError("META fields are cut short")
    return tuple(fields), off


def parents(after_delay: int, onfail_run: bool, waiting_for) -> bytes:
    """The AFTER part of a job (PUSH records and snapshots): its DELAY from
    release, ONFAIL run, and the parents ``(qid, id)`` it waits for."""
    listed = sorted(waiting_for)
    return (_AFTER.pack(after_delay, 1 if onfail_run else 0, len(listed))
            + b"".join(_PARENT.pack(qid, jid) for qid, jid in listed))


def read_parents(b: bytes, off: int) -> tuple:
    """``((after_delay, onfail_run, {(qid, id)}), next offset)``"""
    after_delay, onfail, count = _AFTER.unpack_from(b, off)
    off += _AFTER.size
    found = set()
    for _ in range(count):
        found.add(_PARENT.unpack_from(b, off))
        off += _PARENT.size
    return (after_delay, bool(onfail), found), off


def claim(qid: int, ts: int, deadline: int, first_seq: int, consumer: bytes, ids, deliveries=None) -> bytes:
    n = len(ids)
    body = (_CLAIM.pack(qid, ts, deadline, first_seq, n, len(consumer)) + consumer
            + _u64s(n).pack(*ids))
    if deliveries is not None:
        body += _u32s(n).pack(*deliveries)
    return body


def ack(qid: int, ts: int, ids) -> bytes:
    n = len(ids)
    return _ACK.pack(qid, ts, n) + _u64s(n).pack(*ids)


def nack(qid: int, ts: int, visible_at: int, error: bytes | None, ids, closed: bool = False) -> bytes:
    n = len(ids)
    err = error or b""
    flags = (NACK_ERROR if error is not None else 0) | (NACK_CLOSED if closed else 0)
    return (_NACK.pack(qid, ts, visible_at, flags, n, len(err)) + err
            + _u64s(n).pack(*ids))


def dead(qid: int, ts: int, reason: int, target: int, pairs) -> bytes:
    n = len(pairs)
    return _DEAD.pack(qid, ts, reason, target, n) + _u64s(2 * n).pack(*(x for p in pairs for x in p))


def redrive(qid: int, ts: int, ids) -> bytes:
    return ack(qid, ts, ids)          # same layout as ACK


def move(qid: int, ts: int, target: int, pairs) -> bytes:
    n = len(pairs)
    return _MOVE.pack(qid, ts, target, n) + _u64s(2 * n).pack(*(x for p in pairs for x in p))


def delete(qid: int, ts: int, ids) -> bytes:
    return ack(qid, ts, ids)          # same layout as ACK (DEL, PURGE)


def expire(qid: int, ts: int, ids) -> bytes:
    return ack(qid, ts, ids)          # same layout as ACK


def release(qid: int, ts: int, ids) -> bytes:
    return ack(qid, ts, ids)          # same layout as ACK


def progress(qid: int, ts: int, jid: int, value: bytes) -> bytes:
    return _PROGRESS.pack(qid, ts, jid, len(value)) + value


def result(qid: int, ts: int, jid: int, until: int, value: bytes) -> bytes:
    return _RESULT.pack(qid, ts, jid, until, len(value)) + value


def cancel(qid: int, ts: int, ids) -> bytes:
    return ack(qid, ts, ids)          # same layout as ACK


def clock(offset: int, frozen: bool, frozen_at: int) -> bytes:
    return _CLOCK.pack(offset, 1 if frozen else 0, frozen_at)


def extend(qid: int, ts: int, deadline: int, ids) -> bytes:
    n = len(ids)
    return _EXTEND.pack(qid, ts, deadline, n) + _u64s(n).pack(*ids)


def idmark(qid: int, next_id: int) -> bytes:
    return _IDMARK.pack(qid, next_id)


def txn(records) -> bytes:
    """``records``: (rtype, body) pairs to apply all or none."""
    parts = [struct.pack("<I", len(records))]
    for rtype, body in records:
        parts.append(_INNER.pack(rtype, len(body)))
        parts.append(body)
    return b"".join(parts)


def schedule(qid: int, ts: int, spec: dict) -> bytes:
    return _TS.pack(qid, ts) + json.dumps(spec, sort_keys=True).encode()


def unschedule(qid: int, ts: int, name: bytes) -> bytes:
    return _TS.pack(qid, ts) + _U16.pack(len(name)) + name


def fire(qid: int, ts: int, name: bytes, next_tick: int, skipped: int, pairs) -> bytes:
    n = len(pairs)
    return (_FIRE.pack(qid, ts, next_tick, skipped, len(name)) + name + struct.pack("<I", n)
            + _u64s(2 * n).pack(*(x for p in pairs for x in p)))


def replace(qid: int, ts: int, visible_at: int, priority: int, pairs) -> bytes:
    """``pairs``: (id, new payload); ``visible_at`` 0 keeps each job's."""
    parts = [_REPLACE.pack(qid, ts, visible_at, priority, len(pairs))]
    for jid, payload in pairs:
        parts.append(_REPLACED.pack(jid, len(payload)))
        parts.append(payload)
    return b"".join(parts)


# -- decoding --------------------------------------------------------------------

def _ids(body: bytes, offset: int, count: int) -> tuple:
    if len(body) != offset + 8 * count:
        raise FormatError("id list length does not match its count")
    return _u64s(count).unpack_from(body, offset)


def decode(rtype: int, body: bytes) -> tuple:
    """Decode a record body into a tuple of its fields (see the module docstring)."""
    try:
        return _DECODERS[rtype](body)
    except KeyError:
        raise FormatError(f"unknown record type {rtype}") from None
    except struct.error as e:
        raise FormatError(f"{NAMES.get(rtype, rtype)} record does not decode: {e}") from None


def _d_boot(b):
    if len(b) != _BOOT.size:
        raise FormatError("BOOT record has the wrong size")
    return _BOOT.unpack(b)


def _d_ping(b):
    if len(b) != _PING.size:
        raise FormatError("PING record has the wrong size")
    return _PING.unpack(b)


def _d_queue(b):
    qid, ts, n = _QUEUE.unpack_from(b)
    name = b[_QUEUE.size:_QUEUE.size + n]
    try:
        config = json.loads(b[_QUEUE.size + n:].decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"QUEUE record config does not decode: {e}") from None
    return qid, ts, name, config


def _d_drop(b):
    return _DROP.unpack(b)


def _d_push(b):
    """``(qid, ts, jobs)``: the jobs as ``push`` was given them, ``Job``
    objects enqueued at ``ts``."""
    qid, ts, count = _PUSH.unpack_from(b)
    jobs, off = _job.push_jobs(b, _PUSH.size, count, ts, _job_at)   # (compiled: the plain jobs made in C)
    if off != len(b):
        raise FormatError("PUSH record length does not match its jobs")
    return qid, ts, jobs


def _job_at(b, off: int, ts: int) -> tuple:
    """The PUSH job at ``off`` of body ``b`` (enqueued at ``ts``), and the
    offset after it."""
    jid, visible_at, prio, flags, maxd, expire_ms, klen, plen = _JOB.unpack_from(b, off)
    off += _JOB.size
    key = group = after = fields = None
    if flags or klen:               # a key, a group, parents, META (most jobs have none of them)
        key, group, after, fields, off = _rare_parts(b, off, flags, klen)
    # visible_at is ts for all but delayed jobs: share that int (32 bytes a job)
    job = Job(jid, b[off:off + plen], prio, ts, ts if visible_at == ts else visible_at, key,
              flags & ~(PUSH_GROUP | PUSH_AFTER | PUSH_META), maxd, expire_ms)
    off += plen
    if group:
        job.group = group
    if after is not None:
        job.after_delay, job.onfail_run, job.waiting_for = after
    if fields is not None:
        job.meta = fields
    return job, off


def _rare_parts(b, off: int, flags: int, klen: int) -> tuple:
    """A PUSH job's key, group, parents and META (each None when absent),
    and the offset of its payload."""
    key = b[off:off + klen] if klen else None
    off += klen
    group = after = fields = None
    if flags & PUSH_GROUP:
        (glen,) = _U16.unpack_from(b, off)
        group = b[off + 2:off + 2 + glen]
        off += 2 + glen
    if flags & PUSH_AFTER:
        after, off = read_parents(b, off)
    if flags & PUSH_META:
        fields, off = read_meta(b, off)
    return key, group, after, fields, off


def push_columns(b) -> tuple:
    """A PUSH body as columns, for readers that want numbers, not jobs (the
    ``leaseq-log`` Spark source): ``(qid, ts, ids, priorities,
    payload_lengths, waits, metas)``; ``waits`` is True when a job has
    parents (AFTER); ``metas`` is None when no job has META, else each
    job's META fields (``((name, value), ...)`` or None).  The same walk
    as ``_d_push`` without making a Job or slicing a payload."""
    qid, ts, count = _PUSH.unpack_from(b)
    off = _PUSH.size
    unpack = _JOB.unpack_from
    size = _JOB.size
    ids, priorities, lengths = [], [], []
    waits = False
    metas = None
    for i in range(count):
        jid, _visible, prio, flags, _maxd, _expire, klen, plen = unpack(b, off)
        off += size + klen
        if flags & PUSH_GROUP:
            off += 2 + _U16.unpack_from(b, off)[0]
        if flags & PUSH_AFTER:
            waits = True
            _after, off = read_parents(b, off)
        if flags & PUSH_META:
            if metas is None:
                metas = [None] * count
            metas[i], off = read_meta(b, off)
        off += plen
        ids.append(jid)
        priorities.append(prio)
        lengths.append(plen)
    if off != len(b):
        raise FormatError("PUSH record length does not match its jobs")
    return qid, ts, ids, priorities, lengths, waits, metas


def _d_claim(b):
    """``(qid, ts, deadline, first_seq, consumer, ids, deliveries)``;
    ``deliveries`` None in a record from before they were written."""
    qid, ts, deadline, first_seq, count, clen = _CLAIM.unpack_from(b)
    off = _CLAIM.size + clen
    consumer = b[_CLAIM.size:off]
    if len(b) == off + 12 * count:
        ids = _u64s(count).unpack_from(b, off)
        return qid, ts, deadline, first_seq, consumer, ids, _u32s(count).unpack_from(b, off + 8 * count)
    return qid, ts, deadline, first_seq, consumer, _ids(b, off, count), None


def _d_ack(b):
    qid, ts, count = _ACK.unpack_from(b)
    return qid, ts, _ids(b, _ACK.size, count)


def _d_nack(b):
    qid, ts, visible_at, flags, count, elen = _NACK.unpack_from(b)
    off = _NACK.size
    error = b[off:off + elen] if flags & NACK_ERROR else None
    return qid, ts, visible_at, error, _ids(b, off + elen, count), bool(flags & NACK_CLOSED)


def _pairs(b: bytes, offset: int, count: int) -> list:
    flat = _ids(b, offset, 2 * count)
    return list(zip(flat[::2], flat[1::2]))


def _d_dead(b):
    qid, ts, reason, target, count = _DEAD.unpack_from(b)
    if reason not in REASONS:
        raise FormatError(f"DEAD record has unknown reason {reason}")
    return qid, ts, reason, target, _pairs(b, _DEAD.size, count)


def _d_move(b):
    qid, ts, target, count = _MOVE.unpack_from(b)
    return qid, ts, target, _pairs(b, _MOVE.size, count)


def _d_clock(b):
    if len(b) != _CLOCK.size:
        raise FormatError("CLOCK record has the wrong size")
    offset, frozen, frozen_at = _CLOCK.unpack(b)
    return offset, bool(frozen), frozen_at


def _d_extend(b):
    qid, ts, deadline, count = _EXTEND.unpack_from(b)
    return qid, ts, deadline, _ids(b, _EXTEND.size, count)


def _d_idmark(b):
    return _IDMARK.unpack(b)


def _d_txn(b):
    (count,) = struct.unpack_from("<I", b)
    off = 4
    inner = []
    for _ in range(count):
        rtype, length = _INNER.unpack_from(b, off)
        off += _INNER.size
        if off + length > len(b) or rtype == TXN:
            raise FormatError("TXN record is malformed")
        inner.append((rtype, b[off:off + length]))
        off += length
    if off != len(b):
        raise FormatError("TXN record length does not match its records")
    return (inner,)


def _d_schedule(b):
    qid, ts = _TS.unpack_from(b)
    try:
        spec = json.loads(b[_TS.size:].decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"SCHEDULE record does not decode: {e}") from None
    return qid, ts, spec


def _d_unschedule(b):
    qid, ts = _TS.unpack_from(b)
    (n,) = _U16.unpack_from(b, _TS.size)
    name = b[_TS.size + 2:_TS.size + 2 + n]
    if _TS.size + 2 + n != len(b):
        raise FormatError("UNSCHEDULE record length does not match its name")
    return qid, ts, name


def _d_fire(b):
    """``(qid, ts, name, next, skipped, pairs)``"""
    qid, ts, next_tick, skipped, n = _FIRE.unpack_from(b)
    off = _FIRE.size
    name = b[off:off + n]
    (count,) = struct.unpack_from("<I", b, off + n)
    return qid, ts, name, next_tick, skipped, _pairs(b, off + n + 4, count)


def _d_replace(b):
    """``(qid, ts, visible_at, priority, [(id, payload)])``"""
    qid, ts, visible_at, priority, count = _REPLACE.unpack_from(b)
    off = _REPLACE.size
    pairs = []
    for _ in range(count):
        jid, n = _REPLACED.unpack_from(b, off)
        off += _REPLACED.size
        pairs.append((jid, b[off:off + n]))
        off += n
    if off != len(b):
        raise FormatError("REPLACE record length does not match its jobs")
    return qid, ts, visible_at, priority, pairs


def _d_progress(b):
    """``(qid, ts, id, value)``"""
    qid, ts, jid, n = _PROGRESS.unpack_from(b)
    if _PROGRESS.size + n != len(b):
        raise FormatError("PROGRESS record length does not match its value")
    return qid, ts, jid, b[_PROGRESS.size:]


def _d_result(b):
    """``(qid, ts, id, until, value)``"""
    qid, ts, jid, until, n = _RESULT.unpack_from(b)
    if _RESULT.size + n != len(b):
        raise FormatError("RESULT record length does not match its value")
    return qid, ts, jid, until, b[_RESULT.size:]


_DECODERS = {BOOT: _d_boot, QUEUE: _d_queue, DROP: _d_drop, PUSH: _d_push, CLAIM: _d_claim,
             ACK: _d_ack, NACK: _d_nack, EXTEND: _d_extend, IDMARK: _d_idmark, TXN: _d_txn,
             DEAD: _d_dead, REDRIVE: _d_ack, MOVE: _d_move, DEL: _d_ack, CLOCK: _d_clock, EXPIRE: _d_ack,
             PURGE: _d_ack, SCHEDULE: _d_schedule, UNSCHEDULE: _d_unschedule, FIRE: _d_fire,
             REPLACE: _d_replace, RELEASE: _d_ack, PROGRESS: _d_progress, RESULT: _d_result, CANCEL: _d_ack,
             PING: _d_ping}
