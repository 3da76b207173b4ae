# The C types of daemon/faults.py, compiled as it is (docs/performance.md, "One source, two flavours").
# (A connection's turn reads ``rebuilding`` before each command.)

cdef class DiskFaults:
    cdef public object server, entered
    cdef public bint rebuilding
    cdef object _rebuilt
