# The C types of storage/queue.py, compiled as it is (docs/performance.md, "One source, two flavours").
# (``Counters`` stays an ordinary class.)
cimport cython
from libc.stdint cimport int64_t

from leaseq.storage.indexes cimport Indexes


cdef class Queue:
    cdef public object qid, name, config, jobs, next_id, id_mark, counters, payload_bytes, rate_window, results
    cdef public object durability
    cdef public Indexes indexes
    cdef public dict keys, schedules
    cdef public bint dropped

    @cython.locals(indexes=Indexes, at=int64_t)
    cpdef bint due(self, object now) except -1
