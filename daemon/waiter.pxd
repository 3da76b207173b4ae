# The C type of daemon/waiter.py, which Cython compiles as it is (the
# compiled flavour: docs/performance.md, "One source, two flavours").


cdef class Waiter:
    cdef public object conn, wait, timer
