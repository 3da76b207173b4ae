"""What leaseq.client's workers decide (client/work.py), the same for the
thread and asyncio flavours, with no daemon: the nack text, the end of a
burst run, which faults are waited out, the heartbeat's interval, and which
leases are still held."""

from __future__ import annotations

import pytest
import redis

from leaseq.client import errors, work
from leaseq.client.protocol import Job
from leaseq.client.work import HeldLeases, Outcome, WorkerStats


def job(n: int) -> Job:
    return Job(queue="q", id=n, payload=b"p", lease=f"{n}.1.{n}", deadline=0, deliveries=1, priority=5,
               enqueued_at=0)


def test_failure_text_reads_like_a_tracebacks_last_line():
    assert work.failure_text(ValueError("no thumbnail for 'x.png'")) == "ValueError: no thumbnail for 'x.png'"
    assert work.failure_text(KeyError("k")) == "KeyError: 'k'"
    assert work.failure_text(TimeoutError()) == "TimeoutError"
    long = work.failure_text(RuntimeError("x" * 10_000))
    assert len(long) == work.MAX_ERROR_CHARS and long.startswith("RuntimeError: xxx") and long.endswith("...")


@pytest.mark.parametrize("counts, drained", [
    ({"ready": 0, "delayed": 0, "in_flight": 0, "dead": 3}, True),     # dead jobs do not come back by themselves
    ({"ready": 1, "delayed": 0, "in_flight": 0, "dead": 0}, False),
    ({"ready": 0, "delayed": 1, "in_flight": 0, "dead": 0}, False),    # it will be ready
    ({"ready": 0, "delayed": 0, "in_flight": 1, "dead": 0}, False),    # another worker may nack it
])
def test_a_burst_run_ends_when_nothing_is_ready_delayed_or_in_flight(counts, drained):
    assert work.queue_is_drained(counts) is drained


@pytest.mark.parametrize("error, passing", [
    (redis.ConnectionError("refused"), True),
    (redis.TimeoutError("timed out"), True),
    (redis.BusyLoadingError("loading"), True),
    (errors.LeaseqError("leaseq cannot write its log", "MISCONF"), True),
    (errors.LeaseqError("You can't write against a read only replica.", "READONLY"), True),
    (errors.LeaseqError("Not enough good replicas to write.", "NOREPLICAS"), True),
    (redis.AuthenticationError("invalid password"), False),
    (errors.NoQueue("no such queue 'q'"), False),
    (errors.LeaseqError("syntax error"), False),
    (ValueError("a bug"), False),
])
def test_which_faults_a_worker_waits_out(error, passing):
    assert work.is_passing(error) is passing


def test_an_ack_meeting_passing_faults_is_tried_again_for_at_most_a_lease():
    waits = work.settle_retry_waits(30_000)
    assert waits[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0] and set(waits[5:]) == {1.0}
    assert sum(waits) <= 30 and sum(waits) + 1.0 > 30
    assert work.settle_retry_waits(100) == [0.05]         # the shortest lease: one more try


def test_the_heartbeat_beats_three_times_a_lease():
    assert work.heartbeat_seconds(300) == pytest.approx(0.1)
    assert work.heartbeat_seconds(30_000) == pytest.approx(10)


@pytest.mark.parametrize("settings, message", [
    ((0, 30_000, 1000), "concurrency"), ((1, 99, 1000), "lease_ms"), ((1, 30_000, 0), "block_ms")])
def test_settings_that_cannot_work_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        work.check_settings(*settings)


def test_stats_count_outcomes():
    stats = WorkerStats.of([Outcome.ACKED, Outcome.ACKED, Outcome.FAILED, Outcome.LOST])
    assert stats == WorkerStats(acked=2, failed=1, lost=1) and stats.processed == 4
    assert WorkerStats.of([]) == WorkerStats()


def test_held_leases_know_which_were_lost():
    leases = HeldLeases()
    a, b, c = job(1), job(2), job(3)
    for j in (a, b, c):
        leases.hold(j)
    assert leases.held() == [a, b, c]
    assert leases.extended([a, b, c], [100, None, 100]) == [b]
    assert leases.held() == [a, c]                     # a lost lease is not extended again
    assert leases.release(b) is False                  # lost: the wrapper must not ack it
    assert leases.release(a) is True
    assert leases.held() == [c]


def test_a_lease_released_before_the_extend_answered_is_not_lost():
    """The handler ended (and acked) while the QEXTEND was on its way: its
    nil is the ack's doing, not a loss."""
    leases = HeldLeases()
    a = job(1)
    leases.hold(a)
    sent = leases.held()
    assert leases.release(a) is True
    assert leases.extended(sent, [None]) == []


def test_a_worker_makes_its_pool_room_for_every_handlers_ack_at_once():
    import redis.asyncio

    from leaseq.client import Queue, Worker, aio
    queue = Queue("redis://127.0.0.1:1", "q")
    assert queue.client.connection_pool.max_connections == 100              # redis-py 8's default cap
    Worker(queue, lambda job: None, concurrency=150)
    assert queue.client.connection_pool.max_connections == 152
    Worker(queue, lambda job: None, concurrency=10)                         # a larger cap stays
    assert queue.client.connection_pool.max_connections == 152
    roomy = aio.Queue.from_client(redis.asyncio.Redis(max_connections=5000), "q")
    aio.Worker(roomy, lambda job: None, concurrency=1000)
    assert roomy.client.connection_pool.max_connections == 5000
    tight = aio.Queue.from_client(redis.asyncio.Redis(), "q")
    aio.Worker(tight, lambda job: None, concurrency=1000)
    assert tight.client.connection_pool.max_connections == 1002
