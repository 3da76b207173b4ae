"""How jobs end, asked and caused: QRESULT (a job's result, or why it
died; BLOCK waits for it) and QCANCEL (end jobs now, in state cancelled).
Semantics: docs/semantics.md §3.4 (results) and §3.11 (cancellation)."""

from __future__ import annotations

from leaseq.storage.job import CANCELLED, COMPLETED, DEAD
from leaseq.storage.queue import Queue

from . import errors
from .args import OptionReader, in_range, queue_name
from .queues import MS_MAX, lookup

ID_MAX = (1 << 63) - 1
ENDED = (COMPLETED, DEAD, CANCELLED)      # QCANCEL counts none of these


def result_reply(q: Queue, jid: int):
    """QRESULT's answer for job ``jid`` now: its result (bytes), ``-DEAD
    reason``, nil while it has not ended (None), or ``-NOJOB``."""
    job = q.jobs.get(jid)
    if job is not None and job.state not in ENDED:
        return None
    ending = q.results.get(jid)
    if ending is not None:
        return ending.value if ending.value is not None else errors.job_dead(ending.reason)
    if job is not None:
        if job.state is DEAD:
            return errors.job_dead(job.dead_reason or b"dead")
        if job.state is CANCELLED:
            return errors.job_dead(b"cancelled")
        return errors.no_job(q.name, jid, "was acked without a result")
    return errors.no_job(q.name, jid)


class ResultWait:
    """A QRESULT BLOCK the daemon must park until job ``jid`` of ``queue``
    ends (``daemon.resultwaits``); ``timeout_ms`` 0 waits for ever."""

    __slots__ = ("queue", "jid", "timeout_ms")

    def __init__(self, queue: Queue, jid: int, timeout_ms: int) -> None:
        self.queue = queue
        self.jid = jid
        self.timeout_ms = timeout_ms

    def answer(self):
        return result_reply(self.queue, self.jid)

    def expired(self):
        return None

    def dropped(self):
        return errors.queue_dropped(self.queue.name)


def qresult(client, args):
    """QRESULT queue id [BLOCK ms]"""
    server = client.server
    q = lookup(server, queue_name(args[1]))
    jid = in_range(args[2], "id", 0, ID_MAX)
    block = None
    r = OptionReader(args, 3)
    for kw in r:
        r.once(kw)
        if kw == b"BLOCK":
            block = r.int_in("BLOCK", 0, MS_MAX)
        else:
            r.unknown()
    server.store.fold(q, server.now_ms())
    reply = result_reply(q, jid)
    if reply is None and block is not None and not client.in_exec:
        return ResultWait(q, jid, block)
    return reply


def qcancel(client, args):
    """QCANCEL queue id [id ...]: the number of jobs cancelled (ready,
    delayed, waiting or in flight); ended and unknown ids count nothing."""
    server = client.server
    q = lookup(server, queue_name(args[1]))
    ids = [in_range(a, "id", 0, ID_MAX) for a in args[2:]]
    now = server.now_ms()
    server.store.fold(q, now)
    jobs, seen = [], set()
    for jid in ids:
        job = q.jobs.get(jid)
        if job is not None and job.state not in ENDED and jid not in seen:
            seen.add(jid)
            jobs.append(job)
    if jobs:
        server.store.deaths.cancel(q, jobs, now)
    return len(jobs)
