# The C types of storage/logbuffer.py, compiled as it is (docs/performance.md, "One source, two flavours").
cimport cython


cdef class LogBuffer:
    cdef public list buffer
    cdef long long _appended, _last_sync_record, _sync_gen, _claim_sync_gen, _blind_gen, _blind_until
    cdef long long _written, _covered, _durable
    cdef public long long bytes_written
    cdef public object last_fsync_ms, stream
    cdef public long long durable_bytes
    cdef list _ends, _repl_ends
    cdef public bint ack_needed
    cdef long long _replicated

    cpdef append(self, int rtype, object body, bint sync, long long blind_until=*)
    cpdef append_frame(self, bytes data, bint sync, long long blind_until=*)
    cpdef long long mark(self)
    cpdef object ticket_since(self, long long mark)
    cpdef object settled_since(self, long long mark, object claim_at=*)
    cpdef bint reached(self, object ticket)
    cpdef bint replicated_to(self, long long nbytes)
