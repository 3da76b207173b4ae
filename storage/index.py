"""``TimeIndex``: job ids ordered by a moment (a lease deadline, a visible_at).

A ``SortedDict`` from moment to the set of job ids due then.  Jobs that change
together share a moment (every job of one QCLAIM has the same deadline, every
job of one delayed QPUSHMANY the same visible_at), so a claim of 100 jobs is
one sorted insert and 100 set additions, and an ack 100 set removals, instead
of 100 sorted inserts and removals.  Iteration and ``pop_due`` yield
``(moment, id)`` in ascending order of both: the order is total.

These are the definitions.  ``storage/_index.pyx`` is their compiled twin,
the same behaviour with the entries held as C numbers (docs/performance.md,
"The indexes in C"); ``TimeIndex`` and ``ReadyIndex`` below name it when it
was built and LEASEQ_PURE is not 1, ``PureTimeIndex`` and ``PureReadyIndex``
always name these.
"""

from __future__ import annotations

from sortedcontainers import SortedDict, SortedList

from .bands import BANDS
from .flavour import compiled_twin


# ``TimeIndex.earliest`` of an empty index: later than any moment (ms since
# the epoch), so ``index.earliest <= now`` is false without a test for empty
NEVER = 1 << 62


class TimeIndex:
    """``earliest`` is the first moment held (``NEVER`` when empty), kept as
    a plain attribute: lazy expiry asks every index of a queue whether
    anything is due at every claim (``earliest <= now``), and a look into the
    ``SortedDict`` was several Python calls per index."""

    __slots__ = ("_by_time", "_len", "earliest")

    def __init__(self) -> None:
        self._by_time = SortedDict()
        self._len = 0
        self.earliest = NEVER

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
            if when < self.earliest:
                self.earliest = when
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
            if when < self.earliest:
                self.earliest = when
        before = len(ids)
        ids.update(jids)
        self._len += len(ids) - before

    def remove(self, when: int, jid: int) -> None:
        """Remove an entry that is present (KeyError otherwise: a bug)."""
        ids = self._by_time[when]
        ids.remove(jid)
        self._len -= 1
        if not ids:
            self._drop(when)

    def remove_many(self, when: int, jids: list) -> None:
        """``remove`` of several entries at one moment, all present."""
        ids = self._by_time[when]
        before = len(ids)
        ids.difference_update(jids)
        if len(ids) != before - len(jids):
            raise KeyError(f"not all of {len(jids)} ids were indexed at {when}")
        self._len -= len(jids)
        if not ids:
            self._drop(when)

    def _drop(self, when: int) -> None:
        """A moment left with no ids goes (and ``earliest`` moves on if it was that one)."""
        by_time = self._by_time
        del by_time[when]
        if when == self.earliest:
            self.earliest = by_time.peekitem(0)[0] if by_time else NEVER

    def first(self) -> int | None:
        """The earliest moment, or None when empty."""
        return self.earliest if self._len else None

    def last(self, count: int) -> list[int]:
        """Up to ``count`` ids of the latest moments, latest first: a look at
        the end of the index that costs ``count`` steps, whatever its size."""
        found: list[int] = []
        for _when, ids in reversed(self._by_time.items()):
            found.extend(sorted(ids, reverse=True)[:count - len(found)])
            if len(found) >= count:
                break
        return found

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
        self.earliest = by_time.peekitem(0)[0] if by_time else NEVER
        return due

    def clear(self) -> None:
        self._by_time.clear()
        self._len = 0
        self.earliest = NEVER


