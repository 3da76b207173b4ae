"""``Timeouts``: the BLOCK timeouts of parked commands, many on one timer of
the loop.

A parked claim (QCLAIM BLOCK) or QRESULT BLOCK needs a timeout, and at one
job per request nearly every one is cancelled long before it runs out: the
claim is served by the next push.  A timer of the loop for each (uvloop's
``call_later``: a handle, a libuv timer allocated, started, stopped and
closed in a later turn) cost about 3 % of the daemon's time a job
(docs/performance.md, "BLOCK timeouts on one timer").

Here the timeouts of one kind wait in a heap by due time (the loop's clock,
``loop.time()``) under one timer of the loop, set for the earliest.
Cancelling a timeout only marks it; the heap drops marked entries when they
come to its top, or all at once when they are most of it.  The loop's own
timers count in whole milliseconds, so a timer may run up to a millisecond
before the moment it was set for: a timeout due within that millisecond
runs with it, as it would have with a timer of its own.
"""

from __future__ import annotations

import heapq
import logging

log = logging.getLogger(__name__)

EARLY = 0.001           # seconds: a timer of the loop may run this much early
COMPACT_ABOVE = 64      # cancelled entries kept at most while they are half the heap


class Timeout:
    """One timeout: ``cancel()`` it, or its ``Timeouts``' callback runs with
    ``arg`` at ``due``.  ``timeouts`` is None once it was cancelled or ran."""

    __slots__ = ("due", "arg", "timeouts")

    def cancel(self) -> None:
        timeouts = self.timeouts
        if timeouts is not None:
            self.timeouts = None
            timeouts.cancelled += 1
            if timeouts.cancelled > COMPACT_ABOVE and timeouts.cancelled * 2 > len(timeouts.heap):
                timeouts.compact()


class Timeouts:
    """Timeouts that all run ``callback(arg)``, each at its own moment."""

    __slots__ = ("loop", "callback", "heap", "seq", "cancelled", "timer", "timer_due")

    def __init__(self, loop, callback) -> None:
        self.loop = loop
        self.callback = callback
        self.heap: list = []            # (due, seq, Timeout), cancelled ones among them
        self.seq = 0                    # (ties go in the order they were added)
        self.cancelled = 0              # entries of the heap cancelled
        self.timer = None               # the loop's timer, set for timer_due
        self.timer_due: float | None = None

    def __len__(self) -> int:
        """The timeouts waiting to run."""
        return len(self.heap) - self.cancelled

    def add(self, delay: float, arg) -> Timeout:
        """``callback(arg)`` in ``delay`` seconds, unless cancelled first."""
        t = Timeout()
        t.due = due = self.loop.time() + delay
        t.arg = arg
        t.timeouts = self
        self.seq += 1
        heapq.heappush(self.heap, (due, self.seq, t))
        if self.timer_due is None or due < self.timer_due:
            self.set_timer(due)
        return t

    def set_timer(self, due: float) -> None:
        """The loop's timer, for ``due`` (one set for later is cancelled)."""
        if self.timer is not None:
            self.timer.cancel()
        self.timer_due = due
        self.timer = self.loop.call_at(due, self._run)

    def _run(self) -> None:
        self.timer = self.timer_due = None
        now = self.loop.time() + EARLY
        while self.heap:
            heap = self.heap            # (anew each time: a callback's cancel may compact it)
            due, _seq, t = heap[0]
            if t.timeouts is None:
                heapq.heappop(heap)
                self.cancelled -= 1
            elif due <= now:
                heapq.heappop(heap)
                t.timeouts = None
                try:
                    self.callback(t.arg)
                except Exception:       # (as the loop would log a failing callback of its own timer)
                    log.exception("a BLOCK timeout failed")
            else:
                break
        heap = self.heap
        if heap and (self.timer_due is None or heap[0][0] < self.timer_due):
            self.set_timer(heap[0][0])

    def compact(self) -> None:
        """Drop the cancelled entries."""
        self.heap = [entry for entry in self.heap if entry[2].timeouts is not None]
        heapq.heapify(self.heap)
        self.cancelled = 0

    def close(self) -> None:
        """Cancel every timeout and the loop's timer."""
        for _due, _seq, t in self.heap:
            t.timeouts = None
        self.heap = []
        self.cancelled = 0
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.timer_due = None
