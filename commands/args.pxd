# The C types of commands/args.py, compiled as it is (docs/performance.md, "One source, two flavours").

cpdef object queue_name(object value)
