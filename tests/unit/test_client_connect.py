"""Where a Queue's connections go (client/connect.py): the sentinel:// URL's
form and its errors, and the claim clients made beside a queue's client
(a socket timeout of their own, the same server or the same Sentinel
service).  Nothing here connects; test_sentinel.py does, to real sentinels."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from leaseq.client import Queue, aio
from leaseq.client.connect import client_for, parse_sentinel_url, with_socket_timeout


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_settings_of_each():
    addresses, service, nodes, sentinels = parse_sentinel_url(
        "sentinel://app:secret@s1:1234,s2,[::1]:26380/jobs?socket_timeout=2.5&protocol=3&sentinel_password=sp")
    assert addresses == [("s1", 1234), ("s2", 26379), ("::1", 26380)]
    assert service == "jobs"
    assert nodes == {"username": "app", "password": "secret", "socket_timeout": 2.5, "protocol": 3}
    assert sentinels == {"password": "sp", "socket_timeout": 2.5}


@pytest.mark.parametrize("url, says", [
    ("sentinel://s1:26379", "names one service"),
    ("sentinel://s1:26379/a/b", "names one service"),
    ("sentinel://s1:port/jobs", "not a port number: 'port'"),
    ("sentinel://s1:0/jobs", "not a port number: '0'"),
    ("sentinel://s1:70000/jobs", "not a port number: '70000'"),
    ("sentinel://s1,,s2/jobs", "host[:port] of each sentinel"),
    ("redis://s1/jobs", "not a sentinel:// URL"),
])
def test_a_wrong_sentinel_url_is_refused_saying_what_is_wrong(url, says):
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
        parse_sentinel_url(url)


def test_a_queue_on_a_sentinel_url_asks_the_sentinels_for_the_primary_and_its_claims_too():
    queue = Queue("sentinel://127.0.0.1:1,127.0.0.1:2/jobs?socket_timeout=3", "q")
    pool = queue.client.connection_pool
    assert isinstance(pool, redis.sentinel.SentinelConnectionPool) and pool.service_name == "jobs"
    assert [s.connection_pool.connection_kwargs["port"] for s in pool.sentinel_manager.sentinels] == [1, 2]
    claimer = queue._claimer(block_ms=10_000)
    assert isinstance(claimer.connection_pool, redis.sentinel.SentinelConnectionPool)
    assert claimer.connection_pool.service_name == "jobs"
    assert claimer.connection_pool.connection_kwargs["socket_timeout"] > 10
    queue.close()


def test_a_queue_from_a_sentinel_uses_its_primary_and_leaves_it_open():
    sentinel = redis.sentinel.Sentinel([("127.0.0.1", 1)], socket_timeout=1)
    queue = Queue.from_sentinel(sentinel, "jobs", "q")
    assert queue.client.connection_pool.service_name == "jobs"
    queue.close()
    assert queue._sentinel is None               # the caller's Sentinel: not the queue's to close


def test_claim_clients_beside_a_plain_client_keep_its_server_and_settings():
    client = redis.Redis(host="127.0.0.1", port=1, password="pw", socket_timeout=3)
    claimer = with_socket_timeout(client, 13.0)
    settings = claimer.connection_pool.connection_kwargs
    assert (settings["port"], settings["password"], settings["socket_timeout"]) == (1, "pw", 13.0)
    assert claimer.connection_pool is not client.connection_pool


def test_the_asyncio_flavour_takes_a_sentinel_url_too():
    client = client_for("sentinel://127.0.0.1:1/jobs?socket_timeout=2", redis.asyncio)
    assert isinstance(client.connection_pool, redis.asyncio.sentinel.SentinelConnectionPool)
    queue = aio.Queue.from_client(client, "q")
    claimer = queue._claimer(block_ms=5_000)
    assert isinstance(claimer.connection_pool, redis.asyncio.sentinel.SentinelConnectionPool)
    assert claimer.connection_pool.connection_kwargs["socket_timeout"] > 5


def test_a_plain_url_still_makes_a_plain_client():
    client = client_for("redis://127.0.0.1:1", redis)
    assert type(client.connection_pool) is redis.ConnectionPool
