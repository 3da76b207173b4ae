"""Explicit reply types.

Handlers say what they mean; the encoder (``leaseq.daemon.resp``) never
guesses a wire type from content.  The mapping is by Python type:

=================  =====================  ==============================
value              RESP2                  RESP3
=================  =====================  ==============================
``bytes``          bulk string ``$``      bulk string ``$``
``int``            integer ``:``          integer ``:``
``list``/``tuple`` array ``*``            array ``*``
``None``           null bulk ``$-1``      null ``_``
``NULL_ARRAY``     null array ``*-1``     null ``_``
``Simple``         simple string ``+``    simple string ``+``
``Error``          error ``-``            error ``-``
``Map``            flat array ``*2N``     map ``%N``
``Verbatim``       bulk string ``$``      verbatim string ``=``
``Push``           array ``*``            push ``>``
``Record``         flat array ``*2N``     map ``%N``
=================  =====================  ==============================

``Record`` is a map whose keys and value kinds are fixed by a ``Shape``
(a job as QCLAIM returns it): the shape pre-encodes the keys once, so a
record encodes with one format operation instead of one call per field.

``str`` and ``bool`` are deliberately not reply types: a handler that returns
one has a bug, and the encoder raises ``TypeError``.
"""

from __future__ import annotations


class Simple(str):
    """A simple string reply, such as ``+OK``.  Must not contain CR or LF."""

    __slots__ = ()


OK = Simple("OK")
QUEUED = Simple("QUEUED")
PONG = Simple("PONG")


class Error(Exception):
    """An error reply: a code word and a sentence (``-NOQUEUE no such queue 'x'``).

    It is an exception so that argument parsing deep inside a handler can
    ``raise`` it; the dispatcher turns it into a reply.  It never closes the
    connection (protocol errors are a different thing, see ``daemon.resp``).
    """

    __slots__ = ("code", "message")

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message

    @property
    def line(self) -> str:
        return f"{self.code} {self.message}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Error) and other.line == self.line

    def __hash__(self) -> int:
        return hash(self.line)


class Map:
    """A map reply: RESP3 ``%``, RESP2 flat ``[k1, v1, k2, v2 ...]``.

    ``items`` is a sequence of (key, value) pairs; keys are usually bytes.
    """

    __slots__ = ("items",)

    def __init__(self, items) -> None:
        self.items = list(items.items()) if isinstance(items, dict) else list(items)

    def get(self, key, default=None):
        for k, v in self.items:
            if k == key:
                return v
        return default

    def __repr__(self) -> str:
        return f"Map({self.items!r})"


class Verbatim:
    """Text that RESP3 clients show as-is (``=N\\r\\ntxt:...``); bulk in RESP2."""

    __slots__ = ("text",)

    def __init__(self, text: bytes) -> None:
        self.text = text


class Push:
    """An out-of-band message: RESP3 push ``>``, RESP2 array (like pub/sub)."""

    __slots__ = ("items",)

    def __init__(self, items) -> None:
        self.items = list(items)


class Ints(list):
    """An array reply that holds only integers (QPUSHMANY's ids): the
    encoder writes it with one format operation instead of one per item."""

    __slots__ = ()


class Frames:
    """Several top-level replies to one command, sent back to back: SUBSCRIBE
    and UNSUBSCRIBE answer once per channel, as in Redis."""

    __slots__ = ("frames",)

    def __init__(self, frames: list) -> None:
        self.frames = frames


class Raw:
    """Bytes already in their wire form, written as they are: the
    replication stream a primary sends a replica (its snapshot, then its
    log's frames) goes through the connection's outbox like any reply, so
    it keeps its place behind the replies before it."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class _NullArray:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_ARRAY"


NULL_ARRAY = _NullArray()


class _NoReply:
    """Returned by a handler that answers nothing (SHUTDOWN closes instead)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_REPLY"


NO_REPLY = _NoReply()


class Postponed:
    """What the dispatcher returns for a command a pause holds back
    (daemon/pause.py): its connection keeps it and runs it again later."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "POSTPONED"


POSTPONED = Postponed()


class Shape:
    """The fixed layout of a ``Record``: keys, and whether each value is an
    integer or a bulk string.  Build shapes once, at import time."""

    __slots__ = ("keys", "bulk", "resp2", "resp3")

    def __init__(self, fields) -> None:
        """``fields``: (key bytes, "int" | "bulk") pairs."""
        self.keys = tuple(k for k, _ in fields)
        self.bulk = tuple(i for i, (_, kind) in enumerate(fields) if kind == "bulk")
        body = b"".join(b"$%d\r\n%b\r\n" % (len(k), k.replace(b"%", b"%%"))
                        + (b"$%d\r\n%b\r\n" if kind == "bulk" else b":%d\r\n") for k, kind in fields)
        self.resp2 = b"*%d\r\n" % (2 * len(fields)) + body
        self.resp3 = b"%%%%%d\r\n" % len(fields) + body


class Record:
    """A map reply with a fixed ``Shape``; ``values`` in the shape's key order.

    The fast path trusts the shape: an ``int`` field must hold an ``int`` and a
    ``bulk`` field ``bytes`` (the encoder checks neither, to keep a claimed job
    at one format operation).  Build records only in the command modules.
    """

    __slots__ = ("shape", "values")

    def __init__(self, shape: Shape, values) -> None:
        self.shape = shape
        self.values = values

    @property
    def items(self):
        return list(zip(self.shape.keys, self.values))

    def get(self, key, default=None):
        try:
            return self.values[self.shape.keys.index(key)]
        except ValueError:
            return default
