# The C types of storage/bands.py, compiled as it is (docs/performance.md, "One source, two flavours").

cpdef int band(int priority, bint requeued) noexcept
