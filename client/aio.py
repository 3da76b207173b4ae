"""leaseq.client on asyncio: ``Queue`` and ``Worker`` with the names and
parameters of the thread flavour, on ``redis.asyncio``, with ``async``
methods.

Commands and replies come from ``protocol``, a worker's decisions from
``work``, exactly as in ``queue.py`` and ``worker.py``; only the waiting
differs.  A ``Worker`` awaits coroutine handlers on the loop and runs plain
functions in a thread pool of ``concurrency`` threads, so a blocking
handler cannot stall the loop (and with it the heartbeat).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import signal
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel

from . import connect, errors, protocol, work
from .protocol import Job, Payload
from .schedules import AsyncSchedules
from .work import HeldLeases, Outcome, WorkerStats

__all__ = ["Queue", "Worker", "WorkerStats", "Job"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Queue:
    """A leaseq queue on ``redis.asyncio``: ``Queue(url, name,
    **redis_kwargs)`` or ``Queue.from_client(client, name)`` with a
    ``redis.asyncio.Redis`` that does not decode responses, or
    ``Queue.from_sentinel(sentinel, service, name)`` with a
    ``redis.asyncio.sentinel.Sentinel``; ``url`` may be a ``sentinel://``
    URL, as for the thread flavour.  The methods are those of
    ``leaseq.client.Queue``, as coroutines; close it with ``await
    queue.aclose()`` or ``async with``."""

    def __init__(self, url: str, name: str, **redis_kwargs: Any) -> None:
        client = connect.client_for(url, redis.asyncio, **redis_kwargs)
        self._attach(client, name, owns_client=True)
        self._sentinel = getattr(client.connection_pool, "sentinel_manager", None)

    @classmethod
    def from_client(cls, client: redis.asyncio.Redis, name: str) -> "Queue":
        queue = cls.__new__(cls)
        queue._attach(client, name, owns_client=False)
        return queue

    @classmethod
    def from_sentinel(cls, sentinel: redis.asyncio.sentinel.Sentinel, service: str, name: str,
                      **redis_kwargs: Any) -> "Queue":
        queue = cls.__new__(cls)
        queue._attach(sentinel.master_for(service, **redis_kwargs), name, owns_client=True)
        return queue

    def _attach(self, client: redis.asyncio.Redis, name: str, owns_client: bool) -> None:
        protocol.check_raw_replies(client.connection_pool.connection_kwargs)
        self.client = client
        self.name = name
        self._owns_client = owns_client
        self.schedules = AsyncSchedules(self)  # QSCHEDULE, QUNSCHEDULE, QSCHEDULES (client/schedules.py)
        self._claimers: dict[float | None, redis.asyncio.Redis] = {}
        self._sentinel: redis.asyncio.sentinel.Sentinel | None = None

    def __repr__(self) -> str:
        return f"<aio.Queue {self.name!r} on {self.client!r}>"

    async def push(self, payload: Payload, **options: Any) -> int:
        return await self._execute(protocol.push_command(self.name, payload, **options))

    async def push_many(self, payloads: Iterable[Payload], **options: Any) -> list[int]:
        payloads = list(payloads)
        if not payloads:
            return []
        return await self._execute(protocol.push_many_command(self.name, payloads, **options))

    async def claim(self, consumer: str, count: int = 1, lease_ms: int | None = None,
                    block_ms: int | None = None) -> list[Job]:
        command = protocol.claim_command(self.name, consumer, count, lease_ms, block_ms, compact=True)
        client = self.client if block_ms is None else self._claimer(block_ms)
        return protocol.parse_jobs(self.name, await self._execute(command, client), compact=True)

    async def ack(self, job: Job | str, result: Any = None) -> bool:
        return await self._execute(protocol.ack_command(self.name, job, result)) == 1

    async def result(self, job_id: int, block_ms: int | None = None) -> bytes | None:
        """QRESULT (``leaseq.client.Queue.result``)."""
        client = self.client if block_ms is None else self._claimer(block_ms)
        return await self._execute(protocol.result_command(self.name, job_id, block_ms), client)

    async def cancel(self, *job_ids: int) -> int:
        """QCANCEL (``leaseq.client.Queue.cancel``)."""
        return await self._execute(["QCANCEL", self.name, *job_ids])

    async def nack(self, job: Job | str, error: str | None = None, delay_ms: int | None = None,
                   dead: bool = False) -> bool:
        return await self._execute(protocol.nack_command(self.name, job, error, delay_ms, dead)) == 1

    async def progress(self, job: Job | str, value: Payload) -> bool:
        """QPROGRESS (``leaseq.client.Queue.progress``)."""
        return await self._execute(["QPROGRESS", self.name, protocol.token_of(job), value]) == 1

    async def extend(self, job: Job | str, lease_ms: int | None = None) -> int | None:
        return (await self.extend_many([job], lease_ms))[0]

    async def extend_many(self, jobs: Iterable[Job | str], lease_ms: int | None = None) -> list[int | None]:
        return await self._execute(protocol.extend_command(self.name, jobs, lease_ms))

    async def create(self, **options: Any) -> None:
        """QCREATE (``leaseq.client.Queue.create``)."""
        await self._execute(protocol.queue_command("QCREATE", self.name, options))

    async def alter(self, **options: Any) -> None:
        """QALTER (``leaseq.client.Queue.alter``)."""
        await self._execute(protocol.queue_command("QALTER", self.name, options))

    async def pause(self, group: bytes | str | None = None) -> None:
        """QPAUSE (``leaseq.client.Queue.pause``)."""
        await self._execute(protocol.pause_command("QPAUSE", self.name, group))

    async def resume(self, group: bytes | str | None = None) -> None:
        """QRESUME (``leaseq.client.Queue.resume``)."""
        await self._execute(protocol.pause_command("QRESUME", self.name, group))

    async def info(self) -> dict[str, Any]:
        return protocol.parse_info(await self._execute(["QINFO", self.name]))

    async def ready_count(self) -> int:
        return await self._execute(["QLEN", self.name])

    async def aclose(self) -> None:
        """Close the claim connections, and the client when the queue made it."""
        claimers, self._claimers = list(self._claimers.values()), {}
        for claimer in claimers:
            await claimer.aclose()
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> "Queue":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _claimer(self, block_ms: int) -> redis.asyncio.Redis:
        """The client for claims that may wait ``block_ms`` (see
        ``leaseq.client.Queue._claimer``)."""
        settings = self.client.connection_pool.connection_kwargs
        timeout = protocol.claim_socket_timeout(block_ms, settings.get("socket_timeout"))
        if timeout not in self._claimers:
            self._claimers[timeout] = connect.with_socket_timeout(self.client, timeout)
        return self._claimers[timeout]

    async def _execute(self, command: list, client: redis.asyncio.Redis | None = None) -> Any:
        try:
            return await (client or self.client).execute_command(*command)
        except redis.ResponseError as e:
            raise errors.from_response_error(e) from e


class Worker(work.WorkerBase):
    """``leaseq.client.Worker`` on asyncio: the same parameters, ``await
    worker.run(burst=False)``.  ``handler`` is a coroutine function (awaited
    on the loop) or a plain function (run in a thread of the worker's own
    pool).  ``run`` stops on SIGTERM/SIGINT through the loop's
    ``add_signal_handler`` when the loop runs in the main thread; otherwise
    call ``stop()`` on the loop (``loop.call_soon_threadsafe(worker.stop)``
    from another thread)."""

    queue: Queue

    def _new_stop_requests(self) -> asyncio.Event:
        return asyncio.Event()

    def stop(self) -> None:
        """Stop claiming; ``run`` returns once the jobs in flight are done."""
        self._stop_requests.set()

    async def run(self, burst: bool = False, *, stop_signals: tuple[signal.Signals, ...] = STOP_SIGNALS
                  ) -> WorkerStats:
        """Work until stopped, or with ``burst`` until the queue has no
        ready, delayed or in-flight jobs left; the jobs in flight finish and
        are acked or nacked first.  If the task running it is cancelled, the
        handlers are cancelled too and their leases run out."""
        try:
            with _stopping_on(stop_signals, self.stop), _handler_caller(self.handler, self.concurrency) as call:
                async with _Heartbeat(self.queue, self.lease_ms, self.heartbeat_ms) as leases:
                    self._log_start()
                    outcomes = await self._work(burst, self._stop_requests, leases, call)
                    return self._log_done(WorkerStats.of(outcomes))
        finally:
            # a stop ends this run, not the next; and an Event that waited is
            # bound to this loop, while the next run may be on another
            self._stop_requests = self._new_stop_requests()

    async def _work(self, burst: bool, stopping: asyncio.Event, leases: HeldLeases,
                    call: Callable[[Job], Awaitable]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        running: set[asyncio.Task] = set()
        stop_waiter = asyncio.ensure_future(stopping.wait())
        try:
            while not stopping.is_set():
                if len(running) >= self.concurrency:
                    await asyncio.wait(running | {stop_waiter}, return_when=asyncio.FIRST_COMPLETED)
                running, done = _split_done(running)
                outcomes += [t.result() for t in done]
                if stopping.is_set() or len(running) >= self.concurrency:
                    continue
                try:
                    jobs = await self._claim_unless_finished(self.concurrency - len(running), burst,
                                                             idle=not running)
                except Exception as e:
                    if not work.is_passing(e):
                        raise
                    self._log_claim_failed(e)
                    await asyncio.wait({stop_waiter}, timeout=work.RETRY_AFTER_S)
                    continue
                if jobs is None:
                    self._log_drained()
                    break
                if not jobs and burst and running:
                    await asyncio.wait(running | {stop_waiter}, timeout=self.block_ms / 1000,
                                       return_when=asyncio.FIRST_COMPLETED)
                running |= {self._start(leases, call, job) for job in jobs}
            self._log_stopping(len(running))
            return outcomes + list(await asyncio.gather(*running))
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            raise
        except Exception:
            await asyncio.gather(*running, return_exceptions=True)      # as the thread pool would
            raise
        finally:
            stop_waiter.cancel()

    async def _claim_unless_finished(self, free: int, burst: bool, idle: bool) -> list[Job] | None:
        """Claim up to ``free`` jobs; None when a burst run is over."""
        if burst and idle and work.queue_is_drained(await self.queue.info()):
            return None
        return await self.queue.claim(self.consumer, count=free, lease_ms=self.lease_ms,
                                      block_ms=work.claim_block_ms(self.block_ms, burst, idle))

    def _start(self, leases: HeldLeases, call: Callable[[Job], Awaitable], job: Job) -> asyncio.Task:
        leases.hold(job)
        return asyncio.create_task(self._process(leases, call, job))

    async def _process(self, leases: HeldLeases, call: Callable[[Job], Awaitable], job: Job) -> Outcome:
        with self._spans.process(job) as span:       # the handler's task inherits it as current
            failure, value = await _call_handler(call, job, leases)
            return span.ended(await self._settle(leases, job, failure, value), failure)

    async def _settle(self, leases: HeldLeases, job: Job, failure: Exception | None, value: Any) -> Outcome:
        if not leases.release(job):
            return work.lost_while_running(job)
        waits = work.settle_retry_waits(self.lease_ms)
        while True:
            try:
                landed = (await self.queue.ack(job, value) if failure is None
                          else await self.queue.nack(job, error=work.failure_text(failure)))
            except redis.RedisError as e:
                if not waits or not work.is_passing(e):
                    return work.settle_failed(job, failure, e)
                await asyncio.sleep(work.settle_retrying(job, failure, e, waits))
                continue
            return work.settled(job, failure, landed)


async def _call_handler(call: Callable[[Job], Awaitable], job: Job,
                        leases: HeldLeases) -> tuple[Exception | None, Any]:
    """(the exception the handler raised, or None; what it returned).  The
    handler runs as a task of its own, which a heartbeat that finds the
    job cancelled cancels (a plain function in a thread cannot be stopped:
    it sees ``job.cancelled``); a handler cancelled that way counts as lost."""
    handler = asyncio.ensure_future(call(job))
    leases.on_cancel(job, handler.cancel)
    try:
        await asyncio.wait({handler})
    except asyncio.CancelledError:          # the run itself is cancelled
        handler.cancel()
        raise
    if handler.cancelled():
        return None, None
    error = handler.exception()
    if error is None:
        value = handler.result()
        try:
            return None, None if value is None else protocol.result_value(value)   # as the ack sends it
        except (TypeError, ValueError) as e:                                      # not JSON-able
            error = e
    if not isinstance(error, Exception):
        raise error
    return work.handler_failed(job, error), None


def _split_done(tasks: set[asyncio.Task]) -> tuple[set[asyncio.Task], list[asyncio.Task]]:
    done = [t for t in tasks if t.done()]
    return tasks.difference(done), done


def _is_coroutine_function(handler: Callable) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))


@contextlib.contextmanager
def _handler_caller(handler: Callable[[Job], Any], concurrency: int) -> Iterator[Callable[[Job], Awaitable]]:
    """How to call the handler: a coroutine function as it is; a plain
    function in a pool of ``concurrency`` threads of the worker's own (the
    loop's default executor may have fewer)."""
    if _is_coroutine_function(handler):
        yield handler
        return
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(concurrency, thread_name_prefix="leaseq-handler")
    try:
        # in a copy of the caller's context, as asyncio.to_thread does: the job's span stays current
        yield lambda job: loop.run_in_executor(pool, contextvars.copy_context().run, handler, job)
    finally:
        pool.shutdown(wait=False)      # every handler has ended, unless the run was cancelled


