"""Dependencies: jobs that wait for other jobs (docs/semantics.md §3.10).

A job pushed with ``AFTER`` parents is ``waiting`` while any of them is
still held; its ``waiting_for`` is the set of parents left, each as
``(qid, id)``, so parents and children may be in different queues.
``Deps.children`` is the other direction: parent -> the children waiting on
it, kept in memory and rebuilt from the waiting jobs after a snapshot loads
(``add`` of each queue's jobs that have rare fields: ``storage.snapshot``),
so a snapshot holds it through the jobs themselves.

* A parent **done** (acked, deleted, its queue dropped: no longer held)
  leaves each child's ``waiting_for``; a child with none left is released:
  ready, or delayed by its DELAY counted from now (``Queue.wake_waiting``).
  This follows from the parent's ACK (or DEL, PURGE, DROP) record, both live
  and in replay, so it is as crash-atomic as the ack.  The store also
  writes a RELEASE record naming the children, in the same transaction, for
  readers of the log; replay derives the release and skips that record.
* A parent **dead** (dead-lettered, expired): each child pushed with
  ``ONFAIL run`` counts it as done; the others must die with reason
  ``parent-failed`` and the parent as provenance.  ``failed`` marks them
  (``failed_parent``) and returns them; the live path dead-letters them with
  DEAD records of their own in the same transaction (replay applies those
  records, so it ignores the list).

Both are the dependants' part in a job's end: ``Store.ended`` calls
``ended``, which picks one by how the jobs ended, only while ``children``
is not empty.

Every step touches only the jobs involved: an ack costs one dict look-up
when its job has no children, a chain of N jobs or a fan-in of N parents
costs O(N) in all.
"""

from __future__ import annotations

from . import results
from .job import CANCELLED, DEAD, WAITING, Job, Provenance

NOBODY_DOOMED: tuple = ()       # ``ended``'s answer when no child must die


class Deps:
    __slots__ = ("store", "children", "released")

    def __init__(self, store) -> None:
        self.store = store
        self.children: dict[tuple, list] = {}     # (qid, id) parent -> [(qid, id) child]
        self.released: dict = {}                  # queue -> ids released by the transition under way

    def take_released(self) -> dict:
        """The children released since the last call, by queue (and forget them)."""
        released, self.released = self.released, {}
        return released

    def add(self, q, jobs: list[Job]) -> None:
        """Jobs just pushed onto ``q``, or read back from a snapshot: register
        the waiting ones with their parents."""
        children = self.children
        for job in jobs:
            extra = job.extra
            if extra is not None and extra.waiting_for:
                me = (q.qid, job.id)
                for parent in extra.waiting_for:
                    children.setdefault(parent, []).append(me)

    def _waiting_children(self, q, job: Job):
        """Pop ``job``'s entry; yield (queue, child) for each child still waiting on it."""
        kids = self.children.pop((q.qid, job.id), None)
        if not kids:
            return
        by_qid = self.store.by_qid
        parent = (q.qid, job.id)
        for qid, cid in kids:
            cq = by_qid.get(qid)
            child = cq.jobs.get(cid) if cq is not None else None
            if child is not None and child.state is WAITING and parent in child.extra.waiting_for:
                yield cq, child

    def ended(self, q, jobs: list[Job], how: bytes, ts: int):
        """``jobs`` of ``q`` ended (``Store.ended``): done (acked, deleted,
        dropped: ``finished``) or dead (died, cancelled: ``failed``); the
        children that must die with them, as ``failed`` returns them."""
        if how is results.DIED or how is results.CANCELLED:
            return self.failed(q, jobs, ts)
        self.finished(q, jobs, ts)
        return NOBODY_DOOMED

    def finished(self, q, jobs: list[Job], ts: int) -> None:
        """``jobs`` of ``q`` are done: children waiting on nothing else are released."""
        for job in jobs:
            for cq, child in self._waiting_children(q, job):
                self._drop_parent(cq, child, (q.qid, job.id), ts)

    def failed(self, q, jobs: list[Job], ts: int) -> list:
        """``jobs`` of ``q`` died: children with ONFAIL run count them as done;
        the others are marked with their failed parent and returned, as
        ``[(queue, [child, ...])]``, for the caller to dead-letter."""
        doomed: dict = {}
        for job in jobs:
            for cq, child in self._waiting_children(q, job):
                if child.extra.onfail_run:
                    self._drop_parent(cq, child, (q.qid, job.id), ts)
                elif child.extra.failed_parent is None:
                    child.extra.failed_parent = Provenance(q.name, job.id, job.deliveries, b"parent-failed")
                    doomed.setdefault(cq, []).append(child)
        return list(doomed.items())

    def failed_parent(self, job: Job) -> Provenance | None:
        """Why a job dies parent-failed: the parent ``failed`` marked, or (a
        job pushed after its parent died, and in replay) the first parent it
        waits for that is dead."""
        extra = job.extra
        if extra is None:
            return None
        if extra.failed_parent is not None:
            return extra.failed_parent
        for qid, jid in sorted(extra.waiting_for or ()):
            pq = self.store.by_qid.get(qid)
            parent = pq.jobs.get(jid) if pq is not None else None
            if parent is not None and (parent.state is DEAD or parent.state is CANCELLED):
                return Provenance(pq.name, parent.id, parent.deliveries, b"parent-failed")
        return None

    def _drop_parent(self, cq, child: Job, parent: tuple, ts: int) -> None:
        waiting = child.extra.waiting_for
        waiting.discard(parent)
        if not waiting and child.extra.failed_parent is None:
            cq.wake_waiting(child, ts)
            self.store.wake(cq)
            if self.store.journal.logs_jobs_of(cq):      # (not in replay, nor for a memory queue)
                self.released.setdefault(cq, []).append(child.id)
