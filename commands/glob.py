"""Glob patterns as Redis matches them (KEYS, SCAN MATCH, ACL ``~pattern``).

``*`` any run of bytes, ``?`` one byte, ``[abc]`` / ``[a-z]`` a set or a
range, ``[^a]`` not in the set, ``\\x`` the byte x itself.  This differs
from Python's ``fnmatch`` in the negation (``^``, not ``!``) and in the
backslash escape, and it works on bytes, as queue names are.  A pattern is
translated once into a regular expression; QLIST MATCH, SCAN MATCH, KEYS,
CONFIG GET and the ACL's queue patterns all use it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable


def _translate(pattern: bytes) -> bytes:
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i:i + 1]
        i += 1
        if c == b"*":
            out.append(b".*")
        elif c == b"?":
            out.append(b".")
        elif c == b"\\" and i < n:
            out.append(re.escape(pattern[i:i + 1]))
            i += 1
        elif c == b"[":
            i = _translate_set(pattern, i, out)
        else:
            out.append(re.escape(c))
    return b"".join(out)


def _translate_set(pattern: bytes, i: int, out: list) -> int:
    """A ``[...]`` set from index ``i`` (just past ``[``); returns the index
    after it.  As in Redis, an unclosed set runs to the end of the pattern."""
    n = len(pattern)
    negate = i < n and pattern[i:i + 1] == b"^"
    if negate:
        i += 1
    members = []
    while i < n and pattern[i:i + 1] != b"]":
        c = pattern[i:i + 1]
        if c == b"\\" and i + 1 < n:
            members.append(re.escape(pattern[i + 1:i + 2]))
            i += 2
        elif i + 2 < n and pattern[i + 1:i + 2] == b"-" and pattern[i + 2:i + 3] != b"]":
            low, high = sorted((pattern[i:i + 1], pattern[i + 2:i + 3]))
            members.append(re.escape(low) + b"-" + re.escape(high))
            i += 3
        else:
            members.append(re.escape(c))
            i += 1
    body = b"".join(members)
    if not body:
        out.append(b"[^\\s\\S]" if not negate else b"[\\s\\S]")   # [] matches nothing, [^] anything
    else:
        out.append(b"[" + (b"^" if negate else b"") + body + b"]")
    return i + 1


@lru_cache(maxsize=1024)
def compile_glob(pattern: bytes) -> Callable[[bytes], bool]:
    """A predicate telling whether a whole name matches ``pattern``."""
    regex = re.compile(_translate(pattern), re.DOTALL)
    return lambda name: regex.fullmatch(name) is not None


def matches(pattern: bytes, name: bytes) -> bool:
    return compile_glob(pattern)(name)
