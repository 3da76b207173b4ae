"""A data directory, opened: its lock, the store recovered from its log, and
the write-ahead log new records go to.

``DataDir.open`` locks the directory (one daemon per directory), replays
every segment into a fresh ``Store`` (``storage.recovery``), starts a new
segment, and makes the store's journal write to it; the new run's BOOT
record is fsynced before it returns.  ``close`` records exact id marks,
fsyncs and lets go of the lock.  A crash skips ``close``: the next ``open``
recovers from what reached the disk.
"""

from __future__ import annotations

import logging
import os
import time

from .journal import Journal
from .recovery import RecoveryReport, Replayer, read_log
from .store import Store
from .wal import WriteAheadLog, lock_directory

log = logging.getLogger(__name__)


class DataDir:
    def __init__(self, directory: str, lock_fd: int, store: Store, wal: WriteAheadLog,
                 report: RecoveryReport, recovery_seconds: float) -> None:
        self.directory = directory
        self.store = store
        self.wal = wal
        self.report = report
        self.recovery_seconds = recovery_seconds
        self._lock_fd = lock_fd

    @classmethod
    def open(cls, directory: str, now: int, segment_size: int = 64 << 20, lease_sync: bool = False,
             repair: bool = False) -> "DataDir":
        """Lock ``directory`` (created if missing), recover from its log, and
        start a new segment."""
        os.makedirs(directory, exist_ok=True)
        lock_fd = lock_directory(directory)
        t0 = time.monotonic()
        store = Store()                       # its journal writes nothing while the log is replayed
        try:
            report = read_log(directory, Replayer(store).apply, repair=repair)
            wal = WriteAheadLog(directory, segment_size, report.last_segment + 1)
        except BaseException:
            os.close(lock_fd)
            raise
        store.journal = Journal(wal, lease_sync)
        store.boot(now)
        wal.flush_and_sync()
        seconds = time.monotonic() - t0
        log.info("recovered %d queues from %d segments, %d records, %d bytes (truncated %d torn bytes%s) "
                 "in %.3f s; boot epoch %d", len(store.queues), report.segments, report.records, report.bytes,
                 report.truncated_bytes, f", skipped {len(report.skipped)} corrupt ranges" if report.skipped else "",
                 seconds, store.epoch)
        return cls(directory, lock_fd, store, wal, report, seconds)

    @property
    def closed(self) -> bool:
        return self._lock_fd < 0

    def close(self) -> None:
        """A clean stop: exact id marks, everything fsynced, the lock released."""
        if self.closed:
            return
        self.store.record_id_marks()
        self.wal.close()
        self.release_lock()

    def release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def info_fields(self) -> list[tuple[str, object]]:
        r = self.report
        return [("dir", os.path.abspath(self.directory))] + self.wal.info_fields() + [
            ("recovery_seconds", f"{self.recovery_seconds:.3f}"),
            ("recovery_records", r.records),
            ("recovery_truncated_bytes", r.truncated_bytes),
            ("boot_epoch", self.store.epoch),
        ]
