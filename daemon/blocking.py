"""Blocked claimers: QCLAIM ... BLOCK that found nothing to claim.

Each queue keeps its waiters in arrival order and has at most one timer,
armed for the queue's next due moment (the earliest delayed job or lease
deadline), only while someone waits.  Waiters are served:

* at the end of an event-loop turn in which the queue got ready jobs or its
  next due moment moved (a push, a nack, an extend) — so a QPUSHMANY's jobs
  are divided at once, and the timer is re-armed;
* when the queue's timer fires (a lease expired, a delayed job became due);
* with an empty reply at their own BLOCK timeout, or with an error when the
  queue is dropped.

The jobs available are divided among all waiters in proportion to their
COUNT (``deal``), not first-come-takes-all.  A connection that closes while
blocked is removed before anything can be leased to it.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class Waiter:
    __slots__ = ("conn", "wait", "timer")

    def __init__(self, conn, wait) -> None:
        self.conn = conn
        self.wait = wait
        self.timer = None


def deal(available: int, counts: list[int]) -> list[int]:
    """Split ``available`` jobs over waiters asking ``counts``: proportional
    shares, the remainder one by one in waiting order, nobody above its count."""
    total = sum(counts)
    if available >= total:
        return list(counts)
    shares = [available * c // total for c in counts]
    left = available - sum(shares)
    i = 0
    while left:
        if shares[i] < counts[i]:
            shares[i] += 1
            left -= 1
        i = (i + 1) % len(counts)
    return shares


class Blocking:
    def __init__(self, server, loop) -> None:
        self.server = server
        self.loop = loop
        self.by_queue: dict = {}     # Queue -> [Waiter]
        self.timers: dict = {}       # Queue -> (due_ms, TimerHandle)

    def count(self, queue=None) -> int:
        if queue is not None:
            return len(self.by_queue.get(queue, ()))
        return sum(len(w) for w in self.by_queue.values())

    def park(self, conn, wait) -> None:
        w = Waiter(conn, wait)
        conn.waiting = w
        self.by_queue.setdefault(wait.queue, []).append(w)
        if wait.timeout_ms:
            w.timer = self.loop.call_later(wait.timeout_ms / 1000.0, self._timed_out, w)
        self._arm(wait.queue)

    def cancel(self, w: Waiter) -> None:
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        waiters = self.by_queue.get(w.wait.queue)
        if waiters and w in waiters:
            waiters.remove(w)
            if not waiters:
                self._forget(w.wait.queue)

    def _timed_out(self, w: Waiter) -> None:
        w.timer = None
        self.cancel(w)
        self._answer(w, w.wait.expired())

    def _answer(self, w: Waiter, reply) -> None:
        store = self.server.store
        store.write_needed = store.sync_needed = False
        w.conn.unblock(reply)

    def serve(self, queue) -> None:
        """Give claimable jobs of ``queue`` to its waiters."""
        waiters = self.by_queue.get(queue)
        if not waiters:
            return
        queue.fold(self.server.now_ms())
        available = len(queue.ready)
        if available:
            store = self.server.store
            batch = list(waiters)
            for w, share in zip(batch, deal(available, [w.wait.count for w in batch])):
                if not share or w.conn.closed:
                    continue
                store.write_needed = store.sync_needed = False
                jobs = w.wait.take(share)
                if not jobs:
                    break
                self.cancel(w)
                w.conn.unblock(jobs)
        self._arm(queue)

    def serve_woken(self) -> None:
        store = self.server.store
        if store.woken:
            woken = store.woken
            store.woken = set()
            for q in woken:
                if q in self.by_queue:
                    self.serve(q)

    def queue_dropped(self, queue) -> None:
        waiters = self.by_queue.pop(queue, [])
        self._forget(queue)
        for w in waiters:
            if w.timer is not None:
                w.timer.cancel()
            self._answer(w, w.wait.dropped())

    def release_all(self) -> None:
        """Shutdown: answer every waiter as if its BLOCK timed out."""
        for queue in list(self.by_queue):
            for w in list(self.by_queue.get(queue, [])):
                self.cancel(w)
                self._answer(w, w.wait.expired())

    # -- the per-queue timer -----------------------------------------------------------------

    def _arm(self, queue) -> None:
        if not self.by_queue.get(queue):
            self._forget(queue)
            return
        due = queue.next_due()
        current = self.timers.get(queue)
        if due is None:
            if current:
                current[1].cancel()
                del self.timers[queue]
            return
        if current is not None:
            if current[0] <= due:
                return
            current[1].cancel()
        delay = max(0, due - self.server.now_ms() + 1) / 1000.0
        self.timers[queue] = (due, self.loop.call_later(delay, self._fire, queue))

    def _fire(self, queue) -> None:
        self.timers.pop(queue, None)
        self.serve(queue)
        self.server.committer.touch()

    def _forget(self, queue) -> None:
        """Drop the queue's entry and timer once nobody waits on it."""
        if self.by_queue.get(queue):
            return
        self.by_queue.pop(queue, None)
        timer = self.timers.pop(queue, None)
        if timer is not None:
            timer[1].cancel()
