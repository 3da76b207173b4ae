# The C types of storage/plain.py, compiled as it is (docs/performance.md, "One source, two flavours").
cimport cython

from leaseq.storage._job cimport Job as BuiltJob
from leaseq.storage._index cimport ReadyIndex as BuiltReadyIndex, TimeIndex as BuiltTimeIndex
from leaseq.storage.indexes cimport Indexes
from leaseq.storage.journal cimport Journal
from leaseq.storage.queue cimport Queue
from leaseq.storage.store cimport Store

@cython.locals(journal=Journal, jid=object)
cpdef object push_one(Store store, Queue q, object payload, int priority, object now)
cpdef object arrive(Store store, Queue q, list jobs, object now)
@cython.locals(ready=BuiltReadyIndex)
cdef int _arrive_ready(Store store, Queue q, BuiltJob job) except -1
cpdef object claimable(Store store, Queue q, object now, Py_ssize_t want)
@cython.locals(ready=BuiltReadyIndex)
cpdef list claim_next(Store store, Queue q, object now, Py_ssize_t count, object deadline, object consumer)
cpdef object ack_tokens(Store store, Queue q, object tokens, object now)
cpdef object ack(Store store, Queue q, list jobs, object now)

cdef bint _claims_plainly(Queue q) except -1
cdef int _fold(Store store, Queue q, object now) except -1
@cython.locals(job=BuiltJob)
cdef bint _all_plain(list jobs) except -1
@cython.locals(job=BuiltJob)
cdef bint _all_in_flight(list jobs) except -1
@cython.locals(n=Py_ssize_t, indexes=Indexes, ready=BuiltReadyIndex, journal=Journal)
cdef int _lease_front(Store store, Queue q, list jobs, object now, object deadline, object consumer) except -1
@cython.locals(indexes=Indexes, leases=BuiltTimeIndex, journal=Journal)
cdef int _complete(Store store, Queue q, list jobs, object now) except -1
