"""leaseq.client.aio (docs/client.md), the asyncio flavour, against the real
daemon: the essentials of test_client.py again, awaited.  ``Queue``'s
commands in RESP2 and RESP3 and its errors, blocking claims, and
``Worker`` with coroutine and plain handlers, nacks with the exception's
text, the heartbeat, burst runs, stop(), a lost lease and SIGTERM.

Each test runs its own event loop (``asyncio.run``) and bounds every wait
with ``asyncio.wait_for``.  The module shares one daemon; each test uses
queues of its own (``q``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

import pytest

from harness import Daemon, claim_one, qget, qinfo, unique, wait_blocked
from harness_client import Peak, run_client_worker, work_through_leases
from leaseq.client import WorkerStats, aio, errors

SHARED_DAEMON_ENV = {"LEASEQ_MAX_PAYLOAD": "1kb"}


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request) -> int:
    return request.param


def run(scenario, daemon, name: str, timeout: float = 20.0, **redis_kwargs):
    """Run ``scenario(queue)`` in a new event loop with an ``aio.Queue`` on
    ``name``, bounded by ``timeout``."""
    async def main():
        async with aio.Queue(daemon.url, name, **redis_kwargs) as queue:
            return await asyncio.wait_for(scenario(queue), timeout)
    return asyncio.run(main())


# -- Queue -------------------------------------------------------------------------------------

def test_queue_options_group_pauses_and_schedules(daemon, q):
    async def scenario(queue):
        await queue.create(concurrency=3, group_concurrency=1)
        assert (await queue.info())["group_concurrency"] == 1
        await queue.alter(concurrency="OFF")
        await queue.push_many(["a", "b"], group="acme")
        await queue.pause(group="acme")
        assert await queue.claim("w") == []
        await queue.resume(group="acme")
        assert [j.group for j in await queue.claim("w", count=5)] == [b"acme"]
        tick = await queue.schedules.add("nightly", "x", cron="0 2 * * *", tz="Europe/Paris")
        assert [(s["name"], s["next"]) for s in await queue.schedules.list()] == [("nightly", tick)]
        assert await queue.schedules.remove("nightly") is True
    run(scenario, daemon, q)


def test_pause_and_resume(daemon, q):
    async def scenario(queue):
        await queue.push("held back")
        await queue.pause()
        assert await queue.claim("w") == [] and (await queue.info())["paused"] == 1
        await queue.resume()
        assert [j.payload for j in await queue.claim("w")] == [b"held back"]
        async with aio.Queue(daemon.url, unique("missing")) as missing:
            with pytest.raises(errors.NoQueue):
                await missing.pause()
            with pytest.raises(errors.NoQueue):
                await missing.resume()
    run(scenario, daemon, q)


def test_push_claim_ack_extend_info(daemon, q, protocol, r):
    async def scenario(queue):
        assert await queue.push("photo-1.jpg") == 1
        assert await queue.push(b"\x00\xff", priority=9, key="k") == 2
        assert await queue.push_many(["a", "b"], keys=["ka", "kb"], delay_ms=60_000) == [3, 4]
        assert await queue.push_many([]) == []
        jobs = await queue.claim("w", count=5, lease_ms=10_000)
        assert [(j.id, j.payload, j.key, j.queue) for j in jobs] == [(2, b"\x00\xff", b"k", q),
                                                                     (1, b"photo-1.jpg", None, q)]
        assert await queue.extend(jobs[0], 60_000) >= jobs[0].deadline + 49_000
        assert await queue.extend_many([jobs[0], "99.1.1"], 60_000) == [pytest.approx(jobs[0].deadline + 50_000,
                                                                                      abs=1000), None]
        assert await queue.ack(jobs[0]) is True and await queue.ack(jobs[0]) is False
        assert await queue.nack(jobs[1], error="ValueError: smtp timeout", delay_ms=0) is True
        [again] = await queue.claim("w")
        assert (again.id, again.deliveries, again.last_error) == (1, 2, "ValueError: smtp timeout")
        assert await queue.nack(again, dead=True) is True
        info = await queue.info()
        assert (info["name"], info["ready"], info["delayed"], info["in_flight"], info["dead"]) == (q, 0, 2, 0, 1)
        assert info["backoff_exponent"] == 2.0
        assert await queue.ready_count() == 0
    run(scenario, daemon, q, protocol=protocol)
    assert qget(r, q, 1, str_keys=True)["state"] == b"dead"


def test_meta_on_push_push_many_and_schedules(daemon, q, protocol):
    async def scenario(queue):
        one = await queue.push("one", meta={"tenant": "acme"}, priority=9)
        many = await queue.push_many(["a", "b"], meta={"batch": b"7"})
        await queue.schedules.add("beat", "ping", every_ms=3_600_000, meta={"source": "cron"})
        jobs = await queue.claim("w", count=5)
        assert [(j.id, j.meta) for j in jobs] == [(one, {"tenant": "acme"}), (many[0], {"batch": "7"}),
                                                  (many[1], {"batch": "7"})]
        assert [s["meta"] for s in await queue.schedules.list()] == [{"source": "cron"}]
        with pytest.raises(errors.LeaseqError, match="META names field 'a' twice"):
            await queue.push("x", meta={"a": "1", b"a": "2"})
    run(scenario, daemon, q, protocol=protocol)


def test_error_replies_raise_leaseq_errors(daemon, q, protocol, r):
    r.execute_command("QCREATE", q, "MAXLEN", 1)

    async def scenario(queue):
        missing = aio.Queue.from_client(queue.client, unique("missing"))
        with pytest.raises(errors.NoQueue):
            await missing.ack("1.1.1")
        await queue.push("one")
        with pytest.raises(errors.Full):
            await queue.push("two")
        with pytest.raises(errors.TooBig):             # the module's daemon runs with max-payload 1kb
            await aio.Queue.from_client(queue.client, unique()).push(b"x" * 2000)
        with pytest.raises(errors.LeaseqError) as e:
            await queue.nack("1.1.1", delay_ms=5, dead=True)
        assert (e.value.code, e.value.message) == ("ERR", "DELAY and DEAD cannot be combined")
        with pytest.raises(TypeError, match="encode it first"):
            await queue.push(["not", "bytes"])
    run(scenario, daemon, q, protocol=protocol)


def test_a_decoding_client_is_refused(daemon, q):
    with pytest.raises(ValueError, match="decode_responses"):
        aio.Queue(daemon.url, q, decode_responses=True)


def test_a_blocking_claim_outlasts_a_short_socket_timeout(daemon, q, protocol, r):
    async def scenario(queue):
        t0 = time.monotonic()
        assert await queue.claim("w", block_ms=1200) == []
        assert time.monotonic() - t0 >= 1.15
        claim = asyncio.create_task(queue.claim("w", block_ms=5000))
        await asyncio.to_thread(wait_blocked, r, q, 1)
        assert (await queue.info())["consumers_blocked"] == 1     # the ordinary connection is free meanwhile
        await queue.push("arrives")
        assert [j.payload for j in await claim] == [b"arrives"]
    run(scenario, daemon, q, protocol=protocol, socket_timeout=0.3)


# -- Worker ------------------------------------------------------------------------------------

def test_a_worker_awaits_coroutine_handlers_four_at_a_time(daemon, q, protocol):
    peak, seen = Peak(), []

    async def handler(job):
        with peak:
            seen.append(job.payload)
            await asyncio.sleep(0.15)

    async def scenario(queue):
        await queue.push_many([f"photo-{i}.jpg" for i in range(12)])
        stats = await aio.Worker(queue, handler, concurrency=4, lease_ms=5000).run(burst=True)
        assert stats == WorkerStats(acked=12)
        info = await queue.info()
        assert (info["acked"], info["ready"], info["in_flight"]) == (12, 0, 0)
    run(scenario, daemon, q, protocol=protocol)
    assert peak.most == 4
    assert sorted(seen) == sorted(f"photo-{i}.jpg".encode() for i in range(12))


def test_plain_handlers_run_in_threads_of_the_workers_own(daemon, q):
    """A blocking handler runs off the loop, in up to ``concurrency`` threads."""
    peak, threads = Peak(), set()

    def handler(job):
        with peak:
            threads.add(threading.current_thread().name)
            time.sleep(0.15)

    async def scenario(queue):
        await queue.push_many([str(i) for i in range(9)])
        return await aio.Worker(queue, handler, concurrency=3, lease_ms=5000).run(burst=True)
    assert run(scenario, daemon, q) == WorkerStats(acked=9)
    assert peak.most == 3 and all(name.startswith("leaseq-handler") for name in threads)


def test_a_raising_handler_nacks_with_the_exception_text(daemon, q, r):
    r.execute_command("QCREATE", q, "MAXDELIVERIES", 1, "BACKOFF", 0, 1, 0)

    async def handler(job):
        if job.payload == b"corrupt.png":
            raise ValueError("no thumbnail for 'corrupt.png'")

    async def scenario(queue):
        await queue.push_many(["corrupt.png", "fine.png"])
        return await aio.Worker(queue, handler, concurrency=2, lease_ms=5000).run(burst=True)
    assert run(scenario, daemon, q) == WorkerStats(acked=1, failed=1)
    job = qget(r, q, 1, str_keys=True)
    assert (job["state"], job["last_error"]) == (b"dead", b"ValueError: no thumbnail for 'corrupt.png'")


def test_the_heartbeat_keeps_a_job_longer_than_three_leases(tmp_path):
    """A 300 ms lease kept through four leases of the daemon's time (its
    clock frozen and moved by the test, ``hold_through_leases``); the worker
    runs in a loop of its own in a thread, the test drives the clock."""
    d = Daemon(tmp_path / "data", env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}).start()
    try:
        r = d.client(protocol=2)
        assert r.execute_command("DEBUG", "CLOCK", "FREEZE") == b"OK"
        job_id = r.execute_command("QPUSH", "slow", "slow")
        started, finish = threading.Event(), threading.Event()

        async def handler(job):
            started.set()
            assert await asyncio.get_running_loop().run_in_executor(None, finish.wait, 30)

        async def scenario(queue):
            stats = await aio.Worker(queue, handler, lease_ms=300, block_ms=200).run(burst=True, stop_signals=())
            info = await queue.info()
            return stats, (info["acked"], info["lease_expired"])

        got = work_through_leases(r, "slow", job_id, 300, lambda: run(scenario, d, "slow", timeout=60), started, finish)
        assert got == (WorkerStats(acked=1), (1, 0))
    finally:
        d.kill()


def test_a_burst_run_waits_for_delayed_jobs(daemon, q):
    async def scenario(queue):
        await queue.push("now")
        await queue.push("later", delay_ms=600)
        t0 = time.monotonic()
        stats = await aio.Worker(queue, lambda job: None, block_ms=5000).run(burst=True)
        assert stats == WorkerStats(acked=2) and 0.55 <= time.monotonic() - t0 < 4
    run(scenario, daemon, q)


def test_stop_lets_the_job_in_flight_finish(daemon, q):
    async def scenario(queue):
        await queue.push("one")
        started, finish = asyncio.Event(), asyncio.Event()

        async def handler(job):
            started.set()
            await finish.wait()

        worker = aio.Worker(queue, handler, concurrency=2, block_ms=100)
        running = asyncio.create_task(worker.run())
        await started.wait()
        worker.stop()
        await asyncio.sleep(0.3)
        assert not running.done()                      # the handler still runs: the worker waits for it
        finish.set()
        assert await running == WorkerStats(acked=1)
        assert (await queue.info())["in_flight"] == 0
    run(scenario, daemon, q)


def test_a_lost_lease_is_not_acked(daemon, q, r, caplog):
    async def scenario(queue):
        await queue.push("contested")
        settled = []

        async def record(job, **kw):
            settled.append(job)
        queue.ack = queue.nack = record
        running, finish = asyncio.Queue(), asyncio.Event()

        async def handler(job):
            await running.put(job)
            await finish.wait()

        worker = aio.Worker(queue, handler, lease_ms=300, block_ms=100)
        task = asyncio.create_task(worker.run())
        job = await running.get()
        r.execute_command("QNACK", q, job.lease, "DELAY", 0)
        claim_one(r, q, "thief", "LEASE", 60_000)
        while "lease lost" not in caplog.text:         # bounded by run()'s wait_for
            await asyncio.sleep(0.02)
        worker.stop()
        finish.set()
        assert await task == WorkerStats(lost=1)
        assert settled == []
        return job

    with caplog.at_level(logging.WARNING, logger="leaseq.client"):
        job = run(scenario, daemon, q, timeout=10)
    now = qget(r, q, job.id, str_keys=True)
    assert (now["state"], now["consumer"]) == (b"in_flight", b"thief")


@pytest.mark.parametrize("pushed, running", [(8, 4), (2, 2)], ids=["slots-full", "waiting-in-a-claim"])
def test_sigterm_drains_the_jobs_in_flight(daemon, q, r, pushed, running):
    """As in test_client.py, with an asyncio worker in the main thread of its
    process: the loop's signal handler stops it, the handlers finish."""
    r.execute_command("QPUSHMANY", q, pushed, *[f"job-{i}" for i in range(pushed)])
    status, out, err = run_client_worker(daemon, "aio", q, 1.5, 4,
                                         in_flight=lambda: qinfo(r, q, str_keys=True)["in_flight"] == running)
    assert status == 0, err
    assert json.loads(out) == {"acked": running, "failed": 0, "lost": 0}
    info = qinfo(r, q, str_keys=True)
    assert (info["acked"], info["in_flight"], info["ready"]) == (running, 0, pushed - running)
    assert f"stopping after {running} jobs in flight" in err


