# The C types of storage/indexes.py, compiled as it is (docs/performance.md, "One source, two flavours").

from leaseq.storage._index cimport TimeIndex as BuiltTimeIndex    # storage/index.py's, as built


cdef class Indexes:
    cdef public object ready, waiting, groups
    cdef public BuiltTimeIndex delayed, leases      # (next_due calls their first as C)
    cdef public BuiltTimeIndex dead, completed, cancelled   # (a plain claim reads when each is due as C)
    cdef dict _place

    cpdef object next_due(self)
