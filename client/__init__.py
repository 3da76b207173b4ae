"""leaseq.client: push, claim and work leaseq jobs from Python, on redis-py.

- ``Queue(url, name)``: push, claim, ack, nack, extend, QINFO (threads);
- ``Worker(queue, handler, concurrency=N)``: runs a handler on claimed
  jobs, extends their leases while it runs, acks or nacks, and stops
  gracefully on SIGTERM/SIGINT;
- ``leaseq.client.aio``: the same on ``redis.asyncio``;
- ``leaseq.client.errors``: the exceptions for the daemon's error replies;
- ``leaseq.client.tracing``: with ``opentelemetry-api`` installed, the
  producer's trace context in META and each job of a ``Worker`` in a span.

docs/client.md is the reference.
"""

from .errors import Closed, Full, JobDead, LeaseqError, NoJob, NoQueue, TooBig
from .protocol import Job
from .queue import Queue
from .work import WorkerStats
from .worker import Worker

__all__ = ["Queue", "Worker", "WorkerStats", "Job", "LeaseqError", "NoQueue", "Full", "TooBig", "Closed", "NoJob",
           "JobDead"]
