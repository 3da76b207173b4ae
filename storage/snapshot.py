"""Snapshots: the live state in one file, so the log can be cut.

A snapshot holds what replaying segments 1..``covers`` would build: every
queue with its options, counters and id marks, every job of a queue that is
not a memory queue (state, lease token and deadline, deliveries, dedupe key,
provenance, retention), the boot epoch, the DEBUG clock and the id marks of
dropped queues.  Its bytes are defined in ``storage.snapformat``: plain
ready and delayed jobs column by column in SNAP_PLAIN records, every other
job field by field in SNAP_JOBS.  Recovery (``storage.datadir``) loads the
newest snapshot that reads whole and replays only the segments after it.

``write`` is called in a forked child of the daemon (``daemon.snapshots``),
over the state frozen at the fork, so serving never waits for it.  It
fdatasyncs the file every ``SYNC_BYTES`` (4 MiB, as Redis's
``rdb-save-incremental-fsync``): left to one fsync at the end, the
hundreds of MB written back at once held the daemon's own log fsyncs
(and so every fsync queue's replies) for 200 ms and more.  It writes
``snap-<covers>.snap.tmp``, fsyncs it, renames it into place and fsyncs the
directory: a crash at any point leaves either the whole new snapshot or none
(a stray ``.tmp`` is removed at the next start).

``load`` builds a fresh ``Store`` from a file, reading it a frame at a
time; a SNAP_PLAIN record becomes its jobs column by column and its ready
and delayed ids go to their indexes in bulk (``indexes.Bulk``).  Any defect
(a checksum, a short file, a missing SNAP_END) raises ``CorruptSnapshot``
naming the file and offset, and the caller falls back to the previous
snapshot.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter, itemgetter

from crc32c import crc32c

from . import records, snapformat
from .bands import band
from .config import MEMORY, QueueConfig
from .indexes import Bulk
from .job import CANCELLED, COMPLETED, DEAD, DELAYED, IN_FLIGHT, READY, WAITING, Job, Provenance, payload_sizes
from .queue import Counters, Queue
from .schedules import Schedule
from .store import Store
from .wal import fsync_directory, numbered_files

PREFIX = "snap-"
SUFFIX = ".snap"
TEMPORARY = ".tmp"

STATE_CODES = {DELAYED: 1, READY: 2, IN_FLIGHT: 3, DEAD: 4, COMPLETED: 5, WAITING: 6, CANCELLED: 7}
STATES = {code: state for state, code in STATE_CODES.items()}
FRAME_JOBS = 1000          # at most this many jobs per SNAP_JOBS frame ...
PLAIN_FRAME_JOBS = 4096    # ... or per SNAP_PLAIN frame ...
FRAME_BYTES = 1 << 20      # ... and about this many bytes (of payloads, in SNAP_PLAIN)
SYNC_BYTES = 4 << 20       # the file is fdatasynced every this many bytes while it is written
_ID, _ENQUEUED, _VISIBLE, _DELIVERIES, _PAYLOAD = map(attrgetter, ("id", "enqueued_at", "visible_at", "deliveries",
                                                                   "payload"))
_SET_STATE, _SET_REQUEUED, _SET_DELIVERIES = Job.state.__set__, Job.requeued.__set__, Job.deliveries.__set__
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
COUNTERS = ("pushed", "acked", "nacked", "lease_expired", "dead_lettered", "duplicates")


class CorruptSnapshot(RuntimeError):
    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"snapshot {path} is unreadable at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


@dataclass
class SnapshotInfo:
    path: str
    covers: int          # the last segment number it holds
    ts: int              # when it was taken (ms epoch)
    queues: int
    jobs: int
    bytes: int


def snapshot_name(covers: int) -> str:
    return f"{PREFIX}{covers:020d}{SUFFIX}"


def list_snapshots(directory: str) -> list[tuple[int, str]]:
    """``(covers, path)`` of every snapshot file, oldest first."""
    return numbered_files(directory, PREFIX, SUFFIX)


def remove_temporaries(directory: str) -> list[str]:
    """Delete snapshots a crash left half-written; return their names."""
    gone = []
    for name in os.listdir(directory):
        if name.startswith(PREFIX) and name.endswith(SUFFIX + TEMPORARY):
            os.unlink(os.path.join(directory, name))
            gone.append(name)
    return gone


# -- writing -------------------------------------------------------------------------------

def frames(store: Store, tally: list):
    """The framed records of a snapshot of ``store``, in file order;
    ``tally`` gets the number of queues and of jobs written."""
    queues = jobs = 0
    yield records.frame(snapformat.SNAP_STORE, snapformat.snap_store(
        store.epoch, store.lease_seq, store.next_qid, store.clock, store.dropped_marks))
    for q in store.queues.values():
        queues += 1
        c = q.counters
        yield records.frame(snapformat.SNAP_QUEUE, snapformat.snap_queue(
            q.qid, q.next_id, q.id_mark, tuple(getattr(c, n) for n in COUNTERS), q.name, q.config.to_json()))
        if q.schedules:
            yield records.frame(snapformat.SNAP_SCHEDULES, snapformat.snap_schedules(
                q.qid, [s.to_json() for s in q.schedules.values()]))
        if q.durability is MEMORY:
            continue
        for rtype, body, n in _job_frames(q):
            yield records.frame(rtype, body)
            jobs += n
        if q.results:
            yield records.frame(snapformat.SNAP_RESULTS, snapformat.snap_results(q.qid, q.results.entries))
        groups = q.indexes.groups
        if groups is not None:
            yield records.frame(snapformat.SNAP_GROUPS, snapformat.snap_groups(q.qid, groups.next_turn,
                                                                         groups.turn_table()))
    tally[:] = [queues, jobs]
    yield records.frame(snapformat.SNAP_END, snapformat.snap_end(queues, jobs))


def _job_frames(q):
    """``(record type, body, jobs)`` of every job of ``q``, in ascending id
    order: runs of plain jobs in SNAP_PLAIN, the others in SNAP_JOBS."""
    plain: list[Job] = []
    kinds: list[int] = []
    other: list[bytes] = []
    size = 0
    for job in q.jobs.values():
        state = job.state
        if (job.extra is None and job.token is None and job.consumer is None and not job.deadline
                and (state is READY or state is DELAYED)):
            if other:
                yield snapformat.SNAP_JOBS, snapformat.snap_jobs(q.qid, other), len(other)
                other, size = [], 0
            plain.append(job)
            kinds.append(job.priority | (snapformat.PLAIN_REQUEUED if job.requeued else 0)
                         | (snapformat.PLAIN_DELAYED if state is DELAYED else 0))
            size += job.payload_len
            if len(plain) >= PLAIN_FRAME_JOBS or size >= FRAME_BYTES:
                yield snapformat.SNAP_PLAIN, _plain(q.qid, plain, kinds), len(plain)
                plain, kinds, size = [], [], 0
            continue
        if plain:
            yield snapformat.SNAP_PLAIN, _plain(q.qid, plain, kinds), len(plain)
            plain, kinds, size = [], [], 0
        bits = ((snapformat.SNAP_REQUEUED if job.requeued else 0)
                | (snapformat.SNAP_ERROR if job.last_error is not None else 0)
                | (snapformat.SNAP_ORIGIN if job.origin is not None else 0)
                | (snapformat.SNAP_GROUP if job.group else 0)
                | (snapformat.SNAP_TICK if job.schedule is not None else 0)
                | (snapformat.SNAP_AFTER if job.waiting_for else 0))
        dead_code = records.REASON_CODES[job.dead_reason] if job.dead_reason is not None else 0
        part = snapformat.snap_job(job, STATE_CODES[state], bits, dead_code)
        other.append(part)
        size += len(part)
        if len(other) >= FRAME_JOBS or size >= FRAME_BYTES:
            yield snapformat.SNAP_JOBS, snapformat.snap_jobs(q.qid, other), len(other)
            other, size = [], 0
    if plain:
        yield snapformat.SNAP_PLAIN, _plain(q.qid, plain, kinds), len(plain)
    if other:
        yield snapformat.SNAP_JOBS, snapformat.snap_jobs(q.qid, other), len(other)


def _plain(qid: int, jobs: list[Job], kinds: list[int]) -> bytes:
    return snapformat.snap_plain(qid, list(map(_ID, jobs)), list(map(_ENQUEUED, jobs)), list(map(_VISIBLE, jobs)),
                                 kinds, list(map(_DELIVERIES, jobs)), list(map(_PAYLOAD, jobs)))


def write(store: Store, directory: str, covers: int, ts: int, still_wanted=lambda: True) -> SnapshotInfo:
    """Write a snapshot of ``store`` covering segments up to ``covers``,
    atomically.  ``still_wanted()`` is asked now and then; when it says no,
    the temporary file is removed and ``InterruptedError`` raised (the daemon
    that forked us is gone)."""
    path = os.path.join(directory, snapshot_name(covers))
    tmp = path + TEMPORARY
    size = 0
    tally: list = []
    try:
        with open(tmp, "wb", buffering=1 << 20) as f:
            head = snapformat.snapshot_header(covers, ts)
            f.write(head)
            size += len(head)
            unsynced = 0
            for n, framed in enumerate(frames(store, tally)):
                f.write(framed)
                size += len(framed)
                unsynced += len(framed)
                if unsynced >= SYNC_BYTES:
                    f.flush()
                    os.fdatasync(f.fileno())
                    unsynced = 0
                if n % 256 == 255 and not still_wanted():
                    raise InterruptedError("snapshot abandoned")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_directory(directory)
    return SnapshotInfo(path, covers, ts, tally[0], tally[1], size)


# -- reading ---------------------------------------------------------------------------------

def load(path: str) -> tuple[Store, SnapshotInfo]:
    """A fresh store holding the snapshot at ``path`` (journal off)."""
    try:
        with open(path, "rb") as f:
            return _load(path, f)
    except OSError as e:
        raise CorruptSnapshot(path, 0, e.strerror or str(e)) from None


def _load(path: str, f) -> tuple[Store, SnapshotInfo]:
    size = os.fstat(f.fileno()).st_size
    try:
        version, covers, ts = snapformat.check_snapshot_header(f.read(snapformat.SNAPSHOT_HEADER_SIZE))
    except records.FormatError as e:
        raise CorruptSnapshot(path, 0, str(e)) from None
    loading = _Loading(version)
    offset = snapformat.SNAPSHOT_HEADER_SIZE
    try:
        for offset, rtype, body in _frames(f, offset, size):
            loading.record(rtype, body)
            offset += records.FRAME_SIZE + len(body)
    except records.FormatError as e:
        raise CorruptSnapshot(path, offset, str(e)) from None
    if loading.ended is None:
        reason = "a record fails its checksum or is cut short" if offset < size else "SNAP_END is missing"
        raise CorruptSnapshot(path, offset, reason)
    if offset != size:
        raise CorruptSnapshot(path, offset, "bytes follow SNAP_END")
    queues, jobs = loading.ended
    if queues != len(loading.store.queues) or jobs != sum(len(p.jobs) for p in loading.pending.values()):
        raise CorruptSnapshot(path, offset, "SNAP_END counts do not match the records")
    return loading.finish(), SnapshotInfo(path, covers, ts, queues, jobs, size)


class _Loading:
    """A snapshot's records as they are read: one step a record type
    (``STEPS``), the SNAP_STORE first and once, nothing after SNAP_END;
    ``finish`` hands the jobs to their queues."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.store = Store()
        self.pending: dict[int, _Pending] = {}
        self.turns: dict[int, tuple] = {}        # qid -> (next_turn, {group: turn})
        self.ended = None
        self.started = False

    def record(self, rtype: int, body: bytes) -> None:
        if self.ended is not None:
            raise records.FormatError("a record follows SNAP_END")
        if self.started == (rtype == snapformat.SNAP_STORE):
            raise records.FormatError("SNAP_STORE must come first, and once")
        self.started = True
        step = self.STEPS.get(rtype)
        if step is None or (rtype == snapformat.SNAP_PLAIN and self.version < 2):
            raise records.FormatError(f"record type {rtype} does not belong in a version {self.version} snapshot")
        step(self, body)

    def queue(self, qid: int, record: str) -> Queue:
        """The queue ``qid`` a record of type ``record`` names."""
        q = self.store.by_qid.get(qid)
        if q is None:
            raise records.FormatError(f"{record} for unknown queue {qid}")
        return q

    def snap_store(self, body: bytes) -> None:
        store = self.store
        store.epoch, store.lease_seq, store.next_qid, store.clock, store.dropped_marks = \
            snapformat.decode_snap_store(body)

    def snap_queue(self, body: bytes) -> None:
        _queue(self.store, snapformat.decode_snap_queue(body))

    def snap_plain(self, body: bytes) -> None:
        _plain_jobs(self.store, self.pending, snapformat.decode_snap_plain(body))

    def snap_jobs(self, body: bytes) -> None:
        qid, rows = snapformat.iter_snap_jobs(body, self.version)
        q = self.queue(qid, "SNAP_JOBS")
        _pending(self.pending, qid).others(_jobs(rows, q.name))

    def snap_schedules(self, body: bytes) -> None:
        qid, listed = snapformat.decode_snap_schedules(body)
        self.store.timetable.restore(self.queue(qid, "SNAP_SCHEDULES"), [Schedule.from_json(d) for d in listed])

    def snap_results(self, body: bytes) -> None:
        qid, rows = snapformat.decode_snap_results(body)
        results = self.queue(qid, "SNAP_RESULTS").results
        for jid, until, value, reason in rows:
            results.put(jid, until, value, reason)

    def snap_groups(self, body: bytes) -> None:
        qid, next_turn, table = snapformat.decode_snap_groups(body)
        self.queue(qid, "SNAP_GROUPS")
        self.turns[qid] = (next_turn, table)

    def snap_end(self, body: bytes) -> None:
        self.ended = snapformat.decode_snap_end(body)

    STEPS = {snapformat.SNAP_STORE: snap_store, snapformat.SNAP_QUEUE: snap_queue,
             snapformat.SNAP_PLAIN: snap_plain, snapformat.SNAP_JOBS: snap_jobs,
             snapformat.SNAP_SCHEDULES: snap_schedules, snapformat.SNAP_RESULTS: snap_results,
             snapformat.SNAP_GROUPS: snap_groups, snapformat.SNAP_END: snap_end}

    def finish(self) -> Store:
        store = self.store
        for qid, got in self.pending.items():
            q = store.by_qid[qid]
            q.restore(got.jobs, got.ids, got.payload_bytes, got.bulk)
            store.deps.add(q, got.bulk.single)          # (a plain job waits for nothing)
        for qid, (next_turn, table) in self.turns.items():
            store.by_qid[qid].use_groups().set_turns(table, next_turn)
        return store


