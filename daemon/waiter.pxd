# The C types of daemon/waiter.py, compiled as it is (docs/performance.md, "One source, two flavours").


cdef class Waiter:
    cdef public object conn, wait, timer
