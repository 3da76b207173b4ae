# The C side of storage/_clock.pyx, for the compiled modules that cimport it
# (commands/parties.pxd): a reading of the clock as a C call
# (docs/performance.md, "C calls between the compiled modules").

cdef class Reading:
    cdef public long long offset
    cdef public bint frozen
    cdef public long long frozen_at
    cpdef long long now(self)


cpdef double seconds() noexcept
