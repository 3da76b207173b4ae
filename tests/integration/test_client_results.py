"""leaseq.client and issue 19's commands (docs/client.md): ``Queue.ack(...,
result=)``, ``Queue.result`` (with BLOCK), ``Queue.cancel``, a ``Worker``
that returns its handler's value as the result, and a cancel reaching a
running handler at its next heartbeat: ``job.cancelled`` in the thread
flavour, the handler's task cancelled in the asyncio flavour."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from harness import CheckedThread, as_map, unique, wait_for
from leaseq.client import JobDead, NoJob, Queue, Worker, aio

HEARTBEAT_MS = 100


@pytest.fixture
def queue(daemon):
    with Queue(daemon.url, unique("cr"), socket_timeout=10) as queue:
        yield queue


def test_ack_with_a_result_and_result_with_block(queue):
    jid = queue.push("p")
    assert queue.result(jid) is None
    job = queue.claim("w")[0]
    waiter = CheckedThread(target=lambda: setattr(waiter, "got", queue.result(jid, block_ms=10_000)))
    waiter.start()
    wait_for(lambda: queue.client.info("clients")["blocked_clients"] == 1, 5, "QRESULT blocked")
    assert queue.ack(job, result={"pages": 3, "ok": True}) is True
    waiter.join(10)
    assert waiter.got == b'{"pages":3,"ok":true}'
    assert queue.result(jid) == b'{"pages":3,"ok":true}'
    with pytest.raises(NoJob, match=f"job {jid + 100} of queue"):
        queue.result(jid + 100)
    assert queue.result(queue.push("q"), block_ms=20) is None          # timed out: still ready


def test_cancel_and_a_dead_job_raise_job_dead(queue):
    a, b = queue.push_many(["a", "b"])
    assert queue.cancel(a, b, 999) == 2
    assert queue.cancel(a) == 0
    with pytest.raises(JobDead) as e:
        queue.result(a)
    assert e.value.message == "cancelled"


def test_a_worker_returns_the_handler_value_as_the_result(queue):
    ids = queue.push_many(["1", "2", "none", "bytes"])
    answers = {b"1": 1, b"2": "two", b"none": None, b"bytes": b"\xff"}
    stats = Worker(queue, lambda job: answers[job.payload], block_ms=50).run(burst=True, stop_signals=())
    assert stats.acked == 4
    assert [queue.result(i) for i in ids[:2]] == [b"1", b"two"]
    with pytest.raises(NoJob, match="acked without a result|unknown"):
        queue.result(ids[2])
    assert queue.result(ids[3]) == b"\xff"


def test_a_handler_returning_what_json_cannot_hold_fails_the_job(queue):
    jid = queue.push("p")
    worker = Worker(queue, lambda job: object(), block_ms=50)
    runner = CheckedThread(target=lambda: setattr(runner, "stats", worker.run(stop_signals=())))
    runner.start()
    wait_for(lambda: queue.info()["nacked"] == 1, 10, "the job nacked")
    worker.stop()
    runner.join(10)
    assert runner.stats.failed >= 1
    shown = as_map(queue.client.execute_command("QGET", queue.name, jid))      # still there, with its error
    assert shown[b"last_error"].startswith(b"TypeError")


def test_a_cancel_reaches_a_running_handler_within_a_heartbeat(queue):
    seen = {}

    def handler(job):
        started.set()
        seen["cancelled"] = job.cancelled.wait(30)
        seen["at"] = time.monotonic()

    started = threading.Event()
    jid = queue.push("long")
    worker = Worker(queue, handler, lease_ms=30_000, heartbeat_ms=HEARTBEAT_MS, block_ms=50)
    runner = CheckedThread(target=lambda: setattr(runner, "stats", worker.run(stop_signals=())))
    runner.start()
    assert started.wait(10)
    cancelled_at = time.monotonic()
    assert queue.cancel(jid) == 1
    wait_for(lambda: "at" in seen, 30, "the handler saw the cancel")
    worker.stop()
    runner.join(10)
    assert seen["cancelled"] is True
    assert runner.stats.lost == 1 and runner.stats.acked == 0
    with pytest.raises(JobDead):
        queue.result(jid)
    print(f"cancel reached the handler after {(seen['at'] - cancelled_at) * 1000:.0f} ms "
          f"(heartbeat {HEARTBEAT_MS} ms)")


def test_aio_a_cancel_cancels_the_handler_task(daemon):
    name = unique("aiocr")

    async def main():
        async with aio.Queue(daemon.url, name, socket_timeout=10) as queue:
            jid = await queue.push("long")
            ran = asyncio.Event()
            seen = {}

            async def handler(job):
                ran.set()
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    seen["cancelled"] = job.cancelled.is_set()
                    raise

            worker = aio.Worker(queue, handler, heartbeat_ms=HEARTBEAT_MS, block_ms=50)
            run = asyncio.create_task(worker.run(stop_signals=()))
            await asyncio.wait_for(ran.wait(), 10)
            assert await queue.cancel(jid) == 1
            for _ in range(3000):
                if "cancelled" in seen:
                    break
                await asyncio.sleep(0.01)
            worker.stop()
            stats = await asyncio.wait_for(run, 10)
            assert seen == {"cancelled": True}
            assert (stats.lost, stats.acked) == (1, 0)
            done = await queue.push("short")
            worker = aio.Worker(queue, lambda job: {"id": job.id}, block_ms=50)
            await worker.run(burst=True, stop_signals=())
            assert await queue.result(done) == b'{"id":%d}' % done

    asyncio.run(main())


def test_a_lease_lost_otherwise_is_not_a_cancel(queue, caplog):
    """QDEL of a running job: the heartbeat finds the lease lost, asks QGET,
    finds no cancelled job, and leaves ``job.cancelled`` unset (the handler
    runs on; its ack is skipped)."""
    caplog.set_level("WARNING", logger="leaseq.client")
    held = {}

    def handler(job):
        held["job"] = job
        started.set()
        release.wait(30)

    started, release = threading.Event(), threading.Event()
    jid = queue.push("long")
    worker = Worker(queue, handler, heartbeat_ms=HEARTBEAT_MS, block_ms=50)
    runner = CheckedThread(target=lambda: setattr(runner, "stats", worker.run(stop_signals=())))
    runner.start()
    assert started.wait(10)
    assert queue.client.execute_command("QDEL", queue.name, jid) == 1
    wait_for(lambda: "lease lost (another worker may have it)" in caplog.text, 30, "the heartbeat noticed")
    assert not held["job"].cancelled.is_set()
    release.set()
    worker.stop()
    runner.join(10)
    assert runner.stats.lost == 1