def _frames(f, offset: int, size: int):
    """``records.iter_frames`` over the file ``f`` of ``size`` bytes, one
    frame read at a time: the whole file is never in memory at once (reading
    it whole into a fresh buffer first cost a tenth of the load)."""
    head_size, unpack = records.FRAME_SIZE, records.FRAME.unpack
    f.seek(offset)
    while offset + head_size <= size:
        head = f.read(head_size)
        if len(head) != head_size:          # (the file shrank under us)
            return
        crc, length, rtype = unpack(head)
        end = offset + head_size + length
        if end > size:                      # (a length that runs past the file: read nothing)
            return
        body = f.read(length)
        if len(body) != length or crc32c(body, crc32c(head[4:])) != crc:
            return
        yield offset, rtype, body
        offset = end


def _queue(store: Store, fields) -> None:
    qid, next_id, id_mark, counters, name, config = fields
    q = store.create_queue(name, QueueConfig.from_json(config), 0, qid)
    q.next_id, q.id_mark = next_id, id_mark
    q.counters = Counters(*counters)


class _Pending:
    """The jobs of one queue read so far (ascending ids), for ``Queue.restore``."""

    __slots__ = ("jobs", "ids", "payload_bytes", "bulk")

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.ids: list[int] = []
        self.payload_bytes = 0
        self.bulk = Bulk()

    def others(self, jobs: list[Job]) -> None:
        """Jobs of a SNAP_JOBS record: indexed one by one."""
        self.jobs += jobs
        self.ids += map(_ID, jobs)
        self.payload_bytes += payload_sizes(jobs)
        self.bulk.single += jobs


