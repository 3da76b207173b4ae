# The C side of storage/_job.pyx, for the compiled modules that cimport it
# (storage/_plain.pyx): the layout of a job, and a claim's and an ack's
# per-job loops reached as C calls (docs/performance.md, "C calls between
# the compiled modules").  What each does is written in the .pyx.

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


cdef Job c_new_job(object id, object payload, int priority, object now)
cdef object c_acked_deadline(Job job)
cdef list c_lease_tokens(object jobs, unsigned long long epoch, unsigned long long first_seq)
cdef list c_take_leases(object jobs, object tokens, object deadline, object consumer)
cdef tuple c_drop_leases(object jobs, object table)
cdef list c_jobs_for_tokens(object table, object tokens)
cdef list c_job_replies(object record, object plain, object job_reply, object jobs)
