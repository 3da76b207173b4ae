"""WAIT numreplicas timeout and WAITAOF numlocal numreplicas timeout
(docs/replication.md): connections parked until enough replicas
acknowledged what the primary wrote up to their command (and, for WAITAOF
with numlocal 1, until this node's own fsync covers it), or their timeout
ran out.  ``Replicas`` tells this module of every acknowledgement
(``acked``); the committer of each fsync, while a WAITAOF is parked (its
``on_synced``, None otherwise: nothing more a fsync on the hot path)."""

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
        if self.replication.following:
            return errors.WAIT_ON_REPLICA
        return self._park(conn, (numreplicas, self.replication.appended_offset(), None), timeout_ms)

    def waitaof(self, conn, numlocal: int, numreplicas: int, timeout_ms: int):
        """WAITAOF: [1 once this node's log has fsynced all it has written
        or is about to write (else 0), the replicas that have it on their
        disks], once both counts are reached; the log is asked for that
        fsync now rather than at its next fsync-interval."""
        replication = self.replication
        if replication.following:
            return errors.WAITAOF_ON_REPLICA
        if numlocal:
            replication.server.committer.sync_soon()
        return self._park(conn, (numreplicas, replication.appended_offset(), numlocal), timeout_ms)

    def acked(self) -> None:
        """A replica acknowledged, or this node's log was fsynced: answer the
        waits that are satisfied."""
        for w in list(self.parked):
            reply = self._satisfied(w.wait)
            if reply is not None:
                self._answer(w, reply)

    def cancel(self, w: Acks) -> None:
        """Its connection gave it up (``Blocking.cancel``)."""
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        if w in self.parked:
            self.parked.remove(w)
            self._listen()

    def release(self) -> None:
        """Shutdown, or this node follows another: each wait gets its counts now."""
        for w in list(self.parked):
            self._answer(w, self._counts(w.wait))

    # -- inside -----------------------------------------------------------------------------------

    def _park(self, conn, wait: tuple, timeout_ms: int):
        reply = self._satisfied(wait)
        if reply is not None or conn.in_exec:
            return self._counts(wait) if reply is None else reply
        w = Acks(conn, wait)
        conn.waiting = w
        self.parked.append(w)
        self._listen()
        if timeout_ms:
            w.timer = self.replication.server.loop.call_later(timeout_ms / 1000.0, self._over, w)
        return NO_REPLY

    def _listen(self) -> None:
        """Hear of each fsync while a WAITAOF waits for one, and only then."""
        local = any(w.wait[2] for w in self.parked)
        self.replication.server.committer.on_synced = self.acked if local else None

    def _counts(self, wait: tuple):
        """WAIT's reply (an integer) or WAITAOF's ([local, replicas]), as things stand."""
        numreplicas, offset, numlocal = wait
        have = sum(1 for p in self.replication.replicas.online() if p.ack_offset >= offset)
        if numlocal is None:
            return have
        return [int(self.replication.durable_offset() >= offset), have]

    def _satisfied(self, wait: tuple):
        """The reply when the wait is satisfied, else None."""
        counts = self._counts(wait)
        numreplicas, _offset, numlocal = wait
        if numlocal is None:
            return counts if counts >= numreplicas else None
        return counts if counts[0] >= numlocal and counts[1] >= numreplicas else None

    def _over(self, w: Acks) -> None:
        w.timer = None
        if w in self.parked:
            self._answer(w, self._counts(w.wait))

    def _answer(self, w: Acks, reply) -> None:
        self.cancel(w)
        w.conn.unblock(reply)
