# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The request parser of ``daemon/resp.py``, compiled: the same class,
``RequestParser(max_inline, max_args, max_bulk, max_buffer)`` with
``feed(data) -> list[list[bytes]]`` and ``pending``, parsing multibulk
requests in C over the bytes instead of through hiredis and the Python
that checks hiredis's work.

The profile (docs/performance.md) put 12.7 % of the daemon's busy time in
``RequestParser.feed`` in batched workloads, most of it the Python around
hiredis: the count check, the walk that finds each command's end, the type
checks.  Here one pass over the bytes does all of that, as Redis's
``processMultibulkBuffer`` does: a state machine (between commands, in an
inline line, in the count line, in an element's ``$N`` line, in its body)
that keeps only the unfinished piece (a header line, or the part of a body
received) between calls, with the arguments finished so far; a big bulk
string arriving in pieces is appended, never parsed again.

The pure parser stays the definition.  Its faults are named as
``resp.first_fault`` names them (the first in byte order), with the same
sentences from ``commands/errors.py``, the same commands before the error,
the same limits, checked at the same bytes; inline lines are split by the
pure ``split_args``, handed over by ``bind``.  ``bin/setup`` builds this
when a C compiler is there; ``daemon/resp.py`` uses the pure parser
otherwise, or when ``LEASEQ_PURE=1``.  The unit tests run every parser
test against both and compare them on generated streams, split anyhow.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.string cimport memchr, memcpy, memmove

from leaseq.commands import errors

cdef object _ProtocolError = None   # daemon.resp.ProtocolError
cdef object _split_args = None      # daemon.resp.split_args, for inline lines


def bind(protocol_error, split_args):
    """``daemon.resp`` hands over its exception class and its inline splitter."""
    global _ProtocolError, _split_args
    _ProtocolError = protocol_error
    _split_args = split_args


cdef enum:
    COUNT_LINE_MAX = 24     # the "*N\r\n" line must end within this many bytes


cdef inline bint _number(const char* s, Py_ssize_t n, long long* value):
    """Redis's and hiredis's ``string2ll``: canonical decimal, in range."""
    cdef bint negative = 0
    cdef Py_ssize_t i = 0
    cdef unsigned long long v = 0
    cdef unsigned char c
    if n == 1 and s[0] == 48:
        value[0] = 0
        return 1
    if n > 0 and s[0] == 45:    # '-'
        negative = 1
        i = 1
    if i >= n or not (49 <= <unsigned char> s[i] <= 57):
        return 0
    while i < n:
        c = <unsigned char> s[i]
        if c < 48 or c > 57 or v > 922337203685477580ULL:
            return 0
        v = v * 10 + (c - 48)
        i += 1
    if negative:
        if v > 9223372036854775808ULL:
            return 0
        value[0] = -(<long long> (v - 1)) - 1
    else:
        if v > 9223372036854775807ULL:
            return 0
        value[0] = <long long> v
    return 1


cdef inline Py_ssize_t _crlf(const char* p, Py_ssize_t start, Py_ssize_t n):
    """Offset of the first "\\r\\n" in p[start:n], or -1."""
    cdef const char* hit
    while start < n - 1:
        hit = <const char*> memchr(p + start, 13, n - 1 - start)
        if hit == NULL:
            return -1
        start = hit - p
        if p[start + 1] == 10:
            return start
        start += 1
    return -1


cdef class RequestParser:
    """Incremental request parser for one connection (compiled; its fields
    and states are declared in _parser.pxd)."""

    def __cinit__(self):
        self.bcap = 256
        self.buf = <char*> PyMem_Malloc(self.bcap)
        if self.buf == NULL:
            raise MemoryError()

    def __init__(self, Py_ssize_t max_inline=64 * 1024, Py_ssize_t max_args=1024 * 1024,
                 Py_ssize_t max_bulk=512 * 1024 * 1024, Py_ssize_t max_buffer=1024 * 1024 * 1024):
        self.max_inline = max_inline
        self.max_args = max_args
        self.max_bulk = max_bulk
        self.max_buffer = max_buffer

    def __dealloc__(self):
        if self.buf != NULL:
            PyMem_Free(self.buf)

    @property
    def pending(self):
        """Bytes received that do not yet form a complete command."""
        return self.used + self.blen

    cdef int _keep(self, const char* p, Py_ssize_t n) except -1:
        """Append p[:n] to buf."""
        cdef Py_ssize_t cap = self.bcap
        cdef char* grown
        if self.blen + n > cap:
            while cap < self.blen + n:
                cap *= 2
            grown = <char*> PyMem_Realloc(self.buf, cap)
            if grown == NULL:
                raise MemoryError()
            self.buf = grown
            self.bcap = cap
        memcpy(self.buf + self.blen, p, n)
        self.blen += n
        return 0

    cpdef list feed(self, data):
        """``RequestParser.feed`` of daemon/resp.py: the commands ``data`` completes."""
        cdef list out = []
        cdef Py_ssize_t n, done
        if type(data) is not bytes:
            data = bytes(data)
        n = PyBytes_GET_SIZE(data)
        if self.blen == 0:
            done = self._run(PyBytes_AS_STRING(data), n, out)
            self._keep(PyBytes_AS_STRING(data) + done, n - done)
        elif self.state == BODY and self.blen + n < self.bulk + 2:
            self._keep(PyBytes_AS_STRING(data), n)     # more of a big body: append, no parse
        else:
            self._keep(PyBytes_AS_STRING(data), n)
            done = self._run(self.buf, self.blen, out)
            self.blen -= done
            memmove(self.buf, self.buf + done, self.blen)
        if self.state != INLINE and self.used + self.blen > self.max_buffer:
            raise _ProtocolError(errors.PROTO_TOO_BIG_REQUEST, out)
        return out

    cdef Py_ssize_t _run(self, const char* p, Py_ssize_t n, list out) except -1:
        """Parse p[:n] from the current state; return the offset where the
        unfinished piece begins (n when nothing is left over)."""
        cdef Py_ssize_t i = 0, end, line
        cdef long long value
        cdef const char* nl
        while i < n:
            if self.state == IDLE:
                self.state = COUNT if p[i] == 42 else INLINE    # '*'
                self.seen = 0
            if self.state == BODY:
                if n - i < self.bulk + 2:
                    return i
                self.args.append(PyBytes_FromStringAndSize(p + i, self.bulk))
                i += self.bulk + 2
                self.used += self.bulk + 2
                self.left -= 1
                if self.left == 0:
                    out.append(self.args)
                    self.args = None
                    self.used = 0
                    self.state = IDLE
                else:
                    self.state = HEADER
            elif self.state == HEADER:
                if p[i] != 36:      # '$'
                    raise _ProtocolError(errors.proto_expected_dollar_got(chr(<unsigned char> p[i])), out)
                end = _crlf(p, i + (self.seen if self.seen > 1 else 1), n)
                if end < 0:
                    self.seen = n - i - 1
                    return i
                self.seen = 0
                if not _number(p + i + 1, end - i - 1, &value) or value < 0 or value > self.max_bulk:
                    raise _ProtocolError(errors.PROTO_BULK_LENGTH, out)
                self.used += end + 2 - i
                i = end + 2
                self.bulk = <Py_ssize_t> value
                self.state = BODY
            elif self.state == COUNT:
                line = n - i if n - i < COUNT_LINE_MAX else COUNT_LINE_MAX
                end = _crlf(p, i + 1, i + line)
                if end < 0:
                    if n - i >= COUNT_LINE_MAX:
                        raise _ProtocolError(errors.PROTO_MULTIBULK_LENGTH, out)
                    return i
                if not _number(p + i + 1, end - i - 1, &value) or value < -1 or value > self.max_args:
                    raise _ProtocolError(errors.PROTO_MULTIBULK_LENGTH, out)
                if value <= 0:      # *0 and *-1 (a null request): nothing to run, as Redis
                    self.state = IDLE
                else:
                    self.used = end + 2 - i
                    self.left = <Py_ssize_t> value
                    self.args = []
                    self.state = HEADER
                i = end + 2
            else:                   # INLINE
                nl = <const char*> memchr(p + i + self.seen, 10, n - i - self.seen)
                if nl == NULL:
                    if n - i > self.max_inline:
                        raise _ProtocolError(errors.PROTO_TOO_BIG_INLINE, out)
                    self.seen = n - i
                    return i
                i = self._inline(p, i, nl - p, out)
        return n

    cdef Py_ssize_t _inline(self, const char* p, Py_ssize_t i, Py_ssize_t nl, list out) except -1:
        """The inline line p[i:nl] (its newline at nl), split as the pure parser does."""
        cdef Py_ssize_t size = nl - i
        if size > self.max_inline:
            raise _ProtocolError(errors.PROTO_TOO_BIG_INLINE, out)
        if size and p[nl - 1] == 13:
            size -= 1
        try:
            args = _split_args(PyBytes_FromStringAndSize(p + i, size))
        except ValueError:
            raise _ProtocolError(errors.PROTO_UNBALANCED_QUOTES, out) from None
        if args:
            if len(args) > self.max_args:
                raise _ProtocolError(errors.PROTO_MULTIBULK_LENGTH, out)
            out.append(args)
        self.state = IDLE
        self.seen = 0
        return nl + 1
