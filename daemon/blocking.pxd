# The C types of daemon/blocking.py, compiled as it is (docs/performance.md, "One source, two flavours").
# (``Session`` and ``Worker`` stay ordinary classes.)
cimport cython

from leaseq.commands.claims cimport ClaimWait
from leaseq.commands.parties cimport Host
from leaseq.daemon.timeouts cimport Timeouts
from leaseq.daemon.waiter cimport Waiter
from leaseq.storage.queue cimport Queue
from leaseq.storage.journal cimport Journal
from leaseq.storage.store cimport Store


cpdef list deal(Py_ssize_t available, list counts)


cdef class Blocking:
    cdef public object server, loop, results
    cdef public dict by_queue, workers, timers, cohorts
    cdef public set woken
    cdef public Store store
    cdef public Timeouts timeouts

    @cython.locals(w=Waiter, queue=Queue)
    cpdef park(self, object conn, ClaimWait wait)
    cpdef cancel(self, object w)
    @cython.locals(wait=ClaimWait)
    cpdef _unpark(self, Waiter w)
    @cython.locals(w=Waiter, wait=ClaimWait, server=Host, store=Store, journal=Journal, takers=list, asks=list,
                   shares=list, i=Py_ssize_t)
    cpdef serve(self, object queue, bint closing_window=*)
    cpdef wake(self, object queue)
    cpdef serve_woken(self)
    cpdef _arm(self, Queue queue)
    cpdef _forget(self, object queue)
