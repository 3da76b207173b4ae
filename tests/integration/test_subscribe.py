"""QWORK through SUBSCRIBE (docs/semantics.md §3.3, "QWORK through
SUBSCRIBE"): the channel names the QWORK request, each job arrives as a
pub/sub message with the job as JSON, RESP2 connections keep Redis's pub/sub
context, UNSUBSCRIBE and a closed connection give the leases back, and a
client library known not to read QWORK's push frames is refused."""

from __future__ import annotations

import base64
import json

import pytest

from harness import RespSocket, error_text, qget, qinfo, unique, wait_for


@pytest.fixture
def conn(daemon):
    opened = []

    def open_(resp: int = 2) -> RespSocket:
        c = RespSocket(daemon.port)
        if resp == 3:
            c.send("HELLO", "3")
            c.read()
        opened.append(c)
        return c
    yield open_
    for c in opened:
        c.close()


def message_job(frame, channel: str) -> dict:
    kind, got_channel, data = frame
    assert (kind, got_channel) == (b"message", channel.encode())
    return json.loads(data)


@pytest.mark.parametrize("resp", [2, 3])
def test_jobs_arrive_as_messages_on_the_channel(daemon, conn, q, resp):
    r = daemon.client()
    r.execute_command("QPUSH", q, "hello", "PRIORITY", 9)
    r.execute_command("QPUSH", q, b"\x00\xff binary")
    channel = f"QWORK {q} w1 MAX 5 LEASE 60000"
    c = conn(resp)
    c.send("SUBSCRIBE", channel)
    assert c.read() == [b"subscribe", channel.encode(), 1]
    first, second = message_job(c.read(), channel), message_job(c.read(), channel)
    assert first["queue"] == q and first["payload"] == "hello" and first["priority"] == 9
    assert first["deliveries"] == 1 and first["lease"]
    assert base64.b64decode(second["payload_base64"]) == b"\x00\xff binary" and "payload" not in second
    assert qinfo(r, q)[b"in_flight"] == 2
    assert r.execute_command("QACK", q, first["lease"], second["lease"]) == 2
    r.execute_command("QPUSH", q, "third")
    assert message_job(c.read(), channel)["payload"] == "third"       # a freed slot takes the next job


def test_a_jobs_meta_arrives_as_an_object_of_its_fields(daemon, conn, q):
    """META in the JSON message: an object, a value that is not UTF-8 in
    base64 under its name with _base64 added (as the payload is)."""
    r = daemon.client()
    r.execute_command("QPUSH", q, "hello", "META", "tenant", "acme", "raw", b"\xff\x00")
    channel = f"QWORK {q} w1 LEASE 60000"
    c = conn(2)
    c.send("SUBSCRIBE", channel)
    assert c.read() == [b"subscribe", channel.encode(), 1]
    job = message_job(c.read(), channel)
    assert job["meta"] == {"tenant": "acme", "raw_base64": base64.b64encode(b"\xff\x00").decode()}
    assert r.execute_command("QACK", q, job["lease"]) == 1


def test_resp2_keeps_redis_pubsub_context(daemon, conn, q):
    c = conn(2)
    channel = f"QWORK {q} w1"
    c.send("SUBSCRIBE", channel)
    assert c.read() == [b"subscribe", channel.encode(), 1]
    c.send("QLEN", q)
    assert str(c.read()) == ("ERR Can't execute 'qlen': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET "
                             "are allowed in this context")
    c.send("PING")
    assert c.read() == [b"pong", b""]
    c.send("UNSUBSCRIBE")
    assert c.read() == [b"unsubscribe", channel.encode(), 0]
    c.send("QLEN", q)
    assert c.read() == 0                                                # out of the context again
    c.send("UNSUBSCRIBE")
    assert c.read() == [b"unsubscribe", None, 0]


def test_resp3_runs_any_command_meanwhile(daemon, conn, q):
    daemon.client().execute_command("QPUSH", q, "x")
    c = conn(3)
    channel = f"QWORK {q} w1"
    c.send("SUBSCRIBE", channel)
    c.read()
    job = message_job(c.read(), channel)
    c.send("QACK", q, job["lease"])
    assert c.read() == 1