def _pending(pending: dict, qid: int) -> _Pending:
    got = pending.get(qid)
    if got is None:
        got = pending[qid] = _Pending()
    return got


def _plain_jobs(store: Store, pending: dict, decoded: tuple) -> None:
    """The jobs of a SNAP_PLAIN record, built column by column (no Python
    step per job but where a run is a job long), and their ids sorted for
    the ready and delayed indexes (``_place``)."""
    qid, ids, enqueued, visible, (kinds, runs), (deliveries, lengths), payloads, payload_bytes = decoded
    if qid not in store.by_qid:
        raise records.FormatError(f"SNAP_PLAIN for unknown queue {qid}")
    expand = snapformat.expand
    priority, requeued = snapformat.PLAIN_PRIORITY, snapformat.PLAIN_REQUEUED
    distinct = set(kinds)

    def column(field):                          # one entry per job of a field of the kind
        return expand(list(map({k: field(k) for k in distinct}.__getitem__, kinds)), runs)

    jobs = list(map(Job, ids, payloads, column(lambda k: k & priority), enqueued, visible))
    _all(_SET_STATE, jobs, column(lambda k: DELAYED if k & snapformat.PLAIN_DELAYED else READY))
    if any(k & requeued for k in distinct):
        _all(_SET_REQUEUED, jobs, column(lambda k: bool(k & requeued)))
    if any(deliveries):
        _all(_SET_DELIVERIES, jobs, expand(deliveries, lengths))
    got = _pending(pending, qid)
    if len(kinds) > len(ids) // 8:              # short runs: a step per job
        _place_each(got.bulk, distinct, expand(kinds, runs), ids, visible)
    else:                                       # long runs: a slice per run
        at = 0
        for kind, n in zip(kinds, runs):
            _place(got.bulk, kind, ids[at:at + n], visible[at:at + n])
            at += n
    got.jobs += jobs
    got.ids += ids
    got.payload_bytes += payload_bytes


