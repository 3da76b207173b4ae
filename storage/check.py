"""``leaseq check DIR [--repair]``: verify a data directory offline.

``check`` runs the daemon's own recovery over a directory, without serving
it: the snapshot choice of ``storage.datadir`` (``choose_snapshot``), the log
reader of ``storage.recovery`` (``read_log``) and its ``Replayer``, on a store
whose journal writes nothing.  It returns a ``CheckReport``: the snapshot
used and any damaged one passed over, the segments read after it, a torn
tail, and the jobs of every queue.

Without ``repair`` nothing in the directory changes (``modify=False``): a
torn tail is reported, not truncated, a half-written snapshot is reported,
not removed.  The one write is the directory lock (``storage.wal``), taken
as the daemon takes it, so a running daemon and a check never overlap; a
directory without a ``LOCK`` file has never been opened by a daemon and is
checked without creating one.  Corruption raises the daemon's own
exceptions: ``CorruptLog`` (a bad record in a sealed segment, a missing
segment, a damaged snapshot with nothing to fall back on).

With ``repair`` the directory is changed exactly as ``leaseq serve
--repair`` would change it at start-up (torn tail truncated, unreadable
ranges cut out of their segment, damaged snapshots and unreadable segments
moved aside as ``.corrupt``, half-written snapshots removed), and the
report lists what was dropped.  Nothing is appended to the log: the next
start of the daemon writes its BOOT record as usual.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from . import snapshot
from .datadir import choose_snapshot, seal_after_repair
from .recovery import CorruptLog, RecoveryReport, Replayer, read_log
from .store import Store
from .wal import DirectoryLocked, list_segments, lock_directory

LOCK = "LOCK"


class CheckError(RuntimeError):
    """The directory cannot be checked (missing, not a directory, in use)."""


@dataclass
class QueueCounts:
    name: str
    durability: str
    ready: int
    delayed: int
    in_flight: int
    dead: int
    completed: int
    waiting: int = 0
    cancelled: int = 0


@dataclass
class Dropped:
    path: str
    offset: int
    length: int
    what: str


@dataclass
class CheckReport:
    directory: str
    repair: bool
    empty: bool = False
    locked: bool = False                       # False: no LOCK file, so no daemon ever held it
    snapshot: snapshot.SnapshotInfo | None = None
    damaged: list = field(default_factory=list)        # CorruptSnapshot passed over, newest first
    temporaries: list = field(default_factory=list)    # names of half-written snapshots
    log: RecoveryReport = field(default_factory=RecoveryReport)
    first_segment: str = ""
    last_segment: str = ""
    dropped: list = field(default_factory=list)        # Dropped, under repair
    queues: list = field(default_factory=list)         # QueueCounts, by name
    now: int = 0                                       # when the counts were folded (ms epoch, daemon clock)
    still_refused: str = ""                            # after repair: why a start without --repair still fails
    sealed: str = ""                                   # after a lossy repair: the snapshot written to start from

    def lines(self) -> list[str]:
        """The report, one fact per line."""
        out = [_line("directory", os.path.abspath(self.directory))]
        if self.empty:
            out.append(_line("empty", "no segments and no snapshots: a daemon starts here with nothing"))
            return out
        if not self.locked:
            out.append(_line("lock", "no LOCK file (no daemon has opened this directory); none created"))
        for name in self.temporaries:
            out.append(_line("temporary", f"{name}: a snapshot a crash left half-written; "
                                          + ("removed" if self.repair else "the next start removes it")))
        for e in self.damaged:
            out.append(_line("damaged", f"{os.path.basename(e.path)} unreadable at offset {e.offset}: "
                                        f"{e.reason}; recovery falls back past it"))
        s = self.snapshot
        if s is not None:
            out.append(_line("snapshot", f"{os.path.basename(s.path)} covers segments <= {s.covers}, "
                                         f"{s.jobs} jobs, {s.bytes} bytes"))
        else:
            out.append(_line("snapshot", "none: the log alone is replayed"))
        r = self.log
        span = "" if not r.segments else (f" ({self.first_segment})" if self.first_segment == self.last_segment
                                          else f" ({self.first_segment} .. {self.last_segment})")
        out.append(_line("segments", f"{r.segments} read{' after the snapshot' if s else ''}{span}, "
                                     f"{r.records} records, {r.bytes} bytes"))
        for path, offset, length in r.torn:
            what = ("segment with a torn header" if offset == 0 else "torn tail")
            action = "truncated" if self.repair else "not truncated; the next start or --repair truncates it"
            if offset == 0:
                action = "removed" if self.repair else "not removed; the next start or --repair removes it"
            out.append(_line("torn", f"{what} {os.path.basename(path)} at offset {offset}, {length} bytes "
                                     f"({action})"))
        for d in self.dropped:
            out.append(_line("dropped", f"{os.path.basename(d.path)} at offset {d.offset}, {d.length} bytes "
                                        f"({d.what})"))
        if self.sealed:
            out.append(_line("sealed", f"{self.sealed}: a snapshot of what was recovered, so that the next "
                                       f"start begins there"))
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now / 1000))
        out.append(_line("queues", f"{len(self.queues)}, jobs counted by state as of {when} (due delayed "
                                   f"jobs and expired leases moved to ready, as QINFO shows them)"))
        for q in self.queues:
            out.append(_line("queue", f"{q.name} ready={q.ready} delayed={q.delayed} in_flight={q.in_flight} "
                                      f"dead={q.dead} completed={q.completed} waiting={q.waiting} cancelled={q.cancelled} "
                                      f"durability={q.durability}"))
        if self.still_refused:
            out.append(_line("result", f"repaired what --repair can, but the daemon still refuses to start "
                                       f"without --repair: {self.still_refused}"))
        elif self.repair and (self.dropped or r.torn or self.temporaries):
            out.append(_line("result", "repaired: the daemon starts on this directory without --repair"))
        else:
            out.append(_line("result", "ok: the daemon starts on this directory without --repair"))
        return out


def _line(label: str, text: str) -> str:
    return f"{label:<10}{text}"


def check(directory: str, repair: bool = False, now: int | None = None) -> CheckReport:
    """Recover ``directory`` as the daemon's start would, without serving it;
    change nothing unless ``repair``.  Raises ``CheckError``, or the
    daemon's ``CorruptLog`` naming the first corrupt file and offset."""
    if not os.path.exists(directory):
        raise CheckError(f"data directory {directory} does not exist")
    if not os.path.isdir(directory):
        raise CheckError(f"{directory} is not a directory")
    report = CheckReport(directory, repair)
    lock_fd = -1
    if repair or os.path.exists(os.path.join(directory, LOCK)):
        try:
            lock_fd = lock_directory(directory)
        except DirectoryLocked as e:
            raise CheckError(str(e).replace("refusing to start", "refusing to check it; stop it first, "
                                                                 "or check a copy")) from None
        report.locked = True
    try:
        _check(directory, repair, now, report)
        if repair and not report.empty:
            # read it again as the next plain start will, changing nothing: what
            # --repair cannot mend (a segment missing between others) shows here
            try:
                _check(directory, False, now, CheckReport(directory, False))
            except CorruptLog as e:
                report.still_refused = str(e).split(". Refusing to start")[0]
    finally:
        if lock_fd >= 0:
            os.close(lock_fd)
    return report


