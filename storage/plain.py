"""What a plain command changes, as one function each: a QPUSH of one job
without options (``push_one``), a claim (``claim_next``: ``take_claimable``,
then ``claim`` of what it took; ``claimable``, what a serve of parked claims
deals out) and a QACK without RESULT
(``ack_tokens``), over the ``Store`` transitions.

At one job per command a job's life is these three, and they are where
the daemon spends its time on a plain queue, so each has a compiled twin
(``storage/_plain.pyx``, docs/performance.md "The plain transitions"),
asked first: it answers what the function below would, or None, decided
before anything changes, for everything that is not plain (a queue's
features, jobs with rare fields ...); then the function runs on.  The
plain lane (daemon/_lane.pyx) asks ``twin`` itself, with no Python frame
in between.  tests/unit/test_lane.py holds the twin to these
definitions."""

from __future__ import annotations

from . import flow
from .flavour import compiled_twin
from .job import Job

twin = compiled_twin("leaseq.storage._plain")     # None when not built, or LEASEQ_PURE=1


def push_one(store, q, payload: bytes, priority: int, now: int) -> int:
    """One job with no options but ``priority``: ``take_ids``, then ``push``;
    the job's id."""
    if twin is not None:
        jid = twin.push_one(store, q, payload, priority, now)
        if jid is not None:
            return jid
    jid = store.take_ids(q, 1)
    store.push(q, [Job(jid, payload, priority, now, now)], now)
    return jid


def claimable(store, q, now: int, want: int) -> int:
    """What a serve of parked claims asks before it deals jobs out: the
    fold, then how many of ``want`` jobs the rules let out now."""
    if twin is not None:
        n = twin.claimable(store, q, now, want)
        if n is not None:
            return n
    store.fold(q, now)
    return flow.claimable(q, now, want)


def claim_next(store, q, now: int, count: int, deadline: int, consumer: bytes) -> list[Job]:
    """A claim's whole change: ``take_claimable``, then ``claim`` of the jobs
    it took (leased until ``deadline``); those jobs."""
    if twin is not None:
        jobs = twin.claim_next(store, q, now, count, deadline, consumer)
        if jobs is not None:
            return jobs
    jobs = store.take_claimable(q, now, count)
    if jobs:
        store.claim(q, jobs, deadline, consumer, now, front=True)
    return jobs


def ack_tokens(store, q, tokens, now: int) -> int:
    """QACK without RESULT: the jobs these tokens still hold, completed
    (``ack``); how many."""
    if twin is not None:
        n = twin.ack_tokens(store, q, tokens, now)
        if n is not None:
            return n
    jobs = q.jobs_for_tokens(tokens)
    if jobs:
        store.ack(q, jobs, now)
    return len(jobs)
