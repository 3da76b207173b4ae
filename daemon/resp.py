"""RESP request parsing and reply encoding, with no I/O in them (sans-IO).

Requests
--------
``RequestParser.feed(data)`` takes whatever bytes arrived and returns the
complete commands in them (each a list of ``bytes``); ``pending`` says how
many bytes of an unfinished command it holds.  ``RequestParser`` is the
compiled parser of ``_parser.pyx`` when it was built and ``LEASEQ_PURE`` is
not 1, else ``PureRequestParser``, here, which is the definition: the unit
tests run every parser test against both and compare them on generated
streams cut anywhere, good and bad.

In ``PureRequestParser``, multibulk requests (``*N\\r\\n$L\\r\\n...``) are
parsed by ``hiredis.Reader``; inline requests (``PING\\r\\n``, telnet,
``redis-cli --pipe``'s leading ``\\r\\n``) have their own path, because
hiredis rejects them.  The two can be mixed in one stream.

hiredis does not say how many bytes it consumed, so the parser keeps its own
offsets: hiredis accepts only canonical lengths (no sign, no leading zeros),
so a command's size on the wire is computed from its arguments.  This is
needed only when more bytes follow a command in the same chunk (pipelining),
to look at the first byte of the next one.

A malformed request raises ``ProtocolError`` with Redis's wording, naming
the first fault in byte order however the bytes were split (``first_fault``);
the commands parsed before it are in ``ProtocolError.commands`` so the caller
can still run and answer them before it replies the error and closes, as
Redis does.

Replies
-------
``encode(value, resp3)`` turns an explicit reply value (see
``leaseq.commands.replies``) into bytes for a RESP2 or RESP3 connection.
"""

from __future__ import annotations

import re

import hiredis

from leaseq.commands import errors
from functools import lru_cache

from leaseq.daemon import clock
from leaseq.storage import index, job, jobtable
from leaseq.storage.flavour import compiled_twin
from leaseq.commands.replies import NULL_ARRAY, Error, Frames, Ints, Map, Push, Raw, Record, Simple, Verbatim

ASTERISK = 0x2A  # '*'
_BYTES = {bytes}
TAIL_MAX = 64 * 1024  # partial commands up to this size are re-parsed whole with the next read


class ProtocolError(Exception):
    """The peer broke the protocol.  ``str(e)`` is the text after ``Protocol error: ``."""

    def __init__(self, message: str, commands: list | None = None) -> None:
        super().__init__(message)
        self.commands = commands or []


def wire_size(args: list) -> int:
    """Bytes of ``args`` as a canonical multibulk request."""
    size = 3 + len(str(len(args)))
    for a in args:
        n = len(a)
        size += n + 5 + (1 if n < 10 else 2 if n < 100 else 3 if n < 1000 else len(str(n)))
    return size


_CANONICAL = re.compile(rb"(?:0|-?[1-9][0-9]*)\Z")   # what Redis's string2ll accepts
_LL_MIN, _LL_MAX = -(1 << 63), (1 << 63) - 1


def _number(line: bytes) -> int | None:
    """A length as Redis and hiredis read it (``string2ll``), or None."""
    if not _CANONICAL.match(line):
        return None
    n = int(line)
    return n if _LL_MIN <= n <= _LL_MAX else None


