"""FAILOVER: a primary hands its role to one of its replicas, as Redis 7's
coordinated failover (docs/replication.md, "FAILOVER without Sentinel").

``FAILOVER [TO host port [FORCE]] [TIMEOUT ms]`` on a primary:

1. *waiting-for-sync*: writes wait (daemon/pause.py, WRITE) until the
   target (the replica ``TO`` names, or the first that gets there) has
   acknowledged everything this node wrote; each REPLCONF ACK is a look.
   When ``TIMEOUT`` runs out first, the failover is aborted and writes go on
   here, or with ``FORCE`` it goes ahead all the same.
2. *failover-in-progress*: this node follows the target (``REPLICAOF``) and
   asks it ``PSYNC replid offset FAILOVER``: the target, which follows this
   node's history, promotes itself (as ``REPLICAOF NO ONE``) and answers the
   PSYNC as a primary, continuing this node's stream.  Once it answered, the
   pause ends: the writes that waited run again on a replica and get
   -READONLY, so no write is lost or done twice.  A target that refuses the
   PSYNC aborts the failover (this node is a primary again); one that
   cannot be reached is asked again, as a replica asks its primary.

``FAILOVER ABORT`` ends it at either step (at the second, this node is a
primary again: the target may already be one, as in Redis).  INFO
replication says where it is (``master_failover_state``).  Redis says not to
use it under Sentinel, which decides by itself: ``leaseq switchover`` does
the same through Sentinel (cli/switchover.py).
"""

from __future__ import annotations

import logging

from leaseq.commands.context import WRITE

log = logging.getLogger(__name__)

NONE, WAITING, IN_PROGRESS = "no-failover", "waiting-for-sync", "failover-in-progress"


class Failover:
    __slots__ = ("replication", "state", "target", "force", "timer")

    def __init__(self, replication) -> None:
        self.replication = replication
        self.state = NONE
        self.target: tuple[str, int] | None = None     # (host, port): TO's, or the replica that caught up first
        self.force = False
        self.timer = None

    @property
    def running(self) -> bool:
        """A FAILOVER waits or is under way (REPLICAOF and PSYNC wait for its end)."""
        return self.state != NONE

    def start(self, target: tuple[str, int] | None, timeout_ms: int, force: bool) -> None:
        """Step 1; the command checked what Redis checks first."""
        server = self.replication.server
        self.state, self.target, self.force = WAITING, target, force
        if timeout_ms:
            self.timer = server.loop.call_later(timeout_ms / 1000.0, self._timed_out)
        server.pause.start("failover", WRITE)
        log.info("FAILOVER requested to %s.", self._named())
        server.loop.call_soon(self.check)

    def check(self) -> None:
        """A replica acknowledged: go on if the target has everything."""
        if self.state != WAITING:
            return
        replication = self.replication
        offset = replication.appended_offset()
        for peer in replication.replicas.online():
            if peer.ack_offset >= offset and self.target in (None, (peer.ip, peer.port)):
                self.target = (peer.ip, peer.port)
                log.info("Failover target %s is synced, failing over.", self._named())
                self._fail_over()
                return

    def psync_args(self) -> list[bytes]:
        """What this node adds to its PSYNC while it fails over."""
        return [b"FAILOVER"] if self.state == IN_PROGRESS else []

    def accepted(self) -> None:
        """The target answered the PSYNC FAILOVER: it is the primary now."""
        if self.state == IN_PROGRESS:
            log.info("FAILOVER to %s done: this node follows it", self._named())
            self._clear()

    def rejected(self, why: str) -> None:
        if self.state == IN_PROGRESS:
            self.abort(f"Failover target rejected psync request ({why})")

    def abort(self, why: str) -> None:
        """FAILOVER ABORT, a timeout or a refusal: a primary again, writes go on."""
        log.warning("FAILOVER to %s aborted: %s", self._named(), why)
        if self.state == IN_PROGRESS:
            self.replication.promote()
        self._clear()

    # -- inside -----------------------------------------------------------------------------------

    def _timed_out(self) -> None:
        """TIMEOUT ran out before the target had everything: abort, or with
        FORCE fail over all the same."""
        self.timer = None
        if self.state != WAITING:
            return
        if self.force:
            log.warning("FAILOVER to %s time out exceeded, failing over.", self._named())
            self._fail_over()
        else:
            self.abort("Replica never caught up before timeout")

    def _fail_over(self) -> None:
        self.state = IN_PROGRESS
        self.replication.follow(*self.target)

    def _clear(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.state, self.target, self.force, self.timer = NONE, None, False, None
        self.replication.server.pause.end("failover")

    def _named(self) -> str:
        return f"{self.target[0]}:{self.target[1]}" if self.target else "any replica"
