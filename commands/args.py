"""Argument parsing shared by the handlers: integers, names and options."""

from __future__ import annotations

import functools

from . import errors
from .replies import Error


def to_int(value: bytes) -> int:
    """A signed 64-bit integer argument (Redis's grammar: no sign but '-', no
    spaces or underscores), with Redis's error for anything else.  (Up to 19
    ASCII digits after an optional '-': ``bytes.isdigit`` takes only those,
    and costs a third of a regular expression's match.)"""
    digits = value[1:] if value[:1] == b"-" else value
    if not 0 < len(digits) <= 19 or not digits.isdigit():
        raise errors.NOT_INTEGER
    n = int(value)
    if not -(1 << 63) <= n < (1 << 63):
        raise errors.NOT_INTEGER
    return n


def to_timeout(value: bytes) -> int:
    """A timeout argument (WAIT, WAITAOF, CLIENT PAUSE), with Redis's
    errors for one that is not an integer, or is negative."""
    try:
        timeout = to_int(value)
    except Error:
        raise errors.TIMEOUT_NOT_INTEGER from None
    if timeout < 0:
        raise errors.NEGATIVE_TIMEOUT
    return timeout


def in_range(value: bytes, option: str, low: int, high: int) -> int:
    n = to_int(value)
    if not low <= n <= high:
        raise errors.out_of_range(option, low, high)
    return n


def clamped(value: bytes, option: str, low: int, high: int) -> int:
    """For options the spec says are clamped: negative is still an error."""
    n = to_int(value)
    if n < 0:
        raise errors.out_of_range(option, low, high)
    return min(max(n, low), high)


def to_float(value: bytes, option: str) -> float:
    try:
        f = float(value)
    except ValueError:
        raise errors.not_a_float(option) from None
    if f != f or f in (float("inf"), float("-inf")):
        raise errors.not_a_float(option)
    return f


# the bytes a queue name may not hold: controls, space, DEL and above (one
# C-level ``translate`` per check: the generator over the bytes it replaces
# held the GIL for 3 % of the daemon's time at 5,000 single-job pushes/s)
_NOT_IN_NAMES = bytes(range(0x21)) + bytes(range(0x7F, 0x100))


_NAMES_SEEN: set = set()   # names that passed, so that a queue's every command checks it with a hash
_NAMES_KEPT = 4096         # at most; when full it starts over


def queue_name(value: bytes) -> bytes:
    if value in _NAMES_SEEN:
        return value
    if not 1 <= len(value) <= 200 or len(value.translate(None, _NOT_IN_NAMES)) != len(value):
        raise errors.bad_queue_name(value)
    if len(_NAMES_SEEN) >= _NAMES_KEPT:
        _NAMES_SEEN.clear()
    _NAMES_SEEN.add(value)
    return value


MAX_GROUP = 1024          # GROUP: a name, any bytes, not a payload


def group_name(value: bytes) -> bytes:
    if len(value) > MAX_GROUP:
        raise errors.group_too_long(MAX_GROUP)
    return value


MAX_META_FIELDS = 32      # META (docs/semantics.md §3.12): a few labels per job, not a second payload
MAX_META_NAME = 64
MAX_META_BYTES = 8192     # its field names and values together


def meta_pairs(r: OptionReader) -> tuple:
    """``META field value [field value ...]``: the pairs from the reader's
    position to the end of the arguments (META is the last option), as a
    tuple of ``(field, value)`` in the order given, checked against the
    limits; bad META is an error before anything is pushed."""
    rest = r.rest()
    if not rest:
        raise errors.META_EMPTY
    if len(rest) % 2:
        raise errors.META_ODD
    count = len(rest) // 2
    if count > MAX_META_FIELDS:
        raise errors.meta_too_many(count, MAX_META_FIELDS)
    pairs = tuple(zip(rest[::2], rest[1::2]))
    seen = set()
    size = 0
    for name, value in pairs:
        if not 1 <= len(name) <= MAX_META_NAME:
            raise errors.meta_bad_name(len(name), MAX_META_NAME)
        if name in seen:
            raise errors.meta_repeated(name)
        seen.add(name)
        size += len(name) + len(value)
    if size > MAX_META_BYTES:
        raise errors.meta_too_big(size, MAX_META_BYTES)
    return pairs


class OptionReader:
    """Walks ``args[start:]`` as ``KEYWORD [values...]`` options.

    >>> r = OptionReader(args, 3)
    >>> for kw in r:                  # kw is upper-case bytes
    ...     if kw == b"LEASE": lease = r.int_in("LEASE", 100, 1000)
    ...     else: r.unknown()
    """

    __slots__ = ("args", "i", "seen")

    def __init__(self, args: list, start: int) -> None:
        self.args = args
        self.i = start
        self.seen: set = set()

    def __iter__(self):
        args = self.args
        while self.i < len(args):
            kw = args[self.i].upper()
            self.i += 1
            yield kw

    def value(self) -> bytes:
        if self.i >= len(self.args):
            raise errors.SYNTAX
        v = self.args[self.i]
        self.i += 1
        return v

    def rest(self) -> list:
        """Every argument left, taken (an option that runs to the end)."""
        rest = self.args[self.i:]
        self.i = len(self.args)
        return rest

    def peek(self) -> bytes | None:
        """The next argument, not taken (None at the end)."""
        return self.args[self.i] if self.i < len(self.args) else None

    def once(self, kw: bytes) -> None:
        """Options may be given once; a repeat is a syntax error."""
        if kw in self.seen:
            raise errors.SYNTAX
        self.seen.add(kw)

    def int_in(self, option: str, low: int, high: int) -> int:
        return in_range(self.value(), option, low, high)

    def int_clamped(self, option: str, low: int, high: int) -> int:
        return clamped(self.value(), option, low, high)

    def unknown(self) -> Error:
        raise errors.SYNTAX


_OPTIONS_KEPT = 1024       # option lists a ``remembered`` parser keeps; when full it starts over


def remembered(parse):
    """``parse(args, start)``, answered from memory when the same option
    words came before.  For parsers whose result depends on ``args[start:]``
    alone, is immutable, and whose valid options are short (numbers and
    keywords): a worker sends the same ``COUNT 10 BLOCK 5000`` with every
    claim, and reading them again took a twentieth of a blocked claim's
    path.  An error is never remembered: bad options are read (and refused)
    every time.  The memory: the option words (a tuple) → what ``parse``
    answered."""
    seen: dict = {}

    @functools.wraps(parse)
    def parse_remembered(args: list, start: int):
        words = tuple(args[start:])
        found = seen.get(words)
        if found is None:
            found = parse(args, start)
            if len(seen) >= _OPTIONS_KEPT:
                seen.clear()
            seen[words] = found
        return found
    return parse_remembered
