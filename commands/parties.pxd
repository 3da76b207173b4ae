# The C types of commands/parties.py, compiled as it is (docs/performance.md, "One source, two flavours").
from leaseq.storage._clock cimport Reading
from leaseq.storage.store cimport Store


cdef class Stats:
    cdef public long long connections, commands, rejected, protocol_errors, acl_access_denied_auth
    cdef public long long acl_access_denied_cmd, acl_access_denied_key, tls_handshake_failures


cdef class Host:
    cdef public Store store
    cdef public Stats stats
    cdef public object metrics, replication, disk_error, pause, slowlog
    cdef public Reading clock
    cdef public bint loading, read_only, oom, paused
    cdef public long long replicas_gate
    cdef public double slow_after

    cpdef long long now_ms(self)


cdef class Caller:
    cdef public Host server
    cdef public object acl_user, holdings, multi, last_command
    cdef public bint authenticated, resp3, multi_dirty, in_exec
