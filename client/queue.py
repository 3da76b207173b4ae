"""``Queue``: one leaseq queue over redis-py, for threads.

Ordinary commands (pushes, acks, nacks, extends, QINFO) go through one
``redis.Redis``; blocking claims go through clients of their own whose
socket timeout outlasts the wait (``protocol.claim_socket_timeout``), so a
blocked QCLAIM neither holds back the other commands nor gets cut and sent
again by redis-py.  The clients share redis-py's thread-safe connection
pools, so one ``Queue`` can serve many threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import redis
import redis.sentinel

from . import connect, errors, protocol
from .protocol import Job, Payload
from .schedules import Schedules


class Queue:
    """A leaseq queue.

    ``Queue(url, name, **redis_kwargs)`` connects with
    ``redis.Redis.from_url(url, **redis_kwargs)`` (``protocol=2`` or ``3``,
    ``socket_timeout``, ``password``, ...), or, for a
    ``sentinel://host:26379,.../service`` URL, to the primary Redis
    Sentinel names for the service (``client/connect.py``), found again
    after a failover.  ``Queue.from_client(client, name)`` uses a
    ``redis.Redis`` you already have instead (it must not decode
    responses); ``Queue.from_sentinel(sentinel, service, name)`` the
    primary of a ``redis.sentinel.Sentinel`` you made.  Error replies raise
    ``leaseq.client.errors`` exceptions.
    """

    def __init__(self, url: str, name: str, **redis_kwargs: Any) -> None:
        client = connect.client_for(url, redis, **redis_kwargs)
        self._attach(client, name, owns_client=True)
        # a sentinel:// URL's Sentinel is the queue's too: closed with it
        self._sentinel = getattr(client.connection_pool, "sentinel_manager", None)

    @classmethod
    def from_client(cls, client: redis.Redis, name: str) -> "Queue":
        """A queue over an existing client (its pool and settings; closing
        the queue leaves the client open)."""
        queue = cls.__new__(cls)
        queue._attach(client, name, owns_client=False)
        return queue

    @classmethod
    def from_sentinel(cls, sentinel: redis.sentinel.Sentinel, service: str, name: str,
                      **redis_kwargs: Any) -> "Queue":
        """A queue on the primary ``sentinel`` names for ``service``
        (``sentinel.master_for(service, **redis_kwargs)``); closing the
        queue leaves ``sentinel`` open."""
        queue = cls.__new__(cls)
        queue._attach(sentinel.master_for(service, **redis_kwargs), name, owns_client=True)
        return queue

    def _attach(self, client: redis.Redis, name: str, owns_client: bool) -> None:
        protocol.check_raw_replies(client.connection_pool.connection_kwargs)
        self.client = client
        self.name = name
        self._owns_client = owns_client
        self.schedules = Schedules(self)  # QSCHEDULE, QUNSCHEDULE, QSCHEDULES (client/schedules.py)
        self._claimers: dict[float | None, redis.Redis] = {}
        self._claimers_lock = threading.Lock()
        self._sentinel: redis.sentinel.Sentinel | None = None

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} on {self.client!r}>"

    # -- producing ---------------------------------------------------------------------------

    def push(self, payload: Payload, **options: Any) -> int:
        """Push one job and return its id (with ``key``, the id of the job
        already holding the key, if one does).  Options: ``priority``,
        ``delay_ms`` or ``at_ms``, ``key``, ``key_scope`` and ``replace``,
        ``max_deliveries``, ``expire_ms``, ``group``, ``after`` (parents:
        ``Job``s or ``(queue, id)`` pairs), ``on_fail`` and ``meta`` (a
        dict of labels the job carries: ``Job.meta``) (docs/client.md)."""
        return self._execute(protocol.push_command(self.name, payload, **options))

    def push_many(self, payloads: Iterable[Payload], **options: Any) -> list[int]:
        """Push several jobs at once, all or none, and return their ids in
        order.  ``keys`` gives one dedupe key per payload and ``groups`` one
        group per payload; the other options are ``push``'s and apply to
        every job."""
        payloads = list(payloads)
        if not payloads:
            return []
        return self._execute(protocol.push_many_command(self.name, payloads, **options))

    # -- consuming ---------------------------------------------------------------------------

    def claim(self, consumer: str, count: int = 1, lease_ms: int | None = None,
              block_ms: int | None = None) -> list[Job]:
        """Lease up to ``count`` jobs to ``consumer`` for ``lease_ms`` (the
        queue's LEASE by default).  With ``block_ms``, wait that long for a
        job when none is ready (``0``: for ever).  An empty list means none
        came."""
        command = protocol.claim_command(self.name, consumer, count, lease_ms, block_ms, compact=True)
        client = self.client if block_ms is None else self._claimer(block_ms)
        return protocol.parse_jobs(self.name, self._execute(command, client), compact=True)

    def ack(self, job: Job | str, result: Any = None) -> bool:
        """Complete a job (a ``Job`` or its lease token), with ``result``
        (bytes, str, or anything JSON-able) kept for the queue's RESULT-TTL.
        False: the token is stale (the lease was lost, or the job was acked
        already)."""
        return self._execute(protocol.ack_command(self.name, job, result)) == 1

    def nack(self, job: Job | str, error: str | None = None, delay_ms: int | None = None,
             dead: bool = False) -> bool:
        """Release a job: ready again after ``delay_ms`` (without it, after
        the queue's BACKOFF), with ``error`` kept as its ``last_error``; or,
        with ``dead``, dead-lettered now.  False: the token is stale."""
        return self._execute(protocol.nack_command(self.name, job, error, delay_ms, dead)) == 1

    def progress(self, job: Job | str, value: Payload) -> bool:
        """QPROGRESS: the job's latest progress (bytes or str, up to 64 KiB),
        shown by QGET; it does not extend the lease.  False: the token is stale."""
        return self._execute(["QPROGRESS", self.name, protocol.token_of(job), value]) == 1

    def extend(self, job: Job | str, lease_ms: int | None = None) -> int | None:
        """Set the lease's deadline to now + ``lease_ms`` (the queue's LEASE
        by default) and return it; None when the lease was lost."""
        return self.extend_many([job], lease_ms)[0]

    def extend_many(self, jobs: Iterable[Job | str], lease_ms: int | None = None) -> list[int | None]:
        """``extend`` for several leases in one command: a deadline or None
        per job, in order."""
        return self._execute(protocol.extend_command(self.name, jobs, lease_ms))

    def result(self, job_id: int, block_ms: int | None = None) -> bytes | None:
        """QRESULT: the job's result (bytes), or None while it has not ended;
        ``block_ms`` waits for its end (0: for ever).  ``JobDead`` (its
        ``message`` the reason) if it died or was cancelled; ``NoJob`` if the
        queue does not know it, its result expired, or it was acked without one."""
        client = self.client if block_ms is None else self._claimer(block_ms)
        return self._execute(protocol.result_command(self.name, job_id, block_ms), client)

    def cancel(self, *job_ids: int) -> int:
        """QCANCEL: end these jobs now (ready, delayed, waiting or in
        flight); returns how many were.  A worker holding one finds its lease
        lost at its next heartbeat and sets ``job.cancelled``."""
        return self._execute(["QCANCEL", self.name, *job_ids])

    # -- the queue's options and flow control ---------------------------------------------

    def create(self, **options: Any) -> None:
        """QCREATE with keyword options (``lease_ms``, ``max_deliveries``,
        ``dead_letter``, ``rate=(n, ms)``, ``concurrency``,
        ``group_concurrency``, ``group_rate=(n, ms)``, ... docs/client.md).
        Idempotent for the same options; ``LeaseqError`` (EXISTS) otherwise."""
        self._execute(protocol.queue_command("QCREATE", self.name, options))

    def alter(self, **options: Any) -> None:
        """QALTER: change the options named (``0`` or ``"OFF"`` removes a limit)."""
        self._execute(protocol.queue_command("QALTER", self.name, options))

    def pause(self, group: bytes | str | None = None) -> None:
        """QPAUSE: claims and work streams get nothing from the queue (or,
        with ``group``, from that group) until ``resume()``; pushes, acks,
        nacks and extends go on.  The pause lasts across daemon restarts.
        ``NoQueue`` if the queue does not exist."""
        self._execute(protocol.pause_command("QPAUSE", self.name, group))

    def resume(self, group: bytes | str | None = None) -> None:
        """QRESUME: hand out jobs again (of ``group``, or the queue's own
        pause); blocked claimers are served at once."""
        self._execute(protocol.pause_command("QRESUME", self.name, group))

    # -- looking ----------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """QINFO: the queue's configuration and counters (``ready``,
        ``delayed``, ``in_flight``, ``acked``, ...) by name."""
        return protocol.parse_info(self._execute(["QINFO", self.name]))

    def ready_count(self) -> int:
        """QLEN: how many jobs can be claimed now."""
        return self._execute(["QLEN", self.name])

    # -- connections -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the claim connections, and the client when the queue made it."""
        with self._claimers_lock:
            claimers, self._claimers = list(self._claimers.values()), {}
        for claimer in claimers:
            claimer.close()
        if self._owns_client:
            self.client.close()
        if self._sentinel is not None:
            self._sentinel.close()

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _claimer(self, block_ms: int) -> redis.Redis:
        """The client for claims that may wait ``block_ms``: the queue's
        connection settings, with a socket timeout that outlasts the wait."""
        settings = self.client.connection_pool.connection_kwargs
        timeout = protocol.claim_socket_timeout(block_ms, settings.get("socket_timeout"))
        with self._claimers_lock:
            if timeout not in self._claimers:
                self._claimers[timeout] = connect.with_socket_timeout(self.client, timeout)
            return self._claimers[timeout]

    def _execute(self, command: list, client: redis.Redis | None = None) -> Any:
        try:
            return (client or self.client).execute_command(*command)
        except redis.ResponseError as e:
            raise errors.from_response_error(e) from e
