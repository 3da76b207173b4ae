# The C types of daemon/committer.py, compiled as it is (docs/performance.md, "One source, two flavours").
cimport cython

from leaseq.daemon.blocking cimport Blocking
from leaseq.storage.logbuffer cimport LogBuffer


cdef class Committer:
    cdef public object server, loop, thread, waiters, last_fsync_ms, on_synced
    cdef public LogBuffer wal
    cdef public Blocking blocking
    cdef public bint scheduled, syncing, closed, serving
    cdef public long long fsyncs, fsyncs_inline
    cdef public double fsync_average

    cpdef touch(self)
    cpdef bint work_left(self)
    @cython.locals(blocking=Blocking)
    cpdef bint _woken_waited(self)
    cpdef serve_now(self)
    cpdef wait(self, object conn)
    cpdef end_of_turn(self)
    cpdef commit_turn(self)
