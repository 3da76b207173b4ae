"""Whether the replication links are alive (docs/replication.md, "Silent
peers").

A link is a TCP connection, and TCP tells nothing of a peer that hangs
(a stopped process, a full disk it waits on) or of a network that drops
everything without a reset: each side must hear from the other within a
time, or give the link up.  The rules, both ways, as Redis's:

* **A replica is heard** through its REPLCONF ACK, sent every second.  A
  primary drops an online replica that acknowledged nothing for
  ``repl-timeout`` seconds (the replica connects again and continues with
  PSYNC).
* **A primary is heard** through its stream, which is its log.  A primary
  whose stream carried nothing for ``repl-ping-replica-period`` seconds
  while replicas are online writes a PING record (storage/records.py): a
  record like any other, in the log, the backlog and the replicas' logs,
  counted in the offset, and skipped by replay.  So the stream of a primary
  that lives is never silent for longer.
* **A replica drops a silent primary**: nothing from it for
  ``repl-timeout`` seconds (during the handshake, the full sync or the
  stream) and the replica closes the link and connects again, which
  INFO's ``master_link_status`` shows at once as ``down``.

``repl-timeout`` must be above ``repl-ping-replica-period`` for an idle
primary to stay linked (the defaults, 60 and 10, are Redis's).
``repl-timeout 0`` turns both timeouts off; the PINGs go on.

``scan`` runs every 0.1 s (the idle reaper's tick, daemon/admission.py).
"""

from __future__ import annotations

import logging

from leaseq.storage import records

log = logging.getLogger(__name__)


class Liveness:
    __slots__ = ("_seen_at", "_seen_offset", "replication")

    def __init__(self, replication) -> None:
        self.replication = replication
        self._seen_offset = -1        # the stream's offset when it last moved, and when that was
        self._seen_at = 0.0

    def scan(self, now: float) -> None:
        """``now``: ``time.monotonic()``."""
        replication = self.replication
        settings = replication.server.settings
        timeout = settings.repl_timeout
        if replication.link is not None:
            if timeout:
                replication.link.drop_if_silent(now, timeout)
            return
        if timeout:
            self._drop_silent(now, timeout)
        self._ping_if_idle(now, settings.repl_ping_replica_period)

    def _drop_silent(self, now: float, timeout: int) -> None:
        """Drop the replicas that acknowledged nothing for ``timeout``
        seconds (hung, or gone without closing).  The clock of a replica
        starts when its full sync ends: one still receiving it is not online."""
        for peer in self.replication.replicas.online():
            if now - peer.ack_time > timeout:
                self.replication.replicas.drop(
                    peer, f"no acknowledgement for {now - peer.ack_time:.0f} s (repl-timeout {timeout} s)")

    def _ping_if_idle(self, now: float, period: int) -> None:
        """Write a PING when the stream has not moved for ``period`` seconds
        and a replica is online to hear it."""
        replication = self.replication
        offset = replication.offset
        if offset != self._seen_offset:
            self._seen_offset, self._seen_at = offset, now
            return
        if now - self._seen_at < period or not replication.replicas.online():
            return
        server = replication.server
        if server.loading or server.read_only or server.disk_error is not None:
            return              # (no log to write to; the replicas' timeouts say so)
        server.store.journal.stream_record(records.PING, records.ping(server.now_ms()))
        server.committer.touch()           # written at the end of this turn, and so sent
        self._seen_at = now                # (the offset moves once it is written)
