"""The ``leaseq-log`` data source: data directories' logs as a DataFrame of
lifecycle events, one row per job per record, in batch
(``spark.read``) or as a stream (``spark.readStream``: leaseq.pipeline.logstream).

``load(paths)``: ``paths`` is one directory or several, separated by
commas, each a data directory or an ``archive-dir``; an entry with glob
characters (``/mnt/pods/*/data``) stands for the directories it matches.
Each directory belongs to a *source* (a pod, a daemon): by default the name
of its parent directory (``/mnt/pods/pod-a/data`` and
``/mnt/pods/pod-a/archive`` are both ``pod-a``), or, with the option
``sourcePattern`` (a regular expression searched in the directory's
absolute path), its first group, or the whole match when it has none.  The
directories of one source are read together: a segment found in two of
them is read once.  Job and queue numbers are a source's own, so the
``source`` column is part of a job's identity.  One input partition per
segment file.

Every record is decoded by ``storage.records``, the daemon's own code.
Records name queues by number; the names come from the QUEUE records of all
the source's segments and from the SNAP_QUEUE records of its snapshots (a
queue created before compaction is named only there), gathered once when
the read is planned.  A record that fails its checksum ends the segment:
at the end of the newest segment that is a torn tail, or a record still
being written by a live daemon, and is skipped; anywhere else the read
fails naming file and offset.

Which records become which events (docs/spark.md lists the columns):

========  ==============================================================
record    event rows
========  ==============================================================
PUSH      ``push``, one per job (priority, payload_bytes, meta: its META
          as a map of text), and after it ``wait`` for a job pushed with
          parents (AFTER)
FIRE      ``push`` of each job a schedule's tick pushed (priority and
          payload_bytes null: they are the schedule's), a ``fire`` row
          for it (consumer: the schedule's name), and one ``skip`` row
          (id null, consumer: the schedule's name, deliveries: how many
          ticks pushed nothing) when ticks were skipped
REPLACE   ``replace``, one per job KEY ... REPLACE changed (priority and
          payload_bytes: the new ones)
RELEASE   ``unblock``: a job that waited for parents is ready now (its last
          parent was acked, deleted or dropped); not ``release``, which
          names a lease given back by a closed connection
CLAIM     ``claim``, one per job (consumer; deliveries: this one included,
          null in records from before 0.2)
EXPIRE    ``expire``: a lease that ran out, when the daemon noticed it
ACK       ``ack``
RESULT    ``result`` (payload_bytes: the result's size), after the ``ack``
CANCEL    ``cancel``, one per job (QCANCEL)
NACK      ``nack`` (error), or ``release`` when the holding connection
          closed (a SESSION or QWORK lease)
EXTEND    ``extend``
DEAD      ``dead`` (error: the reason, max-deliveries | nack | expired),
          and with a DEADLETTER queue a ``push`` of the copy there (its
          new id; priority and payload_bytes null)
REDRIVE   ``redrive`` (dead jobs back to ready in their queue)
MOVE      ``redrive`` on the dead-letter queue, and a ``push`` of the new
          job in the source queue
DEL       ``delete`` (QDEL)
PURGE     ``purge`` (QPURGE), one per job
DROP      ``purge``, one row with no id: QDROP, the queue and all its jobs
========  ==============================================================

SCHEDULE and UNSCHEDULE records (definitions), PROGRESS records and PING
records (a primary's keepalive) give no rows.

Expiry is lazy: an ``expire`` row has the time the daemon noticed the
lease had run out (a claim or an inspection looked), not its deadline.
``deliveries`` is set on ``claim`` rows; other rows leave it null.
``meta`` is set on the ``push`` and ``wait`` rows of PUSH records only:
a schedule's jobs and dead-letter copies carry their META too, but their
``push`` rows leave it null, as they leave priority.
"""

from __future__ import annotations

import glob
import os
import re

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from leaseq.storage import records, snapformat, snapshot
from leaseq.storage.wal import list_segments

SCHEMA = ("ts timestamp, queue string, event string, id long, deliveries int, consumer string, "
          "priority int, payload_bytes long, error string, source string, meta map<string,string>")


class LogError(ValueError):
    """A path that is not a readable data directory, or a corrupt segment."""


