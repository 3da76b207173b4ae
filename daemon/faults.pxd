# The C types of daemon/faults.py, which Cython compiles as it is (the
# compiled flavour: docs/performance.md, "One source, two flavours").  What
# a disk fault does is written there; here only what each field is in C
# (a connection's turn reads ``rebuilding`` before each command).

cdef class DiskFaults:
    cdef public object server, entered
    cdef public bint rebuilding
    cdef object _rebuilt
