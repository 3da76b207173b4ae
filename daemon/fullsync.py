"""A replica's full sync, the primary's side (docs/replication.md, "The
handshake and the sync").

A replica whose PSYNC cannot continue (another history, or an offset the
backlog no longer holds) waits for a snapshot's *cut*: ``wanted`` starts a
snapshot (the fork BGSAVE uses) unless one is being written, and answers
``+FULLRESYNC replid offset`` to each waiting replica, whose stream from
then on is held for it.  When the snapshot is written, ``snapshot_done``
sends it to each as one bulk string, a chunk at a time, then the stream
held since the cut, and from then on the stream as it is written (the
replica is *online*).  Replicas that came while a snapshot was being
written wait for the next one, which starts once this one is done.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from leaseq.commands.replies import Simple
from leaseq.storage import snapshot

log = logging.getLogger(__name__)

# a full sync's snapshot goes to its replica in chunks of this size, the next once the connection
# holds no more than one; how often to look while it holds more
SNAPSHOT_CHUNK = 1 << 20
SNAPSHOT_POLL_S = 0.001


class FullSync:
    __slots__ = ("replication",)

    def __init__(self, replication) -> None:
        self.replication = replication

    def wanted(self) -> None:
        """Replicas wait for a snapshot's cut: take one now unless one is
        being written (the peers wait for the next, ``snapshot_done``)."""
        replication = self.replication
        snapshots = replication.server.snapshots
        if snapshots.in_progress:
            return
        waiting = [p for p in replication.replicas.peers if p.state == "wait_bgsave" and p.held is None]
        if not waiting:
            return
        if not snapshots.start("a replica's full sync"):
            for peer in waiting:
                replication.replicas.drop(peer, "cannot take a snapshot for its full sync")
            return
        for peer in waiting:           # the snapshot's cut is the stream as written up to now
            peer.cut = replication.offset
            peer.held = []
            peer.conn.answer(Simple(f"FULLRESYNC {replication.replid} {replication.offset}"))
            peer.conn.flush()

    def snapshot_done(self, covers: int | None) -> None:
        """The snapshot written (``covers``: the segments it covers) or failed
        (None): send it to the replicas that waited for its cut
        (``_send``), then what was written since.  Those that came
        later wait for the next, which ``wanted`` starts once
        this one is done with."""
        replication = self.replication
        server = replication.server
        waiting = [p for p in replication.replicas.peers if p.state == "wait_bgsave" and p.held is not None]
        if not waiting:
            return
        if covers is None:
            for peer in waiting:
                replication.replicas.drop(peer, "its snapshot failed")
            return
        path = os.path.join(server.datadir.directory, snapshot.snapshot_name(covers))
        for peer in waiting:
            peer.state = "send_bulk"
            server.spawn(self._send(peer, path))

    async def _send(self, peer, path: str) -> None:
        """Send the snapshot at ``path`` to ``peer`` a chunk at a time, each
        once the connection has passed on all but a chunk of what it was
        given: neither this process nor the replica's connection ever holds
        the whole file (a million jobs make about 100 MB, more than a
        client's output buffer may hold), and the loop serves the other
        clients between chunks.  Then the stream written since the
        snapshot's cut (``held``), and from then on the stream as it is
        written.  The file stays readable while it is sent, even if a newer
        snapshot replaces it."""
        replication = self.replication
        conn = peer.conn
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                peer.send(b"$%d\r\n" % size)
                left = size
                while left:
                    while conn.output_buffer > SNAPSHOT_CHUNK and not conn.closed:
                        await asyncio.sleep(SNAPSHOT_POLL_S)
                    if conn.closed:
                        return
                    chunk = f.read(min(SNAPSHOT_CHUNK, left))
                    if not chunk:
                        raise OSError(f"{path} ended {left} bytes short of its size")
                    peer.send(chunk)
                    left -= len(chunk)
        except OSError as e:
            replication.replicas.drop(peer, f"cannot send it the snapshot: {e}")
            return
        if conn.closed or peer not in replication.replicas.peers:
            return
        held, peer.held = peer.held, None
        peer.state = "online"
        peer.ack_time = time.monotonic()       # (repl-timeout counts from here: the replica loads it first)
        if held:
            peer.send(b"".join(held))
        log.info("replica %s:%d: snapshot sent (%d bytes), streaming from offset %d", peer.ip, peer.port, size,
                 peer.cut)
