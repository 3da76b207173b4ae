# The C types of commands/args.py, which Cython compiles as it is (the
# compiled flavour: docs/performance.md, "One source, two flavours").

cpdef object queue_name(object value)
