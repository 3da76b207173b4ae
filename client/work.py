"""What a worker decides, the same for threads (``worker.py``) and asyncio
(``aio.py``): its settings, how often to beat, what a failure's nack says,
when a burst run is done, what counts as a passing fault, which leases are
still held, how each job ends and what the log says about it.  Only the
waiting and the I/O differ between the two flavours.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import redis

from . import errors, protocol, tracing
from .protocol import Job

logger = logging.getLogger("leaseq.client")

# a nack's ERROR text is stored with the job and logged; a huge exception
# message (a whole response body) would bloat both
MAX_ERROR_CHARS = 4000
# how long a worker waits before claiming again after a fault that passes
RETRY_AFTER_S = 1.0


class Outcome(enum.Enum):
    """How one job ended for this worker."""

    ACKED = "acked"        # the handler returned and the ack landed
    FAILED = "failed"      # the handler raised and the nack landed
    LOST = "lost"          # the lease was lost, or the ack/nack did not land: the daemon decides


@dataclasses.dataclass(frozen=True)
class WorkerStats:
    """What a ``run()`` did: jobs acked, jobs nacked because the handler
    raised, and jobs whose lease was lost (another worker may have them)."""

    acked: int = 0
    failed: int = 0
    lost: int = 0

    @property
    def processed(self) -> int:
        """Jobs whose handler ran to its end, whatever became of them."""
        return self.acked + self.failed + self.lost

    @classmethod
    def of(cls, outcomes: Iterable[Outcome]) -> "WorkerStats":
        outcomes = list(outcomes)
        return cls(**{o.value: outcomes.count(o) for o in Outcome})


class WorkerBase:
    """The settings both workers take, and what they log about a run.  Each
    flavour says, in ``_new_stop_requests``, where its ``stop()`` leaves
    the request for ``run()`` to find."""

    def __init__(self, queue: Any, handler: Callable[[Job], Any], *, concurrency: int = 1,
                 lease_ms: int = 30_000, consumer: str | None = None, block_ms: int = 1_000,
                 heartbeat_ms: int | None = None, trace_parent: str = "link", tracer_provider: Any = None) -> None:
        check_settings(concurrency, lease_ms, block_ms)
        if heartbeat_ms is not None and heartbeat_ms < 10:
            raise ValueError(f"heartbeat_ms must be at least 10, not {heartbeat_ms}")
        self.heartbeat_ms = heartbeat_ms
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.block_ms = block_ms
        self.consumer = consumer or default_consumer()
        # each job's span, when OpenTelemetry is installed (client/tracing.py)
        self._spans = tracing.JobSpans(queue.name, self.consumer, getattr(queue, "client", None), failure_text,
                                       trace_parent=trace_parent, tracer_provider=tracer_provider)
        self._stop_requests = self._new_stop_requests()
        make_room(getattr(queue, "client", None), concurrency)

    def _new_stop_requests(self) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.consumer!r} on {self.queue.name!r}, {self.concurrency} at a time>"

    def _log_start(self) -> None:
        logger.info("worker %s: working on queue %s, %d at a time", self.consumer, self.queue.name,
                    self.concurrency)

    def _log_claim_failed(self, error: Exception) -> None:
        logger.warning("worker %s: cannot claim from %s (%s); retrying in %.0f s", self.consumer,
                       self.queue.name, error, RETRY_AFTER_S)

    def _log_drained(self) -> None:
        logger.info("worker %s: queue %s is drained", self.consumer, self.queue.name)

    def _log_stopping(self, in_flight: int) -> None:
        if in_flight:
            logger.info("worker %s: stopping after %d jobs in flight", self.consumer, in_flight)

    def _log_done(self, stats: "WorkerStats") -> "WorkerStats":
        logger.info("worker %s: done, %s", self.consumer, stats)
        return stats


# connections a worker may use at once beyond one per handler: the heartbeat's QEXTEND and its QGET
WORKER_CONNECTIONS = 2


def make_room(client: Any, concurrency: int) -> None:
    """Let ``client``'s connection pool open a connection for every
    handler's ack at once, and the heartbeat's: redis-py 8 caps a pool at
    100 connections unless told otherwise, and past the cap a command fails
    with "Too many connections" (acks would be tried again, and leases run
    out, at concurrency above about 100).  A larger cap the pool already
    has is kept."""
    pool = getattr(client, "connection_pool", None)
    need = concurrency + WORKER_CONNECTIONS
    if pool is not None and isinstance(getattr(pool, "max_connections", None), int) and pool.max_connections < need:
        logger.info("raising the connection pool's max_connections from %d to %d for %d handlers at once",
                    pool.max_connections, need, concurrency)
        pool.max_connections = need


def check_settings(concurrency: int, lease_ms: int, block_ms: int) -> None:
    """Refuse settings that cannot work, at construction rather than later.
    ``block_ms`` must end: the worker looks for a stop between claims."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    if lease_ms < 100:
        raise ValueError(f"lease_ms must be at least 100 (the daemon's shortest lease), not {lease_ms}")
    if block_ms < 1:
        raise ValueError(f"block_ms must be at least 1, not {block_ms}")


