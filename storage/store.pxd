# The C types of storage/store.py, compiled as it is (docs/performance.md, "One source, two flavours").
from leaseq.storage.queue cimport Queue


cdef class Store:
    cdef object __weakref__
    cdef public dict queues, by_qid, dropped_marks
    cdef public object next_qid, epoch, lease_seq, journal, default_config, clock, timetable, deps, deaths, endings
    cdef public set woken
    cdef public bint following

    cpdef set take_woken(self)
    cpdef object ended(self, Queue q, object jobs, object how, object ts, object detail=*)
