"""Replication commands: REPLICAOF (and SLAVEOF), ROLE, and what a replica
sends its primary, REPLCONF and PSYNC.  What they do is the daemon's
(``ServerContext.replication``, daemon/replication.py); here only the
arguments and the replies, as Redis writes them."""

from __future__ import annotations

from . import errors
from .args import to_int
from .replies import Simple


def replicaof(client, args):
    """REPLICAOF host port | REPLICAOF NO ONE."""
    host, port = args[1], args[2]
    replication = client.server.replication
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
    """PSYNC replid offset: the stream from ``offset``, or a full sync."""
    offset = to_int(args[2])
    return client.server.replication.psync(client, args[1].decode(errors="replace"), offset)


def wait(client, args):
    """WAIT numreplicas timeout."""
    numreplicas, timeout = to_int(args[1]), to_int(args[2])
    if timeout < 0:
        raise errors.NEGATIVE_TIMEOUT
    return client.server.replication.waits.wait(client, numreplicas, timeout)
