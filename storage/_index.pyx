# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of ``storage.index`` (docs/performance.md): the same
``ReadyIndex`` and ``TimeIndex``, their entries held as C numbers.

Each is one ``_Keys``: unique keys, ascending, in chunks of 8 KiB (a C
array of chunk pointers; a chunk's last key is its maximum, so a look-up
is a bisection over the chunks, then one inside a chunk):

- ``TimeIndex``: 16-byte keys, the moment (its sign bit flipped, so that
  the unsigned order is the signed one) above the job id: the order is
  (moment, id), the total order the pure index gives.  A lease, a delayed
  job, a kept one costs 16 bytes here, against about 117 in the pure
  index's sets under a ``SortedDict``.
- ``ReadyIndex``: 8-byte keys, the band above bit 59, the id below it
  (ids are given 1, 2, 3, ... and stay far below 2**59): claim order.
  The twenty bands of the pure index are ranges of one array, a claim
  reads its head, and a new job of the default priority (the last band)
  is appended at its end.  8 bytes a ready job, as the pure index's
  pointer to the job's own id.

The algorithm is written once, over the key type (``key_t``, a fused
type).  A chunk that falls under a quarter full is merged with its
neighbour when both fit in one; an emptied chunk is freed.

The same behaviour as storage/index.py, which tests/unit/test_index.py
checks on both flavours."""

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport INT64_MAX, int64_t, uint64_t
from libc.string cimport memcpy, memmove

from leaseq.storage.bands import BANDS      # (a Python import: this engine also loads beside the pure flavour)

cdef int N_BANDS = BANDS

cdef extern from *:
    """
    typedef unsigned __int128 leaseq_wide;
    """
    ctypedef unsigned long leaseq_wide     # (to Cython an integer type other than uint64_t; C sees the typedef above)

# a key: 8 bytes in the ready index, 16 in a time index (one algorithm for both)
ctypedef fused key_t:
    uint64_t
    leaseq_wide

cdef enum:
    BAND_SHIFT = 59             # a ready key: the band above bit 59, the id below it

cdef uint64_t SIGN = (<uint64_t>1) << 63
cdef uint64_t ID_MASK = ((<uint64_t>1) << BAND_SHIFT) - 1
NEVER = 1 << 62
cdef int64_t C_NEVER = (<int64_t>1) << 62

cdef inline leaseq_wide wide_key(int64_t when, uint64_t jid):
    return ((<leaseq_wide>((<uint64_t>when) ^ SIGN)) << 64) | <leaseq_wide>jid


cdef inline int64_t moment_of(leaseq_wide k):
    return <int64_t>((<uint64_t>(k >> 64)) ^ SIGN)


cdef inline uint64_t id_bits(object jid, uint64_t limit) except? 0xFFFFFFFFFFFFFFFF:
    cdef int64_t v = jid
    if v < 0 or <uint64_t>v > limit:
        raise OverflowError(f"job id {v} out of range")
    return <uint64_t>v


@cython.final
@cython.auto_pickle(False)
cdef class _Keys:
    """Ascending unique keys, all of one width (``key_t``), in chunks; the
    functions below that take a ``key_t`` are its typed operations
    (its fields, and those of the classes below, are declared in _index.pxd)."""

    def __cinit__(self, Py_ssize_t width):
        self.chunks = NULL
        self.nchunks = self.room = self.length = 0
        self.width = width
        self.cap = CHUNK_BYTES // width
        self.merge_below = self.cap // 4

    def __dealloc__(self):
        self.clear()
        PyMem_Free(self.chunks)

    cdef void clear(self):
        cdef Py_ssize_t i
        for i in range(self.nchunks):
            PyMem_Free(self.chunks[i])
        self.nchunks = self.length = 0

    cdef Chunk *new_chunk(self, Py_ssize_t at) except NULL:
        """A new empty chunk at position ``at``."""
        cdef Chunk **grown
        cdef Chunk *c = <Chunk *>PyMem_Malloc(sizeof(Chunk))
        if c == NULL:
            raise MemoryError()
        c.n = 0
        if self.nchunks == self.room:
            grown = <Chunk **>PyMem_Realloc(self.chunks, (self.room * 2 + 4) * sizeof(Chunk *))
            if grown == NULL:
                PyMem_Free(c)
                raise MemoryError()
            self.chunks, self.room = grown, self.room * 2 + 4
        memmove(&self.chunks[at + 1], &self.chunks[at], (self.nchunks - at) * sizeof(Chunk *))
        self.chunks[at] = c
        self.nchunks += 1
        return c

    cdef void drop_chunk(self, Py_ssize_t at):
        PyMem_Free(self.chunks[at])
        memmove(&self.chunks[at], &self.chunks[at + 1], (self.nchunks - at - 1) * sizeof(Chunk *))
        self.nchunks -= 1

    cdef void settle(self, Py_ssize_t ci):
        """After removals from chunk ``ci``: an empty chunk goes; one under a
        quarter full joins a neighbour when both fit in one chunk."""
        cdef Chunk *c = self.chunks[ci]
        cdef Chunk *other
        cdef Py_ssize_t w = self.width
        if c.n == 0:
            self.drop_chunk(ci)
            return
        if c.n >= self.merge_below:
            return
        if ci + 1 < self.nchunks and self.chunks[ci + 1].n + c.n <= self.cap:
            other = self.chunks[ci + 1]
            memcpy(&c.data[c.n * w], other.data, other.n * w)
            c.n += other.n
            self.drop_chunk(ci + 1)
        elif ci > 0 and self.chunks[ci - 1].n + c.n <= self.cap:
            other = self.chunks[ci - 1]
            memcpy(&other.data[other.n * w], c.data, c.n * w)
            other.n += c.n
            self.drop_chunk(ci)

    cdef void pop_front(self, Py_ssize_t count):
        """Remove the first ``count`` keys (at most ``length``)."""
        cdef Chunk *c
        if count > self.length:
            count = self.length
        self.length -= count
        while count > 0:
            c = self.chunks[0]
            if count >= c.n:
                count -= c.n
                self.drop_chunk(0)
            else:
                memmove(c.data, &c.data[count * self.width], (c.n - count) * self.width)
                c.n -= count
                count = 0
                self.settle(0)


cdef Py_ssize_t chunk_for(_Keys s, key_t k):
    """The first chunk whose last key is >= k (``nchunks`` when none)."""
    cdef Py_ssize_t lo = 0, hi = s.nchunks, mid
    if hi and (<key_t *>s.chunks[hi - 1].data)[s.chunks[hi - 1].n - 1] < k:
        return hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if (<key_t *>s.chunks[mid].data)[s.chunks[mid].n - 1] < k:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef Py_ssize_t lower(Chunk *c, key_t k):
    """The first position in ``c`` whose key is >= k."""
    cdef key_t *keys = (<key_t *>c.data)
    cdef Py_ssize_t lo = 0, hi = c.n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < k:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef int insert(_Keys s, key_t k) except -1:
    """Add ``k``; 1 when it was added, 0 when it was there already."""
    cdef Py_ssize_t ci = chunk_for[key_t](s, k), pos, half
    cdef Chunk *c
    cdef Chunk *tail
    cdef key_t *keys
    if ci == s.nchunks:                             # above every key (or none yet): at the end
        if ci == 0 or s.chunks[ci - 1].n == s.cap:
            c = s.new_chunk(ci)
        else:
            c = s.chunks[ci - 1]
        pos = c.n
    else:
        c = s.chunks[ci]
        pos = lower[key_t](c, k)
        if (<key_t *>c.data)[pos] == k:
            return 0
        if c.n == s.cap:                            # full: split in halves
            half = s.cap // 2
            tail = s.new_chunk(ci + 1)
            memcpy(tail.data, &(<key_t *>c.data)[half], (s.cap - half) * sizeof(key_t))
            tail.n = s.cap - half
            c.n = half
            if pos > half:                          # (at ``half`` it ends the first half)
                c, pos = tail, pos - half
    keys = <key_t *>c.data
    memmove(&keys[pos + 1], &keys[pos], (c.n - pos) * sizeof(key_t))
    keys[pos] = k
    c.n += 1
    s.length += 1
    return 1


cdef int erase(_Keys s, key_t k) except -1:
    """Remove ``k``; 1 when it was there, 0 when not."""
    cdef Py_ssize_t ci = chunk_for[key_t](s, k), pos
    cdef Chunk *c
    cdef key_t *keys
    if ci == s.nchunks:
        return 0
    c = s.chunks[ci]
    pos = lower[key_t](c, k)
    keys = (<key_t *>c.data)
    if keys[pos] != k:
        return 0
    memmove(&keys[pos], &keys[pos + 1], (c.n - pos - 1) * sizeof(key_t))
    c.n -= 1
    s.length -= 1
    s.settle(ci)
    return 1


cdef Py_ssize_t count_below(_Keys s, key_t k):
    """How many keys are < k."""
    cdef Py_ssize_t ci = chunk_for[key_t](s, k), i, n = 0
    for i in range(ci):
        n += s.chunks[i].n
    if ci < s.nchunks:
        n += lower[key_t](s.chunks[ci], k)
    return n


cdef key_t key_at(_Keys s, Py_ssize_t index, key_t *kind):
    cdef Py_ssize_t ci = 0
    while index >= s.chunks[ci].n:
        index -= s.chunks[ci].n
        ci += 1
    return (<key_t *>s.chunks[ci].data)[index]


cdef inline object decode(key_t k, bint pair):
    """A key's job id, or with ``pair`` (its band or moment, its id)."""
    if key_t is uint64_t:
        if pair:
            return (k >> BAND_SHIFT, k & ID_MASK)
        return k & ID_MASK
    else:
        if pair:
            return (moment_of(k), <uint64_t>k)
        return <uint64_t>k


