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
    """A parked WAIT (daemon/replication.py): ``wait`` is ``(numreplicas,
    offset)``, the replicas it asks for and the stream offset they must
    acknowledge."""

    __slots__ = ()


class Stopping(Waiter):
    """A SHUTDOWN waiting while its node lets the replicas catch up
    (daemon/shutdown.py); ``wait`` is None."""

    __slots__ = ()