def _band(kind: int) -> int:
    """The ready band of a SNAP_PLAIN job of ``kind``."""
    return band(kind & snapformat.PLAIN_PRIORITY, kind & snapformat.PLAIN_REQUEUED)


def _place(bulk: Bulk, kind: int, ids: list, visible: list) -> None:
    """A run of jobs of one kind to ``bulk``: ready ids by band, delayed ids by visible_at."""
    if kind & snapformat.PLAIN_DELAYED:
        for when, pairs in groupby(zip(visible, ids), key=_FIRST):
            bulk.delayed.setdefault(when, []).extend(map(_SECOND, pairs))
    else:
        bulk.ready.setdefault(_band(kind), []).extend(ids)


def _place_each(bulk: Bulk, distinct: set, kinds: list, ids: list, visible: list) -> None:
    """``_place`` job by job (``kinds`` one entry per job)."""
    ready = {kind: None if kind & snapformat.PLAIN_DELAYED else bulk.ready.setdefault(_band(kind), []).append
             for kind in distinct}
    delayed = bulk.delayed
    for kind, jid, when in zip(kinds, ids, visible):
        add = ready[kind]
        if add is None:
            delayed.setdefault(when, []).append(jid)
        else:
            add(jid)


def _all(setter, jobs: list, values) -> None:
    """``setter(job, value)`` for each pair, at C speed (``deque`` drains the map)."""
    deque(map(setter, jobs, values), 0)


