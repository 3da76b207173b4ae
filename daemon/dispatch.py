"""Dispatch: the checks every command gets, in one place, then its handler.

Order (as Redis's processCommand): unknown command, arity, authentication,
the user's permissions (-NOPERM: the command, then the queue it names; a
user with every command on every queue skips this), the pub/sub context (a
RESP2 connection with SUBSCRIBE streams runs only the commands flagged
``pubsub``, as Redis), recovery still running (-LOADING), a log that cannot be written (-MISCONF
for commands that change queues), too few good replicas (-NOREPLICAS, with
min-replicas-to-write), a replica (-READONLY for them, as Redis), a
pause (CLIENT PAUSE, or a shutdown waiting for its replicas: the command
is not run and comes back ``POSTPONED``, and its connection runs it when
the pause ends; daemon/pause.py), transaction queueing, memory; then the
handler.  Handlers raise
``commands.replies.Error`` for their own errors; any other exception is a
bug, logged with its traceback and answered with an error, never a crash.

``execute`` returns the reply together with the command's ``Ticket``: what
the log records it appended need (written, or fsynced) before that reply may
be sent; None when it appended nothing.  The connection holds the reply on
it (docs/architecture.md, "The path of one QPUSH").  ``execute`` needs no
socket: ``client`` is anything that fits ``commands.context.ClientContext``
and derives from ``commands.parties.Caller``, its server from ``Host``.

Every command comes this one way, at one job per request as well: the
checks read what they need as fields (``Route`` for the command,
``Caller`` for the client, ``Host`` for the server), which the compiled
flavour reads as C (docs/performance.md, "One way in").
"""

from __future__ import annotations

import logging

from leaseq.commands import acl, errors
from leaseq.commands.parties import Caller, Host
from leaseq.commands.replies import OK, POSTPONED, QUEUED, Error
from leaseq.commands.table import TABLE
from leaseq.storage.clock import seconds
from leaseq.storage.wal import Ticket

log = logging.getLogger(__name__)


class Route:
    """What the checks read of one command (a ``commands.table.Command``),
    each flag a field of its own."""

    __slots__ = ("command", "name", "handler", "arity", "noauth", "loading", "write", "pubsub", "denyoom", "direct",
                 "transaction", "no_multi", "observes", "claims")

    def __init__(self, command) -> None:
        flags = command.flags
        self.command = command
        self.name = command.name
        self.handler = command.handler
        self.arity = command.arity
        self.noauth = "noauth" in flags
        self.loading = "loading" in flags
        self.write = "write" in flags
        self.pubsub = "pubsub" in flags
        self.denyoom = "denyoom" in flags
        self.direct = "direct" in flags
        self.transaction = "transaction" in flags
        self.no_multi = "no-multi" in flags
        self.observes = bool(command.observes)         # its reply may show the queues
        self.claims = command.observes == "claims"     # ... only the jobs it claims


def routes(table: dict) -> dict:
    """Each command's ``Route`` under its name in lower case and in upper
    case (as clients send it); any other spelling is lowered first."""
    found = {}
    for name, command in table.items():
        found[name] = found[name.upper()] = Route(command)
    return found


ROUTES = routes(TABLE)


def execute(client: Caller, args: list) -> tuple[object, Ticket | None]:
    """Run one command for ``client``: its reply (or a ``ClaimWait`` to park)
    and its ticket: the records it logged, and for a command whose reply
    may show the queues (``Route.observes``) every record appended so far
    (``Journal.settled_since``; a claim's only what a claim can see), so
    that no reply shows a change the log may still refuse."""
    server = client.server
    journal = server.store.journal
    mark = journal.mark()
    name, routes = args[0], ROUTES
    route = routes.get(name)
    if route is None:
        route = routes.get(name.lower())
    reply = _execute(client, server, args, route)
    if route is not None and route.observes:
        return reply, journal.settled_since(mark, server.now_ms() if route.claims else None)
    return reply, journal.ticket_since(mark)


