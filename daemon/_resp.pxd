# The C side of daemon/_resp.pyx, for daemon/_lane.pyx, which cimports it:
# ``encode`` as a C call (docs/performance.md, "C calls between the compiled
# modules").

cdef bytes c_encode(object value, bint resp3)
