# The C types of storage/bands.py, which Cython compiles as it is (the
# compiled flavour: docs/performance.md, "One source, two flavours"); the
# formula and what it means are written there.

cpdef int band(int priority, bint requeued) noexcept