cdef list keys_list(_Keys s, Py_ssize_t start, Py_ssize_t count, bint backwards, bint pairs, key_t *kind):
    """``count`` keys, decoded (``decode``), from the ``start``-th, or the
    last ``count`` from the end, last first, when ``backwards``."""
    cdef list out = []
    cdef Py_ssize_t ci, i
    cdef key_t *keys
    if backwards:
        ci = s.nchunks - 1
        while ci >= 0 and count > 0:
            keys = <key_t *>s.chunks[ci].data
            i = s.chunks[ci].n - 1
            while i >= 0 and count > 0:
                out.append(decode[key_t](keys[i], pairs))
                i -= 1
                count -= 1
            ci -= 1
        return out
    ci = 0
    while ci < s.nchunks and start >= s.chunks[ci].n:
        start -= s.chunks[ci].n
        ci += 1
    while ci < s.nchunks and count > 0:
        keys = <key_t *>s.chunks[ci].data
        i = start
        while i < s.chunks[ci].n and count > 0:
            out.append(decode[key_t](keys[i], pairs))
            i += 1
            count -= 1
        start = 0
        ci += 1
    return out


def _lazily(_Keys keys, bint wide, bint pairs):
    """The keys, decoded, 256 at a time: a claim that looks for jobs it may
    deliver (``Queue.claim_head`` with ``doomed``) stops early, and a 1M
    ready index must not become a list first.  Positions are re-read at
    every batch, so a change meanwhile can skip or repeat a key, never
    read freed memory."""
    cdef Py_ssize_t start = 0
    while True:
        if wide:
            batch = keys_list[leaseq_wide](keys, start, 256, False, pairs, <leaseq_wide *>NULL)
        else:
            batch = keys_list[uint64_t](keys, start, 256, False, pairs, <uint64_t *>NULL)
        if not batch:
            return
        yield from batch
        start += len(batch)