def test_a_thousand_held_leases_cost_one_qextend_a_beat(daemon, q, r):
    """Every beat extends every held lease in one QEXTEND: the daemon counts
    one command a beat (its total_commands_processed), each naming the
    1,000 tokens.  ``extend_many`` is wrapped only to count the beats it
    sends; it still sends them.  (redis-py's pool holds 100 connections by
    default; the Worker makes it room for its 1,000 acks at once.)"""
    r.execute_command("QPUSHMANY", q, 1000, *[b"j"] * 1000)
    beats: list[int] = []

    def commands() -> int:
        return r.info("stats")["total_commands_processed"]

    async def scenario(queue):
        extend_many = queue.extend_many

        async def counted(jobs, lease_ms=None):
            jobs = list(jobs)
            beats.append(len(jobs))
            return await extend_many(jobs, lease_ms)

        queue.extend_many = counted
        release = asyncio.Event()
        started: list[int] = []

        async def handler(job):
            started.append(job.id)
            await release.wait()

        worker = aio.Worker(queue, handler, concurrency=1000, lease_ms=3000, heartbeat_ms=100, block_ms=100)
        run_task = asyncio.ensure_future(worker.run(stop_signals=()))
        while len(started) < 1000 or len(beats) < 2:
            await asyncio.sleep(0.01)
        before, sent = await asyncio.to_thread(commands), len(beats)
        while len(beats) < sent + 5:
            await asyncio.sleep(0.01)
        during, sent = await asyncio.to_thread(commands) - before, len(beats) - sent
        release.set()
        worker.stop()
        return during, sent, await run_task

    during, sent, stats = run(scenario, daemon, q)      # (the Worker makes its pool room for 1,000 acks at once)
    # the beats sent between the two INFOs (one may have been on its way at either end), and the second INFO
    assert sent - 1 <= during - 1 <= sent + 1, (during, sent)
    assert set(beats[1:]) == {1000}
    assert stats == WorkerStats(acked=1000)
