# The C types of daemon/outbox.py, which Cython compiles as it is (the
# compiled flavour: docs/performance.md, "One source, two flavours").  What
# the Outbox does, and its five rules, are written there.
cimport cython


@cython.final
cdef class Outbox:
    cdef list _ready
    cdef public object held

    cpdef bint add(self, bytes data, object ticket=*)
    cpdef hold_place(self, object ticket)
    cpdef bytes take(self)
