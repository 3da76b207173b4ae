"""``Timeouts`` (daemon/timeouts.py): the BLOCK timeouts of parked commands
on one timer of the loop.  Generated histories of adds, cancels and the
clock moving on hold it to what a timer of the loop for each timeout would
do: every timeout not cancelled runs once, no later than it is due and at
most ``EARLY`` before, in the order they are due; a cancelled one never
runs.  The module is compiled from its own source in the compiled flavour
(daemon/timeouts.pxd), so these tests run on whichever flavour is loaded.

The loop here is a stand-in for asyncio's (``time``, ``call_at``), whose
timers run exactly when they are due, so that a history runs the same on
any machine."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from leaseq.daemon.timeouts import COMPACT_ABOVE, EARLY, Timeouts


class Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    """``time`` and ``call_at``; ``advance`` runs the timers due, each at its moment."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list = []          # (when, seq, handle, callback)
        self.seq = 0

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback) -> Handle:
        handle = Handle()
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, handle, callback))
        return handle

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self.timers and self.timers[0][0] <= end:
            when, _seq, handle, callback = heapq.heappop(self.timers)
            if not handle.cancelled:
                self.now = max(self.now, when)
                callback()
        self.now = end

    def live_timers(self) -> int:
        return sum(1 for t in self.timers if not t[2].cancelled)


class Side:
    """A ``Timeouts`` driven by a history of steps."""

    def __init__(self) -> None:
        self.loop = Loop()
        self.ran: list = []             # (arg, at)
        self.timeouts = Timeouts(self.loop, self.run)
        self.handles: list = []         # Timeout per add, in order
        self.dues: list = []
        self.on_run = None              # a step to take inside a callback
        self.inner: set = set()         # the timeouts added inside a callback

    def run(self, arg) -> None:
        self.ran.append((arg, self.loop.now))
        if self.on_run is not None:
            step, self.on_run = self.on_run, None
            added = len(self.handles)
            self.do(step)
            self.inner |= set(range(added, len(self.handles)))

    def do(self, step) -> None:
        kind = step[0]
        if kind == "add":
            ms = step[1]
            n = len(self.handles)
            t = self.timeouts.add(ms / 1000.0, n)
            self.handles.append(t)
            self.dues.append(self.loop.now + ms / 1000.0)
        elif kind == "adds":
            for _ in range(step[1]):
                self.do(("add", step[2]))
        elif kind == "cancel" and self.handles:
            t = self.handles[step[1] % len(self.handles)]
            t.cancel()
        elif kind == "cancel_all":
            for t in self.handles:
                t.cancel()
        elif kind == "advance":
            self.loop.advance(step[1] / 1000.0)
        elif kind == "inside":
            self.on_run = step[1]

    def state(self) -> dict:
        ts = self.timeouts
        return {"heap": [(due, seq, t.arg, t.timeouts is None) for due, seq, t in sorted(ts.heap)],
                "cancelled": ts.cancelled, "seq": ts.seq, "timer_due": ts.timer_due, "len": len(ts),
                "ran": list(self.ran), "loop_timers": self.loop.live_timers()}


inner = st.one_of(st.tuples(st.just("add"), st.integers(0, 300)), st.tuples(st.just("cancel"), st.integers(0, 400)))
steps = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 300)),
    st.tuples(st.just("adds"), st.integers(10, 80), st.integers(50, 300)),
    st.tuples(st.just("cancel"), st.integers(0, 400)),
    st.tuples(st.just("cancel"), st.integers(0, 400)),
    st.tuples(st.just("cancel_all")),
    st.tuples(st.just("advance"), st.integers(0, 150)),
    st.tuples(st.just("inside"), inner),
)


def _run(history) -> Side:
    side = Side()
    for step in history:
        side.do(step)
    side.do(("advance", 10_000))       # everything still waiting comes due
    return side


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=40))
def test_each_timeout_runs_once_on_time_unless_cancelled(history):
    side = _run(history)
    ran = [arg for arg, _at in side.ran]
    assert len(ran) == len(set(ran)), "a timeout ran twice"
    for arg, at in side.ran:
        due = side.dues[arg]
        assert due - EARLY - 1e-9 <= at <= due + 1e-9, (arg, due, at)
    # in the order they were due, ties in the order they were added (of those added
    # between callbacks: one added inside a callback may be due before others
    # already running in the same batch)
    outer = [arg for arg in ran if arg not in side.inner]
    assert outer == sorted(outer, key=lambda arg: (side.dues[arg], arg))
    assert [at for _arg, at in side.ran] == sorted(at for _arg, at in side.ran)
    live = [i for i, t in enumerate(side.handles) if i not in set(ran)]
    assert all(side.handles[i].timeouts is None for i in live), "a timeout neither ran nor was cancelled"
    assert len(side.timeouts) == 0 and side.timeouts.heap == [] and side.loop.live_timers() == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=40))
def test_a_cancelled_timeout_never_runs(history):
    side = Side()
    cancelled = set()
    for step in history:
        ran_before = {arg for arg, _at in side.ran}
        side.do(step)
        if step[0] in ("cancel", "cancel_all") and side.handles:
            targets = range(len(side.handles)) if step[0] == "cancel_all" else [step[1] % len(side.handles)]
            cancelled |= {i for i in targets if i not in ran_before}
    side.do(("advance", 10_000))
    assert not cancelled & {arg for arg, _at in side.ran}


def test_cancelled_entries_are_dropped_once_they_are_most_of_the_heap():
    side = Side()
    side.do(("adds", 4 * COMPACT_ABOVE, 200))
    for t in side.handles[:COMPACT_ABOVE]:
        t.cancel()
    assert len(side.timeouts.heap) == 4 * COMPACT_ABOVE      # a quarter cancelled: kept
    for t in side.handles[COMPACT_ABOVE:2 * COMPACT_ABOVE + 1]:
        t.cancel()
    assert len(side.timeouts.heap) == 2 * COMPACT_ABOVE - 1 and side.timeouts.cancelled == 0
    assert len(side.timeouts) == 2 * COMPACT_ABOVE - 1


def test_one_timer_of_the_loop_however_many_timeouts():
    side = Side()
    side.do(("adds", 50, 100))
    assert side.loop.live_timers() == 1 and side.timeouts.timer_due == side.dues[0]
    side.do(("add", 20))                                      # an earlier one moves the timer
    assert side.loop.live_timers() == 1 and side.timeouts.timer_due == side.dues[-1]
    side.do(("advance", 20))
    assert [arg for arg, _at in side.ran] == [50] and side.loop.live_timers() == 1


def test_a_failing_callback_does_not_stop_the_others(caplog):
    loop = Loop()
    ran = []

    def callback(arg):
        ran.append(arg)
        if arg == "bad":
            raise RuntimeError("boom")

    timeouts = Timeouts(loop, callback)
    timeouts.add(0.01, "bad")
    timeouts.add(0.01, "good")
    timeouts.add(0.05, "later")
    loop.advance(0.02)
    assert ran == ["bad", "good"] and "a BLOCK timeout failed" in caplog.text
    loop.advance(0.05)
    assert ran == ["bad", "good", "later"]


def test_close_cancels_everything():
    side = Side()
    side.do(("adds", 10, 50))
    handles = list(side.handles)
    side.timeouts.close()
    side.do(("advance", 1000))
    assert side.ran == [] and side.loop.live_timers() == 0 and len(side.timeouts) == 0
    assert all(t.timeouts is None for t in handles)