def heartbeat_seconds(lease_ms: int, heartbeat_ms: int | None = None) -> float:
    """Leases are extended every third of the lease, so a lease always has
    two thirds of its length left when the next beat comes, which leaves
    room for one beat to fail or come late; ``heartbeat_ms`` beats more
    often (a beat is also when a cancelled job is noticed), never less."""
    third = lease_ms / 3
    return (third if heartbeat_ms is None else min(third, heartbeat_ms)) / 1000


def default_consumer() -> str:
    """``host:pid``: QGET shows it as the job's ``consumer``, which is how
    an operator finds the process that holds a job."""
    return f"{socket.gethostname()}:{os.getpid()}"


def failure_text(error: BaseException) -> str:
    """The nack's ERROR text: ``"<ExcType>: message"``, as a traceback's last
    line reads."""
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 3] + "..."


def claim_block_ms(block_ms: int, burst: bool, idle: bool) -> int | None:
    """How long a claim may wait.  A burst run whose own jobs still run does
    not wait in a claim but for its jobs (they may nack, or be the last
    ones): otherwise the run would end up to ``block_ms`` after the queue
    drained.  A burst run with nothing of its own checks the drain first
    (``queue_is_drained``) and then waits in the claim, which the daemon
    answers as soon as a delayed job comes due or a lease runs out."""
    return None if burst and not idle else block_ms


def queue_is_drained(info: Mapping[str, Any]) -> bool:
    """A burst run is done when the queue has nothing ready, delayed or in
    flight.  Delayed jobs count because they will be ready; jobs in flight
    with other workers count because they may come back (a nack, a lease
    that runs out).  Dead jobs do not: nothing brings them back by itself."""
    return info["ready"] + info["delayed"] + info["in_flight"] == 0


# error codes a worker waits out: the disk refuses the log for now; the node is (now) a replica,
# as after a failover, until a connection finds the primary; too few replicas for writes
PASSING_CODES = frozenset({"MISCONF", "READONLY", "NOREPLICAS"})
# the first wait before an ack or nack is tried again, doubled up to the longest
SETTLE_RETRY_FIRST_S, SETTLE_RETRY_MOST_S = 0.05, 1.0


def is_passing(error: BaseException) -> bool:
    """A fault the worker waits out and retries: the connection (a restart
    of the daemon, a failover, LOADING) or one of ``PASSING_CODES``.  Failed
    authentication is a connection error to redis-py but does not pass."""
    if isinstance(error, redis.AuthenticationError):
        return False
    if isinstance(error, errors.LeaseqError):
        return error.code in PASSING_CODES
    return isinstance(error, (redis.ConnectionError, redis.TimeoutError))


def settle_retry_waits(lease_ms: int) -> list[float]:
    """The waits between tries of an ack or nack that meets passing faults:
    doubling from 50 ms to 1 s, adding up to at most a lease.  The lease
    token stays good that long (on the daemon after a restart, on a
    promoted replica after a failover: docs/replication.md), and past it
    the daemon answers that the lease was lost, which is the truth; so a
    worker keeps track of the jobs it finished across a failover rather
    than letting their leases run out and the jobs run again."""
    waits, total, wait = [], 0.0, SETTLE_RETRY_FIRST_S
    while total + wait <= lease_ms / 1000:
        waits.append(wait)
        total += wait
        wait = min(wait * 2, SETTLE_RETRY_MOST_S)
    return waits


def settle_retrying(job: Job, failure: Exception | None, error: Exception, waits: list[float]) -> float:
    """Log a passing fault met by an ack or nack; the wait before the next
    try (taken from ``waits``)."""
    wait = waits.pop(0)
    logger.info("job %s of %s: cannot %s it yet (%s); trying again in %.2f s", job.id, job.queue,
                _verb(failure), error, wait)
    return wait


# -- how a job ends (and what the log says about it) ----------------------------------------------

def handler_failed(job: Job, error: Exception) -> Exception:
    logger.warning("job %s of %s failed: %s", job.id, job.queue, failure_text(error), exc_info=error)
    return error


