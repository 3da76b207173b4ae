"""leaseq.client (docs/client.md), the thread flavour, against the real
daemon: ``Queue``'s commands in RESP2 and RESP3, its error classes, its
blocking claims, and ``Worker``: concurrency, acks, nacks with the
exception's text, lease heartbeats, burst runs, a lost lease, and a drain on
SIGTERM in a worker process of its own.

The module shares one daemon; each test uses queues of its own (``q``).
"""

from __future__ import annotations

import time

import pytest
import redis

from harness import CheckedThread, qget, qinfo, unique, wait_blocked
from leaseq.client import Job, Queue, errors

SHARED_DAEMON_ENV = {"LEASEQ_MAX_PAYLOAD": "1kb"}


def url(daemon) -> str:
    return f"redis://127.0.0.1:{daemon.port}"


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request) -> int:
    return request.param


@pytest.fixture
def queue(daemon, q, protocol):
    """A Queue on a fresh queue name, in RESP2 and in RESP3."""
    with Queue(url(daemon), q, protocol=protocol, socket_timeout=10) as queue:
        yield queue


@pytest.fixture
def r(daemon):
    """Plain redis-py, to look at what the client did."""
    c = daemon.client(protocol=2)
    yield c
    c.close()


# -- Queue -------------------------------------------------------------------------------------

def test_push_claim_ack(queue, r):
    first = queue.push("photo-1.jpg")
    second = queue.push(b"\x00\xff binary", priority=9)
    assert (first, second) == (1, 2)
    jobs = queue.claim("worker-1", count=5, lease_ms=10_000)
    assert [(j.id, j.payload, j.priority, j.deliveries) for j in jobs] == [
        (2, b"\x00\xff binary", 9, 1), (1, b"photo-1.jpg", 5, 1)]
    job = jobs[0]
    assert isinstance(job, Job) and job.queue == queue.name
    assert job.deadline - job.enqueued_at >= 10_000 - 50
    assert qget(r, queue.name, 2, str_keys=True)["consumer"] == b"worker-1"
    assert queue.ack(job) is True
    assert queue.ack(job) is False                     # the token is stale now
    assert queue.ack(jobs[1].lease) is True            # a token works as well as a Job
    assert queue.claim("worker-1") == []


def test_push_options_reach_the_job(queue, r):
    soon = queue.push("later", delay_ms=60_000)
    at = queue.push("at", at_ms=int(time.time() * 1000) + 60_000)
    limited = queue.push("limited", max_deliveries=3, expire_ms=90_000)
    assert qget(r, queue.name, soon, str_keys=True)["state"] == b"delayed"
    assert qget(r, queue.name, at, str_keys=True)["state"] == b"delayed"
    shown = qget(r, queue.name, limited, str_keys=True)
    assert (shown["maxdeliveries"], shown["expire"]) == (3, 90_000)
    assert [j.id for j in queue.claim("w", count=3)] == [limited]


def test_dedupe_keys_and_scopes(queue):
    job_id = queue.push("report", key="report:2026-11-21")
    assert queue.push("report", key="report:2026-11-21") == job_id
    [job] = queue.claim("w")
    assert job.key == b"report:2026-11-21"
    assert queue.push("report", key="report:2026-11-21", key_scope="active") == job_id
    assert queue.push("report", key="report:2026-11-21") != job_id      # in flight: not "queued"
    assert queue.info()["duplicates"] == 2


def test_push_many(queue):
    assert queue.push_many([]) == []
    assert queue.push_many(["a", b"b", "c"], priority=2) == [1, 2, 3]
    assert queue.push_many(["d", "e", "f"], keys=["k1", "k2", "k2"]) == [4, 5, 5]
    jobs = queue.claim("w", count=10)
    assert sorted((j.id, j.payload, j.key) for j in jobs) == [
        (1, b"a", None), (2, b"b", None), (3, b"c", None), (4, b"d", b"k1"), (5, b"e", b"k2")]
    assert {j.priority for j in jobs if j.key is None} == {2}


def test_nack_keeps_the_error_and_counts_a_delivery(queue, r):
    queue.push("flaky")
    [job] = queue.claim("w")
    assert queue.nack(job, error="ValueError: smtp timeout", delay_ms=0) is True
    assert queue.nack(job) is False                    # stale
    [again] = queue.claim("w")
    assert (again.id, again.deliveries, again.last_error) == (job.id, 2, "ValueError: smtp timeout")
    assert queue.nack(again, delay_ms=60_000) is True
    assert qget(r, queue.name, job.id, str_keys=True)["state"] == b"delayed"


