# The C types of commands/queues.py, which Cython compiles as it is (the
# compiled flavour: docs/performance.md, "One source, two flavours"): the
# lookups every job command makes.
from leaseq.commands.parties cimport Host


cpdef object lookup(Host server, object name)
cpdef object get_or_create(Host server, object name)