def first_fault(data: bytes, start: int, max_args: int, max_bulk: int) -> str | None:
    """The protocol error of the multibulk command at ``data[start]``, naming
    its first fault in byte order (None if the bytes so far have none).

    This is the definition of which error a bad request gets, whatever the
    chunks it arrived in: hiredis words some faults its own way and finds
    them at other times (a whole ``*1\\r\\n:x\\r\\n`` is its "Bad integer
    value", the same bytes one by one our "expected '$', got ':'"), so the
    parser asks this whenever it raises.  The count line must end within 24
    bytes; every element must start with ``$``; lengths are canonical
    numbers; bodies are skipped by arithmetic and their CRLF is not checked
    (as hiredis and Redis)."""
    end = len(data)
    nl = data.find(b"\r\n", start, start + 24)
    if nl < 0:
        return errors.PROTO_MULTIBULK_LENGTH if end - start >= 24 else None
    count = _number(data[start + 1:nl])
    if count is None or count < -1 or count > max_args:
        return errors.PROTO_MULTIBULK_LENGTH
    pos = nl + 2
    for _ in range(count):
        if pos >= end:
            return None
        if data[pos] != 0x24:
            return errors.proto_expected_dollar_got(chr(data[pos]))
        nl = data.find(b"\r\n", pos)
        if nl < 0:
            return None
        size = _number(data[pos + 1:nl])
        if size is None or size < 0 or size > max_bulk:
            return errors.PROTO_BULK_LENGTH
        pos = nl + 4 + size
    return None


