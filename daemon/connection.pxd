# The C types of daemon/connection.py, compiled as it is (docs/performance.md, "One source, two flavours").
cimport cython

from leaseq.daemon.committer cimport Committer
from leaseq.commands.parties cimport Caller
from leaseq.daemon.dispatch cimport execute
from leaseq.daemon._parser cimport RequestParser as BuiltParser   # daemon/resp.py's parser, as built
from leaseq.daemon.faults cimport DiskFaults
from leaseq.daemon.outbox cimport Outbox


cdef class Connection(Caller):
    cdef public object transport, id, addr, laddr, fd, name, user, lib_name, lib_ver
    cdef public object created, last_active, pending, waiting, protocol_error
    cdef public bint quitting, closed, writing_paused
    cdef public Outbox outbox
    cdef public BuiltParser parser
    cdef public Committer committer
    cdef public DiskFaults disk

    cpdef run_pending(self)
    cpdef answer(self, object reply, object ticket=*)
    cpdef unblock(self, object reply, object ticket=*)
    cpdef flush(self)
    cpdef bint release(self, object wal)
    cpdef _write(self, bytes data)
