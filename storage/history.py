"""A queue's history, minute by minute: what QHISTORY, ``GET
/api/queues/<q>/history`` and the status page's charts show.

Where it is counted.  Two sources, each seen by every flavour and every
way (the ``Store`` transitions and the plain transitions' short ways,
storage/plain.py, alike):

* the queue's own counters (``Queue.counters``, which QINFO and /metrics
  show and both flavours keep): a minute's pushed, acked, nacked, dead and
  expired are how much each rose during it.  A push costs the history
  nothing.
* the job records the journal keeps: ``Journal.job_record`` and
  ``note_record`` (storage/journal.py) call ``History.seen(q, type, body)``
  for every CLAIM and CANCEL, and for the records that end leases (ACK,
  NACK, EXPIRE, DEAD) while ``sampled`` jobs are in flight, after the
  journal's own test that the record is kept at all (so recovery, whose
  journal has no log, counts nothing, and a memory queue, whose job
  records are never kept, has counts and depth but no claims, cancels,
  waits or runs).

=========  ================================================================
field      counted from
=========  ================================================================
pushed     ``counters.pushed``: QPUSH, QPUSHMANY, a schedule's jobs
claimed    CLAIM records: their job counts
acked      ``counters.acked``
nacked     ``counters.nacked``: QNACK (with DEAD too); not the leases let go
           because their connection closed
dead       ``counters.dead_lettered``: any reason (max deliveries, QNACK
           DEAD, EXPIRE, a parent)
cancelled  CANCEL records
expired    ``counters.lease_expired``: leases that ran out
wait_p*    a sampled CLAIM record's jobs on their first delivery: the claim's
           time minus the job's push time (``enqueued_at``), in ms
run_p*     an ACK of a job whose claim was sampled: the ack's time minus the
           claim's
ready,     ``len(indexes.ready)`` and ``len(indexes.leases)`` when the minute
in_flight  closes
=========  ================================================================

Sampling.  At a few claims a second every claim record is looked at; above,
one in ``stride``, the stride set every second from the last second's
claims so that a minute samples about ``SAMPLES_A_MINUTE`` (4,096) records,
and doubled whenever the minute's samples run ahead of their share of that
by the time of the record (a burst, or a queue's first second).  A
claim record not sampled costs a call, one ``unpack`` and two additions;
an ACK nothing while no sampled job is in flight, else one lookup of its
job among them.  The percentiles
come from a small histogram per queue for the open minute (``Histogram``: 8
buckets per power of two, so a value is reported within 6.25 %, exact below
16 ms).  When a minute closes (``tick``, every second and when DEBUG moves
the clock) each queue's row is written and the counts start again; only the
rows are kept.  A row all zero (an empty queue nobody used) is not kept.  A
store rebuilt after a disk fault (``rebase``) loses the counts of that
minute.

On disk, in ``<data dir>/history/``, one file per hour (``<hour ms>.hist``),
appended to as minutes close, each record ``crc32c u32, length u16, body``
with body ``minute u64 (ms epoch), name_len u16, name, 15 x u32`` (the fields
of ``FIELDS`` in order).  A record that is short or fails its CRC ends the
file (a torn tail after a crash: cut off when the file is next appended to).
A kill -9 loses at most the open minute (a stop writes it, and a row of a
minute seen twice is merged: counts added, the last depth, the percentiles
of the part with more claims or acks).  No fsync: a crash of the machine
may lose the minutes its page cache held.  Files older than ``hours`` go at the next
minute; ``hours`` 0 turns history off (nothing counted, kept or written).

In memory each queue keeps two ``array`` columns: minute numbers and the 15
fields of each, 64 bytes a minute (about 270 KiB a queue at 72 hours).
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from bisect import bisect_left, bisect_right

from crc32c import crc32c

from . import records

log = logging.getLogger(__name__)

MINUTE = 60_000
HOUR = 3_600_000
FIELDS = ("pushed", "claimed", "acked", "nacked", "dead", "cancelled", "expired",
          "wait_p50", "wait_p95", "wait_p99", "run_p50", "run_p95", "run_p99", "ready", "in_flight")
NFIELDS = len(FIELDS)
COUNTS = 7                        # the first fields are counts (added when minutes merge)
PERCENTILES = (0.50, 0.95, 0.99)
U32 = (1 << 32) - 1
MAX_NAME = 1 << 16

_HEAD = struct.Struct("<IH")                  # crc32c, body length
_ROW = struct.Struct(f"<{NFIELDS}I")
_MINUTE_NAME = struct.Struct("<QH")
_U32_AT = struct.Struct("<I").unpack_from
_TS_AT = struct.Struct("<Q").unpack_from
_ID = struct.Struct("<Q")
_ID1 = _ID.unpack_from
_U16_AT = struct.Struct("<H").unpack_from
_B_AT = struct.Struct("<B").unpack_from

CLAIM, ACK, NACK, DEAD, CANCEL, EXPIRE = (records.CLAIM, records.ACK, records.NACK, records.DEAD, records.CANCEL,
                                         records.EXPIRE)
# where the fields read here sit in a record's body (storage/records.py)
_TS, _IDS, _COUNT = records.TS_AT, records.IDS_AT, records.IDS_COUNT_AT
_INFLIGHT_CAP = 1 << 20           # claim times kept per queue (jobs in flight); beyond, runs go uncounted


def _ids(body: bytes, at: int, n: int):
    if n == 1:
        return _ID1(body, at)
    return struct.unpack_from(f"<{n}Q", body, at)


class Histogram:
    """Counts of values (ms) in buckets 8 to a power of two; bucket ``b`` of
    ``v``: ``v`` itself below 16, else ``8 * (bits - 3)`` plus the three
    bits after the highest.  A value is reported as its bucket's middle,
    within 1/16 (6.25 %) of it.  At most 8 x 30 buckets for 32-bit values:
    a dict of those seen."""

    __slots__ = ("counts", "n")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0

    def add(self, v: int) -> None:
        if v < 16:
            b = max(0, v)
        else:
            bits = v.bit_length()
            b = 8 * (bits - 3) + ((v >> (bits - 4)) & 7)
        c = self.counts
        c[b] = c.get(b, 0) + 1
        self.n += 1

    @staticmethod
    def value(b: int) -> int:
        """The middle of bucket ``b`` (its value, below 16)."""
        if b < 16:
            return b
        bits, sub = b // 8 + 3, b % 8
        width = 1 << (bits - 4)
        return (8 + sub) * width + width // 2

    def percentiles(self) -> tuple[int, ...]:
        if not self.n:
            return (0,) * len(PERCENTILES)
        ranks = [max(1, -(-int(p * self.n * 1000) // 1000)) for p in PERCENTILES]   # ceil(p * n)
        out, seen, i = [], 0, 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            while i < len(ranks) and seen >= ranks[i]:
                out.append(min(self.value(b), U32))
                i += 1
        return tuple(out)


COUNTERS = ("pushed", "acked", "nacked", "dead_lettered", "lease_expired")
SAMPLES_A_MINUTE = 4096


def counters_of(q) -> tuple:
    c = q.counters
    return (c.pushed, c.acked, c.nacked, c.dead_lettered, c.lease_expired)


class Track:
    """One queue's open minute: the queue's counters when it opened, the
    claims and cancels counted from records, the histograms, which claim
    records to sample, and the claim time of each sampled job in flight."""

    __slots__ = ("base", "cancelled", "claimed", "claimed_at", "claims_then", "countdown", "queue", "run", "stride",
                 "wait")

    def __init__(self, q, base: tuple = (0,) * len(COUNTERS)) -> None:
        self.queue = q
        self.base = base                 # q.counters' COUNTERS when the minute opened
        self.claimed = 0
        self.cancelled = 0
        self.wait = Histogram()
        self.run = Histogram()
        self.claimed_at: dict[bytes, int] = {}     # a sampled job's id (u64 LE bytes) -> its claim's time
        self.stride = 1                  # one claim record in ``stride`` is looked at for wait and run
        self.countdown = 1
        self.claims_then = 0             # ``claimed`` at the last tick (for the stride)

    def row(self, q) -> tuple[int, ...]:
        ready = in_flight = 0
        counts = [0] * len(COUNTERS)
        if q is not None:
            ready, in_flight = len(q.indexes.ready), len(q.indexes.leases)
            if q is self.queue:
                counts = [max(0, v - b) for v, b in zip(counters_of(q), self.base)]
        pushed, acked, nacked, dead, expired = counts
        return tuple(min(c, U32) for c in (pushed, self.claimed, acked, nacked, dead, self.cancelled, expired)) + (
            self.wait.percentiles() + self.run.percentiles() + (min(ready, U32), min(in_flight, U32)))

    def restart(self, q) -> None:
        """The next minute: counts from here on."""
        self.queue = q
        self.base = counters_of(q)
        self.claimed = self.cancelled = self.claims_then = 0
        if self.wait.n:
            self.wait = Histogram()
        if self.run.n:
            self.run = Histogram()

    def pace(self) -> None:
        """Every second: sample about ``SAMPLES_A_MINUTE`` claim records a
        minute at the rate of the last second."""
        per_second = self.claimed - self.claims_then
        self.claims_then = self.claimed
        self.stride = max(1, per_second * 60 // SAMPLES_A_MINUTE)
        self.countdown = min(self.countdown, self.stride)


class Series:
    """One queue's kept minutes: ``minutes`` (minute numbers, ascending) and
    ``rows`` (``NFIELDS`` values a minute)."""

    __slots__ = ("minutes", "rows")

    def __init__(self) -> None:
        self.minutes = array("I")
        self.rows = array("I")

    def put(self, minute_no: int, row) -> None:
        minutes = self.minutes
        if minutes and minutes[-1] >= minute_no:
            i = bisect_left(minutes, minute_no)
            if i < len(minutes) and minutes[i] == minute_no:
                at = i * NFIELDS
                self.rows[at:at + NFIELDS] = array("I", merge(self.rows[at:at + NFIELDS], row))
                return
            minutes.insert(i, minute_no)
            self.rows[i * NFIELDS:i * NFIELDS] = array("I", row)
            return
        minutes.append(minute_no)
        self.rows.extend(row)

    def prune(self, first_kept: int) -> None:
        k = bisect_left(self.minutes, first_kept)
        if k:
            del self.minutes[:k]
            del self.rows[:k * NFIELDS]

    def between(self, lo: int, hi: int) -> list[tuple[int, tuple]]:
        """(minute ms, row) for the minutes from ``lo`` to ``hi`` ms, both included."""
        minutes, rows = self.minutes, self.rows
        i = bisect_left(minutes, max(0, -(-lo // MINUTE)))
        j = bisect_right(minutes, max(0, hi // MINUTE))
        return [(minutes[k] * MINUTE, tuple(rows[k * NFIELDS:(k + 1) * NFIELDS])) for k in range(i, j)]

    def nbytes(self) -> int:
        return self.minutes.buffer_info()[1] * self.minutes.itemsize + self.rows.buffer_info()[1] * self.rows.itemsize


def merge(old, new) -> tuple:
    """Two rows of one minute: counts added, depth the later's, each
    percentile trio from the row with more samples (claims, acks)."""
    old, new = tuple(old), tuple(new)
    counts = tuple(min(a + b, U32) for a, b in zip(old[:COUNTS], new[:COUNTS]))
    wait = new[7:10] if new[1] >= old[1] else old[7:10]
    run = new[10:13] if new[2] >= old[2] else old[10:13]
    return counts + wait + run + new[13:15]


def encode(minute_ms: int, name: bytes, row) -> bytes:
    body = _MINUTE_NAME.pack(minute_ms, len(name)) + name + _ROW.pack(*row)
    return _HEAD.pack(crc32c(body), len(body)) + body


def decode_file(data: bytes) -> tuple[list[tuple[int, bytes, tuple]], int]:
    """The records of one hour's file and the length of its whole ones (a
    short or damaged record ends it)."""
    out, at, n = [], 0, len(data)
    while at + _HEAD.size <= n:
        crc, length = _HEAD.unpack_from(data, at)
        end = at + _HEAD.size + length
        if end > n:
            break
        body = data[at + _HEAD.size:end]
        if crc32c(body) != crc or length < _MINUTE_NAME.size + _ROW.size:
            break
        minute, nlen = _MINUTE_NAME.unpack_from(body, 0)
        if _MINUTE_NAME.size + nlen + _ROW.size != length:
            break
        name = body[_MINUTE_NAME.size:_MINUTE_NAME.size + nlen]
        out.append((minute, name, _ROW.unpack_from(body, _MINUTE_NAME.size + nlen)))
        at = end
    return out, at


class History:
    """Every queue's minutes: the open one (``tracks``), the kept ones
    (``series``) and their files in ``directory``."""

    def __init__(self, directory: str, hours: int = 72) -> None:
        self.directory = directory
        self.hours = hours
        self.minute: int | None = None             # the open minute (ms), once the first tick set it
        self.tracks: dict[bytes, Track] = {}       # queue name -> its open minute
        self.series: dict[bytes, Series] = {}      # queue name -> its kept minutes
        self._whole: dict[str, int] = {}           # file name -> length of its whole records, when torn
        self._track = self.tracks.get
        self.sampled = 0      # sampled jobs in flight, all queues: while 0 the journal skips ACK, NACK ... records

    @property
    def on(self) -> bool:
        """``history-hours`` above 0: minutes are counted and kept."""
        return self.hours > 0

    def hook(self):
        """What a journal that writes the log is given to show its records
        to: this history while it is on, else None (the journal shows nothing)."""
        return self if self.on else None

    # -- counting (the journal calls this for every record it keeps) ------------------------------

    def seen(self, q, rtype: int, body: bytes) -> None:
        t = self._track(q.name)
        if t is None:
            t = self.tracks[q.name] = Track(q)
        if rtype == CLAIM:
            n = _U32_AT(body, records.CLAIM_COUNT_AT)[0]
            t.claimed += n
            t.countdown -= 1
            if t.countdown:
                return          # (a sampled job is claimed again only after a NACK, EXPIRE or DEAD dropped it)
            ts = _TS_AT(body, _TS)[0]
            if t.wait.n > 64 + SAMPLES_A_MINUTE * (ts - (self.minute or ts)) // MINUTE:
                t.stride *= 2                    # ahead of the minute's share (a burst, a new track): fewer
            t.countdown = t.stride
            at = records.CLAIM_CONSUMER_AT + _U16_AT(body, records.CLAIM_CONSUMER_LEN_AT)[0]
            ids = _ids(body, at, n)
            end = at + 8 * n
            deliveries = _ids_u32(body, end, n) if len(body) >= end + 4 * n else (1,) * n
            claimed_at = t.claimed_at
            jobs = q.jobs
            for k, (jid, d) in enumerate(zip(ids, deliveries)):
                if d == 1:
                    job = jobs.get(jid)
                    if job is not None:
                        t.wait.add(ts - job.enqueued_at)
                if len(claimed_at) < _INFLIGHT_CAP:
                    key = body[at + 8 * k:at + 8 * k + 8]      # the id's bytes: an ACK slices, no unpack
                    if key not in claimed_at:
                        self.sampled += 1
                    claimed_at[key] = ts
        elif rtype == ACK:
            if not t.claimed_at:
                return
            pop = t.claimed_at.pop
            if len(body) == _IDS + 8:            # one job: the common case
                at = pop(body[_IDS:_IDS + 8], None)
                if at is not None:
                    self.sampled -= 1
                    t.run.add(_TS_AT(body, _TS)[0] - at)
                return
            ts = _TS_AT(body, _TS)[0]
            for k in range(_IDS, _IDS + 8 * _U32_AT(body, _COUNT)[0], 8):
                at = pop(body[k:k + 8], None)
                if at is not None:
                    self.sampled -= 1
                    t.run.add(ts - at)
        elif rtype == CANCEL:
            n = _U32_AT(body, _COUNT)[0]
            t.cancelled += n
            self._ended(t, body, _IDS, n)
        elif rtype == NACK:
            self._ended(t, body, records.NACK_ERROR_AT + _U32_AT(body, records.NACK_ERROR_LEN_AT)[0],
                        _U32_AT(body, records.NACK_COUNT_AT)[0])
        elif rtype == EXPIRE:
            self._ended(t, body, _IDS, _U32_AT(body, _COUNT)[0])
        elif rtype == DEAD:
            self._ended(t, body, records.DEAD_PAIRS_AT, _U32_AT(body, records.DEAD_COUNT_AT)[0], 16)

    def _ended(self, t: Track, body: bytes, at: int, n: int, step: int = 8) -> None:
        """Jobs out of flight: a sampled one's claim time is void."""
        if t.claimed_at:
            pop = t.claimed_at.pop
            for k in range(at, at + step * n, step):
                if pop(body[k:k + 8], None) is not None:
                    self.sampled -= 1

    # -- minutes ---------------------------------------------------------------------------------

    def tick(self, store, now: int) -> None:
        """Every second, and when DEBUG moves the clock: close the open
        minute once ``now`` is past it, and pace the sampling."""
        minute = now - now % MINUTE
        if minute == self.minute:
            for t in self.tracks.values():
                t.pace()
            return
        if not self.on:                      # off: nothing counted, nothing kept
            if self.minute is not None or self.series:
                self.minute = None
                self.tracks.clear()
                self.sampled = 0
                self.prune(now)
            return
        if self.minute is None:              # the first minute: counters count from now
            self.rebase(store)
        else:
            self.close_minute(store)
        self.minute = minute
        self.prune(now)

    def resume(self, store, now: int) -> None:
        """Count again from ``now`` (a replica promoted: what its store
        replayed meanwhile is its primary's history, not its own)."""
        self.minute = None
        self.tracks.clear()
        self.sampled = 0
        self.tick(store, now)

    def rebase(self, store) -> None:
        """The queues' counters as they stand start the open minute (at
        start, and for a store rebuilt after a disk fault, whose counters
        are what its replay counted)."""
        for name, q in store.queues.items():
            t = self.tracks.get(name)
            if t is None:
                self.tracks[name] = Track(q, counters_of(q))
            else:
                t.queue, t.base = q, counters_of(q)

    def close_minute(self, store) -> None:
        """Write the open minute's row of every queue (what a stop calls too)."""
        if self.minute is None or not self.on:
            return
        minute, queues, out = self.minute, store.queues, []
        for name in sorted(set(self.tracks) | set(queues)):
            q = queues.get(name)
            t = self.tracks.get(name)
            if t is None:                        # made this minute: its counters are this minute's
                t = self.tracks[name] = Track(q)
            row = t.row(q)
            if q is None:
                del self.tracks[name]            # dropped: its last minute is kept
            else:
                t.restart(q)
                if len(t.claimed_at) > 2 * len(q.indexes.leases) + 1024:   # jobs gone by DEL, QDROP ...
                    jobs = q.jobs
                    t.claimed_at = {j: at for j, at in t.claimed_at.items() if _ID1(j)[0] in jobs}
            if not any(row):
                continue
            s = self.series.get(name)
            if s is None:
                s = self.series[name] = Series()
            s.put(minute // MINUTE, row)
            out.append(encode(minute, name[:MAX_NAME - 1], row))
        self.sampled = sum(len(t.claimed_at) for t in self.tracks.values())
        if out:
            self._append(minute, b"".join(out))

    def _append(self, minute: int, data: bytes) -> None:
        name = f"{minute - minute % HOUR}.hist"
        path = os.path.join(self.directory, name)
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(path, "ab") as f:
                whole = self._whole.pop(name, None)
                if whole is not None:             # a torn tail the load found: cut it off first
                    f.truncate(whole)
                f.write(data)
        except OSError as e:
            log.error("could not write the history of minute %d to %s: %s", minute, path, e)

    def prune(self, now: int) -> None:
        """Forget the minutes, and delete the files, older than ``hours``."""
        first_kept = (now - now % MINUTE) - self.hours * HOUR if self.on else now + HOUR
        for name in list(self.series):
            s = self.series[name]
            s.prune(first_kept // MINUTE)
            if not s.minutes:
                del self.series[name]
        for hour, path in self._files():
            if hour + HOUR <= first_kept:
                try:
                    os.unlink(path)
                except OSError as e:
                    log.error("could not delete the old history file %s: %s", path, e)
                self._whole.pop(os.path.basename(path), None)

    def _files(self) -> list[tuple[int, str]]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            stem, _dot, ext = name.partition(".")
            if ext == "hist" and stem.isdigit():
                out.append((int(stem), os.path.join(self.directory, name)))
        return sorted(out)

    def load(self) -> None:
        """Read the files back (at start); a torn tail is ignored and cut
        off at the next write to its file."""
        for _hour, path in self._files():
            with open(path, "rb") as f:
                data = f.read()
            got, whole = decode_file(data)
            if whole != len(data):
                log.warning("history file %s: %d bytes after its last whole record ignored", path,
                            len(data) - whole)
                self._whole[os.path.basename(path)] = whole
            for minute, name, row in got:
                s = self.series.get(name)
                if s is None:
                    s = self.series[name] = Series()
                s.put(minute // MINUTE, row)

    # -- reading ---------------------------------------------------------------------------------

    def rows(self, name: bytes, lo: int = 0, hi: int = (1 << 63) - 1) -> list[tuple[int, tuple]]:
        """(minute ms, row) of the queue's kept minutes from ``lo`` to ``hi``."""
        s = self.series.get(name)
        return s.between(lo, hi) if s is not None else []

    def has(self, name: bytes) -> bool:
        return name in self.series

    def nbytes(self, name: bytes) -> int:
        s = self.series.get(name)
        return s.nbytes() if s is not None else 0


def _ids_u32(body: bytes, at: int, n: int):
    if n == 1:
        return _U32_AT(body, at)
    return struct.unpack_from(f"<{n}I", body, at)
