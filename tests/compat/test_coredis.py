"""coredis (asyncio, RESP3 only), unchanged, against a real daemon
(docs/compatibility.md): push, claim, blocking claim, ack, pipeline, MULTI/EXEC
and QWORK through SUBSCRIBE.  coredis has no generic ``execute_command``
for unknown commands; ``create_request`` is its documented way in."""

from __future__ import annotations

import asyncio
import json

import coredis
import pytest

from harness import Daemon, unique


@pytest.fixture(scope="module")
def leaseq(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("coredis") / "data").start()
    yield d
    d.stop()


def raw(client, *args):
    """An awaitable leaseq command on a coredis client or pipeline."""
    return client.create_request(args[0].encode(), *args[1:], callback=lambda reply, **kw: reply)


def run(leaseq, scenario):
    async def main():
        client = coredis.Redis(host="127.0.0.1", port=leaseq.port)
        async with client:
            return await asyncio.wait_for(scenario(client), 30)
    return asyncio.run(main())


def test_push_claim_ack(leaseq):
    q = unique("coredis")

    async def scenario(c):
        assert await raw(c, "QPUSH", q, "hello") == 1
        assert await raw(c, "QPUSHMANY", q, 2, "a", "b") == [2, 3]
        jobs = await raw(c, "QCLAIM", q, "w1", "COUNT", 3)
        assert [j[b"payload"] for j in jobs] == [b"hello", b"a", b"b"]          # RESP3 maps
        assert await raw(c, "QACK", q, *[j[b"lease"] for j in jobs]) == 3
    run(leaseq, scenario)


def test_blocking_claim(leaseq):
    """coredis multiplexes one connection: a blocked QCLAIM would hold back
    the QPUSH queued behind it, so the claimer gets a client of its own (as
    for ioredis and node-redis: docs/compatibility.md)."""
    q = unique("coredis")

    async def scenario(c):
        claimer = coredis.Redis(host="127.0.0.1", port=leaseq.port)
        async with claimer:
            waiting = asyncio.ensure_future(raw(claimer, "QCLAIM", q, "w1", "BLOCK", 5000))
            await asyncio.sleep(0.2)
            await raw(c, "QPUSH", q, "late")
            [job] = await waiting
        assert job[b"payload"] == b"late"
    run(leaseq, scenario)


def test_pipeline_and_multi(leaseq):
    q = unique("coredis")

    async def scenario(c):
        async with c.pipeline(transaction=False) as p:
            pushes = [raw(p, "QPUSH", q, f"p{i}") for i in range(3)]
        assert [await r for r in pushes] == [1, 2, 3]
        jobs = await raw(c, "QCLAIM", q, "w1", "COUNT", 2)
        async with c.pipeline(transaction=True) as p:
            acks = [raw(p, "QACK", q, j[b"lease"]) for j in jobs]
        assert [await r for r in acks] == [1, 1]
        assert await raw(c, "QLEN", q) == 1
    run(leaseq, scenario)


def test_qwork_through_subscribe(leaseq):
    q = unique("coredis")

    async def scenario(c):
        await raw(c, "QPUSHMANY", q, 2, "s1", "s2")
        got = []
        async with c.pubsub(channels=[f"QWORK {q} w1 MAX 5"]) as ps:
            async for message in ps:
                if message["type"] == "message":
                    job = json.loads(message["data"])
                    got.append(job["payload"])
                    assert await raw(c, "QACK", q, job["lease"]) == 1     # before UNSUBSCRIBE ends the leases
                    if len(got) == 2:
                        break
        assert got == ["s1", "s2"]
        info = await raw(c, "QINFO", q)
        assert (info[b"ready"], info[b"in_flight"], info[b"acked"]) == (0, 0, 2)
    run(leaseq, scenario)
