"""Replication, as a primary and as a replica (docs/replication.md).

The replication stream is the log: the bytes of the frames a primary writes,
in the order it writes them, each write handed to ``feed`` as it leaves
for the disk (``LogBuffer.stream``).  Its *offset* counts those bytes; the
same record sits at the same offset on every node that holds it, so two
replicas of one primary compare by offset (Sentinel promotes the one that
has more).  A *replication id* names one history: the primary's
``replid``; after a promotion the old one stays as ``replid2``, valid up to
``second_offset``, so the replicas that followed the old primary continue
from where they are (PSYNC2, as Redis).

As a primary: a replica connects like a client, says where it listens
(``REPLCONF``), and asks ``PSYNC replid offset``.  When ``replid`` is this
history and the *backlog* (the last ``repl-backlog-size`` bytes of the
stream, in memory) still holds ``offset``, the primary answers ``+CONTINUE``
and the bytes from there on (a partial sync); else ``+FULLRESYNC replid
offset``: it takes a snapshot (the fork that BGSAVE uses) whose cut is at
that offset, sends it as one bulk string, then the stream written since
the cut.  The replicas themselves, as their primary sees them, are
``daemon/replicas.py``'s.

As a replica (``follow``): the link to the primary is
``daemon/replicalink.py``; the store applies only the primary's records,
through the recovery's ``Replayer``, and writes the same frames to its own
log.  Commands that write are refused with -READONLY (``dispatch``); the
store does not fold (its primary's records say what ran out, and when) and
the schedules do not fire (``daemon/alarm.py``).  ``promote`` (REPLICAOF
NO ONE) makes it a primary: a new replication id, the old kept as
``replid2``, and a new boot epoch, so that tokens it hands out never match
one the old primary handed out after the last record this node has.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque

from leaseq.commands import errors
from leaseq.commands.replies import NO_REPLY, Raw, Simple

from .failover import Failover
from .fullsync import FullSync
from .liveness import Liveness
from .replanchor import Anchor
from .replicas import Replicas
from .replicawaits import ReplicaWaits

log = logging.getLogger(__name__)

NO_ID = "0" * 40


def new_id() -> str:
    """A replication id or a run id: 40 hex characters, as Redis's."""
    return os.urandom(20).hex()


class Backlog:
    """The stream's last bytes, at least ``limit`` of them once that many
    were written, as the writes came (whole writes are let go from the
    front, so none is copied again)."""

    __slots__ = ("chunks", "size", "end")

    def __init__(self, end: int) -> None:
        self.chunks: deque = deque()
        self.size = 0
        self.end = end                   # the stream offset after the last byte held

    @property
    def first(self) -> int:
        """The offset of the first byte held."""
        return self.end - self.size

    def add(self, data: bytes, limit: int) -> None:
        self.chunks.append(data)
        self.size += len(data)
        self.end += len(data)
        chunks = self.chunks
        while self.size - len(chunks[0]) >= limit:
            self.size -= len(chunks.popleft())

    def since(self, offset: int) -> bytes:
        """The bytes from ``offset`` on (``first <= offset <= end``)."""
        skip = offset - self.first
        out = []
        for chunk in self.chunks:
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            out.append(chunk[skip:] if skip else chunk)
            skip = 0
        return b"".join(out)