@cython.no_gc              # it holds its keys only, which hold nothing
@cython.auto_pickle(False)
cdef class _Index:
    """What both indexes are: their keys, and their size."""

    def __len__(self):
        return self._keys.length

    def __bool__(self):
        return self._keys.length > 0


@cython.final
@cython.no_gc
@cython.auto_pickle(False)
cdef class TimeIndex(_Index):
    """``storage.index.TimeIndex``, compiled: (moment, id) keys, 16 bytes each."""

    def __cinit__(self):
        self._keys = _Keys(sizeof(leaseq_wide))
        self.earliest = C_NEVER

    def __iter__(self):
        return _lazily(self._keys, True, True)

    cdef void _moved(self):
        self.earliest = moment_of((<leaseq_wide *>self._keys.chunks[0].data)[0]) if self._keys.length else C_NEVER

    def add(self, int64_t when, jid):
        insert[leaseq_wide](self._keys, wide_key(when, id_bits(jid, 0x7FFFFFFFFFFFFFFF)))
        if when < self.earliest:
            self.earliest = when

    cpdef add_many(self, int64_t when, object jids):
        cdef bint any_added = False
        for jid in jids:
            insert[leaseq_wide](self._keys, wide_key(when, id_bits(jid, 0x7FFFFFFFFFFFFFFF)))
            any_added = True
        if any_added and when < self.earliest:
            self.earliest = when

    def remove(self, int64_t when, jid):
        """Remove an entry that is present (KeyError otherwise: a bug)."""
        if not erase[leaseq_wide](self._keys, wide_key(when, id_bits(jid, 0x7FFFFFFFFFFFFFFF))):
            raise KeyError((when, jid))
        if when == self.earliest:
            self._moved()

    cpdef remove_many(self, int64_t when, object jids):
        """``remove`` of several entries at one moment, all present."""
        cdef Py_ssize_t missing = 0
        for jid in jids:
            if not erase[leaseq_wide](self._keys, wide_key(when, id_bits(jid, 0x7FFFFFFFFFFFFFFF))):
                missing += 1
        if when == self.earliest:
            self._moved()
        if missing:
            raise KeyError(f"not all of {len(jids)} ids were indexed at {when}")

    cpdef object first(self):
        """The earliest moment, or None when empty."""
        return self.earliest if self._keys.length else None

    def last(self, Py_ssize_t count):
        """Up to ``count`` ids of the latest moments, latest first."""
        return keys_list[leaseq_wide](self._keys, 0, count, True, False, <leaseq_wide *>NULL)

    def pop_due(self, int64_t now):
        """Remove and return the ids whose moment is ``<= now``, in order."""
        cdef Py_ssize_t n
        if now == INT64_MAX:
            n = self._keys.length
        else:
            n = count_below[leaseq_wide](self._keys, wide_key(now + 1, 0))
        due = keys_list[leaseq_wide](self._keys, 0, n, False, False, <leaseq_wide *>NULL)
        self._keys.pop_front(n)
        self._moved()
        return due

    def clear(self):
        self._keys.clear()
        self.earliest = C_NEVER


