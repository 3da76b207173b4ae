"""Where a ``Queue``'s connections go, the same for threads and asyncio.

A ``redis://`` (or ``rediss://``, ``unix://``) URL names one daemon.  A
``sentinel://`` URL names Redis Sentinels and a service they watch; the
queue's connections then go to the service's primary, asked of the
sentinels on every new connection, so after a failover the next connection
finds the new primary (redis-py's ``Sentinel``, which also drops a
connection whose server answers -READONLY: it was the primary and is now a
replica).  The URL's form (docs/client.md)::

    sentinel://[[username]:password@]host[:port][,host[:port]...]/service[?option=value&...]

Port 26379 when left out.  The user and password are the leaseq nodes'
(as in a ``redis://`` URL); ``sentinel_username`` and ``sentinel_password``
options are the sentinels' own; the other options are redis-py's
connection settings, as in a ``redis://`` URL's query (``socket_timeout``,
``protocol``, ...).  A claim that may wait gets clients of its own whose
socket timeout outlasts the wait (``with_socket_timeout``): for a
sentinel-managed client those find the primary the same way.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.connection import parse_url

SCHEME = "sentinel"
SENTINEL_PORT = 26379
# options of a sentinel:// URL that are the sentinels' own, not the nodes'
SENTINEL_OPTIONS = {"sentinel_username": "username", "sentinel_password": "password"}


def is_sentinel_url(url: str) -> bool:
    return urlsplit(url).scheme == SCHEME


def parse_sentinel_url(url: str) -> tuple[list[tuple[str, int]], str, dict, dict]:
    """(sentinel addresses, service name, the nodes' connection settings,
    the sentinels' own settings) of a ``sentinel://`` URL; ValueError
    naming what is wrong with it."""
    parts = urlsplit(url)
    if parts.scheme != SCHEME:
        raise ValueError(f"not a sentinel:// URL: {url!r}")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    service = unquote(parts.path.strip("/"))
    if not service or "/" in service:
        raise ValueError(f"a sentinel:// URL names one service after the hosts "
                         f"(sentinel://host:26379/mymaster), not {parts.path or 'none'!r}")
    addresses = [_address(h, url) for h in hosts.split(",")]
    # the nodes' settings are read as redis-py reads a redis:// URL's (user, password, query options)
    nodes = parse_url(f"redis://{userinfo + '@' if userinfo else ''}localhost?{parts.query}")
    for key in ("host", "port"):
        nodes.pop(key, None)
    sentinels = {name: nodes.pop(option) for option, name in SENTINEL_OPTIONS.items() if option in nodes}
    sentinels.update({k: v for k, v in nodes.items() if k.startswith("socket_")})
    return addresses, service, nodes, sentinels


def _address(text: str, url: str) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6 address]:port``."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = text.partition(":")
    if not host:
        raise ValueError(f"a sentinel:// URL lists host[:port] of each sentinel, comma-separated: {url!r}")
    if not port:
        return host, SENTINEL_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a port number: {port!r} in {url!r}")
    return host, int(port)


def client_for(url: str, flavour: ModuleType, **redis_kwargs: Any) -> Any:
    """A client of ``flavour`` (``redis`` or ``redis.asyncio``) for ``url``:
    ``Redis.from_url``, or for a ``sentinel://`` URL one whose connections
    go to the service's primary."""
    if not is_sentinel_url(url):
        return flavour.Redis.from_url(url, **redis_kwargs)
    addresses, service, nodes, sentinels = parse_sentinel_url(url)
    nodes.update(redis_kwargs)
    manager = flavour.sentinel.Sentinel(addresses, sentinel_kwargs=sentinels, **nodes)
    return manager.master_for(service, redis_class=flavour.Redis)


def with_socket_timeout(client: Any, timeout: float | None) -> Any:
    """A client like ``client`` (same kind, server and settings, a pool of
    its own) whose socket timeout is ``timeout``."""
    pool = client.connection_pool
    settings = {k: v for k, v in pool.connection_kwargs.items() if k != "connection_pool"}
    settings["socket_timeout"] = timeout
    manager = getattr(pool, "sentinel_manager", None)
    if manager is not None:
        return manager.master_for(pool.service_name, redis_class=type(client), **settings)
    return type(client)(connection_pool=type(pool)(connection_class=pool.connection_class, **settings))