def test_unsubscribe_and_close_give_the_leases_back(daemon, conn, q):
    r = daemon.client()
    r.execute_command("QPUSHMANY", q, 2, "a", "b")
    a_channel, b_channel = f"QWORK {q} w1", f"QWORK {q}-other w1"
    c = conn(2)
    c.send("SUBSCRIBE", a_channel, b_channel)
    assert [c.read(), c.read()] == [[b"subscribe", a_channel.encode(), 1], [b"subscribe", b_channel.encode(), 2]]
    job = message_job(c.read(), a_channel)
    c.send("UNSUBSCRIBE", a_channel)
    assert c.read() == [b"unsubscribe", a_channel.encode(), 1]
    got = qget(r, q, job["id"])
    assert (got[b"state"], got[b"deliveries"]) == (b"ready", 1)       # back at once, no deliveries bump
    d = conn(2)
    d.send("SUBSCRIBE", a_channel)
    d.read()
    assert message_job(d.read(), a_channel)["deliveries"] == 2
    d.close()
    wait_for(lambda: qinfo(r, q)[b"in_flight"] == 0, 5, "the closed connection's leases to go back")


@pytest.mark.parametrize("channel", ["QWORK onlyqueue", "QWORK q w1 MAX 0", "QWORK q w1 BOGUS 1", "qwork  "])
def test_a_bad_qwork_channel_subscribes_nothing(daemon, conn, q, channel):
    c = conn(2)
    c.send("SUBSCRIBE", f"QWORK {q} w1", channel)
    assert str(c.read()).startswith("ERR ")
    c.send("CLIENT", "INFO")
    assert b" sub=0 " in c.read()                                       # the good channel did not start either
    r = daemon.client()
    r.execute_command("QPUSH", q, "x")
    assert qinfo(r, q)[b"in_flight"] == 0


def test_one_stream_per_queue_and_connection(daemon, conn, q):
    c = conn(3)
    c.send("QWORK", q, "w1")
    assert c.read() == b"OK"
    c.send("SUBSCRIBE", f"QWORK {q} w1")
    assert str(c.read()) == f"ERR this connection already has a work stream on queue '{q}'; UNSUBSCRIBE it first"


def test_qwork_is_refused_to_libraries_that_cannot_read_its_frames(daemon, q):
    r = daemon.client(single_connection_client=True)
    r.execute_command("QPUSH", q, "x")
    for library in ("ioredis", "node-redis"):
        r.execute_command("CLIENT", "SETINFO", "LIB-NAME", library)
        assert error_text(r, "QWORK", q, "w1") == (
            f"{library} does not deliver QWORK's push messages; SUBSCRIBE \"QWORK <queue> <consumer> [MAX n] "
            f"[LEASE ms]\" streams the same jobs as pub/sub messages it does deliver")
    assert qinfo(r, q)[b"in_flight"] == 0 and qinfo(r, q)[b"ready"] == 1


def test_a_dropped_queue_ends_its_stream_and_a_new_one_starts_afresh(daemon, conn, q):
    r = daemon.client()
    channel = f"QWORK {q} w1"
    c = conn(3)
    c.send("SUBSCRIBE", channel)
    assert c.read() == [b"subscribe", channel.encode(), 1]
    r.execute_command("QCREATE", q)
    r.execute_command("QDROP", q, "FORCE")
    c.send("CLIENT", "INFO")
    assert b" sub=0 " in c.read()
    c.send("SUBSCRIBE", channel)                       # the queue is created again by auto-create
    assert c.read() == [b"subscribe", channel.encode(), 1]
    r.execute_command("QPUSH", q, "again")
    assert message_job(c.read(), channel)["payload"] == "again"


def test_a_channel_that_is_not_a_qwork_request_is_a_plain_one(daemon, conn):
    """Redis's pub/sub for any other channel (Sentinel's __sentinel__:hello):
    PUBLISH reaches who is subscribed now, and says how many."""
    a, b = conn(2), conn(2)
    a.send("SUBSCRIBE", "news", "qwork")
    assert [a.read(), a.read()] == [[b"subscribe", b"news", 1], [b"subscribe", b"qwork", 2]]
    b.send("PUBLISH", "news", "hello")
    assert b.read() == 1
    assert a.read() == [b"message", b"news", b"hello"]
    b.send("PUBLISH", "nobody", "x")
    assert b.read() == 0
    a.send("UNSUBSCRIBE", "news")
    assert a.read() == [b"unsubscribe", b"news", 1]
    b.send("PUBLISH", "news", "again")
    assert b.read() == 0
    a.close()
    wait_for(lambda: b.send("PUBLISH", "qwork", "gone") or b.read() == 0, 5, "the closed subscriber to go")
