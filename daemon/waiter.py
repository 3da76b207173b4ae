"""``Waiter``: a parked command (a blocked QCLAIM in ``daemon.blocking``, a
blocked QRESULT in ``daemon.resultwaits``): its connection, what it waits
for, and the timer of its BLOCK."""

from __future__ import annotations


class Waiter:
    __slots__ = ("conn", "wait", "timer")

    def __init__(self, conn, wait) -> None:
        self.conn = conn
        self.wait = wait
        self.timer = None


class Acks(Waiter):
    """A parked WAIT or WAITAOF (daemon/replicawaits.py): ``wait`` is
    ``(numreplicas, offset, numlocal)``, the replicas it asks for, the
    stream offset they must acknowledge, and for WAITAOF whether this
    node's own fsync must cover it too (None for WAIT)."""

    __slots__ = ()


class Stopping(Waiter):
    """A SHUTDOWN waiting while its node lets the replicas catch up
    (daemon/shutdown.py); ``wait`` is None."""

    __slots__ = ()
