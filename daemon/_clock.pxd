# The C side of daemon/_clock.pyx, for daemon/_lane.pyx, which cimports it:
# a reading of the clock as a C call (docs/performance.md, "C calls between
# the compiled modules").

cdef class Reading:
    cdef public long long offset
    cdef public bint frozen
    cdef public long long frozen_at
    cdef long long c_now(self)
