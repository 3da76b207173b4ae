# The C side of storage/_index.pyx, for the compiled modules that cimport it
# (storage/indexes.py, storage/plain.py): the layout of the two indexes and the operations a
# job's claim and ack call on them, reached as C calls (docs/performance.md,
# "C calls between the compiled modules").  What each does is written in the .pyx.

cimport cython
from libc.stdint cimport int64_t, uint64_t

cdef enum:
    CHUNK_BYTES = 8192          # a chunk's keys: 1,024 narrow ones or 512 wide ones

ctypedef struct Chunk:
    Py_ssize_t n
    unsigned char data[CHUNK_BYTES]


@cython.final
cdef class _Keys:
    cdef Chunk **chunks
    cdef Py_ssize_t nchunks, room, length
    cdef Py_ssize_t width, cap, merge_below      # bytes a key, keys a chunk, merge threshold
    cdef void clear(self)
    cdef Chunk *new_chunk(self, Py_ssize_t at) except NULL
    cdef void drop_chunk(self, Py_ssize_t at)
    cdef void settle(self, Py_ssize_t ci)
    cdef void pop_front(self, Py_ssize_t count)


cdef class _Index:
    cdef _Keys _keys


@cython.final
cdef class TimeIndex(_Index):
    cdef readonly int64_t earliest
    cdef void _moved(self)
    cpdef object first(self)
    cpdef add_many(self, int64_t when, object jids)
    cpdef remove_many(self, int64_t when, object jids)


@cython.final
cdef class ReadyIndex(_Index):
    cdef uint64_t _key(self, int band, object jid) except? 0xFFFFFFFFFFFFFFFF
    cpdef append_new(self, int band, object jids)
    cpdef list first(self, Py_ssize_t count)
    cpdef pop_first(self, Py_ssize_t count)
