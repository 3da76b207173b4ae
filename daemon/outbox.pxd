# The C types of daemon/outbox.py, compiled as it is (docs/performance.md, "One source, two flavours").
cimport cython


@cython.final
cdef class Outbox:
    cdef list _ready
    cdef public object held

    cpdef bint add(self, bytes data, object ticket=*)
    cpdef hold_place(self, object ticket)
    cpdef bytes take(self)
