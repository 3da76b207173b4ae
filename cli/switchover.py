"""``leaseq switchover``: hand a primary's role to its replica before a
planned stop, through Redis Sentinel (or, for a pair no Sentinel watches,
with FAILOVER: ``without_sentinel``), losing no write and refusing none.

A Sentinel failover is made for a primary that died: the sentinels wait
``down-after-milliseconds`` to agree it is down, and promote the replica
with whatever it had. A planned stop (a rolling update, a drained
Kubernetes node) can do better, and this command does it, in the order a
careful operator would by hand (docs/replication.md, "A planned
switchover"):

1. It checks that the node is the primary the sentinels know (its
   ``run_id`` is the one ``SENTINEL MASTER`` names, or, while they do not
   know the primary's run_id yet, its address), that it has a replica, and
   waits until a sentinel sees one up and linked. A replica has nothing to
   hand over: it says so and succeeds.
2. ``CLIENT PAUSE timeout WRITE``: writes wait in the node, unrefused;
   reads go on.
3. ``WAIT`` until every replica has acknowledged everything written (at
   least one must, within the timeout).
4. ``SENTINEL FAILOVER service`` on the first sentinel that answers: the
   sentinels promote the replica with the most of the stream, which now
   holds everything the primary answered, whatever ``min-replicas-to-ack``.
5. Once the sentinels name the new primary, the node follows it
   (``REPLICAOF``, and ``CONFIG REWRITE`` when it has a config file), as
   the sentinels would on their next look at it.
6. ``CLIENT UNPAUSE``: the writes that waited run again on a node that is
   now a replica, and are refused with ``-READONLY``, which clients that
   find the primary through Sentinel (redis-py's ``Sentinel``,
   ``leaseq.client``, ioredis) take as "ask the sentinels again". They
   never ran on the old primary, so nothing is lost or done twice.

Whatever fails, the pause ends before the command exits (and the pause's
own timeout ends it should this process be killed first), and the exit
status says whether the node is still the primary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import redis

# the CLIENT PAUSE outlives the switchover's own timeout by this much, so that
# only a killed switchover leaves the pause to end by itself
PAUSE_MARGIN_S = 5.0


class SwitchoverError(Exception):
    """Why the node is still the primary (or, after step 4, why the
    switchover did not finish)."""


@dataclass
class Target:
    """What the sentinels know of the service's primary."""

    sentinel: redis.Redis
    where: str              # the sentinel's host:port, for messages
    host: str
    port: int
    run_id: str


def parse_sentinels(text: str) -> list[tuple[str, int]]:
    """``host:port,host:port,...`` (port 26379 when left out)."""
    found = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "26379"
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"not host:port: {item!r}")
        found.append((host.strip("[]"), int(port)))
    if not found:
        raise ValueError("no sentinel given (host:port,...)")
    return found


def switchover(node: redis.Redis, sentinels: list[redis.Redis], service: str, timeout: float,
               say: Callable[[str], None]) -> bool:
    """Hand ``node``'s role to a replica; False when it is not a primary
    (nothing to do). SwitchoverError when it stays the primary or the
    handover did not complete in ``timeout`` seconds."""
    started = time.monotonic()
    role = node.execute_command("ROLE")
    if role[0] != b"master":
        say(f"this node is a {role[0].decode()} (of {role[1].decode()}:{role[2]}): nothing to hand over")
        return False
    target = _this_primary(node, sentinels, service, started + timeout)
    replicas = node.info("replication")["connected_slaves"]
    if not replicas:
        raise SwitchoverError("this node has no replica to hand over to")
    _wait_for_a_replica_seen(target, service, started + timeout)
    say(f"this node ({target.host}:{target.port}) is the primary of {service!r}, with "
        f"{replicas} replica{'s' * (replicas != 1)}; pausing its writes")
    node.execute_command("CLIENT", "PAUSE", int((timeout + PAUSE_MARGIN_S) * 1000), "WRITE")
    try:
        _hand_over(node, target, service, replicas, started + timeout, say)
    finally:
        node.execute_command("CLIENT", "UNPAUSE")
    say(f"done in {time.monotonic() - started:.2f} s: writes that waited are refused with -READONLY "
        "and go to the new primary")
    return True


def without_sentinel(node: redis.Redis, timeout: float, say: Callable[[str], None]) -> bool:
    """The same for a pair no Sentinel watches: ``FAILOVER TIMEOUT`` (the
    node does steps 2 to 6 itself, daemon/failover.py), then wait until it
    is over.  False when the node is not a primary."""
    started = time.monotonic()
    role = node.execute_command("ROLE")
    if role[0] != b"master":
        say(f"this node is a {role[0].decode()} (of {role[1].decode()}:{role[2]}): nothing to hand over")
        return False
    replicas = node.info("replication")["connected_slaves"]
    if not replicas:
        raise SwitchoverError("this node has no replica to hand over to")
    say(f"this node is a primary with {replicas} replica{'s' * (replicas != 1)}: FAILOVER (writes wait)")
    try:
        node.execute_command("FAILOVER", "TIMEOUT", int(timeout * 1000))
    except redis.ResponseError as e:
        raise SwitchoverError(f"FAILOVER: {e}") from None
    deadline = started + timeout + PAUSE_MARGIN_S
    while node.info("replication")["master_failover_state"] != "no-failover":
        if time.monotonic() >= deadline:
            node.execute_command("FAILOVER", "ABORT")
            raise SwitchoverError("the replica did not take the role in time: FAILOVER aborted, this node is a "
                                  "primary again (check ROLE on the replica)")
        time.sleep(0.05)
    role = node.execute_command("ROLE")
    if role[0] == b"master":
        raise SwitchoverError("FAILOVER was aborted (the node's log says why); writes go on here")
    say(f"done in {time.monotonic() - started:.2f} s: this node follows {role[1].decode()}:{role[2]}; writes "
        "that waited are refused with -READONLY and go to the new primary")
    return True


