"""Groups inside one queue: turns, per-group limits and group pauses
(docs/semantics.md §3.8).

A queue whose jobs carry a GROUP, or whose options set a group rule
(GROUP-CONCURRENCY, GROUP-RATE, a paused group), has a ``Groups`` object
(``Indexes.groups``); other queues have None and pay nothing.  It keeps, for
every group that holds a live job:

* ``ready``: the group's ready jobs in claim order, as ``ReadyIndex`` orders
  them (band, then id), one int key each (``band << 64 | id``);
* ``held``: the slots the group holds: its jobs in flight and its jobs
  waiting for a retry (delayed after a nack, ``requeued``);
* ``waiting``: its other delayed jobs and its jobs waiting for parents
  (they hold no slot, but keep the group known);
* ``turn``: its place in the round-robin, a number that only grows.

A group may hand out a job when it has a ready one, is not paused, holds
fewer slots than GROUP-CONCURRENCY and its GROUP-RATE window has room.  Such
groups sit in ``turns`` ordered by (band of their head job, turn): priority
first, then whose turn it is.  A claim takes the head job of the first group
and gives that group the newest turn (``claimed``), so groups take turns one
job at a time; a job the claim dead-letters on the way is passed over without
a turn (``first``'s ``doomed``).  Groups whose only obstacle is a full
GROUP-RATE window sit in ``rooms`` by the moment the window lets one more
through; ``fold`` moves them back, and the daemon's timer waits for the first
of them.

A group appears with the newest turn when it gets its first live job, and is
forgotten when its last one leaves (acked, dead, deleted).  Its rate window
(``windows``) outlives it until the window is empty.

``enter``/``leave`` are called by ``Indexes`` (and the queue's bulk paths)
whenever a job enters or leaves the index its state names.  A group's place
in ``turns``/``rooms`` is recomputed lazily, for the groups marked dirty,
when someone asks (``first``, ``fold``, ``next_room``, ``throttled_by``).
Nothing here has a clock: every question that depends on time takes ``now``.
"""

from __future__ import annotations

from heapq import heappop, heappush

from sortedcontainers import SortedList

from .bands import band
from .flow import RateWindow
from .job import DELAYED, IN_FLIGHT, READY, WAITING, Job

ID_BITS = 64
ID_MASK = (1 << ID_BITS) - 1


def ready_key(job: Job) -> int:
    """A ready job's key in its group: claim order (its band), then id."""
    return band(job.priority, job.requeued) << ID_BITS | job.id


class Group:
    __slots__ = ("name", "ready", "held", "waiting", "turn", "turn_key", "room_key", "room_at")

    def __init__(self, name: bytes, turn: int) -> None:
        self.name = name
        self.ready = SortedList()
        self.held = 0
        self.waiting = 0
        self.turn = turn
        self.turn_key = None        # its entry in Groups.turns, or None
        self.room_key = None        # its entry in Groups.rooms, or None
        self.room_at = 0            # when its full GROUP-RATE window lets one more through (0: not full)

    @property
    def live(self) -> bool:
        return bool(self.ready or self.held or self.waiting)