def directories(raw: str) -> list[str]:
    """The directories ``raw`` names: comma-separated, each a directory or
    a glob (absolute, each once, in the order given; a glob's matches
    sorted).  A glob may match nothing (a pod's archive-dir appears at its
    first compaction) as long as the whole list gives a directory."""
    entries = [p.strip() for p in (raw or "").split(",") if p.strip()]
    if not entries:
        raise LogError("leaseq-log needs a path: load('/var/lib/leaseq') (several: comma-separated or a glob)")
    found: list[str] = []
    for entry in entries:
        if glob.has_magic(entry):
            matches = sorted(m for m in glob.glob(entry) if os.path.isdir(m))
        elif not os.path.isdir(entry):
            raise LogError(f"leaseq-log: {entry} is not a directory")
        else:
            matches = [entry]
        for m in matches:
            m = os.path.abspath(m)
            if m not in found:
                found.append(m)
    if not found:
        raise LogError(f"leaseq-log: {', '.join(entries)} matches no directory")
    return found


def source_of(directory: str, pattern: re.Pattern | None) -> str:
    """The source a directory belongs to: its parent's name, or what
    ``pattern`` finds in its absolute path (the first group, else the match)."""
    if pattern is None:
        return os.path.basename(os.path.dirname(directory.rstrip(os.sep))) or os.sep
    m = pattern.search(directory)
    if m is None:
        raise LogError(f"leaseq-log: sourcePattern {pattern.pattern!r} does not match {directory}")
    name = m.group(1) if pattern.groups else m.group(0)
    if not name:
        raise LogError(f"leaseq-log: sourcePattern {pattern.pattern!r} finds an empty name in {directory}")
    return name


def sources(options: dict) -> dict[str, list[str]]:
    """source -> its directories, from the options' ``path`` and
    ``sourcePattern`` (Spark lower-cases option names)."""
    raw_pattern = options.get("sourcepattern")
    pattern = None
    if raw_pattern:
        try:
            pattern = re.compile(raw_pattern)
        except re.error as e:
            raise LogError(f"leaseq-log: sourcePattern {raw_pattern!r} is not a regular expression: {e}") from None
    grouped: dict[str, list[str]] = {}
    for d in directories(options.get("path") or options.get("paths") or ""):
        grouped.setdefault(source_of(d, pattern), []).append(d)
    return dict(sorted(grouped.items()))


def segments_of(dirs: list[str]) -> dict[int, str]:
    """number -> path of every segment in ``dirs`` (the first directory
    holding a number wins: a segment in two of them is read once)."""
    found: dict[int, str] = {}
    for d in dirs:
        for number, path in list_segments(d):
            found.setdefault(number, path)
    return dict(sorted(found.items()))


class Segment(InputPartition):
    def __init__(self, path: str, newest: bool, names: dict, room_ok: bool, source: str) -> None:
        super().__init__(path)
        self.path = path
        self.newest = newest
        self.room_ok = room_ok      # may end in the room the daemon reserves (the newest two)
        self.names = names          # qid -> queue name
        self.source = source


class LeaseqLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "leaseq-log"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> "LogReader":
        return LogReader(dict(self.options))

    def streamReader(self, schema):
        from .logstream import LogStreamReader
        return LogStreamReader(dict(self.options))


class LogReader(DataSourceReader):
    def __init__(self, options: dict) -> None:
        self.sources = sources(options)

    def partitions(self):
        parts = []
        for source, dirs in self.sources.items():
            segments = list(segments_of(dirs).values())
            names = queue_names(dirs, segments)
            last = len(segments) - 1
            parts += [Segment(path, i == last, names, i >= last - 1, source) for i, path in enumerate(segments)]
        return parts

    def read(self, partition: Segment):
        yield from arrow_batches(segment_records(partition.path, partition.newest, partition.room_ok),
                                 partition.names, partition.source)


def queue_names(directories: list[str], segment_paths: list[str]) -> dict[int, str]:
    """qid -> name from every snapshot's SNAP_QUEUE and every segment's QUEUE
    record (later ones win: a re-created queue gets a new number anyway)."""
    names: dict[int, str] = {}
    for d in directories:
        for _covers, path in snapshot.list_snapshots(d):
            names.update(snapshot_names(path))
    for path in segment_paths:
        for rtype, body in _frames(path, records.SEGMENT_HEADER_SIZE):
            names.update(segment_names(rtype, body))
    return names


def snapshot_names(path: str) -> dict[int, str]:
    names = {}
    for rtype, body in _frames(path, snapformat.SNAPSHOT_HEADER_SIZE):
        if rtype == snapformat.SNAP_QUEUE:
            qid, _n, _m, _c, name, _config = snapformat.decode_snap_queue(body)
            names[qid] = name.decode(errors="replace")
    return names