@cython.final
@cython.no_gc
@cython.auto_pickle(False)
cdef class ReadyIndex(_Index):
    """``storage.index.ReadyIndex``, compiled: (band, id) keys in claim
    order, 8 bytes each (the band above bit 59: ids stay below 2**59)."""

    BANDS = BANDS

    def __cinit__(self):
        self._keys = _Keys(sizeof(uint64_t))

    def __iter__(self):
        return _lazily(self._keys, False, False)

    def items(self):
        """Every entry as (band, id), in claim order."""
        return keys_list[uint64_t](self._keys, 0, self._keys.length, False, True, <uint64_t *>NULL)

    cdef uint64_t _key(self, int band, object jid) except? 0xFFFFFFFFFFFFFFFF:
        if band < 0 or band >= N_BANDS:
            raise IndexError(f"no band {band}")
        return ((<uint64_t>band) << BAND_SHIFT) | id_bits(jid, ID_MASK)

    def add(self, int band, jid):
        insert[uint64_t](self._keys, self._key(band, jid))

    cpdef append_new(self, int band, object jids):
        """Ids above every id in the band, ascending (new jobs)."""
        for jid in jids:
            insert[uint64_t](self._keys, self._key(band, jid))

    def update(self, int band, jids):
        self.append_new(band, jids)

    def remove(self, int band, jid):
        """Remove an entry that is present (ValueError otherwise: a bug)."""
        if not erase[uint64_t](self._keys, self._key(band, jid)):
            raise ValueError(f"{jid} not in band {band}")

    cpdef list first(self, Py_ssize_t count):
        """The first ``count`` ids in claim order."""
        return keys_list[uint64_t](self._keys, 0, count, False, False, <uint64_t *>NULL)

    cpdef pop_first(self, Py_ssize_t count):
        """Remove the first ``count`` ids in claim order."""
        self._keys.pop_front(count)

    def oldest(self):
        """The smallest id of all (the job pushed first): the least of the
        bands' first ids."""
        cdef uint64_t band, k, best = 0
        cdef Py_ssize_t at
        cdef bint found = False
        for band in range(20):
            at = count_below[uint64_t](self._keys, band << BAND_SHIFT)
            if at == self._keys.length:
                break
            k = key_at[uint64_t](self._keys, at, <uint64_t *>NULL)
            if k >> BAND_SHIFT == band and (not found or (k & ID_MASK) < best):
                best, found = k & ID_MASK, True
        return best if found else None

    def clear(self):
        self._keys.clear()
