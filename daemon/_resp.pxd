# The C side of daemon/_resp.pyx, for daemon/connection.py (compiled), which
# cimports it:
# ``encode`` as a C call (docs/performance.md, "C calls between the compiled
# modules").

cpdef bytes encode(object value, bint resp3)
