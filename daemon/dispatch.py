"""Dispatch: the checks every command gets, in one place, then its handler.

Order (as Redis's processCommand): unknown command, arity, authentication,
the user's permissions (-NOPERM: the command, then the queue it names; a
user with every command on every queue skips this), the pub/sub context (a
RESP2 connection with SUBSCRIBE streams runs only the commands flagged
``pubsub``, as Redis), recovery still running (-LOADING), a log that cannot be written (-MISCONF
for commands that change queues), too few good replicas (-NOREPLICAS, with
min-replicas-to-write), a replica (-READONLY for them, as Redis),
transaction queueing, memory; then the handler.  Handlers raise
``commands.replies.Error`` for their own errors; any other exception is a
bug, logged with its traceback and answered with an error, never a crash.

``execute`` returns the reply together with the command's ``Ticket``: what
the log records it appended need (written, or fsynced) before that reply may
be sent; None when it appended nothing.  The connection holds the reply on
it (docs/architecture.md, "The path of one QPUSH").  ``execute`` needs no
socket: ``client`` is anything that fits ``commands.context.ClientContext``.
"""

from __future__ import annotations

import logging
from time import perf_counter

from leaseq.commands import acl, errors
from leaseq.commands.replies import OK, QUEUED, Error
from leaseq.commands.table import TABLE
from leaseq.storage.flavour import compiled_twin
from leaseq.storage.wal import Ticket

log = logging.getLogger(__name__)

def execute(client, args: list) -> tuple[object, Ticket | None]:
    """Run one command for ``client``: its reply (or a ``ClaimWait`` to park)
    and its ticket: the records it logged, and for a command whose reply
    may show the queues (``Command.observes``) every record appended so far
    (``Journal.settled_since``; a claim's only what a claim can see), so
    that no reply shows a change the log may still refuse."""
    if lane is not None:
        got = lane(client, args)         # (reply, ticket), or None: not a plain command
        if got is not None:
            return got
    journal = client.server.store.journal
    mark = journal.mark()
    name = args[0].lower()
    cmd = TABLE.get(name)
    reply = _execute(client, args, name, cmd)
    if cmd is not None and cmd.observes:
        return reply, journal.settled_since(mark, client.server.now_ms() if cmd.observes == "claims" else None)
    return reply, journal.ticket_since(mark)


def _execute(client, args: list, name: bytes, cmd):
    server = client.server
    server.stats.commands += 1
    if cmd is None:
        return _refuse(client, errors.unknown_command(args[0], args[1:]))
    n = len(args)
    if n != cmd.arity if cmd.arity > 0 else n < -cmd.arity:
        return _refuse(client, errors.wrong_arity(cmd.name))
    if not client.authenticated and server.auth_required and "noauth" not in cmd.flags:
        return _refuse(client, errors.NOAUTH)
    if not client.acl_user.unrestricted and "noauth" not in cmd.flags:
        denied = _permission(client, cmd, args)
        if denied is not None:
            return _refuse(client, denied)
    if client.holdings.subscriptions and not client.resp3 and "pubsub" not in cmd.flags:
        return _refuse(client, errors.pubsub_context(cmd.name))
    if server.loading and "loading" not in cmd.flags:
        return _refuse(client, errors.LOADING)
    if server.disk_error is not None and "write" in cmd.flags:
        return _refuse(client, errors.misconf(server.disk_error))
    if server.replicas_gate and "write" in cmd.flags and server.replication.good_replicas() < server.replicas_gate:
        return _refuse(client, errors.NOREPLICAS)
    if server.read_only and "write" in cmd.flags and "pubsub" not in cmd.flags:    # (SUBSCRIBE: QWORK's only)
        return _refuse(client, errors.READONLY)
    client.last_command = cmd.name
    if client.multi is not None and "direct" not in cmd.flags:
        if "transaction" in cmd.flags:
            return _transaction(client, name)
        if "no-multi" in cmd.flags:
            return _refuse(client, errors.not_allowed_in_multi(cmd.name))
        client.multi.append((cmd, args))
        return QUEUED
    if "transaction" in cmd.flags:
        return _transaction(client, name)
    return run(client, cmd, args)


def run(client, cmd, args):
    if "denyoom" in cmd.flags and client.server.oom:
        return errors.OOM
    started = perf_counter()
    try:
        return cmd.handler(client, args)
    except Error as e:
        return e
    except Exception:
        log.exception("command %s failed", cmd.name.upper())
        return errors.INTERNAL
    finally:
        client.server.metrics.commands[cmd.name].observe(perf_counter() - started)


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


def _refuse(client, error: Error) -> Error:
    if client.multi is not None:
        client.multi_dirty = True
    return error


def _transaction(client, name: bytes):
    if name == b"multi":
        if client.multi is not None:
            return errors.NESTED_MULTI
        client.multi = []
        client.multi_dirty = False
        return OK
    if name == b"discard":
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
            return [run(client, cmd, args) for cmd, args in queued]
    finally:
        client.in_exec = False


# The plain forms of QPUSH, QCLAIM and QACK, and the serve of plain claims
# parked on a queue (``Blocking.serve_woken`` asks it), compiled
# (daemon/_lane.pyx): None when not built.  Imported last: the lane knows
# the connection's type, and the connection's module imports ``execute``.
_lane = compiled_twin("leaseq.daemon._lane")
lane = _lane.run if _lane is not None else None
serve_plain = _lane.serve_plain if _lane is not None else None
