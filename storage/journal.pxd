# The C types of storage/journal.py, compiled as it is (docs/performance.md, "One source, two flavours").
cimport cython

from leaseq.storage._clock cimport Reading
from leaseq.storage.logbuffer cimport LogBuffer
from leaseq.storage.queue cimport Queue


@cython.final
cdef class Journal:
    cdef public LogBuffer log
    cdef public bint lease_sync
    cdef list _txn
    cdef bint _txn_sync
    cdef int _txn_depth
    cdef public object history

    cpdef long long mark(self)
    cpdef object ticket_since(self, long long mark)
    cpdef object settled_since(self, long long mark, object claim_at=*)
    cpdef bint logs_jobs_of(self, Queue q)
    cpdef job_record(self, Queue q, int rtype, bytes body, bint lease=*, long long blind_until=*)
    cpdef note_record(self, Queue q, int rtype, bytes body)
    cpdef meta_record(self, int rtype, bytes body)
    cpdef stream_record(self, int rtype, bytes body)
    cpdef _emit(self, int rtype, bytes body, bint sync, long long blind_until=*)
    cpdef tuple claimed(self, Reading clock, object take, object limit)
