"""A queue's jobs by id: ``JobTable``.

What the queue asks of its table: the job of an id (``t[jid]``, ``get``,
``in``), how many there are, every job in ascending id order (``values``,
``items``, iteration over the ids) and the newest first (``newest``), new
jobs (``extend``, ascending ids above every id so far; ``put_many`` for a
snapshot's), a job gone (``del t[jid]``), and QSCAN's step (``scan``).

The class here is the definition: a ``dict`` (its order is ascending id
order, as jobs arrive in id order) and beside it a list of the ids in that
order, which QSCAN bisects to find where a cursor is; the list keeps the
ids of jobs gone until ``compact`` finds it twice as long as the table.
When its compiled twin (``_jobtable.pyx``: the jobs in blocks of 32 ids,
no dict entry and no list entry per job, about 11 bytes a job instead of
50) was built and LEASEQ_PURE is not 1, the name ``JobTable`` is bound to
that one (``COMPILED``); tests/unit/test_jobtable.py holds both to the same
behaviour.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import attrgetter

from .flavour import compiled_twin

_ID = attrgetter("id")


class JobTable(dict):
    __slots__ = ("order",)

    def __init__(self) -> None:
        super().__init__()
        self.order: list[int] = []      # ids in ascending order, some maybe gone (see compact)

    def extend(self, jobs: list) -> None:
        """New jobs, in ascending id order, above every id so far."""
        ids = list(map(_ID, jobs))
        self.update(zip(ids, jobs))
        self.order.extend(ids)

    def put_many(self, ids: list[int], jobs: list) -> None:
        """Jobs read back from a snapshot: ``ids`` theirs, both ascending."""
        self.update(zip(ids, jobs))
        self.order.extend(ids)

    def present(self, ids) -> list:
        """The jobs of ``ids`` this table holds, in the ids' order (a
        replayed record's: one naming a job that is gone skips it)."""
        return [job for job in map(self.get, ids) if job is not None]

    def compact(self) -> None:
        """After jobs went: drop the ids of gone jobs once they are half the list."""
        if len(self.order) > 2 * len(self) + 4096:
            self.order = list(self)

    def clear(self) -> None:
        super().clear()
        self.order.clear()

    def newest(self):
        """The jobs, the newest (highest id) first."""
        return reversed(self.values())

    def scan(self, cursor: int, count: int) -> tuple[int, list]:
        """The jobs with ids above ``cursor``, in ascending id order, at most
        ``count`` looked at: (the cursor to go on from, or 0 at the end;
        the jobs)."""
        order = self.order
        i = bisect_right(order, cursor)
        end = min(i + count, len(order))
        get = self.get
        found = [job for job in map(get, order[i:end]) if job is not None]
        return (order[end - 1] if end < len(order) else 0), found


PureJobTable = JobTable
_twin = compiled_twin("leaseq.storage._jobtable")
COMPILED = _twin is not None
if COMPILED:
    JobTable = _twin.JobTable   # noqa: F811
