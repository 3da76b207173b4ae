"""Claimers that wait, and connections that hold leases.

Per queue the daemon keeps, in arrival order:

* *waiters*: one QCLAIM each, parked because it found nothing and may BLOCK,
  or because the queue has a WINDOW and it joined a cohort (see below);
* *workers*: QWORK streams, each wanting up to MAX jobs leased at any time.

and at most one timer, armed for the queue's next due moment (the earliest
delayed job or lease deadline) while anyone waits, so an expiring lease or a
due delayed job wakes them at that moment, not at a poll.

A queue is *served* at the end of an event-loop turn in which its ready jobs
or its next due moment changed (a push, a nack, an extend, a freed worker
slot), when its timer fires, and when a cohort window closes.  Serving
divides the claimable jobs among everyone waiting in proportion to what they
asked for (COUNT, or a worker's free slots; ``deal``), not first-come-takes-
all.  A claim that *finds* jobs waiting is served at once (greedy), unless
the queue has a WINDOW: then it joins a cohort that is served in one pass
when the window closes.

*Holders*: a SESSION claim or a QWORK stream holds its leases
(``Session`` and ``Worker``, daemon/holdings.py); when its connection
closes they go back to ready at once (no deliveries bump until the next
claim).  The store calls ``lease_ended`` when a held lease ends any other
way (ack, nack, claimed again after expiry, removal).
"""

from __future__ import annotations

import logging
from operator import attrgetter

from leaseq.storage import flow, plain

from .holdings import Worker
from .resultwaits import ResultWaits
from .timeouts import Timeouts
from .waiter import Acks, Stopping, Waiter

log = logging.getLogger(__name__)

BY_QID = attrgetter("qid")


