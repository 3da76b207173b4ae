"""WAIT numreplicas timeout (docs/replication.md): connections parked until
enough replicas acknowledged what the primary wrote up to their command, or
their timeout ran out.  ``Replication`` tells this module of every
acknowledgement (``acked``)."""

from __future__ import annotations

from leaseq.commands import errors
from leaseq.commands.replies import NO_REPLY

from .waiter import Acks


class ReplicaWaits:
    def __init__(self, replication) -> None:
        self.replication = replication
        self.parked: list[Acks] = []

    def wait(self, conn, numreplicas: int, timeout_ms: int):
        """How many replicas acknowledged everything this node has written or
        is about to write (this turn's records included), once
        ``numreplicas`` have, or when ``timeout_ms`` runs out (0: no limit);
        at once inside MULTI."""
        replication = self.replication
        if replication.following:
            return errors.WAIT_ON_REPLICA
        target = replication.appended_offset()
        have = self._count(target)
        if have >= numreplicas or conn.in_exec:
            return have
        w = Acks(conn, (numreplicas, target))
        conn.waiting = w
        self.parked.append(w)
        if timeout_ms:
            w.timer = replication.server.loop.call_later(timeout_ms / 1000.0, self._over, w)
        return NO_REPLY

    def acked(self) -> None:
        """A replica acknowledged: answer the WAITs it satisfies."""
        for w in list(self.parked):
            numreplicas, target = w.wait
            have = self._count(target)
            if have >= numreplicas:
                self._answer(w, have)

    def cancel(self, w: Acks) -> None:
        """Its connection gave it up (``Blocking.cancel``)."""
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        if w in self.parked:
            self.parked.remove(w)

    def release(self) -> None:
        """Shutdown, or this node follows another: each WAIT gets its count now."""
        for w in list(self.parked):
            self._answer(w, self._count(w.wait[1]))

    def _count(self, offset: int) -> int:
        return sum(1 for p in self.replication.replicas.online() if p.ack_offset >= offset)

    def _over(self, w: Acks) -> None:
        w.timer = None
        if w in self.parked:
            self._answer(w, self._count(w.wait[1]))

    def _answer(self, w: Acks, have: int) -> None:
        self.cancel(w)
        w.conn.unblock(have)
