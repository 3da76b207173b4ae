# cython: language_level=3
"""The compiled twin of ``storage.jobtable.JobTable`` (docs/performance.md):
a queue's jobs by id, in blocks of 32 consecutive ids.

A block is a C array of 32 job pointers and a count; the table keeps its
blocks in a dict by block number (the id divided by 32) and the block
numbers in ascending order in a list, for iteration and QSCAN.  A job costs
its pointer in a block and a share of the block's own cost, about 11
bytes when ids are dense, as they are (ids are given in arrival order and
most jobs end in roughly that order), against 42 for a dict entry and 8
for the id list of the pure table.  The worst case is one live job in
each block (a job kept while the 31 pushed around it ended): about 350
bytes for that job.  A block is freed when its last job goes; its number
stays in the ordered list until ``compact`` finds the list twice as long
as the dict.

The same behaviour as the definition in storage/jobtable.py, which
tests/unit/test_jobtable.py checks on both."""

cimport cython
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from libc.string cimport memset

from bisect import bisect_right, insort

cdef enum:
    SHIFT = 5
    SIZE = 32
    MASK = 31


@cython.final
@cython.no_gc              # it holds jobs, which hold nothing that leads back to it
@cython.auto_pickle(False)
cdef class _Block:
    cdef PyObject *slots[SIZE]
    cdef int count

    def __cinit__(self):
        memset(self.slots, 0, sizeof(self.slots))
        self.count = 0

    def __dealloc__(self):
        cdef int i
        for i in range(SIZE):
            if self.slots[i] != NULL:
                Py_DECREF(<object>self.slots[i])
                self.slots[i] = NULL


@cython.final
@cython.auto_pickle(False)
cdef class JobTable:
    cdef dict _blocks          # block number -> _Block
    cdef list _order           # block numbers, ascending; some maybe freed (see compact)
    cdef Py_ssize_t _len

    def __cinit__(self):
        self._blocks = {}
        self._order = []
        self._len = 0

    def __len__(self):
        return self._len

    cdef inline object _find(self, object jid):
        """The job of ``jid``, or None (also for what is no id: a lease
        token's id is read from the client's bytes)."""
        cdef long long i
        try:
            i = jid
        except (OverflowError, TypeError):
            return None
        cdef _Block block = self._blocks.get(i >> SHIFT)
        if block is None or block.slots[i & MASK] == NULL:
            return None
        return <object>block.slots[i & MASK]

    def __getitem__(self, jid):
        job = self._find(jid)
        if job is None:
            raise KeyError(jid)
        return job

    def get(self, jid, default=None):
        job = self._find(jid)
        return default if job is None else job

    def __contains__(self, jid):
        return self._find(jid) is not None

    def __setitem__(self, jid, job):
        if job is None:
            raise ValueError("a job table holds jobs, not None")
        cdef long long i = jid
        cdef long long number = i >> SHIFT
        cdef _Block block = self._blocks.get(number)
        if block is None:
            block = _Block()
            self._blocks[number] = block
            order = self._order
            if not order or number > order[-1]:
                order.append(number)
            elif order[bisect_right(order, number) - 1] != number:
                insort(order, number)
        cdef PyObject *old = block.slots[i & MASK]
        Py_INCREF(job)
        block.slots[i & MASK] = <PyObject *>job
        if old == NULL:
            block.count += 1
            self._len += 1
        else:
            Py_DECREF(<object>old)

    def __delitem__(self, jid):
        cdef long long i = jid
        cdef long long number = i >> SHIFT
        cdef _Block block = self._blocks.get(number)
        if block is None or block.slots[i & MASK] == NULL:
            raise KeyError(jid)
        cdef PyObject *old = block.slots[i & MASK]
        block.slots[i & MASK] = NULL
        block.count -= 1
        self._len -= 1
        if block.count == 0:
            del self._blocks[number]
        Py_DECREF(<object>old)

    def extend(self, jobs):
        """New jobs, in ascending id order, above every id so far."""
        for job in jobs:
            self[job.id] = job

    def put_many(self, ids, jobs):
        """Jobs read back from a snapshot: ``ids`` theirs, both ascending."""
        for jid, job in zip(ids, jobs):
            self[jid] = job

    def present(self, ids):
        """The jobs of ``ids`` this table holds, in the ids' order."""
        cdef list jobs = []
        for jid in ids:
            job = self._find(jid)
            if job is not None:
                jobs.append(job)
        return jobs

    def compact(self):
        """After jobs went: drop the numbers of freed blocks once they are half the list."""
        if len(self._order) > 2 * len(self._blocks) + 64:
            self._order = sorted(self._blocks)

    def clear(self):
        self._blocks = {}
        self._order = []
        self._len = 0

    def _pairs(self, bint newest_first):
        """(id, job) of every job, in ascending id order or the other way."""
        cdef _Block block
        cdef int k
        cdef long long base
        numbers = list(self._order)             # (jobs may come and go meanwhile)
        if newest_first:
            numbers.reverse()
        for number in numbers:
            block = self._blocks.get(number)
            if block is None:
                continue
            base = <long long>number << SHIFT
            for k in (range(SIZE - 1, -1, -1) if newest_first else range(SIZE)):
                if block.slots[k] != NULL:
                    yield base + k, <object>block.slots[k]

    def items(self):
        return self._pairs(False)

    def values(self):
        return (job for _jid, job in self._pairs(False))

    def keys(self):
        return (jid for jid, _job in self._pairs(False))

    def __iter__(self):
        return self.keys()

    def newest(self):
        """The jobs, the newest (highest id) first."""
        return (job for _jid, job in self._pairs(True))

    def scan(self, long long cursor, Py_ssize_t count):
        """The jobs with ids above ``cursor``, in ascending id order, at most
        ``count`` looked at: (the cursor to go on from, or 0 at the end;
        the jobs)."""
        cdef _Block block
        cdef int k
        cdef long long base, last = 0
        found = []
        order = self._order
        cdef Py_ssize_t b = bisect_right(order, cursor >> SHIFT) - 1
        if b < 0:
            b = 0
        while b < len(order):
            number = order[b]
            b += 1
            block = self._blocks.get(number)
            if block is None:
                continue
            base = <long long>number << SHIFT
            for k in range(SIZE):
                if block.slots[k] == NULL or base + k <= cursor:
                    continue
                if len(found) == count:
                    return last, found
                found.append(<object>block.slots[k])
                last = base + k
        return 0, found
