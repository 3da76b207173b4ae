# daemon/dispatch.py, which Cython compiles as it is (the compiled flavour:
# docs/performance.md, "One source, two flavours").  Its checks and their
# order are written there; here only what is a C function.

cpdef tuple execute(object client, list args)