def lost_while_running(job: Job) -> Outcome:
    """The heartbeat found the lease lost: the job belongs to whoever
    claimed it next, so this worker neither acks nor nacks it."""
    logger.warning("job %s of %s: lease lost while the handler ran; not acked", job.id, job.queue)
    return Outcome.LOST


def settled(job: Job, failure: Exception | None, landed: bool) -> Outcome:
    """The outcome of the ack (``failure`` None) or nack: ``landed`` False
    means the token was stale, the lease lost before it."""
    if not landed:
        logger.warning("job %s of %s: the lease was lost before the %s", job.id, job.queue, _verb(failure))
        return Outcome.LOST
    return Outcome.ACKED if failure is None else Outcome.FAILED


def settle_failed(job: Job, failure: Exception | None, error: Exception) -> Outcome:
    """The ack or nack did not reach the daemon: its lease will run out and
    the job will be claimed again."""
    logger.warning("job %s of %s: could not %s it (%s); its lease will run out", job.id, job.queue,
                   _verb(failure), error)
    return Outcome.LOST


def _verb(failure: Exception | None) -> str:
    return "ack" if failure is None else "nack"


def extend_failed(queue: str, jobs: list[Job], error: Exception) -> None:
    logger.warning("cannot extend %d leases on %s (%s); trying again next beat", len(jobs), queue, error)


def leases_lost(jobs: list[Job], cancelled: list[Job]) -> None:
    for job in jobs:
        if job in cancelled:
            logger.warning("job %s of %s: cancelled (QCANCEL); job.cancelled is set", job.id, job.queue)
        else:
            logger.warning("job %s of %s: lease lost (another worker may have it); the handler goes on, "
                           "but the job will not be acked", job.id, job.queue)


def cancelled_by_state(jobs: list[Job], states: list[Any]) -> list[Job]:
    """The lost ``jobs`` whose QGET (``states``: one reply each, None when
    it could not be asked) says ``cancelled``."""
    out = []
    for job, reply in zip(jobs, states):
        if reply is not None and protocol.as_map(reply).get("state") == b"cancelled":
            out.append(job)
    return out


class HeldLeases:
    """The jobs a worker holds, which its heartbeat extends.

    A job is held from its claim until its handler ends.  The heartbeat
    extends ``held()`` and hands the answers to ``extended``; a nil deadline
    means the token is stale, the lease lost.  The heartbeat then asks the
    job's state: a job in state ``cancelled`` (QCANCEL) is ``cancel``-ed
    here, its ``cancelled`` event set and its ``on_cancel`` called (the
    asyncio flavour cancels the handler's task); a lease lost otherwise (run
    out and claimed by another, deleted) leaves the handler running.
    ``release`` ends the hold and answers whether the lease was still the
    worker's, so the handler's wrapper knows whether to ack.  Thread-safe
    (the heartbeat runs in a thread of its own in the thread flavour).
    """

    def __init__(self) -> None:
        self._held: dict[str, Job] = {}
        self._lost: set[str] = set()
        self._on_cancel: dict[str, Callable[[], Any]] = {}
        self._lock = threading.Lock()

    def hold(self, job: Job) -> None:
        with self._lock:
            self._held[job.lease] = job

    def on_cancel(self, job: Job, callback: Callable[[], Any]) -> None:
        """Call ``callback`` if ``job`` is found cancelled while held."""
        with self._lock:
            self._on_cancel[job.lease] = callback

    def held(self) -> list[Job]:
        with self._lock:
            return [job for token, job in self._held.items() if token not in self._lost]

    def extended(self, jobs: list[Job], deadlines: list[int | None]) -> list[Job]:
        """Record an extend's answers; return the jobs newly found lost.
        A job released meanwhile is not counted: its ack tells."""
        with self._lock:
            lost = [job for job, deadline in zip(jobs, deadlines) if deadline is None and job.lease in self._held]
            self._lost.update(job.lease for job in lost)
        return lost

    def cancel(self, job: Job) -> None:
        """``job`` was cancelled (QCANCEL): tell its handler."""
        with self._lock:
            callback = self._on_cancel.pop(job.lease, None)
        job.cancelled.set()
        if callback is not None:
            callback()

    def release(self, job: Job) -> bool:
        """Stop holding ``job``; True when its lease was not found lost."""
        with self._lock:
            del self._held[job.lease]
            self._on_cancel.pop(job.lease, None)
            if job.lease in self._lost:
                self._lost.discard(job.lease)
                return False
            return True
