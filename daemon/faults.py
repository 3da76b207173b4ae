"""A full or failing disk: from a failed write or fsync of the log to the
moment writing resumes, without stopping the daemon (docs/operations.md,
"A full or failing disk").

``failed`` runs on the loop when ``daemon.committer`` (or a snapshot's
fsync) gets the ``OSError``:

1. ``server.disk_error`` is set: ``daemon.dispatch`` answers every command flagged
   ``write`` with -MISCONF before it runs.
2. The committer releases the replies the log did reach and turns every
   other held reply into -MISCONF; blocked claims get it too, QWORK streams
   are closed, connections forget their SESSION/QWORK holdings (they live
   in the store about to be replaced).

then ``_recover``, a task:

3. cut the log back (``DataDir.cut_back``) in the fsync thread, so it runs
   after any fsync in flight; again every second until the disk allows it;
4. rebuild the store from disk (``DataDir.recover``) in a worker thread;
   meanwhile (``rebuilding``) connections run no command (they are read and
   parsed, and wait: the old store may hold refused changes), and the
   status page and /metrics wait too (``until_rebuilt``); once the new
   store takes over (``Server.replace_after_disk_fault(store=...)``) the
   waiting commands run on it, in order;
5. about once a second try ``DataDir.resume`` (a new segment and its BOOT
   record, fsynced); when it works, the committer takes the new log
   (``Server.replace_after_disk_fault(wal=...)``) and ``server.disk_error`` is cleared.

``entered`` counts the faults since start (step 1, once per fault, however
long it lasts or however many writes it refuses): /metrics shows it as
``leaseq_wal_write_errors_total``, so an alert sees a fault that came and
went between two scrapes.  It lives here, not in the store, because the store
is replaced in step 4.
"""

from __future__ import annotations

import asyncio
import logging

from leaseq.commands import errors
from leaseq.storage.journal import Journal

log = logging.getLogger(__name__)


class DiskFaults:
    __slots__ = ("server", "entered", "rebuilding", "_rebuilt")

    def __init__(self, server) -> None:
        self.server = server
        self.entered = 0                      # faults since start (leaseq_wal_write_errors_total)
        self.rebuilding = False               # step 4 runs: no command may read the old store
        self._rebuilt: asyncio.Event | None = None

    def failed(self, error: OSError, fsync_failed: bool) -> None:
        """The log's write (``fsync_failed`` False) or fsync failed: steps
        1-2 now, 3-5 in the background."""
        server = self.server
        if server.disk_error is not None or server.dirwatch.explains(error):
            return                            # (a removed directory: no write failed, nothing is cut)
        server.disk_error = error
        self.entered += 1
        self.rebuilding = True
        log.error("the log cannot be written (%s): commands that change queues get -MISCONF until it can; "
                  "reads go on", error)
        misconf = errors.misconf(error)
        server.store.journal = Journal()     # nothing more goes to the failed log, not even a note
        server.committer.failed(misconf, errors.misconf_unseen(error))   # its stand-in log takes nothing
                                                                           # until writing resumes
        server.blocking.fail_all(misconf)
        server.replication.disk_failed()     # what the cut drops may be on the replicas (or counted by one)
        for c in server.clients.values():
            c.holdings.drop()                # their leases stay until the rebuilt store's deadlines
        server.spawn(self._recover(fsync_failed))

    async def _recover(self, fsync_failed: bool) -> None:
        server = self.server
        loop = server.loop
        datadir = server.datadir
        log_thread = server.committer.thread      # never while an fsync of the failed log runs
        while True:
            try:
                dropped = await log_thread.run(datadir.cut_back, fsync_failed)
                break
            except OSError as e:
                log.error("cannot cut the log back yet (%s); trying again in 1 s", e)
                await asyncio.sleep(1)
        for line in dropped:
            log.warning("dropped from the log (never acknowledged as durable): %s", line)
        try:
            await loop.run_in_executor(None, datadir.recover)
        except Exception:
            log.critical("cannot rebuild the queues from the disk after a write failed; stopping", exc_info=True)
            server.abort()
            return
        server.replace_after_disk_fault(store=datadir.store)
        self._done_rebuilding()
        log.info("rebuilt the queues from the disk; waiting for the disk to take writes again")
        while not server.stopping:
            try:
                await log_thread.run(datadir.resume, server.now_ms(), not server.read_only)   # (a replica: no BOOT)
                break
            except OSError as e:
                log.debug("the disk still refuses the log: %s", e)
                await asyncio.sleep(1)
        if datadir.wal is None:
            return
        server.replace_after_disk_fault(wal=datadir.wal)
        server.disk_error = None
        server.replication.disk_resumed()
        log.info("the log is writable again: writes resume")

    def _done_rebuilding(self) -> None:
        """The new store holds only what the log holds: the commands that
        waited run now, in order."""
        self.rebuilding = False
        if self._rebuilt is not None:
            self._rebuilt.set()
            self._rebuilt = None
        for c in list(self.server.clients.values()):
            if c.pending and not c.closed:
                c.run_pending()

    async def until_rebuilt(self) -> None:
        """Return once no rebuild runs (at once, mostly)."""
        while self.rebuilding:
            if self._rebuilt is None:
                self._rebuilt = asyncio.Event()
            await self._rebuilt.wait()

    def info_fields(self) -> list[tuple[str, object]]:
        error = self.server.disk_error
        return [("log_write_status", "err" if error else "ok"),
                ("log_write_error", (error.strerror or str(error)) if error else "")]