def segment_names(rtype: int, body: bytes) -> dict[int, str]:
    """The queue a log record names (a QUEUE record, alone or in a TXN)."""
    names = {}
    for inner_type, inner_body in _flatten(rtype, body):
        if inner_type == records.QUEUE:
            qid, _ts, name, _config = records.decode(inner_type, inner_body)
            names[qid] = name.decode(errors="replace")
    return names


def _frames(path: str, start: int):
    with open(path, "rb") as f:
        data = f.read()
    for _off, rtype, body in records.iter_frames(data, start):
        yield rtype, body


def _flatten(rtype: int, body: bytes):
    if rtype == records.TXN:
        yield from records.decode(rtype, body)[0]
    else:
        yield rtype, body


def segment_records(path: str, newest: bool, room_ok: bool = True):
    """``(type, fields)`` of every record of one segment file, a TXN's
    records one by one (see the module docstring for where it may end)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        records.check_segment_header(data)
    except records.FormatError as e:
        if newest and len(data) < records.SEGMENT_HEADER_SIZE:
            return                          # created, header not yet (fully) written
        raise LogError(f"{path} at offset 0: {e}") from None
    offset = records.SEGMENT_HEADER_SIZE
    for at, rtype, body in records.iter_frames(data, offset):
        for inner_type, inner_body in _flatten(rtype, body):
            yield _decoded(inner_type, inner_body)
        offset = at + records.FRAME_SIZE + len(body)
    if offset < len(data) and not newest and not (room_ok and records.reserved_from(data, offset)):
        raise LogError(f"{path} at offset {offset}: a record fails its checksum or is cut short")


EVENTS = {records.ACK: "ack", records.REDRIVE: "redrive", records.DEL: "delete", records.PURGE: "purge",
          records.EXPIRE: "expire", records.RELEASE: "unblock", records.CANCEL: "cancel"}


BATCH_ROWS = 65_536
_ARROW = None
FAST_PUSH = -records.PUSH           # a PUSH whose jobs have no parents, as ``records.push_columns``


def _decoded(rtype: int, body: bytes) -> tuple:
    """``(type, records.decode(...))``, but a PUSH of jobs without parents
    (AFTER) is ``(FAST_PUSH, records.push_columns(...))``: its rows need no
    ``Job`` made per job."""
    if rtype == records.PUSH:
        cols = records.push_columns(body)
        if not cols[5]:
            return FAST_PUSH, cols
    return rtype, records.decode(rtype, body)


def arrow_batches(recs, names: dict, source: str, size: int = BATCH_ROWS):
    """The rows of ``recs`` (``(type, fields)`` records) as Arrow record
    batches of ``SCHEMA``: Spark takes them as they are instead of
    converting row by row.  The columns are filled a record at a time: a
    record of many jobs (QPUSHMANY, QCLAIM COUNT, QACK of many tokens)
    extends each column at once; other records go through ``_rows``."""
    import pyarrow as pa

    global _ARROW
    if _ARROW is None:
        _ARROW = ([c.split()[0] for c in SCHEMA.split(", ")],
                  (pa.string(), pa.string(), pa.int64(), pa.int32(), pa.string(), pa.int32(), pa.int64(),
                   pa.string()), pa.map_(pa.string(), pa.string()))
    columns, types, map_type = _ARROW
    cols: list = [[] for _ in range(10)]
    ts, queue, event, ids, deliveries, consumer, priority, size_, error, meta = cols
    for rtype, f in recs:
        n = 0
        if rtype == FAST_PUSH:
            n = len(f[2])
            ids.extend(f[2])
            priority.extend(f[3])
            size_.extend(f[4])
            for c in (deliveries, consumer, error):
                c.extend([None] * n)
            meta.extend([None] * n if f[6] is None else map(_meta, f[6]))
            name = "push"
        elif rtype == records.CLAIM:
            n = len(f[5])
            ids.extend(f[5])
            deliveries.extend(f[6] or [None] * n)
            consumer.extend([f[4].decode(errors="replace")] * n)
            for c in (priority, size_, error, meta):
                c.extend([None] * n)
            name = "claim"
        elif rtype in EVENTS:
            n = len(f[2])
            ids.extend(f[2])
            for c in (deliveries, consumer, priority, size_, error, meta):
                c.extend([None] * n)
            name = EVENTS[rtype]
        else:
            for row in _rows(rtype, f, names):
                for c, v in zip(cols, row):
                    c.append(v)
        if n:
            qid = f[0]
            ts.extend([f[1]] * n)
            queue.extend([names.get(qid, f"#{qid}")] * n)
            event.extend([name] * n)
        if len(ts) >= size:
            yield _batch(pa, cols, columns, types, map_type, source)
            cols = [[] for _ in range(10)]
            ts, queue, event, ids, deliveries, consumer, priority, size_, error, meta = cols
    if ts:
        yield _batch(pa, cols, columns, types, map_type, source)


def _batch(pa, cols: list, columns: list, types: tuple, map_type, source: str):
    stamps = pa.array(cols[0], pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
    arrays = [stamps] + [pa.array(c, t) for c, t in zip(cols[1:9], types)]
    arrays.append(pa.array([source] * len(cols[0]), pa.string()))
    arrays.append(pa.array(cols[9], map_type))
    return pa.RecordBatch.from_arrays(arrays, names=columns)


def _rows(rtype: int, f: tuple, names: dict):
    """(ts, queue, event, id, deliveries, consumer, priority, payload_bytes, error, meta) rows; ts in ms."""
    if rtype in (records.BOOT, records.QUEUE, records.IDMARK, records.CLOCK, records.SCHEDULE, records.UNSCHEDULE,
                 records.PING):
        return
    qid, ts = f[0], f[1]
    queue = names.get(qid, f"#{qid}")
    if rtype == records.PUSH:
        for job in f[2]:
            meta = _meta(job.meta)
            yield ts, queue, "push", job.id, None, None, job.priority, len(job.payload), None, meta
            if job.waiting_for is not None:
                yield ts, queue, "wait", job.id, None, None, job.priority, len(job.payload), None, meta
    elif rtype == records.FIRE:
        _q, _t, name, _next, skipped, pairs = f
        schedule = name.decode(errors="replace")
        for jid, _tick in pairs:
            yield ts, queue, "push", jid, None, None, None, None, None, None
            yield ts, queue, "fire", jid, None, schedule, None, None, None, None
        if skipped:
            yield ts, queue, "skip", None, skipped, schedule, None, None, None, None
    elif rtype == records.REPLACE:
        _q, _t, _visible, priority, pairs = f
        for jid, payload in pairs:
            yield ts, queue, "replace", jid, None, None, priority, len(payload), None, None
    elif rtype == records.CLAIM:
        consumer = f[4].decode(errors="replace")
        deliveries = f[6] or (None,) * len(f[5])          # None: a record from before they were written
        for jid, n in zip(f[5], deliveries):
            yield ts, queue, "claim", jid, n, consumer, None, None, None, None
    elif rtype == records.NACK:
        _q, _t, _visible, error, ids, closed = f
        text = None if error is None else error.decode(errors="replace")
        for jid in ids:
            yield ts, queue, "release" if closed else "nack", jid, None, None, None, None, text, None
    elif rtype == records.EXTEND:
        for jid in f[3]:
            yield ts, queue, "extend", jid, None, None, None, None, None, None
    elif rtype == records.DEAD:
        reason = records.REASONS[f[2]].decode()
        target = names.get(f[3], f"#{f[3]}") if f[3] else None
        for jid, new in f[4]:
            yield ts, queue, "dead", jid, None, None, None, None, reason, None
            if target is not None:          # its copy arrives in the DEADLETTER queue
                yield ts, target, "push", new, None, None, None, None, reason, None
    elif rtype == records.MOVE:
        source = names.get(f[2], f"#{f[2]}")
        for jid, new in f[3]:
            yield ts, queue, "redrive", jid, None, None, None, None, None, None
            yield ts, source, "push", new, None, None, None, None, None, None
    elif rtype in EVENTS:
        event = EVENTS[rtype]
        for jid in f[2]:
            yield ts, queue, event, jid, None, None, None, None, None, None
    elif rtype == records.DROP:
        yield ts, queue, "purge", None, None, None, None, None, None, None
    elif rtype == records.RESULT:
        yield ts, queue, "result", f[2], None, None, None, len(f[4]), None, None


def _meta(fields) -> list | None:
    """A job's META as the ``meta`` column holds it: (name, value) pairs of
    text (bytes that are not UTF-8 read with replacement characters)."""
    if fields is None:
        return None
    return [(n.decode(errors="replace"), v.decode(errors="replace")) for n, v in fields]
