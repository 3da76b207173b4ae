"""Pauses: clients' commands held back for a while, as Redis's CLIENT PAUSE.

Three purposes can pause the clients, each with its own mode, and the pause
in force is the strictest:

- ``client``: ``CLIENT PAUSE timeout [WRITE|ALL]`` (ALL when no mode is
  given), until its deadline or ``CLIENT UNPAUSE``.  A second CLIENT PAUSE
  moves the deadline only later, and turns WRITE into ALL, never back, as
  Redis's does.
- ``shutdown``: WRITE, while a shutdown waits for the replicas to have
  everything (daemon/shutdown.py), until it ends or is aborted.
- ``failover``: WRITE, while FAILOVER hands the role to a replica
  (daemon/failover.py), until the replica took it or it is aborted.

What a pause holds back (``holds``):

- ALL: every command of every connection but a replica's link to this node
  (its acknowledgements are what a shutdown waits for).
- WRITE: what a replica would refuse with -READONLY (the commands flagged
  ``write``, but SUBSCRIBE), queued in a transaction or not, and an EXEC
  whose transaction holds one.

A command held back is not run and not refused: its connection keeps it,
and every command after it, and runs them in order when the pause ends or
weakens (``connection.Connection.run_pending`` re-runs what it kept).  The
replies before it go out as usual.  What the server does by its own clock
goes on meanwhile: leases that run out are recorded and schedules fire (a
primary that takes over does both by its own clock).

This module keeps the rules and the connections held; the loop's timer for a
CLIENT PAUSE's deadline is the server's (``arm``, given at construction).
"""

from __future__ import annotations

from time import monotonic

from leaseq.commands.context import ALL, WRITE


class Pause:
    __slots__ = ("server", "purposes", "held", "arm")

    def __init__(self, server, arm) -> None:
        self.server = server
        self.purposes: dict[str, tuple[int, float | None]] = {}   # purpose -> (mode, monotonic deadline or None)
        self.held: list = []          # connections that keep a command back, in the order they were held
        self.arm = arm                # arm(seconds or None): call ``expire`` after that long (None: no timer)

    @property
    def mode(self) -> int:
        """The pause in force: 0 (none), WRITE or ALL."""
        return max((mode for mode, _ in self.purposes.values()), default=0)

    def by_client(self, mode: int, timeout_ms: int) -> None:
        """CLIENT PAUSE: from now until ``timeout_ms`` from now (or later,
        if one asked for later already), in ``mode`` (or ALL, if in force)."""
        until = monotonic() + timeout_ms / 1000.0
        was = self.purposes.get("client")
        if was is not None:
            mode, until = max(mode, was[0]), max(until, was[1])
        self._set("client", (mode, until))

    def start(self, purpose: str, mode: int) -> None:
        """A pause with no deadline, until ``end(purpose)``."""
        self._set(purpose, (mode, None))

    def end(self, purpose: str) -> None:
        if purpose in self.purposes:
            self._set(purpose, None)

    def expire(self) -> None:
        """The deadline of a CLIENT PAUSE came (the server's timer)."""
        was = self.purposes.get("client")
        if was is not None and was[1] <= monotonic():
            self._set("client", None)
        else:
            self._rearm()

    def holds(self, client, route) -> bool:
        """Whether ``route``'s command, from ``client``, waits for the pause to end."""
        mode = self.mode
        if not mode or self.server.replication.replicas.is_peer(client):
            return False
        if mode == ALL:
            return True
        if route.write:
            return not route.pubsub
        if route.transaction and route.name == "exec" and client.multi:
            return any(r.write and not r.pubsub for r, _args in client.multi)
        return False

    def hold(self, conn) -> None:
        """``conn`` keeps a command back until the pause ends or weakens."""
        if conn not in self.held:
            self.held.append(conn)

    def count(self) -> int:
        """Connections held now (INFO's ``blocked_clients`` counts them, as Redis's)."""
        return sum(1 for c in self.held if not c.closed)

    # -- changes ----------------------------------------------------------------------------------

    def _set(self, purpose: str, value) -> None:
        before = self.mode
        if value is None:
            self.purposes.pop(purpose, None)
        else:
            self.purposes[purpose] = value
        self.server.paused = bool(self.purposes)
        self._rearm()
        if self.mode < before:
            self._release()

    def _rearm(self) -> None:
        client = self.purposes.get("client")
        self.arm(None if client is None else max(0.0, client[1] - monotonic()))

    def _release(self) -> None:
        """The pause ended or weakened: each connection held runs what it
        kept (one still held keeps it again)."""
        held, self.held = self.held, []
        for conn in held:
            if not conn.closed:
                conn.run_pending()
