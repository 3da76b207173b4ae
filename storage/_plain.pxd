# The C side of storage/_plain.pyx, for daemon/_lane.pyx, which cimports it:
# the plain transitions reached as C calls (docs/performance.md, "C calls
# between the compiled modules").  Each is its def function of the same name
# without the c_; what each does is written in the .pyx.
from leaseq.storage.queue cimport Queue
from leaseq.storage.store cimport Store

cdef object c_push_one(Store store, Queue q, payload, int priority, now)
cdef object c_claimable(Store store, Queue q, now, Py_ssize_t want)
cdef object c_claim_next(Store store, Queue q, now, Py_ssize_t count, deadline, consumer)
cdef object c_ack_tokens(Store store, Queue q, tokens, now)
