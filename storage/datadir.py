"""A data directory, opened: its lock, the store recovered from its snapshot
and log, the write-ahead log new records go to, and compaction.

``DataDir.open`` locks the directory (one daemon per directory), loads the
newest snapshot that reads whole (``storage.snapshot``), replays the segments
after it into that store (``storage.recovery``), starts a new segment, and
makes the store's journal write to it; the new run's BOOT record is fsynced
before it returns.  ``close`` records exact id marks, fsyncs and lets go of
the lock.  A crash skips ``close``: the next ``open`` recovers from what
reached the disk.

Which snapshot.  The candidates are the snapshots on disk, newest first, and
last "no snapshot" (replay from the oldest segment).  A candidate is usable
when every segment after the one it covers is present.  One that fails to
read is logged and the next is tried, so a damaged snapshot costs only time
as long as the one before it and its segments are kept.  When no usable
candidate reads, ``open`` refuses to start and names the damaged file and
offset; ``repair`` then starts from the best snapshot that does read (or from
none) and replays what segments remain, logging what is lost.

Compaction keeps exactly that fallback: after a snapshot S(k) is written,
``compact`` removes the snapshots before S(k-1) and the segments S(k-1)
covers, or moves those segments to ``archive_dir`` when it is set.  On disk
are therefore two snapshots and the log written since the older one.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import time
from dataclasses import dataclass, field

from . import records, snapshot
from .history import History
from .journal import Journal
from .recovery import CorruptLog, RecoveryReport, Replayer, first_gap, read_log
from .store import Store
from .wal import Faults, WriteAheadLog, fsync_directory, list_segments, lock_directory, segment_name

log = logging.getLogger(__name__)


class DataDir:
    def __init__(self, directory: str, lock_fd: int, segment_size: int = 64 << 20,
                 lease_sync: bool = False) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.lease_sync = lease_sync
        self.store = Store()
        self.wal: WriteAheadLog | None = None   # None until ``resume``, and after a disk fault
        self.report = RecoveryReport()
        self.recovery_seconds = 0.0
        self.loaded: snapshot.SnapshotInfo | None = None   # the snapshot recovery started from
        self.archive_dir = ""                # where compaction moves covered segments ("" = delete them)
        self.faults = Faults()               # errors to pretend the disk returns (DEBUG FAULT)
        self._pending = (None, 0)            # the log and its bytes_written when a snapshot began
        self._lock_fd = lock_fd
        self._since_base = 0                 # log bytes after the newest snapshot, when recovered
        self._since_mark = 0                 # wal.bytes_written when that snapshot began
        self.history = History(os.path.join(directory, "history"))   # per queue and minute (storage/history.py)

    @classmethod
    def open(cls, directory: str, now: int, segment_size: int = 64 << 20, lease_sync: bool = False,
             repair: bool = False, boot: bool = True) -> "DataDir":
        """Lock ``directory`` (created if missing), recover from its snapshot
        and log, and start a new segment (``boot``: see ``resume``)."""
        os.makedirs(directory, exist_ok=True)
        lock_fd = lock_directory(directory)
        d = cls(directory, lock_fd, segment_size, lease_sync)
        try:
            d.recover(repair)
            d.history.load()
            d.resume(now, boot)
        except BaseException:
            d.wal = None
            d.release_lock()
            raise
        return d

    def recover(self, repair: bool = False) -> None:
        """Build ``store`` afresh from the newest usable snapshot and the
        segments after it.  Writes nothing, except what a torn tail or
        ``repair`` needs; the store logs nothing until ``resume``."""
        t0 = time.monotonic()
        directory = self.directory
        for name in snapshot.remove_temporaries(directory):
            log.warning("removed %s: a snapshot the previous run did not finish", name)
        # Recovery builds millions of objects and no garbage cycles: the cyclic
        # collector would only rescan the growing heap (half of the time a
        # million jobs take to load).  Off while we build, as it was after.
        collecting = gc.isenabled()
        gc.disable()
        try:
            choice = choose_snapshot(directory, repair)
            store, loaded = choice.store, choice.loaded
            report = read_log(directory, Replayer(store).apply, repair=repair,
                              after=loaded.covers if loaded else 0)
            if repair:
                seal_after_repair(directory, choice, report)
        finally:
            if collecting:
                gc.enable()
        self.store, self.loaded, self.report = store, loaded, report
        self.recovery_seconds = seconds = time.monotonic() - t0
        self._since_base = report.bytes
        self._since_mark = 0
        read = (f"snapshot {os.path.basename(loaded.path)} ({loaded.jobs} jobs, {loaded.bytes} bytes) and "
                if loaded else "no snapshot and ")
        log.info("recovered %d queues from %s%d segments (%d records, %d bytes; truncated %d torn bytes%s) "
                 "in %.3f s", len(store.queues), read, report.segments, report.records,
                 report.bytes, report.truncated_bytes,
                 f", skipped {len(report.skipped)} corrupt ranges" if report.skipped else "", seconds)

    def resume(self, now: int, boot: bool = True) -> None:
        """Start writing: a new segment whose first record, the run's BOOT, is
        fsynced before this returns.  Raises OSError (and leaves nothing
        behind) when the disk does not take it.  Without ``boot`` (a
        replica: it writes only its primary's records, and the epoch is the
        primary's) the store's journal stays off and the segment starts empty."""
        numbers = [n for n, _p in list_segments(self.directory)]
        first = max(numbers + [self.loaded.covers if self.loaded else 0]) + 1
        wal = WriteAheadLog(self.directory, self.segment_size, first)
        wal.faults = self.faults
        try:
            if boot:
                self.store.journal = self.journal(wal)
                self.store.boot(now)
            wal.flush_and_sync()
        except OSError:
            self.store.journal = Journal()
            wal.discard()
            raise
        self.wal = wal
        self._since_mark = 0
        log.info("writing to %s; boot epoch %d", segment_name(first), self.store.epoch)

    def journal(self, wal) -> Journal:
        """The journal of a store that writes to ``wal``: with the history
        unless ``history-hours`` is 0."""
        return Journal(wal, self.lease_sync, self.history.hook())

    def install(self, path: str, now: int) -> None:
        """A replica's full sync: ``path``, a temporary file in this
        directory, is its primary's snapshot.  It replaces what the directory
        held (the log is closed, every segment and snapshot removed), the
        store is loaded from it, and a new segment follows it, without a
        BOOT (``resume``).  A snapshot that does not read changes nothing
        (``snapshot.CorruptSnapshot``).  A crash part way leaves either the
        old files or fewer: the next start recovers what is there, and the
        replica syncs again."""
        store, info = snapshot.load(path)
        if self.wal is not None:
            self.wal.close()
            self.wal = None
        for _number, old in list_segments(self.directory) + snapshot.list_snapshots(self.directory):
            os.unlink(old)
        final = os.path.join(self.directory, snapshot.snapshot_name(info.covers))
        os.replace(path, final)
        fsync_directory(self.directory)
        self.store, self.report = store, RecoveryReport()
        self.loaded = snapshot.SnapshotInfo(final, info.covers, info.ts, info.queues, info.jobs, info.bytes)
        self._since_base = self._since_mark = 0
        self.resume(now, boot=False)

    def cut_back(self, fsync_failed: bool) -> list[str]:
        """A write or fsync failed: stop writing and cut the log back to what
        is safe (``WriteAheadLog.cut_back``).  The store no longer matches
        the disk; ``recover`` rebuilds it."""
        wal = self.wal
        self.wal = None
        self.store.journal = Journal()
        if wal is None:
            return []
        self._since_base += wal.bytes_written - self._since_mark
        return wal.cut_back(fsync_failed)

    @property
    def closed(self) -> bool:
        return self._lock_fd < 0

    @property
    def lock_fd(self) -> int:
        return self._lock_fd

    def close(self) -> None:
        """A clean stop: exact id marks, everything fsynced, the lock released."""
        if self.closed:
            return
        if self.wal is not None:
            self.store.record_id_marks()
            self.wal.close()
        self.release_lock()

    def stream_bytes_from(self, first: int) -> int | None:
        """The bytes of records in segment ``first`` and every later one (a
        replica's stream from where its anchor says), or None when they do
        not add up: ``first`` not there (an anchor names a segment that
        exists: it is written once the segment is), a segment missing after
        it, or ``first`` folded into the snapshot recovery started from.  (Recovery cut each segment at
        its last record, so a segment's records are its size less its
        header.)"""
        if self.loaded is not None and self.loaded.covers >= first:
            return None
        numbers, held = [], 0
        for number, path in list_segments(self.directory):
            if number >= first:
                numbers.append(number)
                held += os.path.getsize(path) - records.SEGMENT_HEADER_SIZE
        if not numbers or numbers != list(range(first, first + len(numbers))):
            return None
        return held

    def relock(self) -> None:
        """The log's files were removed under this daemon (daemon/dirwatch.py):
        make the directory again if it went with them (and fsync its parent,
        so that it stays), and take its lock again if the lock's file went
        too.  Raises OSError while it cannot (say, a file now has its name),
        or ``DirectoryLocked`` if another leaseq took the new one."""
        directory = os.path.abspath(self.directory)
        if not os.path.isdir(directory):
            os.makedirs(directory)
            fsync_directory(os.path.dirname(directory))
        if self._lock_fd >= 0 and os.fstat(self._lock_fd).st_nlink > 0:
            return
        fd = lock_directory(directory)
        self.release_lock()
        self._lock_fd = fd

    def release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- snapshots and compaction ---------------------------------------------------------

    def begin_snapshot(self) -> int:
        """Write out and fsync what is buffered and start a new segment; return
        the number of the last segment the snapshot about to be taken covers.
        The state of the store at this moment is exactly what those segments
        hold, and all of it is durable."""
        wal = self.wal
        wal.flush_and_sync()        # a snapshot never holds a change the log could still lose
        self._pending = (wal, wal.bytes_written)
        return wal.rotate()

    def snapshot_written(self) -> None:
        """The snapshot begun last is on disk: count log bytes from its start."""
        wal, mark = self._pending
        self._since_base = 0
        self._since_mark = mark if wal is self.wal else (self.wal.bytes_written if self.wal else 0)

    def take_snapshot(self, now: int) -> snapshot.SnapshotInfo:
        """Take a snapshot in this process and thread, then compact (the
        daemon writes it in a forked child instead: ``daemon.snapshots``)."""
        covers = self.begin_snapshot()
        info = snapshot.write(self.store, self.directory, covers, now)
        self.snapshot_written()
        self.compact()
        return info

    @property
    def log_bytes_since_snapshot(self) -> int:
        written = self.wal.bytes_written if self.wal is not None else self._since_mark
        return self._since_base + written - self._since_mark

    def compact(self) -> list[str]:
        """Keep the newest snapshot and the one before it with every segment
        after it; remove older snapshots and delete (or archive) the segments
        the older kept snapshot covers.  Returns the segment names let go."""
        snaps = snapshot.list_snapshots(self.directory)
        if len(snaps) < 2:
            return []
        fallback = snaps[-2][0]
        for _covers, path in snaps[:-2]:
            os.unlink(path)
        gone = []
        for number, path in list_segments(self.directory):
            if number > fallback:
                break
            try:
                if self.archive_dir:
                    _archive(path, self.archive_dir)
                else:
                    os.unlink(path)
            except OSError as e:
                log.error("cannot %s %s: %s; it stays until the next snapshot",
                          "archive" if self.archive_dir else "delete", path, e)
                break
            gone.append(segment_name(number))
        fsync_directory(self.directory)
        return gone

    def info_fields(self) -> list[tuple[str, object]]:
        r = self.report
        return [("dir", os.path.abspath(self.directory))] + (self.wal.info_fields() if self.wal else []) + [
            ("recovery_seconds", f"{self.recovery_seconds:.3f}"),
            ("recovery_snapshot", os.path.basename(self.loaded.path) if self.loaded else "none"),
            ("recovery_records", r.records),
            ("recovery_truncated_bytes", r.truncated_bytes),
            ("boot_epoch", self.store.epoch),
        ]


@dataclass
class SnapshotChoice:
    """What ``choose_snapshot`` decided: the store to replay the log into, the
    snapshot it came from (None: the log alone), the damaged snapshots passed
    over, and (under repair) the snapshot files moved aside."""
    store: Store
    loaded: snapshot.SnapshotInfo | None
    damaged: list = field(default_factory=list)     # CorruptSnapshot, newest first
    moved: list = field(default_factory=list)       # (path, size) renamed to <path>.corrupt


def seal_after_repair(directory: str, choice: "SnapshotChoice", report: RecoveryReport) -> snapshot.SnapshotInfo | None:
    """--repair started from less than a whole log (damaged snapshots moved
    aside, or segments missing): write a snapshot of what it recovered,
    covering every segment present, so that the next start begins there and
    needs no --repair.  Returns it, or None when nothing was lost."""
    after = choice.loaded.covers if choice.loaded else 0
    numbers = [n for n, _p in list_segments(directory)]
    if not choice.moved and first_gap(after, [n for n in numbers if n > after], directory) is None:
        return None
    info = snapshot.write(choice.store, directory, max(numbers + [after]), int(time.time() * 1000))
    log.warning("--repair: wrote %s holding what was recovered, so the next start begins there",
                os.path.basename(info.path))
    return info


def choose_snapshot(directory: str, repair: bool, modify: bool = True) -> SnapshotChoice:
    """The newest usable snapshot, loaded (see the module docstring).  With
    ``modify`` False (``leaseq check`` without ``--repair``) no snapshot is
    moved aside."""
    present = {n for n, _p in list_segments(directory)}
    newest = max(present, default=0)
    snaps = snapshot.list_snapshots(directory)
    damaged: list[snapshot.CorruptSnapshot] = []
    for covers, path in reversed(snaps):
        if not all(n in present for n in range(covers + 1, newest + 1)):
            continue                      # its log is gone: it cannot be the one
        try:
            store, info = snapshot.load(path)
        except snapshot.CorruptSnapshot as e:
            log.error("%s; trying the snapshot before it", e)
            damaged.append(e)
            continue
        _report_fallback(damaged, os.path.basename(path))
        return SnapshotChoice(store, info, damaged)
    if not snaps or 1 in present or not present:
        _report_fallback(damaged, "the log alone")
        return SnapshotChoice(Store(), None, damaged)
    if repair:
        return _repair(snaps, damaged, modify)
    if damaged:
        e = damaged[0]
        raise CorruptLog(e.path, e.offset, f"{e.reason}, and no older snapshot with its segments is left to "
                                           f"fall back on")
    covers = snaps[-1][0]
    missing = next(n for n in range(covers + 1, newest + 1) if n not in present)
    raise CorruptLog(os.path.join(directory, segment_name(missing)), 0,
                     "this segment is missing (the newest snapshot needs it)")


def _repair(snaps: list, damaged: list, modify: bool = True) -> SnapshotChoice:
    """--repair with no usable snapshot: the newest one that reads, with the
    segments that remain after it (what lay between is lost), or the log alone."""
    moved: list = []

    def aside(path: str) -> None:
        moved.append((path, os.path.getsize(path)))
        if modify:
            os.replace(path, path + ".corrupt")

    for e in damaged:
        aside(e.path)
        if modify:
            log.error("--repair: moved the damaged snapshot aside to %s.corrupt", e.path)
    gone = {e.path for e in damaged}
    for _covers, path in reversed(snaps):
        if path not in gone and os.path.exists(path):
            try:
                store, info = snapshot.load(path)
            except snapshot.CorruptSnapshot as e:
                aside(path)
                damaged.append(e)
                if modify:
                    log.error("--repair: %s; moved aside", e)
                continue
            log.error("--repair: starting from %s although segments after it are missing: "
                      "their changes are lost", os.path.basename(path))
            return SnapshotChoice(store, info, damaged, moved)
    log.error("--repair: no snapshot reads; starting from the segments that remain")
    return SnapshotChoice(Store(), None, damaged, moved)


def _report_fallback(damaged: list, used: str) -> None:
    if damaged:
        log.warning("recovering from %s instead of the damaged %s", used,
                    ", ".join(os.path.basename(e.path) for e in damaged))


def _archive(path: str, archive_dir: str) -> None:
    """Move a segment into ``archive_dir`` (durably; never over another file)."""
    os.makedirs(archive_dir, exist_ok=True)
    target = os.path.join(archive_dir, os.path.basename(path))
    if os.path.exists(target):
        raise FileExistsError(f"{target} exists")
    try:
        os.link(path, target)            # same filesystem: no copy
    except OSError:
        tmp = target + ".tmp"
        shutil.copyfile(path, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    fsync_directory(archive_dir)
    os.unlink(path)