class ReadyIndex:
    """Ready job ids in claim order: higher priority first; within a
    priority, jobs ready again (expired lease, nack) before jobs never
    handed out; then ascending id.

    Twenty ``SortedList`` bands, one per (priority, ready again or not), kept
    in claim order.  A band holds the jobs' own id ints, so an entry costs one
    pointer (a single sorted list would need a composite key: a 36-byte int
    per job).  Fresh jobs arrive in ascending id order: appending to a band is
    cheap.

    ``_filled`` has bit ``b`` set exactly when band ``b`` holds ids, so a
    claim visits the bands that hold something: jobs of the default
    priority are in the last band, and a walk over all twenty was most of a
    one-job claim's look at the index."""

    __slots__ = ("_bands", "_len", "_filled")

    BANDS = BANDS

    def __init__(self) -> None:
        self._bands = [SortedList() for _ in range(BANDS)]
        self._len = 0
        self._filled = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self):
        for band in self._bands:
            yield from band

    def items(self) -> list[tuple[int, int]]:
        """Every entry as (band, id), in claim order."""
        return [(b, jid) for b, band in enumerate(self._bands) for jid in band]

    def add(self, band: int, jid: int) -> None:
        self._bands[band].add(jid)
        self._len += 1
        self._filled |= 1 << band

    def append_new(self, band: int, jids: list) -> None:
        """Add ids that are above every id in the band, ascending (new jobs):
        appended to the band's last sublist at once instead of one ``add``
        each, a fifth of a push's cost.  This reaches into sortedcontainers'
        layout (``_lists``, ``_maxes``, ``_index``, ``_load``, ``_len``, the
        same since 2.0; 2.4 is current), and tests/unit/test_index.py checks
        the list's own invariants (``SortedList._check``) after it."""
        band_list = self._bands[band]
        self._len += len(jids)
        self._filled |= 1 << band
        lists, maxes, load = band_list._lists, band_list._maxes, band_list._load
        if maxes:
            lists[-1].extend(jids)
            maxes[-1] = jids[-1]
        else:                               # an empty band (``update`` sorts and chunks: a tenth of a push)
            lists.append(list(jids))
            maxes.append(jids[-1])
        band_list._len += len(jids)
        del band_list._index[:]             # positions changed: rebuilt when next needed
        while len(lists[-1]) > load << 1:   # split as SortedList._expand does
            tail = lists[-1]
            half = tail[load:]
            del tail[load:]
            maxes[-1] = tail[-1]
            lists.append(half)
            maxes.append(half[-1])

    def update(self, band: int, jids: list) -> None:
        if jids:
            self._bands[band].update(jids)
            self._len += len(jids)
            self._filled |= 1 << band

    def remove(self, band: int, jid: int) -> None:
        """Remove an entry that is present (ValueError otherwise: a bug)."""
        band_list = self._bands[band]
        band_list.remove(jid)
        self._len -= 1
        if not band_list._len:
            self._filled &= ~(1 << band)

    def first(self, count: int) -> list[int]:
        """The first ``count`` ids in claim order, from the filled bands only
        (a band's size is read as ``_len``: ``len(band)`` is a Python call)."""
        out: list[int] = []
        filled, bands = self._filled, self._bands
        while filled:
            low = filled & -filled                 # the first filled band's bit
            out.extend(bands[low.bit_length() - 1].islice(0, count - len(out)))
            if len(out) >= count:
                break
            filled ^= low
        return out

    def pop_first(self, count: int) -> None:
        """Remove the first ``count`` ids in claim order."""
        self._len -= count
        bands = self._bands
        while count > 0 and self._filled:
            low = self._filled & -self._filled
            band = bands[low.bit_length() - 1]
            n = min(count, band._len)
            _drop_head(band, n)
            count -= n
            if not band._len:
                self._filled ^= low

    def oldest(self) -> int | None:
        """The smallest id of all (ids follow enqueue order: the job pushed first)."""
        heads = [band[0] for band in self._bands if band]
        return min(heads) if heads else None

    def clear(self) -> None:
        for band in self._bands:
            band.clear()
        self._len = 0
        self._filled = 0


def _drop_head(band: SortedList, n: int) -> None:
    """Remove the first ``n`` ids of ``band`` (0 < n <= len(band)) at once:
    whole sublists, then a slice of the next.  ``del band[:n]`` removes
    them one at a time (a position look-up and a delete each: 13 % of W2's
    claims and acks in a profile).  Like ``append_new`` this reaches into
    sortedcontainers' layout, and keeps its invariants as ``_delete`` does:
    a short first sublist is merged into the next (and split again by
    ``_expand`` when that makes it too long); tests/unit/test_index.py runs
    ``SortedList._check`` after it."""
    lists, maxes = band._lists, band._maxes
    band._len -= n
    k = 0
    while n and n >= len(lists[k]):
        n -= len(lists[k])
        k += 1
    if k:
        del lists[:k]
        del maxes[:k]
    del band._index[:]
    if n:
        del lists[0][:n]
        if len(lists) > 1 and len(lists[0]) < band._load >> 1:
            lists[1][:0] = lists[0]
            del lists[0]
            del maxes[0]
            band._expand(0)


PureReadyIndex, PureTimeIndex = ReadyIndex, TimeIndex
_twin = compiled_twin("leaseq.storage._index")
COMPILED = _twin is not None
if COMPILED:
    ReadyIndex, TimeIndex = _twin.ReadyIndex, _twin.TimeIndex   # noqa: F811
