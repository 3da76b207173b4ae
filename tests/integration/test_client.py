"""leaseq.client (docs/client.md), the thread flavour, against the real
daemon: ``Queue``'s commands in RESP2 and RESP3, its error classes, its
blocking claims, and ``Worker``: concurrency, acks, nacks with the
exception's text, lease heartbeats, burst runs, a lost lease, and a drain on
SIGTERM in a worker process of its own.

The module shares one daemon; each test uses queues of its own (``q``).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest
import redis

from harness import CheckedThread, Daemon, claim_one, qget, qinfo, unique, wait_blocked, wait_for
from harness_client import Peak, run_client_worker, work_through_leases
from leaseq.client import Job, Queue, Worker, WorkerStats, errors
from leaseq.client import protocol as client_protocol

SHARED_DAEMON_ENV = {"LEASEQ_MAX_PAYLOAD": "1kb"}
README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request) -> int:
    return request.param


@pytest.fixture
def queue(daemon, q, protocol):
    """A Queue on a fresh queue name, in RESP2 and in RESP3."""
    with Queue(daemon.url, q, protocol=protocol, socket_timeout=10) as queue:
        yield queue


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


def test_pause_and_resume(queue, daemon):
    queue.push("held back")
    queue.pause()
    assert queue.claim("w") == [] and queue.info()["paused"] == 1
    queue.resume()
    assert [j.payload for j in queue.claim("w")] == [b"held back"] and queue.info()["paused"] == 0
    with Queue(daemon.url, unique("missing")) as missing:
        with pytest.raises(errors.NoQueue):
            missing.pause()
        with pytest.raises(errors.NoQueue):
            missing.resume()


def test_queue_options_groups_and_group_pauses(queue):
    queue.create(rate=(100, 1000), concurrency=10, group_concurrency=1, group_rate=(5, 1000), lease_ms=20_000)
    info = queue.info()
    assert (info["rate"], info["rate_ms"], info["concurrency"], info["group_concurrency"], info["group_rate"],
            info["group_rate_ms"], info["lease"]) == (100, 1000, 10, 1, 5, 1000, 20_000)
    queue.create(rate=(100, 1000), concurrency=10, group_concurrency=1, group_rate=(5, 1000), lease_ms=20_000)
    queue.alter(rate=0, group_rate="OFF")
    assert (queue.info()["rate"], queue.info()["group_rate"]) == (0, 0)
    queue.push_many(["a1", "a2", "b1"], groups=["acme", "acme", "beta"])
    queue.push("c1", group="corp")
    queue.pause(group="beta")
    got = queue.claim("w", count=10)
    assert sorted((j.group, j.payload) for j in got) == [(b"acme", b"a1"), (b"corp", b"c1")]
    queue.resume(group="beta")
    assert [j.group for j in queue.claim("w", count=10)] == [b"beta"]
    with pytest.raises(ValueError, match="one group per payload"):
        queue.push_many(["x", "y"], groups=["only-one"])
    with pytest.raises(ValueError, match="not both"):
        queue.push_many(["x"], group="g", groups=["g"])
    with pytest.raises(TypeError, match="unknown queue option 'speed'"):
        queue.alter(speed=3)


def test_schedules_replace_and_parents(queue):
    next_tick = queue.schedules.add("beat", "ping", every_ms=3_600_000, misfire="once")
    assert [(s["name"], s["spec"], s["next"], s["misfire"]) for s in queue.schedules.list()] == [
        ("beat", "EVERY 3600000", next_tick, "once")]
    assert queue.schedules.remove("beat") is True and queue.schedules.remove("beat") is False
    with pytest.raises(ValueError, match="cron or every_ms"):
        queue.schedules.add("x", "p")
    held = queue.push("v1", key="doc", delay_ms=60_000)
    assert queue.push("v2", key="doc", replace=True, delay_ms=0) == held
    parent = queue.claim("w")[0]
    child = queue.push("after", after=[parent], on_fail="run")
    assert queue.info()["waiting"] == 1
    queue.ack(parent)
    assert [j.id for j in queue.claim("w")] == [child]
    held = queue.claim("w")
    assert held == [] or queue.progress(held[0], "half") is True
    with pytest.raises(ValueError, match="give key"):
        queue.push("x", replace=True)
    with pytest.raises(ValueError, match="give after"):
        queue.push("x", on_fail="run")


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


def test_meta_travels_with_push_push_many_and_schedules(daemon, queue, protocol):
    """``meta=`` on push, push_many and schedules; ``Job.meta`` from the
    COMPACT claim ``Queue.claim`` sends and from the map form alike."""
    tagged = queue.push("tagged", meta={"tenant": "acme", b"raw": b"\xff"}, priority=9)
    ids = queue.push_many(["a", "b"], meta={"batch": "7"}, priority=8)
    plain = queue.push("plain", meta={})                  # an empty mapping sends no META
    jobs = queue.claim("w", count=10)
    assert [(j.id, j.meta) for j in jobs] == [(tagged, {"tenant": "acme", "raw": "\ufffd"}),
                                              (ids[0], {"batch": "7"}), (ids[1], {"batch": "7"}), (plain, None)]
    assert "meta" not in jobs[0].extra
    queue.push("again", meta={"tenant": "acme"})
    c = daemon.client(protocol=protocol)
    [job] = client_protocol.parse_jobs(queue.name, c.execute_command("QCLAIM", queue.name, "w"))    # the map form
    assert job.meta == {"tenant": "acme"}
    c.close()
    queue.schedules.add("beat", "ping", every_ms=3_600_000, meta={"source": "cron"})
    assert [s["meta"] for s in queue.schedules.list()] == [{"source": "cron"}]
    with pytest.raises(errors.LeaseqError, match="META has 33 fields, more than 32"):
        queue.push("x", meta={f"f{i}": "v" for i in range(33)})
    with pytest.raises(TypeError, match="str or bytes, not int"):
        queue.push("x", meta={"n": 1})
    with pytest.raises(TypeError, match="a mapping"):
        queue.push_many(["x"], meta=[("a", "b")])
    assert queue.info()["ready"] == 0


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
        Queue(daemon.url, q, decode_responses=True)
    c.close()


# -- blocking claims ---------------------------------------------------------------------------

def test_a_blocking_claim_outlasts_a_short_socket_timeout(daemon, q, protocol, r):
    """socket_timeout 0.3 s, BLOCK 1.2 s: redis-py alone would time out and
    send the claim again; the queue's claim connection waits it out, and the
    ordinary commands keep their short timeout on their own connection."""
    with Queue(daemon.url, q, protocol=protocol, socket_timeout=0.3) as queue:
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


# -- Worker ------------------------------------------------------------------------------------

def run_worker(worker: Worker, burst: bool = True, timeout: float = 15.0) -> WorkerStats:
    """``worker.run(burst)`` in a thread, bounded: past ``timeout`` the
    worker is stopped and the test fails instead of hanging."""
    result = []
    t = CheckedThread(target=lambda: result.append(worker.run(burst)))
    t.start()
    t.join(timeout)
    if t.is_alive():
        worker.stop()
        t.join(10)
        raise AssertionError(f"the worker did not finish within {timeout} s")
    assert t.failure is None, t.failure
    return result[0]


def test_a_worker_runs_jobs_four_at_a_time_and_acks_them(queue):
    queue.push_many([f"photo-{i}.jpg" for i in range(12)])
    peak, seen = Peak(), []

    def handler(job):
        with peak:
            seen.append(job.payload)
            time.sleep(0.15)

    t0 = time.monotonic()
    stats = run_worker(Worker(queue, handler, concurrency=4, lease_ms=5000, block_ms=5000))
    assert time.monotonic() - t0 < 3                   # the run ends with the last job, not a BLOCK later
    assert stats == WorkerStats(acked=12) and stats.processed == 12
    assert peak.most == 4
    assert sorted(seen) == sorted(f"photo-{i}.jpg".encode() for i in range(12))
    info = queue.info()
    assert (info["acked"], info["ready"], info["in_flight"], info["nacked"]) == (12, 0, 0, 0)


def test_a_raising_handler_nacks_with_the_exception_text(queue, r):
    """The job's last_error is "<ExcType>: message"; with MAXDELIVERIES 1 the
    next claim dead-letters it (in place: no DEADLETTER queue), which ends
    the burst run."""
    r.execute_command("QCREATE", queue.name, "MAXDELIVERIES", 1, "BACKOFF", 0, 1, 0)
    bad, good = queue.push("corrupt.png"), queue.push("fine.png")

    def handler(job):
        if job.payload == b"corrupt.png":
            raise ValueError("no thumbnail for 'corrupt.png'")

    stats = run_worker(Worker(queue, handler, concurrency=2, lease_ms=5000))
    assert stats == WorkerStats(acked=1, failed=1)
    job = qget(r, queue.name, bad, str_keys=True)
    assert (job["state"], job["last_error"]) == (b"dead", b"ValueError: no thumbnail for 'corrupt.png'")
    assert qget(r, queue.name, good) is None           # acked


def test_the_heartbeat_keeps_a_job_longer_than_three_leases(tmp_path, protocol):
    """A 300 ms lease kept through four leases of the daemon's time: its
    clock is frozen and moved by the test (``hold_through_leases``), so
    without the heartbeat the lease would run out at the first step, and
    with it no other claimer ever gets the job."""
    d = Daemon(tmp_path / "data", env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}).start()
    try:
        r = d.client(protocol=2)
        assert r.execute_command("DEBUG", "CLOCK", "FREEZE") == b"OK"
        with Queue(d.url, "slow", protocol=protocol, socket_timeout=10) as queue:
            job_id = queue.push("slow")
            started, finish = threading.Event(), threading.Event()

            def handler(job):
                started.set()
                assert finish.wait(30)

            worker = Worker(queue, handler, lease_ms=300, block_ms=200)
            stats = work_through_leases(r, "slow", job_id, 300, lambda: worker.run(True), started, finish)
            assert stats == WorkerStats(acked=1)
            info = queue.info()
            assert (info["acked"], info["lease_expired"]) == (1, 0)
    finally:
        d.kill()


def test_a_burst_run_waits_for_delayed_jobs(queue):
    queue.push("now")
    queue.push("later", delay_ms=600)
    t0 = time.monotonic()
    stats = run_worker(Worker(queue, lambda job: None, block_ms=5000))
    elapsed = time.monotonic() - t0
    assert stats == WorkerStats(acked=2)
    assert 0.55 <= elapsed < 4                         # woken when the job came due, not by BLOCK's end


def test_a_burst_run_waits_for_jobs_in_flight_elsewhere(queue):
    """Another worker holds a job for 400 ms and never acks it: the burst
    run waits, takes the job over when the lease runs out, and ends."""
    queue.push("held elsewhere")
    [held] = queue.claim("other", lease_ms=400)
    t0 = time.monotonic()
    done = []
    stats = run_worker(Worker(queue, done.append, block_ms=5000))
    assert stats == WorkerStats(acked=1) and time.monotonic() - t0 >= 0.35
    assert (done[0].id, done[0].deliveries) == (held.id, 2)


def test_stop_from_another_thread(queue):
    """Outside the main thread no signal handler is installed; stop() ends
    run(), after the job in flight is acked."""
    queue.push("one")
    started, finish = threading.Event(), threading.Event()

    def handler(job):
        started.set()
        finish.wait(10)

    worker = Worker(queue, handler, concurrency=2, block_ms=100)
    result = []
    t = CheckedThread(target=lambda: result.append(worker.run()))
    t.start()
    assert started.wait(5)
    worker.stop()
    time.sleep(0.3)
    assert t.is_alive()                                # the handler still runs: the worker waits for it
    finish.set()
    t.join(5)
    assert t.failure is None and result == [WorkerStats(acked=1)]
    assert queue.info()["in_flight"] == 0


def test_a_lost_lease_is_not_acked(daemon, q, r, caplog, monkeypatch):
    """While the handler runs the job is taken away (nacked with its token,
    then claimed by a "thief"): the next beat finds the lease lost, and the
    worker neither acks nor nacks when the handler ends."""
    queue = Queue(daemon.url, q)
    queue.push("contested")
    settled = []
    monkeypatch.setattr(queue, "ack", lambda job: settled.append(("ack", job)))
    monkeypatch.setattr(queue, "nack", lambda job, **kw: settled.append(("nack", job)))
    running, finish = [], threading.Event()

    def handler(job):
        running.append(job)
        finish.wait(10)

    worker = Worker(queue, handler, lease_ms=300, block_ms=100)
    result = []
    t = CheckedThread(target=lambda: result.append(worker.run()))
    with caplog.at_level(logging.WARNING, logger="leaseq.client"):
        t.start()
        [job] = wait_for(lambda: running, 5, "the handler to start")
        r.execute_command("QNACK", q, job.lease, "DELAY", 0)
        thief = claim_one(r, q, "thief", "LEASE", 60_000)
        wait_for(lambda: "lease lost" in caplog.text, 5, "the heartbeat to find the lease lost")
        worker.stop()
        finish.set()
        t.join(5)
    assert t.failure is None and result == [WorkerStats(lost=1)]
    assert settled == []
    now = qget(r, q, job.id, str_keys=True)
    assert (now["state"], now["consumer"], thief[b"deliveries"]) == (b"in_flight", b"thief", 2)
    queue.close()


def test_a_worker_rides_out_a_daemon_restart(tmp_path, q):
    """A connection error while claiming is logged and retried: the worker
    goes on once the daemon is back on its port.

    The stop waits for the first job's ack to reach the daemon (QINFO's
    ``acked``), not for the handler's side effect: the handler returns
    before the Worker sends the ack, and a stop between the two would
    rightly cost that job (counted ``lost``). The daemon's SIGTERM answers
    what it received before it closes, so the Worker reads that reply."""
    d = Daemon(tmp_path / "data").start()
    try:
        queue = Queue(d.url, q)
        queue.push("before")
        done = []
        worker = Worker(queue, lambda job: done.append(job.payload), block_ms=200)
        t = CheckedThread(target=lambda: done.append(worker.run()))
        t.start()
        wait_for(lambda: queue.info()["acked"] == 1, 5, "the first job acked")
        d.stop()
        time.sleep(0.5)
        d.restart()
        queue.push("after")
        wait_for(lambda: b"after" in done, 15, "the job pushed after the restart")
        worker.stop()
        t.join(10)
        assert t.failure is None and done[-1] == WorkerStats(acked=2)
        queue.close()
    finally:
        d.kill()


@pytest.mark.parametrize("pushed, running", [(8, 4), (2, 2)], ids=["slots-full", "waiting-in-a-claim"])
def test_sigterm_drains_the_jobs_in_flight(daemon, q, r, pushed, running):
    """A worker process (4 slots, handlers of 1.5 s) gets SIGTERM while its
    handlers run, waiting either for a free slot or in a blocking claim: it
    claims nothing more, lets them finish, acks them and exits 0, leaving
    nothing in flight and the other jobs ready."""
    with Queue(daemon.url, q) as queue:
        queue.push_many([f"job-{i}" for i in range(pushed)])
    status, out, err = run_client_worker(daemon, "sync", q, 1.5, 4,
                                         in_flight=lambda: qinfo(r, q, str_keys=True)["in_flight"] == running)
    assert status == 0, err
    assert json.loads(out) == {"acked": running, "failed": 0, "lost": 0}
    info = qinfo(r, q, str_keys=True)
    assert (info["acked"], info["in_flight"], info["ready"], info["nacked"]) == (running, 0, pushed - running, 0)
    assert f"stopping after {running} jobs in flight" in err


# -- the README's example ------------------------------------------------------------------------

def readme_example() -> tuple[str, str]:
    """The code block of README's "A Python worker library" section and the
    block after its "prints:"."""
    section = README.read_text(encoding="utf-8").split("## A Python worker library: leaseq.client\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    printed = re.search(r"prints:\n\n```\n(.*?)```", section, re.S).group(1)
    return code, printed


def test_the_readme_worker_example_prints_what_the_readme_says(daemon, r):
    """The example runs as written (LEASEQ_URL points it at this module's
    daemon, where no other test uses the queue ``thumbnails``)."""
    code, printed = readme_example()
    result = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, LEASEQ_URL=daemon.url),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == printed
    info = qinfo(r, "thumbnails", str_keys=True)
    assert (info["acked"], info["nacked"], info["ready"], info["delayed"], info["in_flight"]) == (3, 1, 0, 0, 0)
