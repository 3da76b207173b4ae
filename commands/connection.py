"""Connection commands, answered as Redis answers them (docs/semantics.md §2.3, §2.4):
PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, CLIENT, MULTI/EXEC/DISCARD/WATCH.

Authentication rule (Redis's): a connection starts as user ``default``,
already authenticated when that user is on and needs no password.  ``AUTH
<user> <password>`` and ``HELLO 3 AUTH <user> <password>`` switch to any
user of the config file (``commands.acl``) that is on and has that password;
a bare ``AUTH <password>`` means user ``default`` and is an error saying no
password is configured while that user needs none.  ``requirepass`` is the
default user's password.
"""

from __future__ import annotations

import time

from . import errors
from .args import OptionReader, to_int, to_timeout
from .context import ALL, PAUSE_MODES
from .replies import OK, PONG, Map, Simple, Verbatim

VERSION = "0.1.0"


def ping(client, args):
    if len(args) > 2:
        raise errors.wrong_arity("ping")
    if client.holdings.subscriptions and not client.resp3:       # Redis's answer in the RESP2 pub/sub context
        return [b"pong", args[1] if len(args) == 2 else b""]
    return PONG if len(args) == 1 else args[1]


def echo(client, args):
    return args[1]


def select(client, args):
    if to_int(args[1]) != 0:
        raise errors.DB_RANGE
    return OK


def quit_(client, args):
    client.close_after_reply()
    return OK


def reset(client, args):
    client.reset()
    return Simple("RESET")


def _log_in(client, name: bytes, password: bytes) -> None:
    """Become user ``name``, or -WRONGPASS (the connection stays who it was)."""
    server = client.server
    user = server.acl.authenticate(name, password)
    if user is None:
        server.stats.acl_access_denied_auth += 1
        raise errors.WRONGPASS
    client.authenticated = True
    client.user = user.name
    client.acl_user = user


def auth(client, args):
    if len(args) not in (2, 3):
        raise errors.wrong_arity("auth")
    if len(args) == 2:
        if client.server.acl.default.nopass:
            raise errors.AUTH_NOT_CONFIGURED
        _log_in(client, b"default", args[1])
    else:
        _log_in(client, args[1], args[2])
    return OK


def _valid_client_name(name: bytes) -> bool:
    return all(0x21 <= c <= 0x7E for c in name)


def hello(client, args):
    server = client.server
    proto = None
    if len(args) >= 2:
        try:
            proto = to_int(args[1])
        except errors.Error:
            raise errors.HELLO_PROTOVER from None
        if proto not in (2, 3):
            raise errors.NOPROTO
    r = OptionReader(args, 2)
    creds, name = None, None
    for kw in r:
        if kw == b"AUTH":
            creds = (r.value(), r.value())
        elif kw == b"SETNAME":
            name = r.value()
            if not _valid_client_name(name):
                raise errors.BAD_CLIENT_NAME
        else:
            raise errors.hello_syntax(kw)
    if creds is not None:
        _log_in(client, *creds)
    elif server.auth_required and not client.authenticated:
        raise errors.HELLO_NOAUTH
    if name is not None:
        client.name = name or None
    if proto is not None:
        client.resp3 = proto == 3
    return Map([
        (b"server", b"leaseq"),
        (b"version", VERSION.encode()),
        (b"proto", 3 if client.resp3 else 2),
        (b"id", client.id),
        (b"mode", b"standalone"),
        (b"role", b"master"),
        (b"modules", []),
    ])


# -- CLIENT -------------------------------------------------------------------------

def client_info_line(c, now: float) -> bytes:
    name = (c.name or b"").decode(errors="replace")
    return (f"id={c.id} addr={c.addr} laddr={c.laddr} fd={c.fd} name={name} "
            f"age={int(now - c.created)} idle={int(now - c.last_active)} flags={c.flags} db=0 sub={c.holdings.subscriptions} psub=0 "
            f"ssub=0 multi={c.multi_len} qbuf={c.query_buffer} obl=0 oll=0 omem={c.output_buffer} "
            f"events=r cmd={c.last_command} user={c.user} redir=-1 resp={3 if c.resp3 else 2} "
            f"lib-name={c.lib_name} lib-ver={c.lib_ver}\n").encode()


CLIENT_HELP = [
    b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"ID", b"    Return the ID of the current connection.",
    b"GETNAME", b"    Return the name of the current connection.",
    b"SETNAME <name>", b"    Assign the name <name> to the current connection.",
    b"SETINFO <LIB-NAME|LIB-VER> <value>", b"    Set client library name or version.",
    b"INFO", b"    Return information about the current client connection.",
    b"LIST [ID <id> [<id> ...]]", b"    Return information about client connections.",
    b"KILL <ip:port> | KILL [ID <id>] [ADDR <ip:port>] [LADDR <ip:port>] [USER <name>] [SKIPME yes|no]",
    b"    Kill connections.",
    b"NO-EVICT (ON|OFF)", b"    Accepted; leaseq evicts nothing.",
    b"NO-TOUCH (ON|OFF)", b"    Accepted; leaseq keeps no LRU/LFU state.",
    b"MAINT_NOTIFICATIONS (ON|OFF) [<option> <value> ...]",
    b"    Accepted; a single leaseq has no maintenance events to notify.",
    b"GETREDIR", b"    -1: leaseq has no client-side caching.",
    b"PAUSE <timeout> [WRITE|ALL]",
    b"    Suspend all, or just write, clients for <timeout> milliseconds.",
    b"UNPAUSE", b"    Stop the current client pause, resuming traffic.",
    b"HELP", b"    Print this help.",
]


