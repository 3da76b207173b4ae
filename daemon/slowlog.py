"""The slow log, as Redis's SLOWLOG (docs/operations.md, "The slow log").

Each command whose run took ``slowlog-log-slower-than`` microseconds or
more (10,000 by default; 0: every command; negative: none) is kept, the
newest first, up to ``slowlog-max-len`` entries (128): an id that only
grows, the Unix time it ran, how long it ran in microseconds, its
arguments, the client's address and name.  The time is the command's own
work, as Redis counts it: a claim that waits, a WAIT, a reply held for the
fsync are not counted while they wait.

What an entry keeps of the arguments is Redis's: at most 32 (the last one
then says how many more there were), each cut at 128 bytes (with how many
more there were), and passwords replaced by ``(redacted)``: AUTH's, HELLO's
after AUTH, and the values of CONFIG SET requirepass / masterauth.

Sans-IO: the dispatcher calls ``add`` (daemon/dispatch.py, ``run``) when a
command took at least ``Host.slow_after`` seconds, a C double it compares
at each command (infinity when the log is off).
"""

from __future__ import annotations

import time
from collections import deque
from itertools import islice

MAX_ARGS = 32
MAX_STRING = 128
REDACTED = b"(redacted)"
SECRET_SETTINGS = {b"requirepass", b"masterauth"}


class SlowLog:
    __slots__ = ("entries", "next_id", "host")

    def __init__(self, host, settings) -> None:
        self.host = host                  # whose ``slow_after`` the dispatcher compares
        self.entries: deque = deque(maxlen=max(settings.slowlog_max_len, 0))
        self.next_id = 0
        self.configure(settings)

    def configure(self, settings) -> None:
        """The settings now (at start and at each CONFIG SET)."""
        micros = settings.slowlog_log_slower_than
        self.host.slow_after = micros / 1e6 if micros >= 0 else float("inf")
        if self.entries.maxlen != settings.slowlog_max_len:
            self.entries = deque(self.entries, maxlen=max(settings.slowlog_max_len, 0))

    def add(self, client, args: list, seconds: float) -> None:
        """A command that took ``seconds``."""
        if self.entries.maxlen == 0:
            return
        self.entries.appendleft((self.next_id, int(time.time()), int(seconds * 1e6), _kept(args),
                                 client.addr.encode(), client.name or b""))
        self.next_id += 1

    def get(self, count: int) -> list:
        """SLOWLOG GET: the newest ``count`` entries (-1: all)."""
        entries = self.entries if count < 0 else islice(self.entries, count)
        return [[i, when, micros, list(args), addr, name] for i, when, micros, args, addr, name in entries]

    def __len__(self) -> int:
        return len(self.entries)

    def reset(self) -> None:
        self.entries.clear()


def _kept(args: list) -> tuple:
    """What an entry keeps of a command's arguments (see the module's docstring)."""
    args = _redacted(args)
    kept = [a if len(a) <= MAX_STRING else a[:MAX_STRING] + b"... (%d more bytes)" % (len(a) - MAX_STRING)
            for a in args[:MAX_ARGS]]
    if len(args) > MAX_ARGS:
        kept[-1] = b"... (%d more arguments)" % (len(args) - MAX_ARGS + 1)
    return tuple(kept)


def _redacted(args: list) -> list:
    name = args[0].lower()
    if name == b"auth":
        return [args[0]] + [REDACTED] * (len(args) - 1)
    if name == b"hello":
        for i, a in enumerate(args):
            if a.upper() == b"AUTH":
                return args[:i + 1] + [REDACTED] * (len(args) - i - 1)
        return args
    if name == b"config" and len(args) > 2 and args[1].lower() == b"set":
        out = list(args)
        for i in range(2, len(out) - 1, 2):
            if out[i].lower() in SECRET_SETTINGS:
                out[i + 1] = REDACTED
        return out
    return args