def _execute(client: Caller, server: Host, args: list, route: Route):
    server.stats.commands += 1
    if route is None:
        return _refuse(client, errors.unknown_command(args[0], args[1:]))
    n = len(args)
    if n != route.arity if route.arity > 0 else n < -route.arity:
        return _refuse(client, errors.wrong_arity(route.name))
    if not client.authenticated and server.auth_required and not route.noauth:
        return _refuse(client, errors.NOAUTH)
    if not client.acl_user.unrestricted and not route.noauth:
        denied = _permission(client, route.command, args)
        if denied is not None:
            return _refuse(client, denied)
    if client.holdings.subscriptions and not client.resp3 and not route.pubsub:
        return _refuse(client, errors.pubsub_context(route.name))
    if server.loading and not route.loading:
        return _refuse(client, errors.LOADING)
    if route.write:
        if server.disk_error is not None:
            return _refuse(client, errors.misconf(server.disk_error))
        if server.replicas_gate and server.replication.replicas.good() < server.replicas_gate:
            return _refuse(client, errors.NOREPLICAS)
        if server.read_only and not route.pubsub:    # (SUBSCRIBE: QWORK's only)
            return _refuse(client, errors.READONLY)
    if server.paused and server.pause.holds(client, route):   # CLIENT PAUSE, a shutdown's wait (daemon/pause.py)
        server.stats.commands -= 1                            # (counted when it runs)
        return POSTPONED
    client.last_command = route.name
    if client.multi is not None and not route.direct:
        if route.transaction:
            return _transaction(client, route.name)
        if route.no_multi:
            return _refuse(client, errors.not_allowed_in_multi(route.name))
        client.multi.append((route, args))
        return QUEUED
    if route.transaction:
        return _transaction(client, route.name)
    return run(client, server, route, args)


def run(client: Caller, server: Host, route: Route, args: list):
    if route.denyoom and server.oom:
        return errors.OOM
    started = seconds()
    try:
        return route.handler(client, args)
    except Error as e:
        return e
    except Exception:
        log.exception("command %s failed", route.name.upper())
        return errors.INTERNAL
    finally:
        elapsed = seconds() - started
        metrics = server.metrics
        metrics.command(route.name, elapsed)
        if elapsed >= server.slow_after:                       # SLOWLOG (daemon/slowlog.py; inf when off)
            server.slowlog.add(client, args, elapsed)


def _permission(client, cmd, args: list) -> Error | None:
    """-NOPERM when the user may not run ``cmd`` or use the queue it names."""
    user, stats = client.acl_user, client.server.stats
    denied = acl.command_refusal(user, cmd, args)
    if denied is not None:
        stats.acl_access_denied_cmd += 1
        return denied
    for name in acl.queues_named(cmd, args):
        denied = acl.queue_refusal(user, name, cmd.access)
        if denied is not None:
            stats.acl_access_denied_key += 1
            return denied
    return None


def _refuse(client: Caller, error: Error) -> Error:
    if client.multi is not None:
        client.multi_dirty = True
    return error


def _transaction(client: Caller, name: str):
    if name == "multi":
        if client.multi is not None:
            return errors.NESTED_MULTI
        client.multi = []
        client.multi_dirty = False
        return OK
    if name == "discard":
        if client.multi is None:
            return errors.DISCARD_WITHOUT_MULTI
        client.multi = None
        return OK
    # exec
    if client.multi is None:
        return errors.EXEC_WITHOUT_MULTI
    queued, dirty = client.multi, client.multi_dirty
    client.multi = None
    if dirty:
        return errors.EXECABORT
    client.in_exec = True
    try:
        with client.server.store.journal.transaction():     # one TXN record: all or none
            return [run(client, client.server, route, args) for route, args in queued]
    finally:
        client.in_exec = False
