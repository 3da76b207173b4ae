"""A primary's replicas (docs/replication.md): each as a ``Peer``, what it
says of itself (``REPLCONF listening-port`` / ``ip-address``, kept until its
PSYNC), how far it has the stream on its disk (``REPLCONF ACK``), and what
the rules that count replicas ask of them: ``min-replicas-to-ack`` (a reply
held until enough replicas have its records), ``min-replicas-to-write``
(``good``: acknowledged within ``min-replicas-max-lag``) and WAIT
(daemon/replicawaits.py, which counts the ``online`` ones).

What a replica is sent, and when, is decided elsewhere: ``Replication.psync``
(a partial sync, or a full sync: daemon/fullsync.py) and ``Replication.feed``
(the stream as it is written, to the ``online`` ones)."""

from __future__ import annotations

import logging
import time

from leaseq.commands.replies import NO_REPLY, OK, Raw

log = logging.getLogger(__name__)


class Peer:
    """A replica of this primary: its connection, where it says it listens,
    how far it has the stream (``ack_offset``, its last REPLCONF ACK: on its
    disk), and what it is being sent: ``wait_bgsave`` (its full sync waits
    for a snapshot's cut), ``send_bulk`` (the snapshot is on its way;
    ``held``: the stream written since the cut, sent after it) or
    ``online`` (the stream as it is written)."""

    __slots__ = ("conn", "ip", "port", "state", "ack_offset", "ack_time", "cut", "held")

    def __init__(self, conn, ip: str, port: int) -> None:
        self.conn = conn
        self.ip = ip
        self.port = port
        self.state = "wait_bgsave"
        self.ack_offset = 0
        self.ack_time = time.monotonic()
        self.cut = -1
        self.held: list | None = None

    def send(self, data: bytes) -> None:
        self.conn.answer(Raw(data))
        self.conn.flush()


class Replicas:
    """The replicas connected to this node (see the module docstring)."""

    def __init__(self, replication) -> None:
        self.replication = replication
        self.server = replication.server
        self.peers: list[Peer] = []
        self.announced: dict[int, list] = {}    # connection id -> [ip, port] from REPLCONF, until PSYNC

    def replconf(self, conn, pairs: list[tuple[bytes, bytes]]):
        """REPLCONF: what a replica says of itself, and its ACKs (no reply)."""
        for option, value in pairs:
            if option == b"ack":
                peer = self.of(conn)
                if peer is not None:
                    peer.ack_offset = max(peer.ack_offset, int(value))
                    peer.ack_time = time.monotonic()
                    self.acked()
                    self.replication.waits.acked()
                    self.replication.failover.check()
                    self.server.shutdown.check()
                return NO_REPLY
            if option == b"getack":
                link = self.replication.link
                if link is not None and conn is link:
                    link.ack()
                return NO_REPLY
            said = self.announced.setdefault(conn.id, [conn.addr.rsplit(":", 1)[0], 0])
            if option == b"listening-port":
                said[1] = int(value)
            elif option == b"ip-address":
                said[0] = value.decode(errors="replace")
        return OK

    def join(self, conn) -> Peer:
        """A connection that asked PSYNC: a replica from now on, where its
        REPLCONF said it listens (its address and no port if it said nothing)."""
        ip, port = self.announced.pop(conn.id, [conn.addr.rsplit(":", 1)[0], 0])
        self.forget(conn)
        peer = Peer(conn, ip, port)
        self.peers.append(peer)
        return peer

    def online(self) -> list[Peer]:
        """The replicas streamed to as the log is written (past their full sync)."""
        return [p for p in self.peers if p.state == "online"]

    def send(self, data: bytes) -> None:
        """What the log wrote: to each replica online, and kept for each
        whose snapshot is on its way (sent after it)."""
        for peer in self.peers:
            if peer.state == "online":
                peer.send(data)
            elif peer.held is not None:
                peer.held.append(data)

    def drop(self, peer: Peer, why: str) -> None:
        """Close a replica's connection; it connects again and continues with PSYNC."""
        log.warning("replica %s:%d dropped: %s", peer.ip, peer.port, why)
        self.forget(peer.conn)
        peer.conn.kill()

    def drop_all(self, why: str) -> None:
        for peer in list(self.peers):
            self.drop(peer, why)

    def of(self, conn) -> Peer | None:
        for peer in self.peers:
            if peer.conn is conn:
                return peer
        return None

    def is_peer(self, conn) -> bool:
        return self.of(conn) is not None

    def forget(self, conn) -> None:
        """A connection closed (or asked again): it is no replica any more."""
        self.announced.pop(conn.id, None)
        self.peers = [p for p in self.peers if p.conn is not conn]

    def acked(self) -> None:
        """A replica acknowledged (or min-replicas-to-ack changed): with
        min-replicas-to-ack n, the stream up to the offset that n replicas
        have on disk is replicated (``Replication.replicated``)."""
        n = self.server.settings.min_replicas_to_ack
        if not n:
            return
        offsets = sorted((p.ack_offset for p in self.online()), reverse=True)
        if len(offsets) >= n:
            self.replication.replicated(offsets[n - 1])

    def good(self) -> int:
        """Replicas online that acknowledged within min-replicas-max-lag."""
        lag = self.server.settings.min_replicas_max_lag
        now = time.monotonic()
        return sum(1 for p in self.online() if now - p.ack_time <= lag)

    def info_fields(self, now: float) -> list[tuple[str, object]]:
        """INFO replication's lines about this node's replicas."""
        fields: list[tuple[str, object]] = [("connected_slaves", len(self.peers))]
        for i, p in enumerate(self.peers):
            fields.append((f"slave{i}", f"ip={p.ip},port={p.port},state={p.state},offset={p.ack_offset},"
                                        f"lag={int(now - p.ack_time)}"))
        if self.server.replicas_gate:
            fields.append(("min_slaves_good_slaves", self.good()))
        return fields
