"""Leases: how ready jobs of a queue go in flight under new tokens, and how
a lease's deadline moves (``Store.claim`` and ``Store.extend`` call these).

Apart from ``Queue`` so that the queue keeps the transitions of a job's
whole life while the three ways of handing out a lease live together:

* ``lease_front``: the jobs are exactly the head of ``ready`` (a queue
  without groups): the ready entries go in one ``pop_first``;
* ``lease_grouped``: a queue with groups, whose claims take turns: each job
  leaves ``ready`` on its own, and the groups hear of the hand-outs
  (``Groups.claimed``);
* ``lease``: one job, wherever it stands (replay of a CLAIM whose job is
  still in flight because its EXPIRE record was lost).

All three end in the same state: ``in_flight``, the new token, deadline and
consumer, one more delivery, a lease entry by deadline, and the job's
previous lease (an expired one whose token still worked) ended.
"""

from __future__ import annotations

from .indexes import band
from .job import COMPILED, IN_FLIGHT, Job, end_lease

# Lease tokens: ``<job id>.<boot epoch>.<lease number>`` in hex.  Unique for
# every lease ever granted (the epoch grows at every start), they name their
# job (``Queue.job_for_token``), contain a dot so they never equal an option
# keyword, and are short (docs/semantics.md §1.4).
TOKEN = b"%x.%x.%x"


def _pure_lease_tokens(jobs, epoch: int, first_seq: int) -> list[bytes]:
    return [TOKEN % (job.id, epoch, first_seq + i) for i, job in enumerate(jobs)]


def _pure_take_leases(jobs, tokens, deadline: int, consumer: bytes) -> list[int]:
    for job, token in zip(jobs, tokens):
        if job.token is not None:         # an expired lease, now replaced
            end_lease(job)
        job.state = IN_FLIGHT
        job.token = token
        job.deadline = deadline
        job.consumer = consumer
        job.deliveries += 1
    return [job.id for job in jobs]


def _pure_drop_leases(jobs, table) -> tuple[dict[int, list[int]], list[Job]]:
    by_deadline: dict[int, list[int]] = {}
    rare = []
    for job in jobs:
        end_lease(job)
        if job.extra is not None:
            rare.append(job)
        by_deadline.setdefault(job.deadline, []).append(job.id)
        job.state = None
        del table[job.id]
    return by_deadline, rare


def _pure_jobs_for_tokens(table, tokens) -> list[Job]:
    jobs, seen = [], set()
    for token in tokens:
        head, _, _ = token.partition(b".")
        try:
            job = table.get(int(head, 16))
        except ValueError:
            continue
        if job is not None and job.token == token and job.id not in seen:
            seen.add(job.id)
            jobs.append(job)
    return jobs


# The per-job loops of claims and acks, each with a compiled twin beside the
# compiled Job it reads and writes (tests/unit/test_leasing.py holds the two
# to the same results):
lease_tokens = _pure_lease_tokens       # the tokens of new leases on ``jobs``, numbered from ``first_seq``
take_leases = _pure_take_leases         # ``jobs`` in flight under ``tokens``, one more delivery each; their ids
drop_leases = _pure_drop_leases         # jobs in flight out of ``table``, leases ended: ids by deadline, jobs with rare fields
jobs_for_tokens = _pure_jobs_for_tokens  # the jobs of ``table`` whose leases these tokens hold, each once, in order
if COMPILED:
    from ._job import drop_leases, jobs_for_tokens, lease_tokens, take_leases   # noqa: F811


def lease(q, job: Job, token: bytes, deadline: int, consumer: bytes) -> None:
    if job.token is not None:
        end_lease(job)
    q.indexes.move(job, state=IN_FLIGHT, token=token, deadline=deadline, consumer=consumer)
    job.deliveries += 1


def lease_grouped(q, jobs: list, tokens, deadline: int, consumer: bytes, ts: int) -> None:
    """``lease`` on a queue with groups, the lease entries in bulk."""
    ready = q.indexes.ready
    q.indexes.groups.claimed(jobs, ts)
    for job in jobs:
        ready.remove(band(job), job.id)
    _leased(q, jobs, tokens, deadline, consumer)


def lease_front(q, jobs: list, tokens, deadline: int, consumer: bytes) -> None:
    """``lease`` for jobs that are exactly the first ``len(jobs)`` ready ones."""
    q.indexes.ready.pop_first(len(jobs))
    _leased(q, jobs, tokens, deadline, consumer)


def _leased(q, jobs: list, tokens, deadline: int, consumer: bytes) -> None:
    """Jobs just taken out of ``ready``: in flight under their new tokens."""
    q.indexes.leases.add_many(deadline, take_leases(jobs, tokens, deadline, consumer))


def extend(q, job: Job, deadline: int) -> None:
    """A lease's new deadline (QEXTEND)."""
    q.indexes.move(job, state=IN_FLIGHT, deadline=deadline)
