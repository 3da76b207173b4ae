# cython: language_level=3
"""The compiled twin of ``storage.clock.Reading`` (docs/performance.md): the
daemon's time read in C.  A job's path reads the clock about eight times,
and each reading in Python is a call, a ``time.time()`` and float
arithmetic; here it is one ``clock_gettime``.  The same fields, the same
value (whole milliseconds since the epoch, rounded down, plus the offset;
or the frozen moment)."""

from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, timespec

cdef extern from *:
    """
    #ifdef LEASEQ_PROFILE_USE
    #define LEASEQ_PROFILE_GUIDED 1
    #else
    #define LEASEQ_PROFILE_GUIDED 0
    #endif
    """
    int LEASEQ_PROFILE_GUIDED

PROFILE_GUIDED = bool(LEASEQ_PROFILE_GUIDED)   # built from a profile (bin/build-from-profile defines the macro)


cdef class Reading:
    """(Its fields are declared in _clock.pxd.)"""

    def __init__(self, long long offset, bint frozen, long long frozen_at):
        self.offset = offset
        self.frozen = frozen
        self.frozen_at = frozen_at

    cpdef long long now(self):
        cdef timespec ts
        if self.frozen:
            return self.frozen_at
        clock_gettime(CLOCK_REALTIME, &ts)
        return <long long>ts.tv_sec * 1000 + ts.tv_nsec // 1000000 + self.offset


cpdef double seconds() noexcept:
    """``time.perf_counter()`` (the same clock on Linux), as a C call."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9