class _Heartbeat:
    """A task that extends every held lease each ``lease_ms / 3``, all in one
    QEXTEND, from entering to leaving the ``async with`` block."""

    def __init__(self, queue: Queue, lease_ms: int, heartbeat_ms: int | None) -> None:
        self.queue = queue
        self.lease_ms = lease_ms
        self.heartbeat_ms = heartbeat_ms
        self.leases = HeldLeases()

    async def __aenter__(self) -> HeldLeases:
        self._task = asyncio.create_task(self._beat())
        return self.leases

    async def __aexit__(self, *exc: object) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(work.heartbeat_seconds(self.lease_ms, self.heartbeat_ms))
            await self._extend_held()

    async def _extend_held(self) -> None:
        jobs = self.leases.held()
        if not jobs:
            return
        try:
            deadlines = await self.queue.extend_many(jobs, self.lease_ms)
        except redis.RedisError as e:
            return work.extend_failed(self.queue.name, jobs, e)
        lost = self.leases.extended(jobs, deadlines)
        cancelled = work.cancelled_by_state(lost, [await self._state(job) for job in lost])
        work.leases_lost(lost, cancelled)
        for job in cancelled:
            self.leases.cancel(job)

    async def _state(self, job: Job):
        """QGET of a job whose lease was lost (``leaseq.client.worker``)."""
        try:
            return await self.queue._execute(["QGET", self.queue.name, job.id])
        except redis.RedisError:
            return None


@contextlib.contextmanager
def _stopping_on(signals: tuple[signal.Signals, ...], stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on the first of ``signals`` (the loop's
    ``add_signal_handler``, which only works in the main thread).  The first
    signal removes the handlers, so a second one acts as it would without
    the worker."""
    if not signals or threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()

    def remove() -> None:
        for s in signals:
            loop.remove_signal_handler(s)

    def on_signal() -> None:
        remove()
        stop()

    for s in signals:
        loop.add_signal_handler(s, on_signal)
    try:
        yield
    finally:
        remove()
