"""QRESULT BLOCK: connections parked until a job ends.

A QRESULT that finds its job not yet ended and may BLOCK is parked here under
``(qid, id)``.  The store is told which jobs are watched (``Store.endings``, an
``EndWatch``) and calls ``ended`` from the transition that ends one (an ack, a death, a
cancel, a deletion).  The answer is not given from inside that transition:
``ended`` notes the job and the answers go out in a callback of their own
right after the current one (``loop.call_soon``), when the transition and its
transaction are complete, reading the job's ending as it then stands
(``commands.results.result_reply``).  A timeout answers nil; a dropped queue
-CLOSED; shutdown nil; a disk fault the fault's error.

Like QGET, QRESULT reads what the daemon holds: it does not wait for the
ack's record to be fsynced (the acker's own reply does).
"""

from __future__ import annotations

from .timeouts import Timeouts
from .waiter import Waiter


class Parked(Waiter):
    """A parked QRESULT: a ``Waiter`` of its own type, so that
    ``Blocking.cancel`` knows where to take it from."""

    __slots__ = ()


class ResultWaits:
    def __init__(self, server, loop) -> None:
        self.server = server
        self.loop = loop
        self.by_job: dict[tuple, list] = {}     # (qid, id) -> [Parked], in arrival order
        self._due: list = []                    # keys whose job ended this turn
        self._scheduled = False
        self.timeouts = Timeouts(loop, self._timed_out)     # their BLOCKs

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_job.values())

    def park(self, conn, wait) -> None:
        p = Parked(conn, wait)
        conn.waiting = p
        key = (wait.queue.qid, wait.jid)
        self.by_job.setdefault(key, []).append(p)
        endings = self.server.store.endings
        endings.watched.add(key)
        endings.tell = self.ended
        if wait.timeout_ms:
            p.timer = self.timeouts.add(wait.timeout_ms / 1000.0, p)

    def cancel(self, p: Parked) -> None:
        if p.timer is not None:
            p.timer.cancel()
            p.timer = None
        key = (p.wait.queue.qid, p.wait.jid)
        parked = self.by_job.get(key)
        if parked and p in parked:
            parked.remove(p)
            if not parked:
                self._unwatch(key)

    def _unwatch(self, key: tuple) -> None:
        self.by_job.pop(key, None)
        self.server.store.endings.watched.discard(key)

    def ended(self, q, jid: int) -> None:
        """The store: job ``jid`` of ``q`` ended; answer its waiters after this callback."""
        self._due.append((q.qid, jid))
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._answer_due)

    def _answer_due(self) -> None:
        self._scheduled = False
        due, self._due = self._due, []
        for key in due:
            parked = self.by_job.get(key)
            if not parked:
                continue
            self._unwatch(key)
            for p in parked:
                if p.timer is not None:
                    p.timer.cancel()
                p.conn.unblock(p.wait.answer())
        self.server.committer.touch()

    def _timed_out(self, p: Parked) -> None:
        p.timer = None
        self.cancel(p)
        p.conn.unblock(p.wait.expired())

    def _answer_all(self, keys, reply_of) -> None:
        for key in list(keys):
            for p in self.by_job.get(key, []):
                if p.timer is not None:
                    p.timer.cancel()
                    p.timer = None
                p.conn.unblock(reply_of(p))
            self._unwatch(key)

    def queue_dropped(self, queue) -> None:
        self._answer_all([k for k in self.by_job if k[0] == queue.qid], lambda p: p.wait.dropped())

    def fail_all(self, error) -> None:
        """The store will be rebuilt from disk: answer everyone with ``error``."""
        self._answer_all(list(self.by_job), lambda p: error)
        self._due = []
        self.timeouts.close()

    def release_all(self) -> None:
        """Shutdown: answer everyone as if the BLOCK timed out."""
        self._answer_all(list(self.by_job), lambda p: p.wait.expired())
        self.timeouts.close()