def _check(directory: str, repair: bool, now: int | None, report: CheckReport) -> None:
    if not list_segments(directory) and not snapshot.list_snapshots(directory) and not _temporaries(directory):
        report.empty = True
        return
    if repair:
        report.temporaries = snapshot.remove_temporaries(directory)
    else:
        report.temporaries = _temporaries(directory)
    choice = choose_snapshot(directory, repair, modify=repair)
    report.snapshot = choice.loaded
    report.damaged = [e for e in choice.damaged if e.path not in {p for p, _n in choice.moved}]
    report.dropped += [Dropped(path, 0, size, "damaged snapshot, moved aside to .corrupt")
                       for path, size in choice.moved]
    store = choice.store
    after = choice.loaded.covers if choice.loaded else 0
    read = [p for n, p in list_segments(directory) if n > after]
    report.log = read_log(directory, Replayer(store).apply, repair=repair, after=after, modify=repair)
    if repair:
        sealed = seal_after_repair(directory, choice, report.log)
        if sealed is not None:
            report.sealed = os.path.basename(sealed.path)
    if read:
        report.first_segment, report.last_segment = os.path.basename(read[0]), os.path.basename(read[-1])
    for path, offset, length in report.log.skipped:
        what = ("unreadable segment header, moved aside to .corrupt" if offset == 0
                else "unreadable bytes, cut out of the segment")
        report.dropped.append(Dropped(path, offset, length, what))
    report.now = _now(store) if now is None else now
    report.queues = counts(store, report.now)


def counts(store: Store, now: int) -> list[QueueCounts]:
    """Jobs per queue and state, after ``Queue.fold(now)`` (what QINFO shows at ``now``)."""
    out = []
    for q in sorted(store.queues.values(), key=lambda q: q.name):
        q.fold(now)
        out.append(QueueCounts(q.name.decode(errors="backslashreplace"), q.config.durability,
                               **q.indexes.counts()))
    return out


def _now(store: Store) -> int:
    """The daemon's clock as the log left it (``daemon.clock.Clock.now``): real
    time plus the DEBUG offset, or the frozen time."""
    offset, frozen, frozen_at = store.clock
    return frozen_at if frozen else int(time.time() * 1000) + offset


def _temporaries(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory)
                  if n.startswith(snapshot.PREFIX) and n.endswith(snapshot.SUFFIX + snapshot.TEMPORARY))