def deal(available: int, counts: list[int]) -> list[int]:
    """Split ``available`` jobs over claimers asking ``counts``: proportional
    shares, the remainder one by one in waiting order, nobody above its count."""
    if len(counts) == 1:                # (most often: one claimer waits)
        return [min(available, counts[0])]
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
    __slots__ = ("server", "store", "loop", "by_queue", "workers", "timers", "cohorts", "woken",
                 "results", "timeouts")

    def __init__(self, server, loop) -> None:
        self.server = server
        self.store = server.store    # the store served (``Server.serve_store`` hands over a new one)
        self.loop = loop
        self.by_queue: dict = {}     # Queue -> [Waiter]
        self.workers: dict = {}      # Queue -> [Worker]
        self.timers: dict = {}       # Queue -> (due_ms, TimerHandle)
        self.cohorts: dict = {}      # Queue -> TimerHandle of the open WINDOW
        self.woken: set = set()     # queues a worker's freed slot asks to serve
        self.results = ResultWaits(server, loop)   # parked QRESULT BLOCKs (daemon/resultwaits.py)
        self.timeouts = Timeouts(loop, self._timed_out)     # the waiters' BLOCKs

    def count(self, queue=None) -> int:
        if queue is not None:
            return len(self.by_queue.get(queue, ()))
        return sum(len(w) for w in self.by_queue.values()) + len(self.results)

    # -- waiters ----------------------------------------------------------------------------

    def park(self, conn, wait) -> None:
        w = Waiter(conn, wait)
        conn.waiting = w
        queue, timeout_ms, cohort = wait.queue, wait.timeout_ms, wait.cohort
        self.by_queue.setdefault(queue, []).append(w)
        if timeout_ms and not cohort:      # a cohort's BLOCK starts when its window closes
            w.timer = self.timeouts.add(timeout_ms / 1000.0, w)
        if cohort and queue not in self.cohorts:
            self.cohorts[queue] = self.loop.call_later(queue.config.window / 1000.0, self._window_closed, queue)
        self._arm(queue)

    def cancel(self, w) -> None:
        """A parked command is given up (its connection closed): a QCLAIM's
        ``Waiter``, a WAIT's (``Replication.waits``), or a QRESULT's
        (``self.results``)."""
        if type(w) is Waiter:
            self._unpark(w)
        elif type(w) is Acks:
            self.server.replication.waits.cancel(w)
        elif type(w) is Stopping:
            self.server.shutdown.cancel(w)
        else:
            self.results.cancel(w)

    def _unpark(self, w: Waiter) -> None:
        """A QCLAIM's ``Waiter`` leaves its queue: its BLOCK timer stops."""
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        wait = w.wait
        queue = wait.queue
        waiters = self.by_queue.get(queue)
        if waiters and w in waiters:
            waiters.remove(w)
            if not waiters:
                self._forget(queue)

    def _timed_out(self, w: Waiter) -> None:
        w.timer = None
        self.cancel(w)
        self._answer(w, w.wait.expired())

    def _answer(self, w: Waiter, reply) -> None:
        w.conn.unblock(reply)

    def _window_closed(self, queue) -> None:
        self.cohorts.pop(queue, None)
        self.serve(queue, closing_window=True)
        self.server.committer.touch()

    # -- workers ----------------------------------------------------------------------------

    def add_worker(self, conn, request) -> None:
        for worker in self.workers.get(request.queue, ()):
            if worker.conn is conn:            # QWORK again on the same queue: new settings
                worker.max, worker.lease_ms, worker.consumer = request.max, request.lease_ms, request.consumer
                break
        else:
            worker = Worker(conn, request)
            conn.holdings.workers.append(worker)
            self.workers.setdefault(request.queue, []).append(worker)
        self.wake(request.queue)

    def remove_worker(self, worker: Worker) -> None:
        workers = self.workers.get(worker.queue)
        if workers and worker in workers:
            workers.remove(worker)
            if not workers:
                del self.workers[worker.queue]
            self._forget(worker.queue)

    # -- serving ------------------------------------------------------------------------------

    def serve(self, queue, closing_window: bool = False) -> None:
        """Give the claimable jobs of ``queue`` to its waiters and workers."""
        waiters = self.by_queue.get(queue, ())
        if closing_window:
            for w in waiters:
                w.wait.cohort = False
        cohort_open = not closing_window and queue in self.cohorts     # its cohort waits for the window
        takers, asks = [], []
        for w in waiters:
            wait = w.wait
            if not w.conn.closed and not (cohort_open and wait.cohort):
                takers.append(w)
                asks.append(wait.count)
        workers = self.workers.get(queue, ())
        if takers or workers:
            server = self.server
            store = server.store
            now = server.now_ms()
            for k in workers:
                if not k.conn.closed:
                    room = k.room
                    if room:
                        takers.append(k)
                        asks.append(room)
            # after the fold, what the rules let out now: RATE, CONCURRENCY, pauses, group rules and turns
            if takers:
                available = plain.claimable(store, queue, now, sum(asks))
            else:
                store.fold(queue, now)
                available = 0
            if available:
                journal = store.journal
                shares = deal(available, asks)
                for i, taker in enumerate(takers):
                    share = shares[i]
                    if not share:
                        continue
                    if isinstance(taker, Worker):
                        taker.take(share)
                        continue
                    wait = taker.wait
                    jobs, ticket = journal.claimed(server.clock, wait.take, share)
                    if not jobs:
                        break
                    self.cancel(taker)
                    taker.conn.unblock(jobs, ticket)
        if closing_window:
            # cohort claims that got nothing: without BLOCK they answer empty,
            # with BLOCK they now wait like any blocked claimer
            for w in list(self.by_queue.get(queue, [])):
                if w.wait.timeout_ms is None:
                    self.cancel(w)
                    self._answer(w, w.wait.expired())
                elif w.wait.timeout_ms and w.timer is None:
                    w.timer = self.timeouts.add(w.wait.timeout_ms / 1000.0, w)
        if queue in self.by_queue or queue in self.workers:
            self._arm(queue)

    def wake(self, queue) -> None:
        """Serve ``queue`` at the end of this turn."""
        self.woken.add(queue)

    def serve_woken(self) -> None:
        """End of a turn (or of a connection's commands, ``Committer.serve_now``):
        serve the queues whose ready jobs or next due moment
        changed (the store's woken set) and those ``wake`` named, in the
        order of their qid (whichever the daemon, the same lease tokens)."""
        woken = self.store.take_woken()
        if self.woken:
            woken |= self.woken
            self.woken = set()
        for q in sorted(woken, key=BY_QID) if len(woken) > 1 else woken:
            if q in self.by_queue or q in self.workers:
                self.serve(q)

    def time_moved(self) -> None:
        """The clock jumped (DEBUG): timers were set for the old time (those
        of queues nobody waits on now as well, ``_forget``)."""
        self._cancel_timers()
        for queue in set(self.by_queue) | set(self.workers):
            self.serve(queue)

    def _cancel_timers(self) -> None:
        for _due, timer in self.timers.values():
            timer.cancel()
        self.timers.clear()

    def queue_dropped(self, queue) -> None:
        self.results.queue_dropped(queue)
        waiters = self.by_queue.pop(queue, [])
        for worker in self.workers.pop(queue, []):
            worker.held = {}
            worker.conn.holdings.work_ended(worker)     # a new stream on a new queue of that name starts afresh
        self._forget(queue)
        timer = self.timers.pop(queue, None)
        if timer is not None:
            timer[1].cancel()
        for w in waiters:
            if w.timer is not None:
                w.timer.cancel()
            self._answer(w, w.wait.dropped())

    def fail_all(self, error) -> None:
        """The log failed and the store will be rebuilt from disk: answer every
        waiter with ``error``, close every QWORK stream (its client reconnects
        and asks again), and forget every timer; nothing here may keep a
        reference into the old store."""
        self.results.fail_all(error)
        for queue in list(self.by_queue):
            for w in list(self.by_queue.get(queue, [])):
                self.cancel(w)
                self._answer(w, error)
        for workers in list(self.workers.values()):
            for worker in workers:
                worker.held = {}
                worker.conn.holdings.workers = []
                worker.conn.kill()
        self.workers.clear()
        self._cancel_timers()
        for timer in self.cohorts.values():
            timer.cancel()
        self.cohorts.clear()
        self.timeouts.close()
        self.woken = set()

    def release_all(self) -> None:
        """Shutdown: answer every waiter as if its BLOCK timed out."""
        self.results.release_all()
        self.server.replication.waits.release()
        for queue in list(self.by_queue):
            for w in list(self.by_queue.get(queue, [])):
                self.cancel(w)
                self._answer(w, w.wait.expired())
        self._cancel_timers()
        self.timeouts.close()

    # -- the per-queue timer -----------------------------------------------------------------

    def _arm(self, queue) -> None:
        if not self.by_queue.get(queue) and not self.workers.get(queue):
            self._forget(queue)
            return
        now = self.server.now_ms()
        due = queue.indexes.next_due()
        if queue.config.rate[0] or queue.indexes.groups is not None:    # (of any other queue both say no)
            room = flow.next_room(queue, now)    # a full RATE window slides on
            if room is None and self._served_late(queue, now):
                room = now
            if room is not None and (due is None or room < due):
                due = room
        if due is None:
            # A timer set for an earlier moment stays: if it runs for nothing,
            # serve finds nothing and looks again.  Cancelling it here would
            # cancel and set a timer of the loop once a job at one job per
            # request, each time a queue's last lease ends.
            return
        current = self.timers.get(queue)
        if current is not None:
            if current[0] <= due:
                return
            current[1].cancel()
        delay = max(0, due - now + 1) / 1000.0
        self.timers[queue] = (due, self.loop.call_later(delay, self._fire, queue))

    def _served_late(self, queue, now: int) -> bool:
        """Whether a job the rules held back when a claimer here last looked
        fits by now: the clock runs between a claim finding a RATE window (or
        a group's) full and its parking, and between ``serve`` dealing and
        arming, so the window may have slid in between; then nothing else
        would wake the claimer before its BLOCK ran out.  Only time-bound
        rules can slide, and only someone able to take counts (a cohort waits
        for its window, a worker for a free slot), so this never spins."""
        if not (queue.config.rate[0] or queue.indexes.groups is not None):
            return False
        cohort_open = queue in self.cohorts
        takers = any(not w.conn.closed and not (cohort_open and w.wait.cohort) for w in self.by_queue.get(queue, ()))
        takers = takers or any(not k.conn.closed and k.room for k in self.workers.get(queue, ()))
        return takers and flow.claimable(queue, now, 1) > 0

    def _fire(self, queue) -> None:
        self.timers.pop(queue, None)
        self.serve(queue)
        self.server.committer.touch()

    def _forget(self, queue) -> None:
        """Drop the queue's entries once nobody waits on it.  Its timer
        stays until it runs, finds nobody and sets no other (or until the
        queue is dropped): cancelling it here, to set one again at the next
        park, was a timer of the loop made, cancelled and closed 0.16 times
        a job at 5,000 single-job pushes a second (docs/performance.md, "A
        push serves its parked claim itself")."""
        if self.by_queue.get(queue) or self.workers.get(queue):
            return
        self.by_queue.pop(queue, None)
        cohort = self.cohorts.pop(queue, None)
        if cohort is not None:
            cohort.cancel()

