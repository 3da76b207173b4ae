# The C types of commands/jobs.py, compiled as it is (docs/performance.md, "One source, two flavours").
# The handlers stay callable from Python (``Route.handler``).
cimport cython

from leaseq.commands.args cimport queue_name
from leaseq.commands.claims cimport ClaimWait, claim_now
from leaseq.commands.parties cimport Caller, Host
from leaseq.commands.queues cimport get_or_create, lookup
from leaseq.storage cimport plain
from leaseq.storage.queue cimport Queue
from leaseq.storage.store cimport Store


cdef class PushOptions:
    cdef public object priority, delay, at, keys, scope, max_deliveries, expire_ms, groups, replace, after
    cdef public object onfail_run, meta


@cython.locals(server=Host, store=Store, q=Queue, limit=Py_ssize_t)
cpdef list _push(Caller client, object name, list payloads, PushOptions opts)
cpdef object qpush(Caller client, list args)
@cython.locals(server=Host, q=Queue)
cpdef object qclaim(Caller client, list args)
@cython.locals(i=Py_ssize_t, n=Py_ssize_t)
cpdef Py_ssize_t _split_tokens(list args, tuple keywords) except -1
@cython.locals(server=Host, q=Queue, end=Py_ssize_t)
cpdef object qack(Caller client, list args)
