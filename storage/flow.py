"""Flow control: how many jobs a queue may hand out at a moment
(docs/semantics.md §3.7; the group rules of §3.8 are ``storage.groups``').

Three rules, each off unless the queue sets it, and the smallest allowance
wins:

* ``paused`` (QPAUSE): nothing;
* ``CONCURRENCY n``: ``n`` minus the jobs in flight;
* ``RATE n ms``: ``n`` minus the jobs handed out in the last ``ms``, a
  sliding window: a hand-out at ``t`` counts until ``t + ms``, so no window
  of ``ms`` ever holds more than ``n`` (a fixed bucket would let ``2n``
  through across its boundary).

Every lease granted counts once: each job of a batch claim, each QWORK
delivery, each redelivery.  ``RateWindow`` holds the moments of the recent
hand-outs (``Store.claim`` adds them, live and during replay, so a restart
that replays the log keeps the window; one that loads a snapshot starts it
empty).  The allowance is computed when a claim looks, after the queue is
folded: nothing runs on a timer here.  The daemon asks ``next_room`` when a
full window holds ready jobs back, and arms the queue's timer for it.
"""

from __future__ import annotations

from collections import deque

GROUP_REASONS = ("group-pause", "group-concurrency", "group-rate")


class RateWindow:
    """The daemon-clock moments (ms) of the hand-outs still inside the
    window, oldest first, one entry per job."""

    __slots__ = ("times",)

    def __init__(self) -> None:
        self.times: deque = deque()

    def add(self, ts: int, n: int, span: int) -> None:
        self.times.extend([ts] * n)
        self._trim(ts, span)

    def used(self, now: int, span: int) -> int:
        """Hand-outs at moments in (now - span, now]."""
        self._trim(now, span)
        return len(self.times)

    def next_room(self, now: int, limit: int, span: int) -> int | None:
        """The first moment after ``now`` at which one more hand-out fits, or
        None when one fits now."""
        excess = self.used(now, span) - limit
        return None if excess < 0 else self.times[excess] + span

    def _trim(self, now: int, span: int) -> None:
        times = self.times
        edge = now - span
        while times and times[0] <= edge:
            times.popleft()


REASONS = ("pause", "concurrency", "rate") + GROUP_REASONS


def _rules(q, now: int) -> list[tuple[str, int]]:
    """(reason, how many jobs that rule lets out now) for each rule the
    queue sets, in REASONS order.  ``QueueConfig.limited`` says whether
    there is any (tests/unit/test_flow.py holds the two to the same
    options)."""
    config = q.config
    rules = []
    if config.paused:
        rules.append(("pause", 0))
    if config.concurrency:
        rules.append(("concurrency", max(0, config.concurrency - len(q.indexes.leases))))
    limit, span = config.rate
    if limit:
        rules.append(("rate", max(0, limit - q.rate_window.used(now, span))))
    return rules


def allowance(q, now: int) -> int | None:
    """How many jobs ``q`` may hand out now (call after folding), or None
    when no rule limits it."""
    if not q.config.limited:
        return None
    rules = _rules(q, now)
    return min(n for _reason, n in rules) if rules else None


def claimable(q, now: int, want: int) -> int:
    """How many of ``want`` jobs a claim could take now (call after folding)."""
    allowed = allowance(q, now)
    if allowed is not None:
        want = min(want, allowed)
    groups = q.indexes.groups
    if groups is None:
        return min(want, len(q.indexes.ready))
    return len(groups.first(want, now))


def handed_out(q, ts: int, n: int) -> None:
    """``n`` leases were granted at ``ts``: they count in the rate window
    (their groups hear of them as they are leased: ``Groups.claimed``)."""
    limit, span = q.config.rate
    if limit:
        q.rate_window.add(ts, n, span)


def has_slots(q) -> bool:
    """Whether a job ending frees a slot someone may wait for (CONCURRENCY,
    GROUP-CONCURRENCY)."""
    return q.config.slots


def next_room(q, now: int) -> int | None:
    """When a full rate window holds ready jobs back: the moment it lets one
    more through (what the queue's timer waits for); else None.  A pause or
    a full CONCURRENCY ends by a command (QRESUME, an ack ...), never by time."""
    if q.config.paused or not q.indexes.ready:
        return None
    limit, span = q.config.rate
    room = q.rate_window.next_room(now, limit, span) if limit else None
    groups = q.indexes.groups
    if groups is not None:
        group_room = groups.next_room(now)
        if group_room is not None and (room is None or group_room < room):
            room = group_room
    return room


def throttled_by(q, now: int) -> dict[str, int]:
    """Ready jobs that no claim could take right now, by the rule that holds
    them back: per group, the group rule allowing least; then, of what the
    groups let out, the queue's rule allowing least (the first in REASONS on
    a tie)."""
    counts = dict.fromkeys(REASONS, 0)
    groups = q.indexes.groups
    free = len(q.indexes.ready) if groups is None else groups.throttled_by(now, counts)
    rules = _rules(q, now)
    if rules:
        reason, allowed = min(rules, key=lambda rule: rule[1])
        counts[reason] += max(0, free - allowed)
    return counts


def throttled(q, now: int) -> int:
    """Ready jobs that no claim could take right now (QINFO's ``throttled``)."""
    return sum(throttled_by(q, now).values())


def limited(q) -> bool:
    """Whether the queue sets any rule (INFO shows ``throttled`` for it)."""
    config = q.config
    return bool(config.paused or config.concurrency or config.rate[0] or config.grouped)
