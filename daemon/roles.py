"""A node's role: what changes in the daemon's parts when it becomes a
replica or a primary, and how a replica takes its primary's data
(docs/replication.md; ``daemon/replication.py`` decides when).

* ``become_replica``: commands that write get -READONLY, the store
  applies only the primary's records and logs nothing of its own, the
  schedules wait, parked claims are answered.
* ``become_primary``: the store logs its own changes again from a new
  boot epoch, the schedules fire.
* ``apply_frames``: records of the primary's stream, applied as recovery
  applies them and written to this node's log as they came.
* ``install_snapshot``: a full sync's snapshot replaces this node's data.
"""

from __future__ import annotations

from leaseq.storage.frames import FRAME_SIZE
from leaseq.storage.journal import Journal
from leaseq.storage.recovery import Replayer
from leaseq.storage.wal import MemoryLog

from . import config


class Roles:
    __slots__ = ("server",)

    def __init__(self, server) -> None:
        self.server = server

    def become_replica(self) -> None:
        """Write nothing of its own from now on: commands that write get
        -READONLY, the store applies only the primary's records, the
        schedules wait, parked claims are answered (nothing to hand out)."""
        server = self.server
        server.read_only = True
        server.serve_store(server.store)
        server.replication_rules()
        server.alarm.cancel()
        server.blocking.release_all()

    def become_primary(self) -> None:
        """REPLICAOF NO ONE: the store logs its own changes again, from a new
        boot epoch (no token of this run can match one the old primary
        handed out), and the schedules fire."""
        server = self.server
        server.read_only = False
        server.replication_rules()
        store, datadir = server.store, server.datadir
        store.following = False
        store.journal = datadir.journal(datadir.wal) if datadir.wal is not None else Journal()
        now = server.now_ms()
        store.boot(now, at_least=now // 1000)     # above any epoch the old primary reached by restarting
        datadir.history.resume(store, now)       # its own minutes from now on
        server.alarm.attach(store)
        server.committer.touch()

    def apply_frames(self, frames: bytes, got: list) -> None:
        """A replica: records of its primary's (``got``: ``(rtype, body)``
        each), applied as recovery applies them, and the ``frames`` that
        carried them written to this node's log as they came (one append).
        If one does not apply, the frames before it are written all the
        same: what the store holds and what the log holds stay alike."""
        replay = Replayer(self.server.store).apply
        applied = 0
        try:
            for rtype, body in got:
                replay(rtype, body)
                applied += FRAME_SIZE + len(body)
        finally:
            if applied:
                self.server.committer.wal.append_frame(frames if applied == len(frames) else frames[:applied], True)

    async def install_snapshot(self, path: str) -> None:
        """A replica's full sync: the primary's snapshot, received into
        ``path``, replaces this node's data (``DataDir.install``, in the
        log's thread, after any fsync in flight there)."""
        server = self.server
        committer, datadir = server.committer, server.datadir
        old = committer.wal
        committer.resumed(MemoryLog())             # (the old log is closed in the thread)
        try:
            await committer.thread.run(datadir.install, path, server.now_ms())
        except BaseException:
            if datadir.wal is old:                 # the snapshot did not read: nothing changed
                committer.resumed(old)
            elif datadir.wal is None:              # part way: what is left is recovered, then synced again
                await committer.thread.run(datadir.recover)
                await committer.thread.run(datadir.resume, server.now_ms(), False)
                server.serve_store(datadir.store)
                server.write_to(datadir.wal)
            raise
        server.serve_store(datadir.store)
        server.write_to(server.datadir.wal)
        config.copy_to_storage(server.settings, server.store, server.datadir)