class Groups:
    def __init__(self, config) -> None:
        self.members: dict[bytes, Group] = {}
        self.turns = SortedList()       # (head band, turn, name): groups that may hand out now
        self.rooms = SortedList()       # (room_at, name): groups held back only by GROUP-RATE
        self.windows: dict[bytes, RateWindow] = {}
        self.next_turn = 0
        self.dirty: set[Group] = set()
        self.config = config

    # -- jobs entering and leaving their state's index ----------------------------------------

    def _group(self, name: bytes) -> Group:
        g = self.members.get(name)
        if g is None:
            g = self.members[name] = Group(name, self.next_turn)
            self.next_turn += 1
            window = self.windows.get(name)       # a group back within its GROUP-RATE window
            limit, span = self.config.group_rate
            if window is not None and window.times and limit:
                g.room_at = window.next_room(window.times[-1], limit, span) or 0
        return g

    def enter(self, job: Job) -> None:
        """``job`` now sits in the index of its (new) state."""
        state = job.state
        extra = job.extra
        name = b"" if extra is None else extra.group
        if state is READY:
            g = self._group(name)
            g.ready.add(ready_key(job))
        elif state is IN_FLIGHT or (state is DELAYED and job.requeued):
            g = self._group(name)
            g.held += 1
        elif state is DELAYED or state is WAITING:
            g = self._group(name)
            g.waiting += 1
        else:                               # dead or completed: no longer part of a group
            g = self.members.get(name)
            if g is not None and not g.live:
                self._forget(g)
            return
        self.dirty.add(g)

    def leave(self, job: Job, staying: bool = False) -> None:
        """``job`` leaves the index of its state; ``staying``: it enters
        another one at once (a move), so its group is not forgotten now."""
        state = job.state
        extra = job.extra
        g = self.members.get(b"" if extra is None else extra.group)
        if g is None:
            return
        if state is READY:
            g.ready.remove(ready_key(job))
        elif state is IN_FLIGHT or (state is DELAYED and job.requeued):
            g.held -= 1
        elif state is DELAYED or state is WAITING:
            g.waiting -= 1
        else:
            return
        if not staying and not g.live:
            self._forget(g)
        else:
            self.dirty.add(g)

    def _forget(self, g: Group) -> None:
        self._unplace(g)
        self.dirty.discard(g)
        if self.members.get(g.name) is g:
            del self.members[g.name]

    # -- hand-outs, time, options -------------------------------------------------------------

    def claimed(self, jobs: list[Job], ts: int) -> None:
        """``jobs``, ready, are leased at ``ts``: each leaves its group's
        ready jobs and holds a slot, and ``served``."""
        members = self.members
        for job in jobs:
            extra = job.extra
            g = members[b"" if extra is None else extra.group]
            g.ready.remove(ready_key(job))
            g.held += 1
        self.served(jobs, ts)

    def served(self, jobs: list[Job], ts: int) -> None:
        """``jobs`` were handed out at ``ts``: each one's group goes to the
        back of the turns, and its GROUP-RATE window counts it."""
        limit, span = self.config.group_rate
        members = self.members
        windows = self.windows
        dirty = self.dirty
        for job in jobs:
            extra = job.extra
            g = members[b"" if extra is None else extra.group]
            g.turn = self.next_turn
            self.next_turn += 1
            if limit:
                window = windows.get(g.name)
                if window is None:
                    window = windows[g.name] = RateWindow()
                window.add(ts, 1, span)
                g.room_at = window.next_room(ts, limit, span) or 0
            dirty.add(g)

    def fold(self, now: int) -> None:
        """Groups whose GROUP-RATE window has slid far enough may hand out again."""
        rooms = self.rooms
        while rooms and rooms[0][0] <= now:
            _, name = rooms.pop(0)
            g = self.members[name]
            g.room_key = None
            g.room_at = 0
            self.dirty.add(g)
        if len(self.windows) > 2 * len(self.members) + 1024:
            span = self.config.group_rate[1]
            self.windows = {name: w for name, w in self.windows.items() if w.used(now, span)}
        self._settle(now)

    def reconfigure(self, config, now: int) -> None:
        """New queue options: every group's place is computed again (a GROUP-RATE
        set, changed or removed starts with empty windows)."""
        if config.group_rate != self.config.group_rate:
            self.windows = {}                      # a GROUP-RATE set or changed starts with empty windows
        self.config = config
        limit, span = config.group_rate
        for g in self.members.values():
            window = self.windows.get(g.name)
            g.room_at = (window.next_room(now, limit, span) or 0) if window is not None else 0
            self.dirty.add(g)
        self._settle(now)

    def set_turns(self, turns: dict, next_turn: int) -> None:
        """The turns a snapshot kept (name -> turn), and the next turn number."""
        for name, turn in turns.items():
            g = self.members.get(name)
            if g is not None:
                g.turn = turn
                self.dirty.add(g)
        self.next_turn = max(self.next_turn, next_turn)

    # -- where each group stands ----------------------------------------------------------------

    def _unplace(self, g: Group) -> None:
        if g.turn_key is not None:
            self.turns.remove(g.turn_key)
            g.turn_key = None
        if g.room_key is not None:
            self.rooms.remove(g.room_key)
            g.room_key = None

    def _settle(self, now: int) -> None:
        if not self.dirty:
            return
        config = self.config
        paused = config.paused_groups
        limit = config.group_concurrency
        for g in self.dirty:
            self._unplace(g)
            if not g.ready or (paused and g.name in paused) or (limit and g.held >= limit):
                continue
            if g.room_at and g.room_at > now:
                g.room_key = (g.room_at, g.name)
                self.rooms.add(g.room_key)
                continue
            g.room_at = 0
            g.turn_key = (g.ready[0] >> ID_BITS, g.turn, g.name)
            self.turns.add(g.turn_key)
        self.dirty.clear()

    def _room(self, g: Group, now: int) -> int:
        """How many more jobs ``g`` may hand out now (it is in ``turns``)."""
        room = len(g.ready)
        config = self.config
        if config.group_concurrency:
            room = min(room, config.group_concurrency - g.held)
        limit, span = config.group_rate
        if limit:
            window = self.windows.get(g.name)
            room = min(room, limit - (window.used(now, span) if window is not None else 0))
        return room

    def first(self, count: int, now: int, doomed=None) -> list[int]:
        """The ids of the next ``count`` jobs claims would take, in order,
        taking turns as claims would (nothing changes here: ``claimed``
        moves the turns when they are handed out).

        ``doomed(id)``, when given, says which jobs the claim would
        dead-letter on the way instead (docs/semantics.md §1.8): such a job
        is passed over without taking its group's turn or room, and the
        group offers its next job at the same turn (the walk asks ``doomed``
        of every job it reaches, in claim order)."""
        self._settle(now)
        out: list[int] = []
        if not self.turns or count <= 0:
            return out
        members = self.members
        taken: dict[bytes, int] = {}         # group -> jobs taken from it so far
        at: dict[bytes, int] = {}            # group -> its next job's place in g.ready
        again: list = []                     # heap of the (head band, turn) of groups already reached
        turn = self.next_turn
        entries = iter(self.turns)
        entry = next(entries, None)
        while len(out) < count:
            while entry is not None and entry[2] in at:
                entry = next(entries, None)
            if again and (entry is None or again[0] < entry):
                _, its_turn, name = heappop(again)
            elif entry is not None:
                _, its_turn, name = entry
                entry = next(entries, None)
            else:
                break
            g = members[name]
            i = at.get(name, 0)
            at[name] = i + 1
            jid = g.ready[i] & ID_MASK
            if doomed is not None and doomed(jid):
                if i + 1 < len(g.ready):             # passed over: the group keeps its turn
                    heappush(again, (g.ready[i + 1] >> ID_BITS, its_turn, name))
                continue
            k = taken.get(name, 0) + 1
            taken[name] = k
            out.append(jid)
            if i + 1 < len(g.ready) and k < self._room(g, now):
                heappush(again, (g.ready[i + 1] >> ID_BITS, turn, name))
                turn += 1
        return out

    def next_room(self, now: int) -> int | None:
        """The first moment a full GROUP-RATE window lets a group with ready
        jobs hand one out, or None."""
        self._settle(now)
        return self.rooms[0][0] if self.rooms else None

    # -- what QINFO, INFO and /metrics show --------------------------------------------------------

    def throttled_by(self, now: int, counts: dict) -> int:
        """Add to ``counts`` the ready jobs each group rule holds back now
        (per group, under the rule allowing least); return how many ready
        jobs the group rules let out now."""
        self._settle(now)
        config = self.config
        paused = config.paused_groups
        limit = config.group_concurrency
        rate, span = config.group_rate
        free = 0
        for g in self.members.values():
            ready = len(g.ready)
            if not ready:
                continue
            rules = []
            if paused and g.name in paused:
                rules.append(("group-pause", 0))
            if limit:
                rules.append(("group-concurrency", max(0, limit - g.held)))
            if rate:
                window = self.windows.get(g.name)
                rules.append(("group-rate", max(0, rate - (window.used(now, span) if window is not None else 0))))
            allowed = ready
            if rules:
                reason, n = min(rules, key=lambda rule: rule[1])
                if n < ready:
                    counts[reason] += ready - n
                    allowed = n
            free += allowed
        return free

    def turn_table(self) -> dict[bytes, int]:
        """Each group's turn (what a snapshot keeps)."""
        return {name: g.turn for name, g in self.members.items()}
