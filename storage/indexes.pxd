# The C types of storage/indexes.py, which Cython compiles as it is (the
# compiled flavour: docs/performance.md, "One source, two flavours").  What
# the indexes are and the table that places a job are written there; here
# only what each field and method is in C.

cdef class Indexes:
    cdef public object ready, delayed, leases, dead, completed, waiting, cancelled, groups
    cdef dict _place

    cpdef object next_due(self)
