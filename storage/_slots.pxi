# Included (not imported) by the compiled modules that read the state of
# Python objects on every request: daemon/_lane.pyx.
#
# Reading ``obj.name`` from compiled code goes through the generic attribute
# lookup: the type's attribute cache, then the instance's dictionary or the
# type's descriptor.  At one job per request those lookups, about 150 a job,
# were a tenth of a job's first-level cache misses (docs/performance.md,
# "What a job costs over sockets, counted"), where CPython's own bytecode
# reads the same attributes through specialised instructions that skip them.
#
# ``Slots`` does for compiled code what CPython's LOAD_ATTR_SLOT does for
# bytecode: the classes on the hot path declare ``__slots__``, so every
# object of the class keeps each of those attributes at the same offset;
# ``Slots`` learns the offsets of the names it was given from the class's
# member descriptors the first time it sees an object of that class, and
# afterwards reads and writes at the offset after one comparison of the
# object's type.  An object of another class (a subclass, a test's stand-in)
# makes it learn that class instead; a class whose attribute is not a plain
# slot (a property, an instance dictionary) is read by ``getattr``.  So the
# answer is always what ``getattr`` would give, only cheaper.

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject, PyTypeObject, Py_TYPE
from cpython.ref cimport Py_INCREF, Py_XDECREF


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    int T_OBJECT_EX
    int READONLY


cdef type _MEMBER_DESCRIPTOR = type(type("_", (), {"__slots__": ("x",)}).x)


cdef class Slots:
    """Where the named ``__slots__`` of one class (``of``, its dotted name:
    what the daemon passes; tests/unit/test_slots.py holds the class to
    having each name as a slot) sit in its objects."""
    cdef readonly str of
    cdef readonly tuple names
    cdef Py_ssize_t *offsets           # by name; 0: not a plain slot of the class, read by getattr
    cdef PyTypeObject *seen            # the class learnt last
    cdef object seen_ref               # (holds it, so that the pointer stays its)

    def __cinit__(self, str of, names):
        self.of = of
        self.names = tuple(names)
        self.offsets = <Py_ssize_t *>PyMem_Malloc(max(1, len(self.names)) * sizeof(Py_ssize_t))
        if self.offsets is NULL:
            raise MemoryError()
        self.seen = NULL

    def __dealloc__(self):
        PyMem_Free(self.offsets)

    cdef int learn(self, object obj) except -1:
        cdef PyMemberDef *member
        cdef Py_ssize_t i
        cls = type(obj)
        self.seen_ref = cls
        self.seen = Py_TYPE(obj)
        for i, name in enumerate(self.names):
            self.offsets[i] = 0
            d = getattr(cls, name, None)
            if type(d) is _MEMBER_DESCRIPTOR:
                member = (<PyMemberDescrObject *>d).d_member
                if member.type == T_OBJECT_EX and not member.flags & READONLY:
                    self.offsets[i] = member.offset
        return 0

    @property
    def learnt(self):
        """The class learnt last (None: none yet)."""
        return self.seen_ref

    def generic(self):
        """The names read by ``getattr`` in objects of the class learnt last."""
        return [name for i, name in enumerate(self.names) if self.offsets[i] == 0]

    def read(self, obj, Py_ssize_t i):
        """``get`` (for the tests)."""
        return get(self, obj, i)

    def write(self, obj, Py_ssize_t i, value):
        """``put`` (for the tests)."""
        put(self, obj, i, value)


cdef inline PyObject **_slot(Slots s, object obj, Py_ssize_t i) except? NULL:
    """Where ``obj`` keeps the attribute, or NULL: it has no plain slot for it."""
    if Py_TYPE(obj) != s.seen:
        s.learn(obj)
    if s.offsets[i] == 0:
        return NULL
    return <PyObject **>((<char *><PyObject *>obj) + s.offsets[i])


cdef inline object get(Slots s, object obj, Py_ssize_t i):
    """``getattr(obj, s.names[i])``: small enough for the C compiler to
    inline at every read (a read of the class learnt last, a plain slot,
    set); any other read is ``_get``'s."""
    cdef PyObject *value
    if Py_TYPE(obj) == s.seen and s.offsets[i] != 0:
        value = (<PyObject **>((<char *><PyObject *>obj) + s.offsets[i]))[0]
        if value is not NULL:
            return <object>value
    return _get(s, obj, i)


cdef object _get(Slots s, object obj, Py_ssize_t i):
    """``get``, learning the class first if need be."""
    cdef PyObject **at = _slot(s, obj, i)
    if at is not NULL and at[0] is not NULL:
        return <object>at[0]
    return getattr(obj, <str>s.names[i])


cdef inline int put(Slots s, object obj, Py_ssize_t i, object value) except -1:
    """``setattr(obj, s.names[i], value)``."""
    cdef PyObject **at = _slot(s, obj, i)
    cdef PyObject *old
    if at is NULL:
        setattr(obj, <str>s.names[i], value)
        return 0
    old = at[0]
    Py_INCREF(value)
    at[0] = <PyObject *>value
    Py_XDECREF(old)
    return 0