def test_nack_dead_letters_with_provenance(daemon, queue, r):
    dead = unique("dead")
    r.execute_command("QCREATE", queue.name, "DEADLETTER", dead)
    queue.push("poison", key="k")
    [job] = queue.claim("w")
    assert queue.nack(job, error="TypeError: bad input", dead=True) is True
    with Queue.from_client(queue.client, dead) as dead_queue:
        [copy] = dead_queue.claim("w")
    assert (copy.queue, copy.payload, copy.last_error, copy.key) == (dead, b"poison", "TypeError: bad input", None)
    assert (copy.dead_letter_from, copy.dead_letter_src_id, copy.dead_letter_deliveries,
            copy.dead_letter_reason) == (queue.name, job.id, 1, "nack")


def test_extend(queue):
    queue.push("slow")
    [job] = queue.claim("w", lease_ms=1000)
    deadline = queue.extend(job, lease_ms=60_000)
    assert deadline >= job.deadline + 59_000 - 50
    assert queue.extend_many([job, "99.1.1"])[1] is None
    queue.ack(job)
    assert queue.extend(job) is None                   # the lease ended


def test_info_and_ready_count(queue):
    queue.push_many(["a", "b", "c"])
    queue.push("d", delay_ms=60_000)
    queue.claim("w")
    info = queue.info()
    assert all(isinstance(k, str) for k in info)
    assert (info["name"], info["ready"], info["delayed"], info["in_flight"], info["pushed"]) == (
        queue.name, 2, 1, 1, 4)
    assert (info["durability"], info["backoff_exponent"], info["deadletter"]) == ("fsync", 2.0, None)
    assert queue.ready_count() == 2


# -- errors ------------------------------------------------------------------------------------

def test_error_replies_raise_leaseq_errors(daemon, queue, r):
    missing = Queue.from_client(queue.client, unique("missing"))
    with pytest.raises(errors.NoQueue) as e:
        missing.ack("1.1.1")
    assert e.value.code == "NOQUEUE" and str(e.value).startswith("NOQUEUE no such queue")
    with pytest.raises(errors.NoQueue):
        missing.info()

    r.execute_command("QCREATE", queue.name, "MAXLEN", 1)
    queue.push("one")
    with pytest.raises(errors.Full):
        queue.push("two")
    with pytest.raises(errors.TooBig):                 # the module's daemon runs with max-payload 1kb
        Queue.from_client(queue.client, unique()).push(b"x" * 2000)

    with pytest.raises(errors.LeaseqError) as e:
        queue.push_many(["a"], priority=12)
    assert (type(e.value), e.value.code, e.value.message) == (
        errors.LeaseqError, "ERR", "PRIORITY must be between 0 and 9")
    assert isinstance(e.value, redis.ResponseError)    # code written for redis-py still catches it


def test_a_dropped_queue_answers_a_blocked_claim_closed(daemon, queue, r):
    queue.push("x")
    result = {}
    t = CheckedThread(target=lambda: result.update(error=pytest.raises(errors.Closed, queue.claim, "w",
                                                                        block_ms=10_000)))
    queue.claim("w")                                   # empty now: the next claim blocks
    t.start()
    wait_blocked(r, queue.name, 1)
    r.execute_command("QDROP", queue.name, "FORCE")
    t.join(10)
    assert t.failure is None and result["error"].value.code == "CLOSED"


def test_payloads_must_be_bytes_or_str(queue):
    with pytest.raises(TypeError, match="encode it first"):
        queue.push({"to": "ann@example.com"})
    with pytest.raises(errors.NoQueue):                # nothing was sent: the push did not even create the queue
        queue.info()


def test_a_decoding_client_is_refused(daemon, q):
    c = daemon.client(decode_responses=True)
    with pytest.raises(ValueError, match="decode_responses"):
        Queue.from_client(c, q)
    with pytest.raises(ValueError, match="decode_responses"):
        Queue(url(daemon), q, decode_responses=True)
    c.close()


# -- blocking claims ---------------------------------------------------------------------------

def test_a_blocking_claim_outlasts_a_short_socket_timeout(daemon, q, protocol, r):
    """socket_timeout 0.3 s, BLOCK 1.2 s: redis-py alone would time out and
    send the claim again; the queue's claim connection waits it out, and the
    ordinary commands keep their short timeout on their own connection."""
    with Queue(url(daemon), q, protocol=protocol, socket_timeout=0.3) as queue:
        queue.push("x")
        queue.claim("w")
        t0 = time.monotonic()
        assert queue.claim("w", block_ms=1200) == []
        assert time.monotonic() - t0 >= 1.15
        assert qinfo(r, q, str_keys=True)["consumers_blocked"] == 0

        got = {}
        t = CheckedThread(target=lambda: got.update(jobs=queue.claim("w", block_ms=5000)))
        t.start()
        wait_blocked(r, q, 1)
        assert queue.info()["consumers_blocked"] == 1  # the ordinary connection is free meanwhile
        queue.push("arrives")
        t.join(10)
        assert t.failure is None and [j.payload for j in got["jobs"]] == [b"arrives"]