def _hand_over(node: redis.Redis, target: Target, service: str, replicas: int, deadline: float,
               say: Callable[[str], None]) -> None:
    offset = node.info("replication")["master_repl_offset"]
    have = node.execute_command("WAIT", replicas, _ms_left(deadline))
    if have < 1:
        raise SwitchoverError(f"no replica acknowledged offset {offset} in time; writes go on here")
    say(f"{have} of {replicas} replicas have everything (offset {offset}); "
        f"asking sentinel {target.where} to fail {service!r} over")
    try:
        target.sentinel.execute_command("SENTINEL", "FAILOVER", service)
    except redis.ResponseError as e:    # -INPROG, -NOGOODSLAVE: nothing changed yet
        raise SwitchoverError(f"sentinel {target.where}: {e}; writes go on here") from None
    while True:
        try:
            found = target.sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", service)
        except redis.RedisError:            # a sentinel busy failing over may be slow to answer
            found = None
        if found and (found[0].decode(), int(found[1])) != (target.host, target.port):
            host, port = found[0].decode(), int(found[1])
            break
        if time.monotonic() >= deadline:
            raise SwitchoverError(f"sentinel {target.where} had not promoted a replica in time; "
                                  "this node may still be demoted by the sentinels")
        time.sleep(0.05)
    say(f"the sentinels name {host}:{port} the primary; this node now follows it")
    node.execute_command("REPLICAOF", host, port)
    try:
        node.execute_command("CONFIG", "REWRITE")   # as the sentinels would: the role survives a restart
    except redis.ResponseError as e:
        if "without a config file" not in str(e):
            raise


def _this_primary(node: redis.Redis, sentinels: list[redis.Redis], service: str, deadline: float) -> Target:
    """What the sentinels know of the service's primary, once it is clear
    that it is ``node``: the same run_id, or, while the sentinels do not
    know the primary's run_id yet (for ten seconds after a failover, until
    their next INFO), one of the addresses ``node`` goes by."""
    run_id = node.info("server")["run_id"]
    addresses = _addresses(node)
    while True:
        target = _primary_of(sentinels, service)
        if target.run_id == run_id or (not target.run_id and (target.host, target.port) in addresses):
            return target
        if target.run_id:
            raise SwitchoverError(f"the sentinels' primary of {service!r} is {target.host}:{target.port} "
                                  f"(run_id {target.run_id}), not this node (run_id {run_id})")
        if time.monotonic() >= deadline:
            raise SwitchoverError(f"sentinel {target.where} names {target.host}:{target.port} the primary of "
                                  f"{service!r} but does not know its run_id yet, and this node goes by "
                                  + ", ".join(f"{h}:{p}" for h, p in sorted(addresses)))
        time.sleep(0.2)


def _wait_for_a_replica_seen(target: Target, service: str, deadline: float) -> None:
    """Until the sentinel sees a replica up and linked (one just started,
    or just back, is not yet a replica it would promote)."""
    while True:
        try:
            seen = target.sentinel.execute_command("SENTINEL", "REPLICAS", service)
        except redis.RedisError as e:
            raise SwitchoverError(f"sentinel {target.where}: {e}") from None
        fields = [{k.decode(): v.decode() for k, v in _pairs(r).items()} for r in seen]
        if any(f["flags"] == "slave" and f.get("master-link-status") == "ok" for f in fields):
            return
        if time.monotonic() >= deadline:
            states = ", ".join(f"{f['ip']}:{f['port']} ({f['flags']}, link {f.get('master-link-status')})"
                               for f in fields) or "none"
            raise SwitchoverError(f"sentinel {target.where} sees no replica up and linked to hand over to "
                                  f"(replicas: {states})")
        time.sleep(0.1)


def _pairs(reply) -> dict:
    """A map reply (RESP3) or a flat list of field, value (RESP2)."""
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))


def _addresses(node: redis.Redis) -> set[tuple[str, int]]:
    """Where ``node`` is reached: the address used here, and the one it
    announces (``replica-announce-ip`` and ``-port``)."""
    kw = node.connection_pool.connection_kwargs
    host, port = kw.get("host", ""), int(kw.get("port", 0))
    said = node.config_get("replica-announce-*")
    announced = (said.get("replica-announce-ip") or host, int(said.get("replica-announce-port") or 0) or port)
    return {(host, port), announced}


def _primary_of(sentinels: list[redis.Redis], service: str) -> Target:
    """The first answer of ``SENTINEL MASTER service``."""
    problems = []
    for s in sentinels:
        kw = s.connection_pool.connection_kwargs
        where = f"{kw.get('host')}:{kw.get('port')}"
        try:
            reply = s.execute_command("SENTINEL", "MASTER", service)
        except (redis.RedisError, OSError) as e:
            problems.append(f"{where}: {e}")
            continue
        fields = {k.decode(): v.decode() for k, v in _pairs(reply).items()}
        return Target(s, where, fields["ip"], int(fields["port"]), fields.get("runid", ""))
    raise SwitchoverError(f"no sentinel answered for {service!r}: {'; '.join(problems)}")


def _ms_left(deadline: float) -> int:
    return max(1, int((deadline - time.monotonic()) * 1000))
