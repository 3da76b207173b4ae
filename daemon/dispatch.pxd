# The C types of daemon/dispatch.py, which Cython compiles as it is (the
# compiled flavour: docs/performance.md, "One source, two flavours").  Its
# checks and their order are written there; here only what each field and
# function is in C.
cimport cython

from leaseq.daemon._clock cimport Reading
from leaseq.storage.journal cimport Journal
from leaseq.storage.store cimport Store


@cython.final
cdef class Route:
    cdef public object command, name, handler
    cdef public Py_ssize_t arity
    cdef public bint noauth, loading, write, pubsub, denyoom, direct, transaction, no_multi, observes, claims


cdef class Stats:
    cdef public long long connections, commands, rejected, protocol_errors, acl_access_denied_auth
    cdef public long long acl_access_denied_cmd, acl_access_denied_key, tls_handshake_failures


cdef class Host:
    cdef public Store store
    cdef public Stats stats
    cdef public object metrics, replication, disk_error
    cdef public Reading clock
    cdef public bint loading, read_only, oom
    cdef public long long replicas_gate


cdef class Caller:
    cdef public Host server
    cdef public object acl_user, holdings, multi, last_command
    cdef public bint authenticated, resp3, multi_dirty, in_exec


@cython.locals(server=Host, journal=Journal, mark=cython.longlong, route=Route, routes=dict)
cpdef tuple execute(Caller client, list args)
@cython.locals(n=Py_ssize_t)
cdef object _execute(Caller client, Host server, list args, Route route)
cpdef object run(Caller client, Host server, Route route, list args)
cdef object _refuse(Caller client, object error)
