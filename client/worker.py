"""``Worker``: runs a handler on leaseq jobs in threads.

The main thread claims jobs (never more than the free handler slots) and
waits; a pool of ``concurrency`` threads runs the handler, each job's
thread acking or nacking it when the handler ends; one heartbeat thread
extends the leases of every job in flight with one QEXTEND per beat.

Everything that reaches the main thread while it waits arrives on one
``queue.SimpleQueue``: a finished job, or a stop.  ``SimpleQueue.put`` is
safe in a signal handler, which ``threading.Event.set`` is not (it takes a
lock the interrupted main thread may hold), so SIGTERM and SIGINT only put
a stop there.
"""

from __future__ import annotations

import contextlib
import queue as stdlib_queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import redis

from . import protocol, work
from .protocol import Job
from .queue import Queue
from .work import HeldLeases, Outcome, WorkerStats

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_STOP = "stop"


class Worker(work.WorkerBase):
    """Claims jobs from ``queue`` and runs ``handler(job)`` on up to
    ``concurrency`` of them at a time, each in a thread of its own.

    A handler that returns gets its job
    acked, with what it returned (unless None) as the job's result
    (``Queue.result``); one that raises gets it nacked with ``"<ExcType>:
    message"`` as the job's ``last_error`` (the queue's BACKOFF decides when
    it comes back).  Leases are claimed for ``lease_ms`` and extended every
    ``lease_ms / 3`` (or ``heartbeat_ms``, if shorter) while the handler
    runs; a beat that finds the job cancelled (QCANCEL) sets
    ``job.cancelled``, which a long handler should check.  ``block_ms`` is
    how long an idle claim waits, and so also the longest a stop waits for the claim in
    progress.  ``consumer`` names the worker in QGET (``host:pid`` by
    default).  With OpenTelemetry installed each job runs in a CONSUMER
    span linked to the producer's (``trace_parent="child"``: its child),
    from ``tracer_provider`` or the global one (client/tracing.py).
    """

    queue: Queue

    def _new_stop_requests(self) -> stdlib_queue.SimpleQueue:
        """Where stops, and the futures of finished jobs, wake ``run``."""
        return stdlib_queue.SimpleQueue()

    def stop(self) -> None:
        """Stop claiming; ``run`` returns once the jobs in flight are done.
        Safe from any thread and from a signal handler."""
        self._stop_requests.put(_STOP)

    def run(self, burst: bool = False, *, stop_signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> WorkerStats:
        """Work until stopped (``stop()``, or one of ``stop_signals`` when
        run in the main thread), or with ``burst`` until the queue has no
        ready, delayed or in-flight jobs left.  Either way the jobs in
        flight finish and are acked or nacked before it returns."""
        outcomes: list[Outcome] = []
        running: set[Future] = set()
        with _stopping_on(stop_signals, self.stop), _Heartbeat(self.queue, self.lease_ms, self.heartbeat_ms) as leases, \
                ThreadPoolExecutor(self.concurrency, thread_name_prefix="leaseq-handler") as pool:
            self._log_start()
            while not self._stop_requested(wait_s=None if len(running) >= self.concurrency else 0):
                running, done = _split_done(running)
                outcomes += [f.result() for f in done]
                if len(running) >= self.concurrency:
                    continue
                try:
                    jobs = self._claim_unless_finished(self.concurrency - len(running), burst, idle=not running)
                except Exception as e:
                    if not work.is_passing(e):
                        raise
                    self._log_claim_failed(e)
                    if self._stop_requested(wait_s=work.RETRY_AFTER_S):
                        break
                    continue
                if jobs is None:
                    self._log_drained()
                    break
                if not jobs and burst and running and self._stop_requested(wait_s=self.block_ms / 1000):
                    break
                running |= {self._start(pool, leases, job) for job in jobs}
            self._log_stopping(len(running))
            outcomes += [f.result() for f in wait(running).done]
        return self._log_done(WorkerStats.of(outcomes))

    def _stop_requested(self, wait_s: float | None) -> bool:
        """Take what arrived (waiting up to ``wait_s``; None: until something
        does); True if a stop did.  Finished jobs only wake the loop: it
        reads their futures."""
        requests = self._stop_requests
        try:
            events = [requests.get(timeout=wait_s) if wait_s != 0 else requests.get_nowait()]
        except stdlib_queue.Empty:
            return False
        while not requests.empty():
            events.append(requests.get_nowait())
        return _STOP in events

    def _claim_unless_finished(self, free: int, burst: bool, idle: bool) -> list[Job] | None:
        """Claim up to ``free`` jobs; None when a burst run is over."""
        if burst and idle and work.queue_is_drained(self.queue.info()):
            return None
        return self.queue.claim(self.consumer, count=free, lease_ms=self.lease_ms,
                                block_ms=work.claim_block_ms(self.block_ms, burst, idle))

    def _start(self, pool: ThreadPoolExecutor, leases: HeldLeases, job: Job) -> Future:
        leases.hold(job)
        future = pool.submit(self._process, leases, job)
        future.add_done_callback(self._stop_requests.put)
        return future

    def _process(self, leases: HeldLeases, job: Job) -> Outcome:
        """Run the handler on one job, then ack or nack it, unless its lease
        was lost meanwhile; an ack or nack that meets a passing fault (a
        restart, a failover) is tried again while the lease may last; all
        of it in the job's span (client/tracing.py)."""
        with self._spans.process(job) as span:
            failure, value = self._call_handler(job)
            return span.ended(self._settle(leases, job, failure, value), failure)

    def _settle(self, leases: HeldLeases, job: Job, failure: Exception | None, value: Any) -> Outcome:
        if not leases.release(job):
            return work.lost_while_running(job)
        waits = work.settle_retry_waits(self.lease_ms)
        while True:
            try:
                landed = (self.queue.ack(job, value) if failure is None
                          else self.queue.nack(job, error=work.failure_text(failure)))
            except redis.RedisError as e:
                if not waits or not work.is_passing(e):
                    return work.settle_failed(job, failure, e)
                time.sleep(work.settle_retrying(job, failure, e, waits))
                continue
            return work.settled(job, failure, landed)

    def _call_handler(self, job: Job) -> tuple[Exception | None, Any]:
        """(the exception the handler raised, or None; what it returned, as
        the ack's RESULT sends it: a value JSON cannot hold is a failure)."""
        try:
            value = self.handler(job)
            if value is not None:
                value = protocol.result_value(value)
        except Exception as e:
            return work.handler_failed(job, e), None
        return None, value


def _split_done(futures: set[Future]) -> tuple[set[Future], list[Future]]:
    """(still running, done)."""
    done = [f for f in futures if f.done()]
    return futures.difference(done), done


class _Heartbeat:
    """A thread that extends every held lease each ``lease_ms / 3``, all in
    one QEXTEND, from entering to leaving the ``with`` block."""

    def __init__(self, queue: Queue, lease_ms: int, heartbeat_ms: int | None) -> None:
        self.queue = queue
        self.lease_ms = lease_ms
        self.heartbeat_ms = heartbeat_ms
        self.leases = HeldLeases()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="leaseq-heartbeat", daemon=True)

    def __enter__(self) -> HeldLeases:
        self._thread.start()
        return self.leases

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stopped.wait(work.heartbeat_seconds(self.lease_ms, self.heartbeat_ms)):
            self._extend_held()

    def _extend_held(self) -> None:
        jobs = self.leases.held()
        if not jobs:
            return
        try:
            deadlines = self.queue.extend_many(jobs, self.lease_ms)
        except redis.RedisError as e:
            return work.extend_failed(self.queue.name, jobs, e)
        lost = self.leases.extended(jobs, deadlines)
        cancelled = work.cancelled_by_state(lost, [self._state(job) for job in lost])
        work.leases_lost(lost, cancelled)
        for job in cancelled:
            self.leases.cancel(job)

    def _state(self, job: Job):
        """QGET of a job whose lease was lost: cancelled, or lost otherwise?"""
        try:
            return self.queue._execute(["QGET", self.queue.name, job.id])
        except redis.RedisError:
            return None


@contextlib.contextmanager
def _stopping_on(signals: tuple[signal.Signals, ...], stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on the first of ``signals`` while the block runs (only
    in the main thread, the one Python delivers signals to).  The first
    signal also puts the previous handlers back, so a second Ctrl-C or
    SIGTERM acts as it would without the worker."""
    if not signals or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in signals}

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)

    def on_signal(signum: int, frame: Any) -> None:
        restore()
        stop()

    for s in signals:
        signal.signal(s, on_signal)
    try:
        yield
    finally:
        restore()