class PureRequestParser:
    """Incremental request parser for one connection: the definition.
    ``RequestParser`` is this, or its compiled twin (``_parser.pyx``)."""

    __slots__ = ("_reader", "_carry", "_tail", "_inline", "max_inline", "max_args", "max_bulk", "max_buffer")

    def __init__(self, max_inline: int = 64 * 1024, max_args: int = 1024 * 1024,
                 max_bulk: int = 512 * 1024 * 1024, max_buffer: int = 1024 * 1024 * 1024) -> None:
        self._reader = hiredis.Reader()
        self._carry = 0          # bytes of a big partial multibulk command inside the reader
        self._tail = b""         # a small partial multibulk command, held by us
        self._inline = b""       # partial inline line (held by us, not by hiredis)
        self.max_inline = max_inline
        self.max_args = max_args
        self.max_bulk = max_bulk
        self.max_buffer = max_buffer

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a complete command."""
        return self._carry + len(self._tail) + len(self._inline)

    def feed(self, data: bytes) -> list[list[bytes]]:
        out: list[list[bytes]] = []
        if self._tail or self._inline:    # a partial command held by us (never both)
            data = self._tail + self._inline + data
            self._tail = self._inline = b""
        pos = 0
        end = len(data)
        while pos < end:
            if self._carry == 0 and data[pos] != ASTERISK:
                pos = self._parse_inline(data, pos, out)
            else:
                pos = self._parse_multibulk(data, pos, out)
            if pos < 0:
                break
        return out

    # -- multibulk, through hiredis ------------------------------------------

    def _parse_multibulk(self, data: bytes, pos: int, out: list) -> int:
        """Feed data[pos:] to hiredis; return the offset of an inline command
        that follows, or -1 when everything was consumed.

        Every command that starts in ``data`` is walked to check its elements
        and find its end exactly.  An incomplete command of at most TAIL_MAX
        bytes is kept by us (``_tail``) and re-fed whole with the next bytes, so
        it too starts in ``data`` next time; a bigger one stays inside hiredis
        (``_carry``) and its end is computed from its arguments."""
        reader = self._reader
        start_carry = self._carry
        reader.feed(data, pos) if pos else reader.feed(data)
        off = pos - start_carry  # where the command being parsed began, in data's coordinates
        end = len(data)
        check_bulk = start_carry + end - pos > self.max_bulk
        try:
            while True:
                start = off   # where the command being checked began
                if off >= pos:
                    # hiredis allocates the whole array at the header: check the count first
                    self._check_count(data, off, out)
                try:
                    cmd = reader.gets()
                except hiredis.ProtocolError as e:
                    raise ProtocolError(_redis_wording(str(e)), out) from None
                if cmd is False:
                    if end - off > self.max_buffer:
                        raise ProtocolError(errors.PROTO_TOO_BIG_REQUEST, out)
                    if off >= pos:
                        self._check_headers(data, off, out)
                        if end - off <= TAIL_MAX:
                            self._tail = data[off:]
                            self._reader = hiredis.Reader()
                            self._carry = 0
                            return -1
                    self._carry = end - off
                    return -1
                if cmd is None:           # *-1: a null request, ignored as Redis does
                    cmd = []
                self._check(cmd, check_bulk, out)
                if off >= pos:
                    off = self._walk(data, off, cmd, out)
                else:                     # began in an earlier read, held by hiredis
                    off += wire_size(cmd)
                    if not pos <= off <= end or data[off - 2:off] != b"\r\n":
                        raise ProtocolError(errors.PROTO_EXPECTED_DOLLAR, out)
                if cmd:
                    out.append(cmd)
                if not reader.has_data():
                    self._carry = 0
                    return -1
                if off >= end:
                    raise ProtocolError(errors.PROTO_EXPECTED_DOLLAR, out)
                if data[off] != ASTERISK:
                    # an inline command follows: hiredis would reject it, so start afresh
                    self._reader = hiredis.Reader()
                    self._carry = 0
                    return off
        except ProtocolError as e:
            if start >= pos:      # the command began in data: name its first fault
                fault = first_fault(data, start, self.max_args, self.max_bulk)
                if fault is not None and fault != str(e):
                    raise ProtocolError(fault, out) from None
            raise

    @staticmethod
    def _walk(data: bytes, start: int, cmd: list, out: list) -> int:
        """End offset of ``cmd``, which starts at ``data[start]``, checking that
        every element was a bulk string (hiredis returns ``+OK`` as bytes too)."""
        end = len(data)
        find = data.find
        pos = find(b"\n", start) + 1
        for a in cmd:
            if pos >= end:
                raise ProtocolError(errors.PROTO_EXPECTED_DOLLAR, out)
            if data[pos] != 0x24:
                raise ProtocolError(errors.proto_expected_dollar_got(chr(data[pos])), out)
            pos = find(b"\n", pos) + 3 + len(a)
        if pos > end:
            raise ProtocolError(errors.PROTO_EXPECTED_DOLLAR, out)
        return pos

    def _check_count(self, data: bytes, start: int, out: list) -> None:
        nl = data.find(b"\r\n", start, start + 24)
        if nl < 0:
            if len(data) - start >= 24:
                raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH, out)
            return
        try:
            count = int(data[start + 1:nl])
        except ValueError:
            return              # hiredis words the error
        if count > self.max_args:
            raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH, out)

    def _check_headers(self, data: bytes, start: int, out: list) -> None:
        """Limits of a partial command, checked on its headers as they arrive
        (as Redis does), so a client cannot make us buffer what we would refuse.
        Bodies are skipped by arithmetic; malformed numbers are left to hiredis."""
        end = len(data)
        find = data.find
        nl = find(b"\r\n", start)
        if nl < 0:
            return
        try:
            count = int(data[start + 1:nl])
        except ValueError:
            return
        if count > self.max_args:
            raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH, out)
        pos = nl + 2
        while pos < end:
            if data[pos] != 0x24:
                raise ProtocolError(errors.proto_expected_dollar_got(chr(data[pos])), out)
            nl = find(b"\r\n", pos)
            if nl < 0:
                return
            try:
                size = int(data[pos + 1:nl])
            except ValueError:
                return
            if size < 0 or size > self.max_bulk:     # hiredis would take $-1 for a nil and wait
                raise ProtocolError(errors.PROTO_BULK_LENGTH, out)
            pos = nl + 4 + size

    def _check(self, cmd, check_bulk: bool, out: list) -> None:
        if type(cmd) is not list:
            raise ProtocolError(errors.PROTO_EXPECTED_STAR, out)
        if len(cmd) > self.max_args:
            raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH, out)
        if set(map(type, cmd)) - _BYTES:     # (one C-level pass; the loop below only names the culprit)
            for a in cmd:
                if type(a) is not bytes:
                    if a is None:        # $-1 inside a request
                        raise ProtocolError(errors.PROTO_BULK_LENGTH, out)
                    raise ProtocolError(errors.proto_expected_dollar_got(_type_byte(a)), out)
        if check_bulk and max(map(len, cmd), default=0) > self.max_bulk:
            raise ProtocolError(errors.PROTO_BULK_LENGTH, out)

    # -- inline ----------------------------------------------------------------

    def _parse_inline(self, data: bytes, pos: int, out: list) -> int:
        nl = data.find(b"\n", pos)
        if nl < 0:
            rest = data[pos:]
            if len(rest) > self.max_inline:
                raise ProtocolError(errors.PROTO_TOO_BIG_INLINE, out)
            self._inline = rest
            return -1
        if nl - pos > self.max_inline:
            raise ProtocolError(errors.PROTO_TOO_BIG_INLINE, out)
        line = data[pos:nl]
        if line.endswith(b"\r"):
            line = line[:-1]
        try:
            args = split_args(line)
        except ValueError:
            raise ProtocolError(errors.PROTO_UNBALANCED_QUOTES, out) from None
        if args:
            if len(args) > self.max_args:
                raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH, out)
            out.append(args)
        return nl + 1


def _type_byte(value) -> str:
    """The RESP type byte of an element hiredis decoded (for the error message)."""
    for kind, byte in ((bool, "#"), (int, ":"), (float, ","), (list, "*"), (dict, "%"),
                       ((set, frozenset), "~"), (Exception, "-")):
        if isinstance(value, kind):
            return byte
    return "?"


def _redis_wording(hiredis_message: str) -> str:
    """hiredis's parse errors, reworded the way Redis's own parser says them."""
    m = hiredis_message.lower()
    if "multi-bulk length" in m:
        return errors.PROTO_MULTIBULK_LENGTH
    if "bulk string length" in m or "bulk length" in m:
        return errors.PROTO_BULK_LENGTH
    if "reply type byte" in m:
        got = hiredis_message.split('"')[1] if '"' in hiredis_message else "?"
        return errors.proto_expected_dollar_got(got)
    return hiredis_message


_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("a"): b"\a"}
_HEX = b"0123456789abcdefABCDEF"


def split_args(line: bytes) -> list[bytes]:
    """Split an inline request the way Redis's ``sdssplitargs`` does.

    Whitespace separates arguments; ``"..."`` supports ``\\n \\r \\t \\b \\a \\xHH``
    and backslash escapes; ``'...'`` supports ``\\'``.  A closing quote must be
    followed by whitespace or the end.  Raises ``ValueError`` on unbalanced
    quotes.
    """
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in b" \t\n\r\v\f":
            i += 1
        if i >= n:
            return args
        cur = bytearray()
        quote = 0
        while True:
            if i >= n:
                if quote:
                    raise ValueError("unbalanced quotes")
                break
            c = line[i]
            if quote == 0x22:  # inside "..."
                if c == 0x5C and i + 3 < n and line[i + 1] == ord("x") \
                        and line[i + 2] in _HEX and line[i + 3] in _HEX:
                    cur.append(int(line[i + 2:i + 4], 16))
                    i += 3
                elif c == 0x5C and i + 1 < n:
                    i += 1
                    cur += _ESCAPES.get(line[i], bytes([line[i]]))
                elif c == 0x22:
                    if i + 1 < n and line[i + 1] not in b" \t\n\r\v\f":
                        raise ValueError("closing quote must be followed by a space")
                    i += 1
                    break
                else:
                    cur.append(c)
            elif quote == 0x27:  # inside '...'
                if c == 0x5C and i + 1 < n and line[i + 1] == 0x27:
                    cur.append(0x27)
                    i += 1
                elif c == 0x27:
                    if i + 1 < n and line[i + 1] not in b" \t\n\r\v\f":
                        raise ValueError("closing quote must be followed by a space")
                    i += 1
                    break
                else:
                    cur.append(c)
            elif c in b" \t\n\r\v\f":
                break
            elif c in (0x22, 0x27):
                quote = c
            else:
                cur.append(c)
            i += 1
        args.append(bytes(cur))


# -- replies -------------------------------------------------------------------

def encode_pure(value, resp3: bool) -> bytes:
    """A reply's bytes (``commands.replies`` says which Python type is which
    RESP type).  ``encode`` is this, or its compiled twin (``_resp.pyx``)."""
    out: list[bytes] = []
    _encode(value, out, resp3)
    return b"".join(out)


def _encode(v, out: list, resp3: bool) -> None:
    t = type(v)
    if t is bytes:
        out.append(b"$%d\r\n%b\r\n" % (len(v), v))
    elif t is int:
        out.append(b":%d\r\n" % v)
    elif t is list or t is tuple:
        out.append(b"*%d\r\n" % len(v))
        for item in v:
            if type(item) is Record:
                out.append(_record(item, resp3))
            else:
                _encode(item, out, resp3)
    elif t is Record:
        out.append(_record(v, resp3))
    elif t is Map:
        items = v.items
        out.append((b"%%%d\r\n" if resp3 else b"*%d\r\n") % (len(items) if resp3 else 2 * len(items)))
        for k, item in items:
            _encode(k, out, resp3)
            _encode(item, out, resp3)
    elif v is None:
        out.append(b"_\r\n" if resp3 else b"$-1\r\n")
    elif t is Simple:
        out.append(b"+%b\r\n" % v.encode())
    elif t is Error:
        out.append(b"-%b\r\n" % v.line.replace("\r", " ").replace("\n", " ").encode())
    elif t is Verbatim:
        if resp3:
            out.append(b"=%d\r\ntxt:%b\r\n" % (len(v.text) + 4, v.text))
        else:
            out.append(b"$%d\r\n%b\r\n" % (len(v.text), v.text))
    elif t is Ints:
        out.append(b"*%d\r\n" % len(v))
        out.append(_int_lines(len(v)) % tuple(v))
    elif t is Raw:
        out.append(v.data)
    elif t is Frames:
        for frame in v.frames:
            _encode(frame, out, resp3)
    elif t is Push:
        out.append((b">%d\r\n" if resp3 else b"*%d\r\n") % len(v.items))
        for item in v.items:
            _encode(item, out, resp3)
    elif v is NULL_ARRAY:
        out.append(b"_\r\n" if resp3 else b"*-1\r\n")
    elif t is bytearray or t is memoryview:
        _encode(bytes(v), out, resp3)
    else:
        raise TypeError(f"not a reply type: {t.__name__} ({v!r:.80})")


@lru_cache(maxsize=64)
def _int_lines(n: int) -> bytes:
    return b":%d\r\n" * n


def _record(v: Record, resp3: bool) -> bytes:
    shape = v.shape
    values = list(v.values)
    for i in reversed(shape.bulk):
        values.insert(i, len(values[i]))
    return (shape.resp3 if resp3 else shape.resp2) % tuple(values)


# -- the compiled modules, when built ------------------------------------------------------------

encode = encode_pure
RequestParser = PureRequestParser
COMPILED: list[str] = []    # the compiled modules in use
_resp = compiled_twin("leaseq.daemon._resp")
if _resp is not None:
    _resp.set_fallback(encode_pure)
    encode = _resp.encode
    COMPILED.append("_resp")
_parser = compiled_twin("leaseq.daemon._parser")
if _parser is not None:
    _parser.bind(ProtocolError, split_args)
    RequestParser = _parser.RequestParser
    COMPILED.append("_parser")
if job.COMPILED:
    COMPILED.append("_job")
if jobtable.COMPILED:
    COMPILED.append("_jobtable")
if index.COMPILED:
    COMPILED.append("_index")
if clock.COMPILED:
    COMPILED.append("_clock")
