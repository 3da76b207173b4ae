"""``Indexes``: the five indexes of one queue, and the table that says which
one holds a job in each state and under which key.

``PLACES`` maps every job state to the ``Indexes`` attribute that holds a
job in that state, the index type, and the job field it is keyed by (the job
id breaks ties; ``storage.index`` has the index types):

* ``READY``     -> ``ready``, a ``ReadyIndex`` by band (priority, ready again
  or not): claim order;
* ``DELAYED``   -> ``delayed``, a ``TimeIndex`` by visible_at;
* ``IN_FLIGHT`` -> ``leases``, a ``TimeIndex`` by lease deadline;
* ``DEAD``      -> ``dead``, a ``TimeIndex`` of jobs dead in their own queue
  (no DEADLETTER) by the moment RETAIN-DEAD lets them go;
* ``COMPLETED`` -> ``completed``, a ``TimeIndex`` of acked jobs kept by
  RETAIN-COMPLETED, by the moment they go;
* ``WAITING``   -> ``waiting``, a ``TimeIndex`` of jobs waiting for their
  parents (AFTER), by enqueued_at;
* ``CANCELLED`` -> ``cancelled``, a ``TimeIndex`` of jobs ended by QCANCEL,
  by the moment RETAIN-DEAD lets them go.

A job sits in exactly one index, the one its ``state`` names.  ``add``,
``remove`` and ``move`` (remove with the old key, change the fields, add
with the new key: the one way to change a field that positions a job) read
the table.  The queue's bulk paths (a push, a claim of the ready head, an
ack, lazy expiry) reach the index they know directly, in bulk.

A queue with groups also has ``groups`` (``storage.groups``, else None):
``add``, ``remove`` and ``move`` tell it each job that enters or leaves an
index, and so must the bulk paths (``Queue`` does, when ``groups`` is set).
"""

from __future__ import annotations

from operator import attrgetter

from .bands import band as ready_band
from .index import ReadyIndex, TimeIndex
from .job import CANCELLED, COMPLETED, DEAD, DELAYED, IN_FLIGHT, READY, WAITING, Job


def band(job: Job) -> int:
    """The job's band in ``ReadyIndex`` (storage/bands.py)."""
    return ready_band(job.priority, job.requeued)


# state -> (attribute, index type, the job's key in it); in the order counts() lists them
PLACES = {
    READY: ("ready", ReadyIndex, band),
    DELAYED: ("delayed", TimeIndex, attrgetter("visible_at")),
    IN_FLIGHT: ("leases", TimeIndex, attrgetter("deadline")),
    DEAD: ("dead", TimeIndex, attrgetter("retain_until")),
    COMPLETED: ("completed", TimeIndex, attrgetter("retain_until")),
    WAITING: ("waiting", TimeIndex, attrgetter("enqueued_at")),
    CANCELLED: ("cancelled", TimeIndex, attrgetter("retain_until")),
}


class Bulk:
    """Jobs read back from a snapshot, sorted for ``Indexes.restore``: ready
    ids by band, delayed ids by visible_at, and ``single``, the jobs to index
    one by one."""

    __slots__ = ("ready", "delayed", "single")

    def __init__(self, single: list[Job] | None = None) -> None:
        self.ready: dict[int, list[int]] = {}
        self.delayed: dict[int, list[int]] = {}
        self.single: list[Job] = [] if single is None else single


class Indexes:
    __slots__ = ("ready", "delayed", "leases", "dead", "completed", "waiting", "cancelled", "_place", "groups")

    def __init__(self) -> None:
        self.groups = None          # storage.groups.Groups of a queue with groups
        self._place = {}            # state -> (index, key)
        for state, (name, kind, key) in PLACES.items():
            index = kind()
            setattr(self, name, index)
            self._place[state] = (index, key)

    def index_of(self, state: bytes):
        """The index that holds jobs in ``state``."""
        return self._place[state][0]

    def add(self, job: Job) -> None:
        """Put the job in the index its state names."""
        index, key = self._place[job.state]
        index.add(key(job), job.id)
        if self.groups is not None:
            self.groups.enter(job)

    def remove(self, job: Job, staying: bool = False) -> None:
        """Take the job out of the index its state names (a job whose state
        is None is in none and is left alone); ``staying``: it is re-added
        at once (``move``)."""
        place = self._place.get(job.state)
        if place is not None:
            index, key = place
            index.remove(key(job), job.id)
            if self.groups is not None:
                self.groups.leave(job, staying)

    def move(self, job: Job, **fields) -> None:
        """The one way to change fields that position a job: remove, change, re-add."""
        self.remove(job, staying=True)
        for name, value in fields.items():
            setattr(job, name, value)
        self.add(job)

    def restore(self, jobs: list[Job], bulk: Bulk | None = None) -> None:
        """Index jobs read back from a snapshot (ascending ids, each with its
        state set): those ``bulk`` sorted already (ready ids by band, delayed
        ids by visible_at) in one update each, the rest one by one (without
        ``bulk``: every job)."""
        if bulk is None:
            bulk = Bulk(jobs)
        ready = bulk.ready
        place = self._place
        for job in bulk.single:
            if job.state is READY:
                ready.setdefault(band(job), []).append(job.id)
            else:
                index, key = place[job.state]
                index.add(key(job), job.id)
        for b, ids in ready.items():
            self.ready.update(b, ids)
        for when, ids in bulk.delayed.items():
            self.delayed.add_many(when, ids)
        if self.groups is not None:
            for job in jobs:
                self.groups.enter(job)

    def clear(self) -> None:
        for index, _ in self._place.values():
            index.clear()
        if self.groups is not None:
            self.groups = type(self.groups)(self.groups.config)

    def counts(self) -> dict[str, int]:
        """Jobs by state, as they stand (nothing folded): what INFO, /metrics
        and the status page show."""
        return {state.decode(): len(index) for state, (index, _) in self._place.items()}

    def next_due(self) -> int | None:
        """The next moment (ms epoch) at which a job becomes claimable by time."""
        a, b = self.delayed.first(), self.leases.first()
        if a is None:
            return b
        return a if b is None or a < b else b
