"""The two parties of every command, as fields: ``Caller``, what the
dispatcher and the handlers read and set of a client, and ``Host``, what
they read of its server (``commands.context`` lists all the rest they may
use).  The daemon's ``Connection`` and ``Server`` derive from them, and so
do the unit tests' in-memory client and core; the compiled flavour reads
their fields as C (docs/performance.md, "One way in")."""

from __future__ import annotations


class Caller:
    """A client (``commands.context.ClientContext``)."""

    __slots__ = ("server", "acl_user", "holdings", "multi", "last_command", "authenticated", "resp3", "multi_dirty",
                 "in_exec")


class Host:
    """A server (``commands.context.ServerContext``)."""

    __slots__ = ("store", "stats", "metrics", "clock", "replication", "loading", "read_only", "oom", "disk_error",
                 "replicas_gate", "paused", "pause", "slowlog", "slow_after")

    def now_ms(self) -> int:
        """The daemon's time (ms since the epoch, or the DEBUG clock's)."""
        return self.clock.now()


class Stats:
    """The server's counters (INFO stats)."""

    __slots__ = ("connections", "commands", "rejected", "protocol_errors", "acl_access_denied_auth",
                 "acl_access_denied_cmd", "acl_access_denied_key", "tls_handshake_failures")

    def __init__(self) -> None:
        self.connections = self.commands = self.rejected = self.protocol_errors = 0
        self.acl_access_denied_auth = 0      # AUTH/HELLO with a wrong user or password
        self.acl_access_denied_cmd = 0       # -NOPERM for a command
        self.acl_access_denied_key = 0       # -NOPERM for a queue
        self.tls_handshake_failures = 0
