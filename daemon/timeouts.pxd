# The C types of daemon/timeouts.py, compiled as it is (docs/performance.md, "One source, two flavours").
cimport cython


cdef class Timeouts


@cython.final
cdef class Timeout:
    cdef public double due
    cdef public object arg
    cdef public Timeouts timeouts

    cpdef cancel(self)


@cython.final
cdef class Timeouts:
    cdef public object loop, callback, timer, timer_due
    cdef public list heap
    cdef public long long seq
    cdef public Py_ssize_t cancelled

    cpdef Timeout add(self, double delay, object arg)
    cpdef set_timer(self, double due)
    cpdef compact(self)
