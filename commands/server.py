"""Server commands: COMMAND, INFO, CONFIG, TIME, DBSIZE, BGSAVE, LASTSAVE, SHUTDOWN, SLOWLOG."""

from __future__ import annotations

import time

from . import errors
from .args import to_int
from .glob import compile_glob
from .replies import NO_REPLY, OK, Map, Simple, Verbatim


# -- COMMAND --------------------------------------------------------------------------

def command_cmd(client, args):
    from .table import TABLE, command_docs, command_info   # the table imports this module
    if len(args) == 1:
        return [command_info(c) for c in TABLE.values()]
    sub = args[1].upper()
    if sub == b"COUNT" and len(args) == 2:
        return len(TABLE)
    if sub == b"LIST":
        names = [c.name.encode() for c in TABLE.values()]
        if len(args) == 2:
            return names
        if len(args) == 4 and args[2].upper() == b"FILTERBY":
            raise errors.FILTERBY_UNSUPPORTED
        raise errors.SYNTAX
    if sub == b"INFO":
        if len(args) == 2:
            return [command_info(c) for c in TABLE.values()]
        return [command_info(TABLE[a.lower()]) if a.lower() in TABLE else None for a in args[2:]]
    if sub == b"DOCS":
        wanted = [a.lower() for a in args[2:]] or list(TABLE)
        return Map([(name, command_docs(TABLE[name])) for name in wanted if name in TABLE])
    if sub == b"GETKEYS" and len(args) >= 3:
        cmd = TABLE.get(args[2].lower())
        if cmd is None or cmd.first_key == 0 or len(args) < 4:
            raise errors.NO_KEY_ARGUMENTS
        return [args[3]]
    if sub == b"HELP" and len(args) == 2:
        return [b"COMMAND [<subcommand>]", b"COUNT", b"DOCS [<command-name> ...]", b"INFO [<command-name> ...]",
                b"LIST", b"GETKEYS <full-command>", b"HELP"]
    raise errors.unknown_subcommand(args[1], "command")


# -- INFO ----------------------------------------------------------------------------

def info(client, args):
    """INFO [section ...]: the daemon assembles the fields where they live
    (``server.info_sections``); this only picks sections and formats them."""
    sections = client.server.info_sections()
    wanted = [a.decode(errors="replace").lower() for a in args[1:]]
    if not wanted or any(w in ("all", "everything", "default") for w in wanted):
        wanted = list(sections)
    lines = []
    for name in wanted:
        if name not in sections:
            continue
        if lines:
            lines.append("")
        lines.append(f"# {name.capitalize()}")
        lines.extend(f"{k}:{v}" for k, v in sections[name])
    return Verbatim(("\r\n".join(lines) + "\r\n").encode() if lines else b"")


# -- CONFIG --------------------------------------------------------------------------

def config_cmd(client, args):
    """CONFIG GET pattern [pattern ...] | SET name value [name value ...] | RESETSTAT.
    The settings and their rules live with the daemon (``server.configuration``)."""
    server = client.server
    sub = args[1].upper()
    n = len(args)
    if sub == b"GET" and n >= 3:
        items, seen = [], set()
        for pattern in args[2:]:
            wanted = compile_glob(pattern.lower())
            for name, value in server.configuration.items():
                if name not in seen and wanted(name.encode()):
                    seen.add(name)
                    items.append((name.encode(), value.encode()))
        return Map(items)
    if sub == b"SET" and n >= 4 and n % 2 == 0:
        pairs = [(args[i].decode(errors="replace").lower(), args[i + 1].decode(errors="replace"))
                 for i in range(2, n, 2)]
        server.configuration.set(pairs)
        return OK
    if sub == b"RESETSTAT" and n == 2:
        server.reset_stats()
        return OK
    if sub == b"REWRITE" and n == 2:
        server.configuration.rewrite()
        return OK
    if sub == b"HELP" and n == 2:
        return [b"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                b"GET <pattern>", b"SET <directive> <value>", b"RESETSTAT", b"REWRITE", b"HELP"]
    if sub in (b"GET", b"SET", b"RESETSTAT", b"REWRITE", b"HELP"):
        raise errors.subcommand_arity("config", sub)
    raise errors.unknown_subcommand(args[1], "config")


SLOWLOG_HELP = [
    b"SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"GET [<count>]", b"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    b"    Entries are made of:", b"    id, timestamp, time in microseconds, arguments array, client IP and port,",
    b"    client name", b"LEN", b"    Return the length of the slowlog.", b"RESET", b"    Reset the slowlog.",
    b"HELP", b"    Print this help.",
]


def slowlog(client, args):
    """SLOWLOG GET [count] | LEN | RESET | HELP, as Redis's (daemon/slowlog.py)."""
    log = client.server.slowlog
    sub = args[1].upper()
    n = len(args)
    if sub == b"GET" and n in (2, 3):
        count = 10
        if n == 3:
            count = to_int(args[2])
            if count < -1:
                raise errors.SLOWLOG_COUNT
        return log.get(count)
    if sub == b"LEN" and n == 2:
        return len(log)
    if sub == b"RESET" and n == 2:
        log.reset()
        return OK
    if sub == b"HELP" and n == 2:
        return SLOWLOG_HELP
    if sub in (b"GET", b"LEN", b"RESET", b"HELP"):
        raise errors.subcommand_arity("slowlog", sub)
    raise errors.unknown_subcommand(args[1], "slowlog")


def time_cmd(client, args):
    now = time.time()
    sec = int(now)
    return [str(sec).encode(), str(int((now - sec) * 1_000_000)).encode()]


def dbsize(client, args):
    return len(client.server.store.queues)


def bgsave(client, args):
    """BGSAVE [SCHEDULE]: Redis's replies, for a leaseq snapshot."""
    if len(args) > 2 or (len(args) == 2 and args[1].upper() != b"SCHEDULE"):
        raise errors.SYNTAX
    started = client.server.bgsave(len(args) == 2)
    if started == "running":
        raise errors.BGSAVE_RUNNING
    if started == "failed":
        raise errors.misconf(client.server.disk_error)
    return Simple("Background saving started" if started == "started" else "Background saving scheduled")


def lastsave(client, args):
    return client.server.lastsave()


def shutdown(client, args):
    """SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT], as Redis 7's: NOSAVE
    and SAVE change nothing (the log is on the disk already); NOW does not
    wait for the replicas; FORCE stops even while the data directory is
    being put back; ABORT ends a shutdown that waits for the replicas."""
    flags = {a.upper() for a in args[1:]}
    if not flags <= {b"NOSAVE", b"SAVE", b"NOW", b"FORCE", b"ABORT"} or {b"NOSAVE", b"SAVE"} <= flags \
            or (b"ABORT" in flags and len(args) > 2):
        raise errors.SYNTAX
    server = client.server
    if b"ABORT" in flags:
        if not server.shutdown.abort():
            raise errors.NO_SHUTDOWN
        return OK
    if not server.request_shutdown(f"SHUTDOWN from client id={client.id} addr={client.addr}", b"FORCE" in flags,
                                   b"NOW" in flags, client):
        raise errors.SHUTDOWN_FAILED
    return NO_REPLY
