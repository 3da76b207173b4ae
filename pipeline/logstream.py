"""``spark.readStream.format("leaseq-log").load(paths)``: the events of
live data directories as a Structured Streaming source (the Python Data
Source API's ``DataSourceStreamReader``), each event exactly once.

Paths, sources and the rows are ``leaseq-log``'s (leaseq.pipeline.logsource).

Offsets
-------
An offset is, per source, a position in its log: ``[segment, byte]``,
everything before segment number ``segment`` and, within it, the records
that end at or before ``byte``.  Spark keeps it in the query's checkpoint
as JSON::

    {"v": 1, "sources": {"pod-a": [12, 40960], "pod-b": [3, 24]}}

``[0, 0]`` is a source with no segment yet.  A micro-batch is the records
between two offsets: one input partition per segment it touches.  A
restarted query plans its unfinished batch again from the same two offsets
and reads the same bytes, so with an exactly-once sink (files, Delta ...)
every event arrives once.

How the end of a batch is chosen (``latestOffset``):

- A segment is final once a newer one holds a record (the daemon seals a
  segment before it writes into the next) or once two newer ones exist.
  A final segment is read to its end.
- The segment being written is read up to the end of its last whole record:
  a record still being written, or torn by a kill -9, fails its checksum
  and is left for a later batch (it is emitted once whole; a torn one never
  is: the restarted daemon cuts it off and writes on in a new segment).
- Compaction moves segments to ``archive-dir``: a source's directories are
  all searched for a segment, so list the archive with the data directory
  (``/mnt/pods/*/data,/mnt/pods/*/archive``).  A segment the stream still
  needs that is in none of them (compaction deleted it: no archive-dir) is
  an error naming it; nothing is skipped silently.
- A glob is matched again at every batch: a new pod's directory joins the
  stream from its first segment; a source the paths no longer give keeps
  its offset.
- A log that starts over below the offset (a replica's full sync replaces
  its segments with its primary's snapshot; a new data directory) is an
  error: it is not the history the offset points into.

Option ``startingOffsets``: ``earliest`` (default: every segment on disk,
oldest first) or ``latest`` (only what is written after the query starts).
"""

from __future__ import annotations

import os

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from leaseq.storage import records, snapshot

from .logsource import (LogError, _decoded, _flatten, arrow_batches, segment_names, segments_of,
                        snapshot_names, sources)

VERSION = 1
START = records.SEGMENT_HEADER_SIZE


class Slice(InputPartition):
    """The records of one segment between two byte offsets (``end`` None:
    to the end of a final segment)."""

    def __init__(self, source: str, dirs: list, number: int, name: str, start: int, end, room_ok: bool,
                 names: dict) -> None:
        super().__init__((source, number, start, end))
        self.source = source
        self.dirs = dirs
        self.number = number
        self.name = name
        self.start = start
        self.end = end
        self.room_ok = room_ok
        self.names = names


def records_end(data: bytes, start: int) -> int:
    """Where the last whole record from ``start`` on ends."""
    end = start
    for offset, _rtype, body in records.iter_frames(data, start):
        end = offset + records.FRAME_SIZE + len(body)
    return end


