"""Plain pub/sub channels, as Redis's: SUBSCRIBE to any channel that is not
a QWORK request, PUBLISH to it (Redis Sentinel finds its peers through
``__sentinel__:hello`` on the servers it watches; applications may use them
too).  A message is not kept: it reaches the connections subscribed at the
moment it is published, as ``["message", channel, message]``."""

from __future__ import annotations

from leaseq.commands.replies import Push


class Channels:
    __slots__ = ("subscribers",)

    def __init__(self) -> None:
        self.subscribers: dict[bytes, list] = {}     # channel -> connections, in the order they came

    def subscribe(self, conn, channel: bytes) -> None:
        conns = self.subscribers.setdefault(channel, [])
        if conn not in conns:
            conns.append(conn)

    def unsubscribe(self, conn, channel: bytes) -> None:
        conns = self.subscribers.get(channel)
        if conns and conn in conns:
            conns.remove(conn)
            if not conns:
                del self.subscribers[channel]

    def publish(self, channel: bytes, message: bytes) -> int:
        """Deliver ``message`` to each subscriber now; how many got it."""
        conns = self.subscribers.get(channel, ())
        for conn in list(conns):
            conn.answer(Push([b"message", channel, message]))
            conn.flush()
        return len(conns)