def client_cmd(client, args):
    sub = args[1].upper()
    server = client.server
    n = len(args)
    if sub == b"ID" and n == 2:
        return client.id
    if sub == b"GETNAME" and n == 2:
        return client.name
    if sub == b"SETNAME" and n == 3:
        if not _valid_client_name(args[2]):
            raise errors.BAD_CLIENT_NAME
        client.name = args[2] or None
        return OK
    if sub in (b"NO-EVICT", b"NO-TOUCH") and n == 3:
        return _on_off(args[2])          # nothing is evicted or LRU-touched in leaseq: nothing to change
    if sub == b"MAINT_NOTIFICATIONS" and n >= 3:
        # node-redis 5/6 and redis-py ask for notifications of maintenance
        # events (moves, failovers); one leaseq never has any to send
        return _on_off(args[2])
    if sub == b"GETREDIR" and n == 2:
        return -1                        # no client-side caching redirection
    if sub == b"SETINFO" and n == 4:
        attr = args[2].upper()
        value = args[3].decode(errors="replace")
        if not _valid_client_name(args[3]) and args[3]:
            raise errors.setinfo_value(attr)
        if attr == b"LIB-NAME":
            client.lib_name = value
        elif attr == b"LIB-VER":
            client.lib_ver = value
        else:
            raise errors.unrecognized_option(args[2])
        return OK
    if sub == b"INFO" and n == 2:
        return Verbatim(client_info_line(client, time.monotonic()))
    if sub == b"LIST":
        chosen = list(server.clients.values())
        if n > 2:
            if args[2].upper() != b"ID" or n == 3:
                raise errors.SYNTAX
            ids = {to_int(a) for a in args[3:]}
            chosen = [c for c in chosen if c.id in ids]
        now = time.monotonic()
        return Verbatim(b"".join(client_info_line(c, now) for c in chosen))
    if sub == b"KILL" and n >= 3:
        return _client_kill(client, args)
    if sub == b"PAUSE" and n in (3, 4):
        return _pause(server, args)
    if sub == b"UNPAUSE" and n == 2:
        server.pause.end("client")
        return OK
    if sub == b"HELP" and n == 2:
        return CLIENT_HELP
    if sub in (b"ID", b"GETNAME", b"SETNAME", b"SETINFO", b"INFO", b"KILL", b"HELP", b"NO-EVICT", b"NO-TOUCH",
               b"MAINT_NOTIFICATIONS", b"GETREDIR", b"PAUSE", b"UNPAUSE"):
        raise errors.subcommand_arity("client", sub)
    raise errors.unknown_subcommand(args[1], "client")


def _pause(server, args):
    """CLIENT PAUSE timeout [WRITE|ALL] (daemon/pause.py)."""
    mode = PAUSE_MODES.get(args[3].upper()) if len(args) == 4 else ALL
    if mode is None:
        raise errors.PAUSE_MODE
    server.pause.by_client(mode, to_timeout(args[2]))
    return OK


def _on_off(value: bytes):
    if value.upper() not in (b"ON", b"OFF"):
        raise errors.SYNTAX
    return OK


def _client_kill(client, args):
    server = client.server
    if len(args) == 3:   # old form: CLIENT KILL ip:port
        targets = [c for c in server.clients.values() if c.addr.encode() == args[2]]
        if not targets:
            raise errors.NO_SUCH_CLIENT
        targets[0].kill()
        return OK
    r = OptionReader(args, 2)
    filters = []
    skipme = True
    kill_link = False
    for kw in r:
        if kw == b"ID":
            wanted = to_int(r.value())
            filters.append(lambda c, w=wanted: c.id == w)
        elif kw == b"ADDR":
            wanted = r.value()
            filters.append(lambda c, w=wanted: c.addr.encode() == w)
        elif kw == b"LADDR":
            wanted = r.value()
            filters.append(lambda c, w=wanted: c.laddr.encode() == w)
        elif kw == b"USER":
            wanted = r.value()
            filters.append(lambda c, w=wanted: c.user.encode() == w)
        elif kw == b"TYPE":
            kind = r.value().lower()
            if kind not in CLIENT_TYPES:
                raise errors.unknown_client_type(kind)
            if kind == b"master":
                kill_link = True
            filters.append(lambda c, k=CLIENT_TYPES[kind]: client_type(server, c) == k)
        elif kw == b"SKIPME":
            v = r.value().lower()
            if v not in (b"yes", b"no"):
                raise errors.SYNTAX
            skipme = v == b"yes"
        else:
            raise errors.SYNTAX
    killed = 0
    for c in list(server.clients.values()):
        if skipme and c is client:
            continue
        if all(f(c) for f in filters):
            c.kill()
            killed += 1
    if kill_link and len(filters) == 1:      # TYPE master: this replica's link to its primary (it reconnects)
        killed += server.replication.drop_link()
    return killed


# CLIENT KILL TYPE's words, as Redis's (slave is replica's older name)
CLIENT_TYPES = {b"normal": "normal", b"pubsub": "pubsub", b"replica": "replica", b"slave": "replica",
                b"master": "master"}


def client_type(server, c) -> str:
    """Redis's client type: a replica of this node, a connection with
    subscriptions, or any other (the link to this node's own primary is no
    client here, so nothing is "master")."""
    if server.replication.replicas.is_peer(c):
        return "replica"
    if c.holdings.subscriptions:
        return "pubsub"
    return "normal"


# -- transactions (the dispatcher does the work; these run only in odd places) ------

def watch(client, args):
    raise errors.WATCH_UNSUPPORTED


def unwatch(client, args):
    return OK