def _read_file(dirs: list, name: str) -> bytes | None:
    """A segment's bytes, looked for in every directory of its source
    (twice: compaction may move it from one to another meanwhile)."""
    for _ in range(2):
        for d in dirs:
            try:
                with open(os.path.join(d, name), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                continue
    return None


class LogStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict) -> None:
        self.options = options
        self.starting = (options.get("startingoffsets") or "earliest").strip().lower()
        if self.starting not in ("earliest", "latest"):
            raise LogError(f"leaseq-log: startingOffsets must be earliest or latest, not {self.starting!r}")
        self.sources = sources(options)         # fails at once on a bad path or pattern
        self._ends: dict = {}                   # (source, number) -> records end: the live segment
        self._snap_names: dict = {}             # snapshot path -> {qid: name} (a snapshot never changes)
        self._seg_names: dict = {}              # (source, number) -> [scanned to, {qid: name}, final]

    # -- offsets --------------------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Match the paths again (a glob may find new pods).  A directory
        that went away keeps its source's offset."""
        try:
            fresh = sources(self.options)
        except LogError:
            return
        for source, dirs in fresh.items():
            known = self.sources.setdefault(source, [])
            known.extend(d for d in dirs if d not in known)
        self.sources = dict(sorted(self.sources.items()))

    def _first(self, segments: dict) -> list:
        return [next(iter(segments)), START] if segments else [0, 0]

    def _last(self, source: str, segments: dict) -> list:
        """The end of the source's records as they are now (module docstring)."""
        if not segments:
            return [0, 0]
        numbers = list(segments)
        live = numbers[-1]
        if len(numbers) > 1 and not self._holds_a_record(segments[live]):
            live = numbers[-2]
        return [live, self._live_end(source, live, segments[live])]

    def _holds_a_record(self, path: str) -> bool:
        try:
            with open(path, "rb") as f:
                data = f.read(START + 64 * 1024)
        except FileNotFoundError:
            return True             # compacted away: surely not the one being written
        if len(data) <= START:
            return False
        got = records.read_frame(data, START)
        return got is not None or len(data) == START + 64 * 1024

    def _live_end(self, source: str, number: int, path: str) -> int:
        """The end of the last whole record of the segment being written,
        reading only what follows the end found last time."""
        end = self._ends.get((source, number), START)
        name = os.path.basename(path)
        for _ in range(2):
            for d in self.sources[source]:
                try:
                    with open(os.path.join(d, name), "rb") as f:
                        if end == START and len(f.read(START)) < START:
                            return START            # created, header not yet (fully) written
                        f.seek(end)
                        rest = f.read()
                except FileNotFoundError:
                    continue
                end += records_end(rest, 0)
                self._ends = {k: v for k, v in self._ends.items() if k[0] != source or k[1] >= number}
                self._ends[(source, number)] = end
                return end
        return end

    def initialOffset(self) -> dict:
        out = {}
        for source, dirs in self.sources.items():
            segments = segments_of(dirs)
            out[source] = self._last(source, segments) if self.starting == "latest" else self._first(segments)
        return {"v": VERSION, "sources": out}

    def latestOffset(self, start: dict, limit) -> dict:
        self._refresh()
        begun = _positions(start)
        out = dict(begun)           # a source the paths no longer give keeps its place (it may come back)
        for source, dirs in self.sources.items():
            segments = segments_of(dirs)
            at = begun.get(source) or self._first(segments)
            if segments and at[0] > max(segments):
                raise LogError(
                    f"leaseq-log: the log of source {source!r} starts over below the stream's offset (segment "
                    f"{at[0]}; its newest is {max(segments)}): a replica's full sync or a new data directory "
                    "replaced it; read it with a new checkpoint")
            end = self._last(source, segments)
            out[source] = max(end, at)
        return {"v": VERSION, "sources": dict(sorted(out.items()))}

    # -- batches --------------------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict):
        begun, until = _positions(start), _positions(end)
        parts = []
        for source, (last_seg, last_pos) in sorted(until.items()):
            if begun.get(source) == [last_seg, last_pos]:
                continue
            dirs = self.sources.get(source)
            if dirs is None:
                raise LogError(f"leaseq-log: the checkpoint names source {source!r}, which the paths no longer "
                               f"give ({self.options.get('path')})")
            segments = segments_of(dirs)
            first_seg, first_pos = begun.get(source) or self._first(segments)
            if first_seg == 0:
                first_seg, first_pos = self._first(segments)
            if last_seg == 0 or [first_seg, first_pos] >= [last_seg, last_pos]:
                continue
            names = None
            newest = max(segments) if segments else last_seg
            for number in range(first_seg, last_seg + 1):
                path = segments.get(number)
                if path is None:
                    raise LogError(
                        f"leaseq-log: segment {number} of source {source!r} is in none of "
                        f"{', '.join(dirs)}: compaction removed it before the stream read it (set the daemon's "
                        "archive-dir and give that directory too)")
                lo = first_pos if number == first_seg else START
                hi = last_pos if number == last_seg else None
                if hi is not None and lo >= hi:
                    continue
                if names is None:
                    names = self._names(source, dirs, segments, newest)
                parts.append(Slice(source, dirs, number, os.path.basename(path), lo, hi, number >= newest - 1,
                                   names))
        return parts

    def _names(self, source: str, dirs: list, segments: dict, newest: int) -> dict:
        """qid -> name, as ``queue_names`` gives, from what was scanned
        before and the records written since."""
        names: dict = {}
        for d in dirs:
            for _covers, path in snapshot.list_snapshots(d):
                if path not in self._snap_names:
                    self._snap_names[path] = snapshot_names(path)
                names.update(self._snap_names[path])
        for number, path in segments.items():
            entry = self._seg_names.setdefault((source, number), [START, {}, False])
            if not entry[2]:
                data = _read_file(dirs, os.path.basename(path)) or b""
                for offset, rtype, body in records.iter_frames(data, entry[0]):
                    entry[1].update(segment_names(rtype, body))
                    entry[0] = offset + records.FRAME_SIZE + len(body)
                entry[2] = number < newest - 1
            names.update(entry[1])
        return names

    def read(self, partition: Slice):
        yield from arrow_batches(self._records(partition), partition.names, partition.source)

    def _records(self, partition: Slice):
        data = _read_file(partition.dirs, partition.name)
        if data is None:
            raise LogError(f"leaseq-log: segment {partition.name} of source {partition.source!r} is gone from "
                           f"{', '.join(partition.dirs)}")
        where = f"{partition.source}: {partition.name}"
        try:
            records.check_segment_header(data)
        except records.FormatError as e:
            raise LogError(f"{where} at offset 0: {e}") from None
        offset = partition.start
        hi = len(data) if partition.end is None else partition.end
        for at, rtype, body in records.iter_frames(data[:hi], partition.start):
            for inner_type, inner_body in _flatten(rtype, body):
                yield _decoded(inner_type, inner_body)
            offset = at + records.FRAME_SIZE + len(body)
        if offset == hi:
            return
        if partition.end is None and partition.room_ok and records.reserved_from(data, offset):
            return
        raise LogError(f"{where} at offset {offset}: a record fails its checksum or is cut short")

    def commit(self, end: dict) -> None:
        """Nothing to release: the files are only read."""


def _positions(offset: dict) -> dict:
    if not isinstance(offset, dict) or offset.get("v") != VERSION or not isinstance(offset.get("sources"), dict):
        raise LogError(f"leaseq-log: not an offset of this source: {offset!r}")
    return {source: list(pos) for source, pos in offset["sources"].items()}
