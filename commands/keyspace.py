"""Redis's keyspace commands, where a key is a queue: SCAN, KEYS, EXISTS,
TYPE, MEMORY USAGE and OBJECT FREQ (docs/semantics.md §2.6).

They exist for the tools people already point at a Redis server: redis-cli
``--scan``, ``--bigkeys``, ``--memkeys`` and ``--hotkeys``, GUIs and
exporters that walk the keyspace.  Every key is a queue, of TYPE ``queue``.

SCAN's cursor is a queue number: queues are numbered as they are created
and never renumbered, so walking them in number order returns every queue
that exists for the whole scan exactly once, and a queue created meanwhile
at most once (Redis's SCAN guarantee, without duplicates).
"""

from __future__ import annotations

from itertools import islice

from leaseq.storage import queries

from . import errors
from .args import OptionReader, to_int
from .glob import compile_glob
from .replies import Simple

QUEUE_TYPE = b"queue"


def scan(client, args):
    """SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]."""
    try:
        cursor = to_int(args[1])
    except errors.Error:
        raise errors.INVALID_CURSOR from None
    if cursor < 0:
        raise errors.INVALID_CURSOR
    r = OptionReader(args, 2)
    wanted, count, kind = None, 10, None
    for kw in r:
        if kw == b"MATCH":
            wanted = compile_glob(r.value())
        elif kw == b"COUNT":
            count = r.int_in("COUNT", 1, 1 << 31)
        elif kw == b"TYPE":
            kind = r.value().lower()
        else:
            raise errors.SYNTAX
    by_qid = client.server.store.by_qid
    looked_at = list(islice((qid for qid in sorted(by_qid) if qid >= cursor), count + 1))
    page, rest = looked_at[:count], looked_at[count:]
    names = [by_qid[qid].name for qid in page]
    if kind is not None and kind != QUEUE_TYPE:
        names = []
    if wanted is not None:
        names = [n for n in names if wanted(n)]
    return [str(rest[0] if rest else 0).encode(), names]


def keys(client, args):
    wanted = compile_glob(args[1])
    return [name for name in client.server.store.queues if wanted(name)]


def exists(client, args):
    queues = client.server.store.queues
    return sum(1 for name in args[1:] if name in queues)


def type_(client, args):
    return Simple(QUEUE_TYPE.decode() if args[1] in client.server.store.queues else "none")


MEMORY_HELP = [
    b"MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"USAGE <key> [SAMPLES <count>]",
    b"    Return the estimated memory usage of a queue, in bytes (its payloads plus",
    b"    a fixed cost per job and per queue).",
    b"HELP",
    b"    Print this help.",
]

OBJECT_HELP = [
    b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"FREQ <key>",
    b"    How busy a queue is: the bit length of its jobs pushed plus acked since",
    b"    the daemon started, at most 255 (a ranking for redis-cli --hotkeys).",
    b"HELP",
    b"    Print this help.",
]


def _about_a_queue(client, args, command: str, sub: bytes, arities: tuple, answer, help_lines: list):
    """MEMORY and OBJECT: one subcommand that answers about a queue (nil for
    none), HELP, and Redis's errors for the rest."""
    given = args[1].upper()
    if given == sub and len(args) in arities:
        q = client.server.store.queues.get(args[2])
        return None if q is None else answer(q)
    if given == b"HELP" and len(args) == 2:
        return help_lines
    if given in (sub, b"HELP"):
        raise errors.subcommand_arity(command, given)
    raise errors.unknown_subcommand(args[1], command)


def memory(client, args):
    if len(args) == 5 and args[1].upper() == b"USAGE":
        if args[3].upper() != b"SAMPLES":
            raise errors.SYNTAX
        to_int(args[4])                       # accepted as Redis does; the estimate needs no samples
    return _about_a_queue(client, args, "memory", b"USAGE", (3, 5), queries.memory_estimate, MEMORY_HELP)


def busyness(q) -> int:
    return min(255, (q.counters.pushed + q.counters.acked).bit_length())


def object_(client, args):
    return _about_a_queue(client, args, "object", b"FREQ", (3,), busyness, OBJECT_HELP)
