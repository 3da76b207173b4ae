# The C side of storage/_plain.pyx, for daemon/_lane.pyx, which cimports it:
# the plain transitions reached as C calls (docs/performance.md, "C calls
# between the compiled modules").  Each is its def function of the same name
# without the c_; what each does is written in the .pyx.

cdef object c_push_one(store, q, payload, int priority, now)
cdef object c_claimable(store, q, now, Py_ssize_t want)
cdef object c_claim_next(store, q, now, Py_ssize_t count, deadline, consumer)
cdef object c_ack_tokens(store, q, tokens, now)
