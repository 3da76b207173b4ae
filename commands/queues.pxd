# The C types of commands/queues.py, compiled as it is (docs/performance.md, "One source, two flavours").
from leaseq.commands.parties cimport Host


cpdef object lookup(Host server, object name)
cpdef object get_or_create(Host server, object name)
