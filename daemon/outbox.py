"""The replies of one connection, in order, each waiting for its record.

A sans-IO object: it holds encoded replies and says which bytes may be
written now; the ``Connection`` writes them.  It never touches a socket, the
loop or the log, so its rules are tested without either
(tests/unit/test_outbox.py).

The rules:

1. **In order.**  Replies leave in the order they were added, whatever
   their tickets.
2. **No reply before its record.**  A reply added with a ``Ticket``
   (``storage.wal``: the generation holding its command's records, and
   whether they must be durable) is *held* until ``release`` is given a
   ``reached`` that says the log got there.
3. **Behind a held reply, everything waits.**  A reply with no ticket (a
   read) goes out at once only if nothing is held; otherwise it waits behind
   and leaves with the held reply before it.
4. **A place for a parked claim.**  ``hold_place(ticket)`` holds an empty
   reply on the records a claim logged before it parked (a queue it
   created); the claim's own answer, added later, waits behind it.
5. **A failed log fails only what needed it.**  ``fail(error, unseen)``
   turns every held reply whose command logged records (``Ticket.own``)
   into ``error`` (those records will not be found after a restart either),
   and every reply held only because it may show what other commands logged
   (a read) into ``unseen``: its bytes may show a change that is now
   refused.  Replies with no ticket keep their bytes; held places carry no
   bytes and vanish.

``take`` hands over what may be written now and ``release`` what a log
generation let go; both return ``b""`` when there is nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from leaseq.storage.wal import Ticket


class Outbox:
    __slots__ = ("_ready", "held")

    def __init__(self) -> None:
        self._ready: list[bytes] = []       # may be written now, in order
        self.held: deque = deque()          # (Ticket or None, bytes), the first waits for the log; read only outside

    def add(self, data: bytes, ticket: Ticket | None = None) -> bool:
        """Queue one encoded reply; True when it is held (the caller then
        asks to be told when the log moves: ``release``)."""
        if ticket is not None:
            self.held.append((ticket, data))
            return True
        if self.held:
            self.held.append((None, data))
        else:
            self._ready.append(data)
        return False

    def hold_place(self, ticket: Ticket) -> None:
        """Rule 4: a parked claim's records; its answer comes later."""
        self.held.append((ticket, b""))

    def take(self) -> bytes:
        """The replies that need no wait, joined; empties them."""
        ready = self._ready
        if not ready:
            return b""
        self._ready = []
        return ready[0] if len(ready) == 1 else b"".join(ready)

    def release(self, reached: Callable[[Ticket], bool]) -> bytes:
        """The held replies, from the first, whose tickets ``reached`` says
        the log has got to (and the ticketless ones behind them), joined."""
        held = self.held
        chunks = []
        while held:
            ticket, data = held[0]
            if ticket is not None and not reached(ticket):
                break
            chunks.append(data)
            held.popleft()
        return b"".join(chunks)

    def fail(self, error: bytes, unseen: bytes) -> bytes:
        """Rule 5: what the held replies become when the log failed, joined;
        nothing is held afterwards."""
        chunks = [data if ticket is None else error if ticket.own else unseen for ticket, data in self.held if data]
        self.held.clear()
        return b"".join(chunks)

    def clear(self) -> None:
        self._ready = []
        self.held.clear()