def _jobs(rows, queue_name: bytes) -> list[Job]:
    """The jobs of a SNAP_JOBS record of the queue ``queue_name``."""
    out = []
    append = out.append
    states = STATES
    times: dict[int, int] = {}       # jobs pushed together share their times: one int for all
    share = times.setdefault
    requeued_bit, error_bit = snapformat.SNAP_REQUEUED, snapformat.SNAP_ERROR
    for (jid, enq, vis, deadline, retain, expire, maxd, deliveries, prio, flags, state, bits, dead,
         key, token, consumer, error, payload, origin, group, scheduled, after, progress, fields) in rows:
        enq = share(enq, enq)
        job = Job(jid, payload, prio, enq, enq if vis == enq else share(vis, vis), key, flags, maxd, expire)
        try:
            job.state = states[state]
        except KeyError:
            raise records.FormatError(f"job {jid} has unknown state {state}") from None
        if deliveries:
            job.deliveries = deliveries
        if token is not None or deadline:         # a lease, current or expired and not yet taken over
            job.token = token
            job.deadline = deadline
        if consumer is not None:                  # who had it last (kept after an ack too)
            job.consumer = consumer
        if dead:
            job.dead_reason = records.REASONS.get(dead)
        if bits:                                  # the rare fields: only jobs that have them pay
            job.requeued = bool(bits & requeued_bit)
            if bits & error_bit:
                job.last_error = error
            if origin is not None:
                job.origin = o = Provenance(*origin)
                if o.parent is not None and o.src_id == jid and o.source == queue_name:
                    # a child that died in place after a parent keeps that parent for its
                    # later deaths (``Deaths.apply_dead``), as the live job does
                    job.failed_parent = Provenance(o.parent[0], o.parent[1], 0, b"parent-failed")
            if group:
                job.group = group
            if scheduled is not None:
                job.schedule, job.tick = scheduled
            if after is not None:
                job.after_delay, job.onfail_run, job.waiting_for = after
        if progress is not None:                  # (in the flags byte, not in bits)
            job.progress = progress
        if fields is not None:                    # META (in the flags byte too)
            job.meta = fields
        if retain:
            job.retain_until = retain
        append(job)
    return out
