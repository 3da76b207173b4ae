"""Schedules: jobs the daemon's clock pushes (docs/semantics.md §3.9).

A ``Schedule`` belongs to a queue (``Queue.schedules``, by name) and says
when it ticks (CRON in a time zone, or EVERY n ms), what each tick pushes
(payload, priority) and what to do with ticks found late (MISFIRE) or while
the previous tick's job is still live (OVERLAP).  ``Timetable`` keeps every
schedule of the store ordered by its next tick, so the daemon arms one timer
for the first.

Firing is one transition, ``Timetable.fire``: it decides (``plan``) which
due ticks push a job and which are skipped, pushes the jobs and moves the
schedule to its next tick, and writes all of it as one FIRE record.  A crash
therefore keeps a tick's job and the schedule's advance together, or loses
both (the tick is then due again after the restart): never one twice, never
one without the other.  Replay applies the same record with
``Timetable.apply_fire``.  Nothing here reads a clock: ``now`` is passed in.

CRON expressions are read by cronsim (crontab(5), as Debian's cron reads
them), with the ``@hourly`` family mapped to their five fields here; a time
zone is an IANA name read by zoneinfo, and daylight-saving changes are
cronsim's: a tick at a wall-clock time that does not exist fires at the
next one that does, a fixed time that happens twice fires once, and
interval fields (``*/30``) fire in both copies of a repeated hour.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from sortedcontainers import SortedList

from . import records
from .job import DELAYED, IN_FLIGHT, READY, Job

log = logging.getLogger(__name__)

ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
MISFIRES = ("skip", "once", "all")
OVERLAPS = ("allow", "skip")
GRACE_MS = 1000           # a tick fired later than this after its moment was missed
MAX_CATCH_UP = 1000       # MISFIRE all pushes at most this many missed ticks, else acts as once
MAX_COUNTED = 100_000     # missed CRON ticks counted one by one up to this many
LIVE = (READY, DELAYED, IN_FLIGHT)


class BadSpec(ValueError):
    """A CRON expression or time zone that cannot be used (the message says why)."""


@dataclass
class Schedule:
    name: bytes
    payload: bytes
    cron: str | None = None       # five fields (an @alias is stored as given)
    tz: str = "UTC"
    every: int = 0                # ms, when not CRON
    priority: int = 5
    misfire: str = "skip"
    overlap: str = "allow"
    next: int = 0                 # ms epoch of the next tick
    last: int = 0                 # ms epoch of the last tick that pushed a job (0: none yet)
    fired: int = 0                # jobs pushed
    skipped: int = 0              # ticks that pushed none (missed and skipped, or OVERLAP skip)
    last_job: int = 0             # id of the job the last tick pushed (OVERLAP skip looks at it)
    meta: tuple | None = None     # META: ((field, value), ...) every job it pushes carries

    def definition(self) -> tuple:
        """What QSCHEDULE set: equal definitions make QSCHEDULE idempotent."""
        return (self.payload, self.cron, self.tz, self.every, self.priority, self.misfire, self.overlap, self.meta)

    @property
    def spec(self) -> str:
        """The tick rule as QSCHEDULES shows it."""
        if self.cron is None:
            return f"EVERY {self.every}"
        return f"CRON {self.cron}" + ("" if self.tz == "UTC" else f" TZ {self.tz}")

    def to_json(self) -> dict:
        d = asdict(self)
        d["name"] = self.name.decode("latin-1")          # any bytes, one character each
        d["payload"] = self.payload.decode("latin-1")
        if self.meta is None:
            del d["meta"]                                 # (as records written before META read)
        else:
            d["meta"] = [[n.decode("latin-1"), v.decode("latin-1")] for n, v in self.meta]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Schedule":
        """The schedule a SCHEDULE record or a snapshot holds (FormatError if it is not one)."""
        try:
            values = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
            values["name"] = values["name"].encode("latin-1")
            values["payload"] = values["payload"].encode("latin-1")
            if values.get("meta") is not None:
                values["meta"] = tuple((n.encode("latin-1"), v.encode("latin-1")) for n, v in values["meta"])
            return cls(**values)
        except (AttributeError, KeyError, TypeError, ValueError, UnicodeEncodeError) as e:
            raise records.FormatError(f"a schedule does not decode: {e!r}") from None


# -- ticks ---------------------------------------------------------------------------------------

def check_cron(expr: str, tz: str) -> None:
    """Raise BadSpec unless ``expr`` in zone ``tz`` can tick."""
    zone = _zone(tz)
    try:
        next(CronSim(ALIASES.get(expr.lower(), expr), datetime.now(zone)))
    except (CronSimError, StopIteration, ValueError) as e:
        raise BadSpec(f"invalid CRON expression '{expr}': {e}") from None


def _zone(tz: str):
    if tz.upper() == "UTC":
        return timezone.utc
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadSpec(f"unknown time zone '{tz}'") from None


def ticks_after(s: Schedule, t: int):
    """The schedule's ticks strictly after ``t`` (ms epoch), in order."""
    if s.cron is None:
        first = s.next + ((t - s.next) // s.every + 1) * s.every if t >= s.next else s.next
        tick = first
        while True:
            yield tick
            tick += s.every
    zone = _zone(s.tz)
    start = datetime.fromtimestamp(t / 1000, zone)
    for moment in CronSim(ALIASES.get(s.cron.lower(), s.cron), start):
        yield int(moment.timestamp() * 1000)


def first_tick(s: Schedule, now: int) -> int:
    """The first tick of a new schedule: EVERY ms from now, or CRON's next match."""
    if s.cron is None:
        return now + s.every
    return next(ticks_after(s, now))


class Plan:
    """What one firing does: ``fire`` the ticks that push a job (in order),
    ``skipped`` how many ticks push none, ``next`` the following tick."""

    __slots__ = ("fire", "skipped", "next")

    def __init__(self, fire: list, skipped: int, next_tick: int) -> None:
        self.fire = fire
        self.skipped = skipped
        self.next = next_tick


def plan(s: Schedule, now: int, previous_live: bool) -> Plan:
    """The ticks of ``s`` due at ``now`` (from ``s.next`` on), and what MISFIRE
    and OVERLAP make of them; ``previous_live``: the last tick's job is still
    ready, delayed or in flight."""
    due: list[int] = []
    counted = 0                           # due ticks beyond the ones listed (EVERY, counted by arithmetic)
    if s.cron is None:
        n = (now - s.next) // s.every + 1
        if n > MAX_CATCH_UP + 1:
            counted = n - (MAX_CATCH_UP + 1)
            n = MAX_CATCH_UP + 1
        due = [s.next + (counted + i) * s.every for i in range(n)]
        next_tick = s.next + (counted + n) * s.every
    else:
        ticks = ticks_after(s, s.next - 1)
        next_tick = next(ticks)
        while next_tick <= now and len(due) < MAX_COUNTED:
            due.append(next_tick)
            next_tick = next(ticks)
        if next_tick <= now:              # more than MAX_COUNTED missed: count no further
            next_tick = next(ticks_after(s, now))
        if len(due) > MAX_CATCH_UP + 1:
            counted = len(due) - (MAX_CATCH_UP + 1)
            due = due[counted:]
    missed = [t for t in due if now - t > GRACE_MS]
    on_time = due[len(missed):]
    missed_count = len(missed) + counted
    fire: list[int] = []
    skipped = 0
    if missed_count:
        if s.misfire == "skip":
            skipped += missed_count
        elif s.misfire == "once" or missed_count > MAX_CATCH_UP:
            if s.misfire == "all":
                log.warning("schedule %r: %d ticks were missed, more than %d: pushing one job for them all",
                            s.name.decode(errors="replace"), missed_count, MAX_CATCH_UP)
            fire.append(missed[-1])
            skipped += missed_count - 1
        else:
            fire += missed
    fire += on_time
    if s.overlap == "skip" and fire:
        keep = [] if previous_live else fire[:1]     # each pushed job is live when the next tick comes
        skipped += len(fire) - len(keep)
        fire = keep
    return Plan(fire, skipped, next_tick)


# -- the store's schedules ---------------------------------------------------------------------------

class Timetable:
    """Every schedule of a store, ordered by next tick, and the transitions
    that change them (each logged: SCHEDULE, UNSCHEDULE, FIRE)."""

    def __init__(self, store) -> None:
        self.store = store
        self.order = SortedList()          # (next, qid, name)
        self.on_change = None              # the daemon's: the first tick may have moved

    def first(self) -> int | None:
        return self.order[0][0] if self.order else None

    def _placed(self, q, s: Schedule, before: int | None) -> None:
        if before is not None:
            self.order.remove((before, q.qid, s.name))
        if s.name in q.schedules:
            self.order.add((s.next, q.qid, s.name))
        if self.on_change is not None:
            self.on_change()

    # -- transitions ---------------------------------------------------------------------------------

    def define(self, q, s: Schedule, ts: int) -> None:
        """QSCHEDULE: create or replace ``s`` (its ``next`` already set)."""
        self.apply_define(q, s)
        self.store.journal.meta_record(records.SCHEDULE, records.schedule(q.qid, ts, s.to_json()))

    def apply_define(self, q, s: Schedule) -> None:
        old = q.schedules.get(s.name)
        q.schedules[s.name] = s
        self._placed(q, s, old.next if old is not None else None)

    def remove(self, q, name: bytes, ts: int) -> bool:
        """QUNSCHEDULE."""
        if name not in q.schedules:
            return False
        self.apply_remove(q, name)
        self.store.journal.meta_record(records.UNSCHEDULE, records.unschedule(q.qid, ts, name))
        return True

    def apply_remove(self, q, name: bytes) -> None:
        s = q.schedules.pop(name, None)
        if s is not None:
            self.order.remove((s.next, q.qid, name))
            if self.on_change is not None:
                self.on_change()

    def queue_dropped(self, q) -> None:
        for s in q.schedules.values():
            self.order.remove((s.next, q.qid, s.name))
        q.schedules.clear()

    def fire_due(self, now: int) -> int:
        """Fire every schedule whose next tick has come; how many fired."""
        fired = 0
        while self.order and self.order[0][0] <= now:
            _next, qid, name = self.order[0]
            q = self.store.by_qid[qid]
            self.fire(q, q.schedules[name], now)
            fired += 1
        return fired

    def fire(self, q, s: Schedule, now: int) -> None:
        previous = q.jobs.get(s.last_job) if s.last_job else None
        p = plan(s, now, previous is not None and previous.state in LIVE)
        first = self.store.take_ids(q, len(p.fire)) if p.fire else 0
        pairs = [(first + i, tick) for i, tick in enumerate(p.fire)]
        body = records.fire(q.qid, now, s.name, p.next, p.skipped, pairs)
        self.apply_fire(q, s, now, pairs, p.next, p.skipped)
        self.store.journal.job_record(q, records.FIRE, body)

    def apply_fire(self, q, s: Schedule, ts: int, pairs: list, next_tick: int, skipped: int) -> None:
        """The state change of a FIRE record: the jobs ``pairs`` (id, tick)
        are pushed, the schedule moves to ``next_tick``."""
        if pairs:
            jobs = []
            for jid, tick in pairs:
                job = Job(jid, s.payload, s.priority, ts, ts)
                if s.meta is not None:
                    job.meta = s.meta
                job.schedule = s.name
                job.tick = tick
                jobs.append(job)
            self.store.arrive(q, jobs, ts)
            s.fired += len(pairs)
            s.last = pairs[-1][1]
            s.last_job = pairs[-1][0]
        s.skipped += skipped
        before = s.next
        s.next = next_tick
        self._placed(q, s, before)

    def restore(self, q, schedules: list[Schedule]) -> None:
        """Schedules read back from a snapshot."""
        for s in schedules:
            q.schedules[s.name] = s
            self.order.add((s.next, q.qid, s.name))

