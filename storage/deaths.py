"""Jobs that end without an ack, and the ways back: the store's dead-letter
transitions (docs/semantics.md §1.8).

``Deaths.dead_letter`` is the one way a job dies: to the queue's DEADLETTER
queue as a new job with provenance, or dead in place (kept for RETAIN-DEAD)
when the queue names none; children waiting on it (AFTER, ``storage.deps``)
die with it in the same transaction.  ``redrive`` brings dead jobs of a
queue back to ready; ``move_back`` sends the jobs of a dead-letter queue
back to the queue they came from as new jobs.  ``apply_dead`` and
``apply_move`` are the state changes of the DEAD and MOVE records, shared by
the live path and replay (``storage.recovery``).

Apart from ``Store`` so that the store keeps the transitions of a job's
ordinary life; these reach the store's journal, queues and dependencies
through ``self.store``.  A death and a cancel change the jobs' state, then
take the one step of a job's end (``Store.ended``: results, dependants,
waiters, flow slots), live and in replay alike; the children it dooms die
by ``dead_letter`` on the live path, by their own DEAD records in replay.
"""

from __future__ import annotations

from . import records
from .job import Job, Provenance
from .results import CANCELLED, DIED


class Deaths:
    def __init__(self, store) -> None:
        self.store = store

    def dead_letter(self, q, jobs: list[Job], reason: bytes, ts: int) -> None:
        """Jobs that must not be delivered again: to the DEADLETTER queue (created
        with defaults if missing) with provenance, or dead in their own queue.
        Children waiting on them (AFTER) die too, with reason parent-failed,
        each queue's in a DEAD record of its own, in one transaction."""
        with self.store.journal.transaction():
            work = [(q, jobs, reason)]
            while work:
                q, jobs, reason = work.pop()
                doomed = self._dead_letter(q, jobs, reason, ts)
                work += [(cq, children, b"parent-failed") for cq, children in doomed]
            self.store.log_released(ts)                # children with ONFAIL run

    def _dead_letter(self, q, jobs: list[Job], reason: bytes, ts: int) -> list:
        target = None
        if q.config.deadletter:
            name = q.config.deadletter.encode()
            store = self.store
            target = store.queues.get(name) or store.create_queue(name, store.default_config, ts)
            first = self.store.take_ids(target, len(jobs))
            pairs = [(job.id, first + i) for i, job in enumerate(jobs)]
        else:
            pairs = [(job.id, 0) for job in jobs]
        doomed = self.apply_dead(q, ts, reason, target, pairs)
        self.store.journal.job_record(q, records.DEAD, records.dead(q.qid, ts, records.REASON_CODES[reason],
                                                target.qid if target else 0, pairs))
        return doomed

    def apply_dead(self, q, ts: int, reason: bytes, target, pairs,
                   copies: bool = True, parent_as_origin: bool = False) -> None:
        """The state change of a DEAD record: ``pairs`` (id, new id) leave ``q``
        for ``target``, or die in place when it is None.  ``copies`` False:
        the target does not get them (replay into a memory queue).  A child
        that dies parent-failed keeps its own provenance and names the
        parent (``Provenance.parent``), so that QREDRIVE sends it home;
        ``parent_as_origin``: a DEAD record as logs before 2026-11-27 wrote
        it, replayed as it was then (the parent's provenance).  Returns the
        children (AFTER) that must die with them (the end's step,
        ``Store.ended``, which follows the change of their state)."""
        jobs = q.jobs
        dying = [jobs[jid] for jid, _ in pairs]
        if reason == b"parent-failed":
            for job in dying:
                job.failed_parent = self.store.deps.failed_parent(job)
        if target is None:
            for job in dying:
                if job.failed_parent is not None:
                    job.origin = _provenance(q, job, reason, parent_as_origin)
                q.bury(job, reason, ts)
            return self.store.ended(q, dying, DIED, ts, reason)
        moved = []
        for job, (_jid, new_id) in zip(dying, pairs):
            copy = Job(new_id, job.payload, job.priority, ts, ts)
            copy.last_error = job.last_error
            _carry(job, copy)
            copy.origin = _provenance(q, job, reason, parent_as_origin)
            moved.append(copy)
            q.remove(job)
            q.counters.dead_lettered += 1
        doomed = self.store.ended(q, dying, DIED, ts, reason)
        if copies:
            target.add_many(moved, ts)
            self.store.wake(target)
        return doomed

    def cancel(self, q, jobs: list[Job], ts: int) -> None:
        """QCANCEL: ``jobs`` (ready, delayed, waiting or in flight) end now in
        state cancelled; a lease held on one is over (its token stale).
        Children waiting on them die as for a death (``dead_letter``), in
        the CANCEL record's transaction."""
        store = self.store
        with store.journal.transaction():
            doomed = self.apply_cancel(q, jobs, ts)
            store.journal.job_record(q, records.CANCEL, records.cancel(q.qid, ts, [j.id for j in jobs]))
            for cq, children in doomed:
                self.dead_letter(cq, children, b"parent-failed", ts)
            store.log_released(ts)                # children with ONFAIL run
        store.wake(q)       # a cancelled job may have been a claimer's next

    def apply_cancel(self, q, jobs: list[Job], ts: int) -> list:
        """The state change of a CANCEL record, then the end's step
        (``Store.ended``: after, so that a child cancelled by the same
        QCANCEL waits no more); returns the children (AFTER) that must die
        with them."""
        for job in jobs:
            q.cancel(job, ts)
        return self.store.ended(q, jobs, CANCELLED, ts, CANCELLED)

    def redrive(self, q, jobs: list[Job], ts: int) -> None:
        """Dead jobs of ``q`` back to ready, deliveries reset to 0."""
        for job in jobs:
            q.revive(job, ts)
        self.store.journal.job_record(q, records.REDRIVE, records.redrive(q.qid, ts, [j.id for j in jobs]))
        self.store.wake(q)

    def move_back(self, q, jobs: list[Job], source, ts: int) -> None:
        """Ready jobs of dead-letter queue ``q`` back to ``source`` as new ready jobs."""
        first = self.store.take_ids(source, len(jobs))
        pairs = [(job.id, first + i) for i, job in enumerate(jobs)]
        self.apply_move(q, ts, source, pairs)
        self.store.journal.job_record(q, records.MOVE, records.move(q.qid, ts, source.qid, pairs))

    def apply_move(self, q, ts: int, source, pairs, copies: bool = True) -> None:
        """The state change of a MOVE record (``copies`` as in ``apply_dead``)."""
        jobs = q.jobs
        back = []
        for jid, new_id in pairs:
            job = jobs[jid]
            copy = Job(new_id, job.payload, job.priority, ts, ts)
            copy.last_error = job.last_error
            _carry(job, copy)
            copy.requeued = True
            back.append(copy)
            q.remove(job)
        if copies:
            source.add_many(back, ts)
            self.store.wake(source)



def _provenance(q, job: Job, reason: bytes, parent_as_origin: bool) -> Provenance:
    """Where ``job`` of ``q`` came from, as its dead-letter copy (or itself,
    dead in place after a parent) says: its queue and id, and the parent
    whose death took it along (``failed_parent``: the parent's queue and id)."""
    failed = job.failed_parent
    if failed is None:
        return Provenance(q.name, job.id, job.deliveries, reason)
    if parent_as_origin:
        return failed
    return Provenance(q.name, job.id, job.deliveries, reason, (failed.source, failed.src_id))


def _carry(job: Job, copy: Job) -> None:
    """What a dead-letter copy, or a job moved back, keeps of the job: its
    group, its META, and the schedule tick that pushed it."""
    extra = job.extra
    if extra is not None:
        copy.group = extra.group
        copy.meta = extra.meta
        copy.schedule = extra.schedule
        copy.tick = extra.tick
