# The C side of daemon/_parser.pyx, for daemon/connection.py (compiled), which
# cimports it: the parser's layout and ``feed`` as a C call (docs/performance.md, "C calls
# between the compiled modules").  What each does is written in the .pyx.

cdef enum State:
    IDLE            # between commands
    INLINE          # in an inline line, before its newline
    COUNT           # in a multibulk's "*N" line
    HEADER          # before or in an element's "$N" line
    BODY            # in an element's body and its CRLF


cdef class RequestParser:
    cdef char* buf              # the unfinished piece: a line, or part of a body
    cdef Py_ssize_t blen, bcap
    cdef State state
    cdef Py_ssize_t seen        # bytes of buf already searched for the line's end
    cdef Py_ssize_t used        # bytes of the current command before buf
    cdef Py_ssize_t left        # elements still to come
    cdef Py_ssize_t bulk        # length of the body being received
    cdef list args              # the current command's arguments so far
    cdef public Py_ssize_t max_inline, max_args, max_bulk, max_buffer
    cdef int _keep(self, const char* p, Py_ssize_t n) except -1
    cpdef list feed(self, data)
    cdef Py_ssize_t _run(self, const char* p, Py_ssize_t n, list out) except -1
    cdef Py_ssize_t _inline(self, const char* p, Py_ssize_t i, Py_ssize_t nl, list out) except -1
