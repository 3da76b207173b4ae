# The C side of storage/_job.pyx, for the compiled modules that cimport it
# (storage/plain.pxd): the layout of a job (docs/performance.md, "C calls
# between the compiled modules").  What each field holds is written in the
# .pyx.

cimport cython


@cython.final
cdef class _Lease:
    cdef object token, deadline, consumer


@cython.final
cdef class Job:
    cdef public object id, enqueued_at, visible_at, extra
    cdef _Lease _lease
    cdef char *_payload
    cdef readonly unsigned int payload_len
    cdef public int deliveries
    cdef public signed char priority      # 0-9 (QPUSH ... PRIORITY)
    cdef unsigned char _requeued
    cdef unsigned char _state             # the index of the state in _STATE_OF
