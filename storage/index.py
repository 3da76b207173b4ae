"""``TimeIndex``: job ids ordered by a moment (a lease deadline, a visible_at).

A ``SortedDict`` from moment to the set of job ids due then.  Jobs that change
together share a moment (every job of one QCLAIM has the same deadline, every
job of one delayed QPUSHMANY the same visible_at), so a claim of 100 jobs is
one sorted insert and 100 set additions, and an ack 100 set removals, instead
of 100 sorted inserts and removals.  Iteration and ``pop_due`` yield
``(moment, id)`` in ascending order of both: the order is total.
"""

from __future__ import annotations

from sortedcontainers import SortedDict


class TimeIndex:
    __slots__ = ("_by_time", "_len")

    def __init__(self) -> None:
        self._by_time = SortedDict()
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self):
        for when, ids in self._by_time.items():
            for jid in sorted(ids):
                yield when, jid

    def add(self, when: int, jid: int) -> None:
        ids = self._by_time.get(when)
        if ids is None:
            self._by_time[when] = {jid}
        elif jid in ids:
            return
        else:
            ids.add(jid)
        self._len += 1

    def add_many(self, when: int, jids) -> None:
        if not jids:
            return
        ids = self._by_time.get(when)
        if ids is None:
            ids = self._by_time[when] = set()
        before = len(ids)
        ids.update(jids)
        self._len += len(ids) - before

    def remove(self, when: int, jid: int) -> None:
        """Remove an entry that is present (KeyError otherwise: a bug)."""
        ids = self._by_time[when]
        ids.remove(jid)
        self._len -= 1
        if not ids:
            del self._by_time[when]

    def first(self) -> int | None:
        """The earliest moment, or None when empty."""
        return self._by_time.peekitem(0)[0] if self._by_time else None

    def pop_due(self, now: int) -> list[int]:
        """Remove and return the ids whose moment is ``<= now``, in order."""
        due: list[int] = []
        by_time = self._by_time
        while by_time:
            when, ids = by_time.peekitem(0)
            if when > now:
                break
            by_time.popitem(0)
            due.extend(sorted(ids))
        self._len -= len(due)
        return due

    def clear(self) -> None:
        self._by_time.clear()
        self._len = 0