class Replication:
    def __init__(self, server) -> None:
        self.server = server
        self.run_id = new_id()           # INFO's run_id: new at every start (Sentinel tells restarts by it)
        self.replid = new_id()
        self.replid2 = NO_ID
        self.second_offset = -1
        self._wal = None                 # the log written to (``attach_log``); the stream is what it writes
        self._base = 0                   # the stream's offset where ``_wal`` began
        self.backlog: Backlog | None = None   # made when the first replica asks (as Redis's)
        self.replicas = Replicas(self)   # this node's replicas (daemon/replicas.py)
        self.waits = ReplicaWaits(self)  # parked WAITs (daemon/replicawaits.py)
        self.master: tuple[str, int] | None = None   # (host, port) followed; None: a primary
        self.link = None                 # the ReplicaLink to it (daemon/replicalink.py)
        self.down_since = time.monotonic()
        self.anchor = Anchor(self)       # a replica's history and offset, kept for its restart (daemon/replanchor.py)
        self.liveness = Liveness(self)   # repl-timeout both ways, and PINGs in an idle stream (daemon/liveness.py)
        self.full_sync = FullSync(self)  # a primary's side of its replicas' full syncs (daemon/fullsync.py)
        self.failover = Failover(self)   # FAILOVER: handing the role to a replica (daemon/failover.py)

    # -- the stream -------------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """Bytes of the stream this node holds: written to its log."""
        return self._base + (self._wal.bytes_written if self._wal is not None else 0)

    def attach_log(self, wal) -> None:
        """``wal`` is the log from now on (``Server.write_to``): the stream
        goes on where the last one ended.  Once a backlog is kept, each of
        its writes is handed to ``feed``; before that, writing costs nothing
        more (the offset is the log's byte count)."""
        self._base = self.offset
        self._wal = wal
        wal.stream = self.feed if self.backlog is not None else None

    def set_offset(self, offset: int) -> None:
        self._base = offset - (self._wal.bytes_written if self._wal is not None else 0)
        if self.backlog is not None:
            self.backlog = Backlog(offset)

    def _keep_backlog(self) -> None:
        if self.backlog is None:
            self.backlog = Backlog(self.offset)
            if self._wal is not None:
                self._wal.stream = self.feed

    def feed(self, data: bytes) -> None:
        """The log wrote ``data`` (``LogBuffer.stream``): keep it in the
        backlog and send it to the replicas."""
        self.backlog.add(data, self.server.settings.repl_backlog_size)
        self.replicas.send(data)

    def appended_offset(self) -> int:
        """The offset once what the log holds in its buffer is written (WAIT's target)."""
        wal = self._wal
        return self.offset + (sum(len(b) for b in wal.buffer) if wal is not None else 0)

    def durable_offset(self) -> int:
        """How much of the stream is on this node's disk (what a replica
        acknowledges): the offset less what the log wrote and has not yet
        fsynced."""
        wal = self._wal
        return self.offset - (wal.bytes_written - wal.durable_bytes) if wal is not None else self.offset

    @property
    def following(self) -> bool:
        return self.master is not None

    # -- a primary's side --------------------------------------------------------------------------

    def psync(self, conn, replid: str, offset: int, failover: bool = False):
        """PSYNC: continue from ``offset`` (the first byte the replica lacks,
        counted from 1 as Redis does) or start a full sync.  With FAILOVER,
        from this node's primary failing over to it (daemon/failover.py): it
        promotes itself first, if it follows that history."""
        if failover:
            if self.following and replid == self.replid:
                log.info("promoted by a failover request from %s", conn.addr)
                self.promote()
            elif self.following or replid != self.replid2:    # (not one it was promoted from already)
                return errors.FAILOVER_REPLID
        if self.failover.running:
            return errors.SYNC_WHILE_FAILING_OVER
        if self.following and (self.link is None or not self.link.up):
            return errors.NOMASTERLINK
        peer = self.replicas.join(conn)
        want = offset - 1
        backlog = self.backlog
        if ((replid == self.replid or (replid == self.replid2 and offset <= self.second_offset))
                and backlog is not None and backlog.first <= want <= self.offset and offset > 0):
            peer.state = "online"
            peer.ack_offset = want
            log.info("replica %s:%d continues from offset %d (partial sync, %d bytes)", peer.ip, peer.port, want,
                     self.offset - want)
            conn.answer(Simple(f"CONTINUE {self.replid}"))
            if want < self.offset:
                conn.answer(Raw(backlog.since(want)))
            return NO_REPLY
        log.info("replica %s:%d asks PSYNC %s %d: full sync", peer.ip, peer.port, replid, offset)
        self._keep_backlog()
        self.full_sync.wanted()
        return NO_REPLY

    def replicated(self, offset: int) -> None:
        """min-replicas-to-ack: enough replicas have the stream up to
        ``offset`` on their disks; the log's generations that end there are
        replicated, and the replies held on them may go."""
        wal = self._wal
        if wal is not None and wal.ack_needed and wal.replicated_to(offset - self._base):
            self.server.committer.touch()

    def synced(self) -> None:
        """This node's log was fsynced: a replica says so to its primary at
        once (a primary waiting for replicas' disks waits no longer than that)."""
        if self.link is not None and self.link.up:
            self.link.ack()

    # -- roles -------------------------------------------------------------------------------------

    def follow(self, host: str, port: int) -> str:
        """REPLICAOF host port: follow that primary from now on."""
        if self.master == (host, port):
            return "OK Already connected to specified master"
        server = self.server
        was_primary = self.master is None
        self.stop_link()
        self.master = (host, port)
        self.down_since = time.monotonic()
        self.replicas.drop_all("this node now follows another")   # (they start again from its new history)
        self.waits.release()
        server.roles.become_replica()
        self._start_link()
        log.info("following the primary at %s:%d%s", host, port,
                 " (this node was a primary)" if was_primary and self.server.datadir.store.epoch else "")
        return "OK"

    def promote(self) -> str:
        """REPLICAOF NO ONE: a primary from now on."""
        if self.master is None:
            return "OK"
        self.stop_link()
        self.master = None
        self.anchor.drop()
        self.replid2, self.second_offset = self.replid, self.offset + 1
        self.replid = new_id()
        self.replicas.drop_all("its primary was promoted: it continues with PSYNC")
        self.server.roles.become_primary()
        log.info("promoted to primary: replication id %s, %s kept up to offset %d", self.replid, self.replid2,
                 self.second_offset)
        return "OK"

    def disk_failed(self) -> None:
        """This node's log failed (daemon/faults.py): what it wrote after
        its last good fsync is about to be cut from its log and its store.
        A primary has sent those records to its replicas already, so its
        history from the cut on is not theirs: it starts a new one (no
        second id: the old one's end is not this node's any more), lets its
        backlog go and drops its replicas, which sync in full.  A replica
        acknowledged only what it had fsynced, and the cut drops only what
        it had not: it closes its link (and drops its own replicas), and
        once writing resumes (``disk_resumed``) its anchor says where its
        log ends now, and it continues from there."""
        if self.following:
            self.pause_link()
            self.replicas.drop_all("its primary's log failed")    # (its own replicas: past the cut, they sync in full)
            log.warning("this replica's log failed: it continues from what its disk holds once the disk takes writes")
            return
        self._new_history()
        self.backlog = None              # (the failed log writes no more; the next one streams once a PSYNC makes one)
        self.replicas.drop_all("its primary's log failed; it syncs in full")

    def disk_resumed(self) -> None:
        """Writing resumed (after a disk fault, or a data directory put
        back: daemon/dirwatch.py): a replica links again, from where its log
        ends, as after a restart (``Anchor.restore``).  After a fault that
        is where the cut left it, not where the stream had come to, so it
        never acknowledges past what was dropped.  If its log no longer
        adds up from the anchor it takes a new id, and syncs in full."""
        if self.following and self.link is None:
            if not self.anchor.restore(self.server.datadir):
                self._new_history()
            self._start_link()

    def _new_history(self) -> None:
        """A new replication id and no second one: no PSYNC continues from here."""
        self.replid, self.replid2, self.second_offset = new_id(), NO_ID, -1

    def pause_link(self) -> None:
        """A replica whose disk cannot be trusted for now: close the link to
        its primary (it acknowledges nothing more) until ``disk_resumed``."""
        self.stop_link()
        self.down_since = time.monotonic()

    def _start_link(self) -> None:
        from .replicalink import ReplicaLink      # (it imports this module)
        self.link = ReplicaLink(self.server, *self.master)
        self.link.start()

    def drop_link(self) -> int:
        """CLIENT KILL TYPE master: close the link to the primary (it
        reconnects, with PSYNC); 1 if there was one up."""
        link = self.link
        if link is None or link.transport is None:
            return 0
        link.transport.close()
        return 1

    def stop_link(self) -> None:
        if self.link is not None:
            self.link.stop()
            self.link = None

    def synced_from(self, replid: str, offset: int) -> None:
        """A full sync installed the primary's snapshot at ``offset`` of
        history ``replid``: this node's stream continues from there."""
        self.replid = replid
        self.set_offset(offset)
        self.replid2, self.second_offset = NO_ID, -1
        self._keep_backlog()             # (promoted, it lets the other replicas continue)
        self.anchor.moved(self._wal.segment_number if self._wal is not None else None)

    def continued(self, replid: str) -> None:
        """+CONTINUE with the primary's id: a new one (it was promoted since)
        keeps ours as the second, as Redis's PSYNC2."""
        if replid and replid != self.replid:
            self.replid2, self.second_offset = self.replid, self.offset + 1
            self.replid = replid
            self.anchor.moved()
        self._keep_backlog()

    # -- what INFO, ROLE and the status page show --------------------------------------------------

    def info_fields(self) -> list[tuple[str, object]]:
        settings = self.server.settings
        now = time.monotonic()
        fields: list[tuple[str, object]]
        if self.master is None:
            fields = [("role", "master")]
        else:
            link = self.link
            up = link is not None and link.up
            fields = [("role", "slave"), ("master_host", self.master[0]), ("master_port", self.master[1]),
                      ("master_link_status", "up" if up else "down"),
                      ("master_last_io_seconds_ago", int(now - link.last_io) if up else -1),
                      ("master_sync_in_progress", int(link is not None and link.syncing)),
                      ("slave_read_repl_offset", self.offset), ("slave_repl_offset", self.offset),
                      ("slave_priority", settings.replica_priority), ("slave_read_only", 1),
                      ("replica_announced", 1)]
            if not up:
                fields.append(("master_link_down_since_seconds", int(now - self.down_since)))
        fields += self.replicas.info_fields(now)
        backlog = self.backlog
        fields += [("master_failover_state", self.failover.state), ("master_replid", self.replid), ("master_replid2", self.replid2),
                   ("master_repl_offset", self.offset), ("second_repl_offset", self.second_offset),
                   ("repl_backlog_active", int(backlog is not None)), ("repl_backlog_size", settings.repl_backlog_size),
                   ("repl_backlog_first_byte_offset", backlog.first + 1 if backlog else 0),
                   ("repl_backlog_histlen", backlog.size if backlog else 0)]
        return fields

    def role_reply(self) -> list:
        if self.master is None:
            return [b"master", self.offset,
                    [[p.ip.encode(), str(p.port).encode(), str(p.ack_offset).encode()]
                     for p in self.replicas.online()]]
        link = self.link
        return [b"slave", self.master[0].encode(), self.master[1],
                (link.state if link is not None else "connect").encode(),
                self.offset if link is not None and link.up else -1]
