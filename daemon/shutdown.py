"""A shutdown that first lets the replicas catch up, as Redis 7's.

A node with replicas that is asked to stop (SHUTDOWN, SIGTERM, SIGINT) does
not stop at once while a replica has not acknowledged everything it wrote:

- it pauses writes (daemon/pause.py: the commands that write wait, reads go
  on, its replicas' acknowledgements too);
- it stops as soon as every replica has acknowledged the whole stream (on
  its disk), or after ``shutdown-timeout`` seconds (10 by default; 0: it
  never waits), logging each replica still behind;
- a SHUTDOWN that started it waits with it (its connection closes when the
  node stops); ``SHUTDOWN NOW``, or a second SIGINT, stops at once, and so
  does a signal when ``shutdown-on-sigterm`` / ``shutdown-on-sigint`` say
  ``now`` (Redis's settings; ``force`` there is SHUTDOWN FORCE);
  ``SHUTDOWN ABORT`` ends the wait and the pause, and each SHUTDOWN waiting
  is answered ``-ERR Errors trying to SHUTDOWN. Check logs.``;
- INFO server shows ``shutdown_in_milliseconds`` meanwhile.

So a replica that takes over after a planned stop holds everything the
primary wrote, with or without ``min-replicas-to-ack``: nothing answered in
the moment before the stop is lost.  A node without replicas, or whose
replicas have everything, stops at once.  docs/operations.md, "Graceful
shutdown".
"""

from __future__ import annotations

import logging
import time

from leaseq.commands import errors

from .pause import WRITE
from .waiter import Stopping

log = logging.getLogger(__name__)


class Shutdown:
    __slots__ = ("server", "reason", "deadline", "timer", "asked")

    def __init__(self, server) -> None:
        self.server = server
        self.reason = ""
        self.deadline: float | None = None      # monotonic; None: not waiting
        self.timer = None
        self.asked: list[Stopping] = []          # SHUTDOWNs waiting with it

    @property
    def waiting(self) -> bool:
        return self.deadline is not None

    def begin(self, reason: str, conn=None) -> bool:
        """Wait for the replicas before stopping (True), or say there is
        nothing to wait for (False: stop now)."""
        server = self.server
        timeout = server.settings.shutdown_timeout
        if not timeout or self._ready():
            return False
        self.reason = reason
        self.deadline = time.monotonic() + timeout
        server.pause.start("shutdown", WRITE)
        self.timer = server.loop.call_later(timeout, self._timed_out)
        log.info("shutting down (%s) once the replicas have everything, %d s at most; writes wait meanwhile",
                 reason, timeout)
        self.join(conn)
        return True

    def join(self, conn) -> None:
        """``conn``'s SHUTDOWN waits with this one (None: a signal's)."""
        if conn is not None:
            w = Stopping(conn, None)
            conn.waiting = w
            self.asked.append(w)

    def check(self) -> None:
        """A replica acknowledged, or left: stop if they all have everything."""
        if self.deadline is not None and self._ready():
            self._finish()

    def signalled(self, name: str) -> None:
        """SIGTERM or SIGINT: shut down, once the replicas have everything
        (a second SIGINT: at once), and once the queues are back on the disk
        (``Server.request_shutdown``; daemon/dirwatch.py); or as
        ``shutdown-on-sigterm`` / ``shutdown-on-sigint`` say (``now``,
        ``force``), as Redis's."""
        server = self.server
        reason = f"signal {name}"
        if self.deadline is not None:
            if name == "SIGINT":
                log.warning("a second signal (%s): shutting down without waiting longer for the replicas", name)
                self._finish()
            return
        flags = (server.settings.shutdown_on_sigint if name == "SIGINT" else server.settings.shutdown_on_sigterm)
        words = flags.split()
        if not server.request_shutdown(reason, force="force" in words, now="now" in words):
            server.dirwatch.shutdown_after = reason
            log.warning("it shuts down (%s) once the queues are back on the disk", reason)

    def now(self) -> None:
        """SHUTDOWN NOW, or a second SIGINT: stop without waiting longer."""
        if self.deadline is not None:
            self._finish()

    def abort(self) -> bool:
        """SHUTDOWN ABORT: go on serving; False when no shutdown waits."""
        if self.deadline is None:
            return False
        self._stop_waiting()
        self.server.pause.end("shutdown")
        asked, self.asked = self.asked, []
        for w in asked:
            w.conn.unblock(errors.SHUTDOWN_FAILED)
        log.warning("shutdown (%s) aborted: serving again", self.reason)
        return True

    def cancel(self, w: Stopping) -> None:
        """The connection of a waiting SHUTDOWN closed."""
        if w in self.asked:
            self.asked.remove(w)

    def info_fields(self) -> list[tuple[str, object]]:
        if self.deadline is None:
            return []
        return [("shutdown_in_milliseconds", max(0, int((self.deadline - time.monotonic()) * 1000)))]

    # -- inside -----------------------------------------------------------------------------------

    def _ready(self) -> bool:
        """Every replica acknowledged all this node wrote (or will write this turn)."""
        return not self._behind()[1]

    def _behind(self) -> tuple[int, list]:
        """(the offset this node wrote or will write this turn, the replicas
        that have not acknowledged it)."""
        replication = self.server.replication
        target = replication.appended_offset()
        return target, [p for p in replication.replicas.peers if p.ack_offset < target]

    def _timed_out(self) -> None:
        self.timer = None
        if self.deadline is not None:
            self._finish()

    def _finish(self) -> None:
        peers = self.server.replication.replicas.peers
        target, behind = self._behind()
        for p in behind:
            log.warning("replica %s:%d is %d bytes behind at shutdown (state %s, acknowledged %.1f s ago)",
                        p.ip, p.port, target - p.ack_offset, p.state, time.monotonic() - p.ack_time)
        if peers:
            log.info("%d of %d replicas have everything at shutdown", len(peers) - len(behind), len(peers))
        self._stop_waiting()
        self.asked = []                          # (their connections close with the others)
        server = self.server                     # the pause stays: writes held now never run
        if not server.request_shutdown(self.reason, now=True):
            server.dirwatch.shutdown_after = self.reason    # (the data directory is being put back)

    def _stop_waiting(self) -> None:
        self.deadline = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
