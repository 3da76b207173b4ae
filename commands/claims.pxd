# The C types of commands/claims.py, compiled as it is (docs/performance.md, "One source, two flavours").
# The daemon's waits read a parked claim's fields as C.

from leaseq.commands.parties cimport Host
from leaseq.storage cimport plain
from leaseq.storage.queue cimport Queue


cdef class ClaimWait:
    cdef public object server, consumer, timeout_ms, holder
    cdef public Queue queue
    cdef public long long count, lease_ms
    cdef public bint cohort, compact


cpdef list claim_now(Host server, Queue q, object consumer, Py_ssize_t count, long long lease_ms, object holder=*,
                     bint compact=*)
