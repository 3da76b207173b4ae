# The C types of daemon/dispatch.py, compiled as it is (docs/performance.md, "One source, two flavours").
cimport cython

from leaseq.commands.parties cimport Caller, Host
from leaseq.daemon.metrics cimport Metrics
from leaseq.storage._clock cimport seconds
from leaseq.storage.journal cimport Journal


@cython.final
cdef class Route:
    cdef public object command, name, handler
    cdef public Py_ssize_t arity
    cdef public bint noauth, loading, write, pubsub, denyoom, direct, transaction, no_multi, observes, claims


@cython.locals(server=Host, journal=Journal, mark=cython.longlong, route=Route, routes=dict)
cpdef tuple execute(Caller client, list args)
@cython.locals(n=Py_ssize_t)
cdef object _execute(Caller client, Host server, list args, Route route)
@cython.locals(started=double, elapsed=double, metrics=Metrics)
cpdef object run(Caller client, Host server, Route route, list args)
cdef object _refuse(Caller client, object error)
