# The C types of daemon/metrics.py, compiled as it is (docs/performance.md, "One source, two flavours").
cimport cython


cdef class Histogram:
    cdef public list counts
    cdef public double total

    @cython.locals(i=Py_ssize_t, bound=double)
    cpdef observe(self, double seconds)


cdef class Metrics:
    cdef public object server, commands, registry
    cdef public Histogram fsync

    @cython.locals(histogram=Histogram)
    cpdef command(self, str name, double seconds)
