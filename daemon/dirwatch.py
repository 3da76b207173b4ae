"""The data directory removed under a running daemon (docs/operations.md,
"A data directory removed while the daemon runs").

A segment being written lives on through the daemon's descriptor after
its name is removed (``rm -rf`` of the directory, a cleanup script gone
wrong): writes and fsyncs still succeed, but a crash or a restart would
find nothing.  The store in memory still holds everything the log did,
so nothing is lost yet; the watch puts it back on the disk before
anything else is promised:

1. ``scan`` (every 0.1 s; ``Server.listen`` runs it) looks whether the
   segment being written still has a name (``WriteAheadLog.unlinked``, one
   ``fstat``).  A new segment or a snapshot that cannot be made in the
   directory (ENOENT) may tell first: then ``DiskFaults.failed`` hands it
   over (``explains``).
2. When it has none, ``server.disk_error`` is set, so commands that change
   queues get -MISCONF ("its data directory was removed") and nothing more
   is acknowledged that a crash would lose; reads go on.  Replies already
   held are released as usual: what they answer is in the store.  A
   replica closes its link to its primary, so that it acknowledges
   nothing it could lose either.
3. About once a second, until it works, ``_restore`` makes the directory
   again (``DataDir.relock``: and its lock) and takes a snapshot there
   (``Snapshots.start(rescue=True)``): the log goes on in a new segment in
   the new directory, and the snapshot holds everything before it, as
   after any snapshot.  While a file has the directory's name, or another
   leaseq holds the new directory's lock, it keeps trying and says why.
4. Once the snapshot counts as taken, the error is cleared and writes
   resume; a replica links again and continues where it was (+CONTINUE:
   it dropped nothing).

Meanwhile a shutdown would lose the queues: SHUTDOWN is refused with
Redis's "-ERR Errors trying to SHUTDOWN. Check logs." (SHUTDOWN FORCE stops
all the same), and SIGTERM or SIGINT shut down once step 4 is done
(``Server.request_shutdown``).

Unlike a disk fault (daemon/faults.py) nothing is cut back and the store
is not rebuilt: no write failed, and the disk no longer holds what the
store would be rebuilt from.  The history's per-minute files
(storage/history.py) that went with the directory are not brought back;
the next minutes are written to the new one.
"""

from __future__ import annotations

import asyncio
import errno
import logging

from leaseq.storage.wal import DirectoryLocked

log = logging.getLogger(__name__)

RETRY_S = 1.0


class DirectoryWatch:
    __slots__ = ("server", "restoring", "shutdown_after")

    PERIOD = 0.1

    def __init__(self, server) -> None:
        self.server = server
        self.restoring = False
        self.shutdown_after = ""          # a signal asked for a shutdown meanwhile: why

    def scan(self) -> None:
        server = self.server
        datadir = server.datadir
        if self.restoring or datadir is None or datadir.wal is None or server.disk_error is not None:
            return
        try:
            unlinked = datadir.wal.unlinked()
        except OSError:                   # (the log closed between the two lines: a shutdown)
            return
        if unlinked:
            self._removed()

    def explains(self, error: OSError) -> bool:
        """A disk fault (daemon/faults.py) asks first: a file could not be
        made in the directory because it is gone (a new segment, at a
        snapshot or when one is full), before ``scan`` noticed.  Nothing
        failed that was written: the watch takes over, and the turn whose
        records wait for an fsync gets one (``Committer.touch``)."""
        wal = self.server.datadir.wal if self.server.datadir is not None else None
        if error.errno != errno.ENOENT or wal is None or not wal.unlinked():
            return False
        self._removed()
        self.server.committer.touch()
        return True

    def _removed(self) -> None:
        server = self.server
        self.restoring = True
        server.disk_error = OSError(errno.ENOENT, "its data directory was removed")
        server.disk.entered += 1
        log.error("the log's current segment was removed from %s (the data directory with it?): commands that "
                  "change queues get -MISCONF until a snapshot of the queues is back on the disk",
                  server.datadir.directory)
        if server.replication.following:
            server.replication.pause_link()     # acknowledges nothing more until it is
        server.spawn(self._restore())

    async def _restore(self) -> None:
        server = self.server
        datadir = server.datadir
        snapshots = server.snapshots
        said = ""
        while not server.stopping:
            if not snapshots.in_progress:     # (one running when the directory went fails; then ours)
                try:
                    datadir.relock()
                except (OSError, DirectoryLocked) as e:
                    if str(e) != said:
                        said = str(e)
                        log.error("cannot make the data directory again (%s); trying again every %g s", e, RETRY_S)
                else:
                    if snapshots.start("the data directory was removed", rescue=True) and await snapshots.outcome():
                        break
            await asyncio.sleep(RETRY_S)
        if server.stopping:
            return
        self.restoring = False
        server.disk_error = None
        server.replication.disk_resumed()       # a replica links again
        log.info("the queues are on the disk again in %s: writes resume", datadir.directory)
        if self.shutdown_after:
            server.request_shutdown(self.shutdown_after)
