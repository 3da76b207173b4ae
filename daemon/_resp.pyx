# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The reply encoder of ``daemon/resp.py``, compiled: the same function,
``encode(value, resp3) -> bytes``, writing into one C buffer instead of
joining a list of formatted bytes.

The profile of W1/W2 (docs/performance.md) put a quarter of the daemon's
CPU in encoding replies: a claimed job is a ``Record`` of 7 to 9 fields, a
push's reply an integer.  Here bulk strings, integers, arrays, ``Record``,
``Map``, ``Ints``, nulls and simple strings (``+OK``, ``+PONG``) are
written in C; the rare types (``Error``, ``Verbatim``, ``Push``,
``Frames``, ...) go through the pure encoder.  ``bin/setup``
builds this when a C compiler is there; ``daemon/resp.py`` falls back to
its own encoder otherwise, or when ``LEASEQ_PURE=1``.  The unit tests
check that both give the same bytes for every reply type.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_AsUTF8String
from libc.string cimport memcpy

from leaseq.commands.replies import Ints, Map, Record, Simple

cdef object _Record = Record
cdef object _Map = Map
cdef object _Ints = Ints
cdef object _Simple = Simple
cdef dict _shapes = {}          # Shape -> (key headers, is-bulk flags), made once per shape
cdef object _fallback = None    # daemon.resp.encode_pure, for the rare types


def set_fallback(fn):
    """``daemon.resp`` hands over its own encoder for the types written here in Python."""
    global _fallback
    _fallback = fn


cdef class _Buf:
    cdef char* data
    cdef Py_ssize_t length
    cdef Py_ssize_t capacity

    def __cinit__(self):
        self.capacity = 256
        self.length = 0
        self.data = <char*> PyMem_Malloc(self.capacity)
        if self.data == NULL:
            raise MemoryError()

    def __dealloc__(self):
        if self.data != NULL:
            PyMem_Free(self.data)

    cdef inline int reserve(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t want = self.length + n
        cdef Py_ssize_t cap = self.capacity
        cdef char* grown
        if want <= cap:
            return 0
        while cap < want:
            cap *= 2
        grown = <char*> PyMem_Realloc(self.data, cap)
        if grown == NULL:
            raise MemoryError()
        self.data = grown
        self.capacity = cap
        return 0

    cdef inline int put(self, const char* s, Py_ssize_t n) except -1:
        self.reserve(n)
        memcpy(self.data + self.length, s, n)
        self.length += n
        return 0

    cdef inline int put_bytes(self, bytes b) except -1:
        return self.put(PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))

    cdef int put_number(self, char prefix, long long n) except -1:
        """``prefix`` n CRLF: an integer reply, or a length header."""
        cdef char digits[24]
        cdef int i = 23
        cdef unsigned long long u = <unsigned long long> (-(n + 1)) + 1 if n < 0 else <unsigned long long> n
        self.reserve(26)
        if u == 0:
            digits[i] = 48
            i -= 1
        while u:
            digits[i] = <char> (48 + u % 10)
            u //= 10
            i -= 1
        if n < 0:
            digits[i] = 45
            i -= 1
        self.data[self.length] = prefix
        self.length += 1
        memcpy(self.data + self.length, digits + i + 1, 23 - i)
        self.length += 23 - i
        self.data[self.length] = 13
        self.data[self.length + 1] = 10
        self.length += 2
        return 0

    cdef int put_int(self, object v) except -1:
        cdef int overflow = 0
        cdef long long n = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow:
            return self.put_bytes(b":%d\r\n" % v)
        return self.put_number(58, n)          # ':'

    cdef int put_bulk(self, bytes b) except -1:
        cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
        self.put_number(36, n)                 # '$'
        self.reserve(n + 2)
        memcpy(self.data + self.length, PyBytes_AS_STRING(b), n)
        self.length += n
        self.data[self.length] = 13
        self.data[self.length + 1] = 10
        self.length += 2
        return 0


cdef tuple _shape_parts(object shape):
    parts = _shapes.get(shape)
    if parts is None:
        keys = tuple(b"$%d\r\n%b\r\n" % (len(k), k) for k in shape.keys)
        bulk = tuple(i in shape.bulk for i in range(len(shape.keys)))
        parts = _shapes[shape] = (keys, bulk)
    return parts


cdef int _record(_Buf b, object v, bint resp3) except -1:
    cdef tuple keys, bulk
    keys, bulk = _shape_parts(v.shape)
    cdef Py_ssize_t n = len(keys), i
    values = v.values
    b.put_number(37 if resp3 else 42, n if resp3 else 2 * n)      # '%' or '*'
    for i in range(n):
        b.put_bytes(keys[i])
        if bulk[i]:
            b.put_bulk(values[i])
        else:
            b.put_int(values[i])
    return 0


cdef int _enc(_Buf b, object v, bint resp3) except -1:
    cdef type t = type(v)
    if t is bytes:
        return b.put_bulk(v)
    if t is int:
        return b.put_int(v)
    if t is list or t is tuple:
        b.put_number(42, len(v))
        for item in v:
            _enc(b, item, resp3)
        return 0
    if t is _Record:
        return _record(b, v, resp3)
    if v is None:
        return b.put(b"_\r\n", 3) if resp3 else b.put(b"$-1\r\n", 5)
    if t is _Map:
        items = v.items
        b.put_number(37 if resp3 else 42, len(items) if resp3 else 2 * len(items))
        for k, item in items:
            _enc(b, k, resp3)
            _enc(b, item, resp3)
        return 0
    if t is _Ints:
        b.put_number(42, len(v))
        for item in v:
            b.put_int(item)
        return 0
    if t is _Simple:                   # +OK, +PONG: no CR or LF in it (commands.replies.Simple)
        b.put(b"+", 1)
        b.put_bytes(PyUnicode_AsUTF8String(v))
        return b.put(b"\r\n", 2)
    return b.put_bytes(_fallback(v, resp3))


cdef _Buf _spare = None                # a buffer kept from one reply to the next
cdef Py_ssize_t SPARE_MAX = 64 * 1024   # (not one a big reply grew)


cpdef bytes encode(object value, bint resp3):
    """``daemon.resp.encode``, compiled: written into the spare buffer when
    it is free; when it is not (an encoding re-entered through the
    fallback), into one of its own."""
    global _spare
    cdef _Buf b = _spare
    if b is None:
        b = _Buf()
    else:
        _spare = None
        b.length = 0
    try:
        _enc(b, value, resp3)
        return PyBytes_FromStringAndSize(b.data, b.length)
    finally:
        if b.capacity <= SPARE_MAX:
            _spare = b
