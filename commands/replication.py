"""Replication commands: REPLICAOF (and SLAVEOF), ROLE, and what a replica
sends its primary, REPLCONF and PSYNC.  What they do is the daemon's
(``ServerContext.replication``, daemon/replication.py); here only the
arguments and the replies, as Redis writes them."""

from __future__ import annotations

from . import errors
from .args import to_int, to_timeout
from .replies import OK, Simple


def replicaof(client, args):
    """REPLICAOF host port | REPLICAOF NO ONE."""
    host, port = args[1], args[2]
    replication = client.server.replication
    if replication.failover.running:
        raise errors.REPLICAOF_FAILING_OVER
    if host.upper() == b"NO" and port.upper() == b"ONE":
        return Simple(replication.promote())
    number = to_int(port)
    if not 0 < number <= 65535:
        raise errors.INVALID_PORT
    if replication.replicas.is_peer(client):
        raise errors.REPLICAOF_FROM_REPLICA
    return Simple(replication.follow(host.decode(errors="replace"), number))


def role(client, args):
    return client.server.replication.role_reply()


def replconf(client, args):
    """REPLCONF option value ...: a replica's own words to its primary."""
    if len(args) % 2 == 0:
        raise errors.SYNTAX
    pairs = [(args[i].lower(), args[i + 1]) for i in range(1, len(args), 2)]
    for option, value in pairs:
        if option not in (b"listening-port", b"ip-address", b"capa", b"ack", b"getack"):
            raise errors.unrecognized_replconf(option)
        if option in (b"listening-port", b"ack"):
            to_int(value)
    return client.server.replication.replicas.replconf(client, pairs)


def psync(client, args):
    """PSYNC replid offset [FAILOVER]: the stream from ``offset``, or a full
    sync; FAILOVER from a primary handing this replica its role."""
    offset = to_int(args[2])
    if len(args) > 4 or (len(args) == 4 and args[3].upper() != b"FAILOVER"):
        raise errors.SYNTAX
    return client.server.replication.psync(client, args[1].decode(errors="replace"), offset, len(args) == 4)


def failover(client, args):
    """FAILOVER [TO host port [FORCE]] [TIMEOUT ms] | FAILOVER ABORT, with
    Redis's checks in Redis's order (daemon/failover.py does it)."""
    replication = client.server.replication
    state = replication.failover
    if len(args) == 2 and args[1].upper() == b"ABORT":
        if not state.running:
            raise errors.NO_FAILOVER
        state.abort("Failover manually aborted")
        return OK
    timeout = port = 0
    host = None
    force = False
    i = 1
    while i < len(args):
        word = args[i].upper()
        if word == b"TIMEOUT" and i + 1 < len(args) and not timeout:
            timeout = to_int(args[i + 1])
            if timeout <= 0:
                raise errors.FAILOVER_TIMEOUT
            i += 2
        elif word == b"TO" and i + 2 < len(args) and host is None:
            port = to_int(args[i + 2])
            host = args[i + 1].decode(errors="replace")
            i += 3
        elif word == b"FORCE" and not force:
            force = True
            i += 1
        else:
            raise errors.SYNTAX
    if state.running:
        raise errors.FAILOVER_RUNNING
    if replication.following:
        raise errors.FAILOVER_ON_REPLICA
    if not replication.replicas.peers:
        raise errors.FAILOVER_NO_REPLICAS
    if force and (not timeout or host is None):
        raise errors.FAILOVER_FORCE
    if host is not None:
        peer = next((p for p in replication.replicas.peers if (p.ip.lower(), p.port) == (host.lower(), port)), None)
        if peer is None:
            raise errors.FAILOVER_NOT_REPLICA
        if peer.state != "online":
            raise errors.FAILOVER_NOT_ONLINE
        host = peer.ip
    state.start((host, port) if host is not None else None, timeout, force)
    return OK


def wait(client, args):
    """WAIT numreplicas timeout."""
    numreplicas, timeout = to_int(args[1]), to_timeout(args[2])
    return client.server.replication.waits.wait(client, numreplicas, timeout)


def waitaof(client, args):
    """WAITAOF numlocal numreplicas timeout, as Redis 7.2's: the log here
    stands for Redis's append-only file (always on)."""
    numlocal, numreplicas = to_int(args[1]), to_int(args[2])
    if not 0 <= numlocal <= 1:
        raise errors.NUMLOCAL_RANGE
    if numreplicas < 0:
        raise errors.NOT_POSITIVE
    timeout = to_timeout(args[3])
    return client.server.replication.waits.waitaof(client, numlocal, numreplicas, timeout)
