"""What the storage tests compare about a store: its log, record by record
(``log_records``), and one digest of everything it remembers (``digest``).

The digest is plain values (dicts, lists, tuples), so two of them compare
with ``==`` and pytest shows what differs.  It holds every field of every
job (read off the definition's ``PureJob.__slots__`` and ``JobExtra.__slots__``, so a new field
is compared without anyone adding it here), every index of every queue, the
queue counters and the store's own marks.  A comparison that must leave
something out says so with a keyword, each one naming why a restart cannot
keep that thing; nothing else is ever left out."""

from __future__ import annotations

from dataclasses import asdict

from leaseq.storage import records
from leaseq.storage.job import DELAYED, IN_FLIGHT, READY, JobExtra, PureJob
from leaseq.storage.recovery import read_log

# every remembered field of a job; ``extra`` is spread into its own fields and
# ``holder`` is the live connection of a SESSION / QWORK lease (never stored)
JOB_FIELDS = tuple(f for f in PureJob.__slots__ + JobExtra.__slots__ if f not in ("extra", "holder"))


def scan_order(q) -> list[int]:
    """The ids in the order QSCAN walks them."""
    cursor, ids = 0, []
    while True:
        cursor, jobs = q.jobs.scan(cursor, 1000)
        ids += [job.id for job in jobs]
        if not cursor:
            return ids


def log_records(directory) -> list[tuple[int, tuple]]:
    """Every record in the log, decoded, TXN kept as one entry."""
    got = []
    read_log(str(directory), lambda t, b: got.append((t, records.decode(t, b))))
    return got


def provenance(job) -> tuple | None:
    """Where a dead-lettered job came from: (source, id there, deliveries,
    reason), and the parent (queue, id) of one that died with it."""
    o = job.origin
    if o is None:
        return None
    return (o.source, o.src_id, o.deliveries, o.reason) + ((o.parent,) if o.parent is not None else ())


def index_counts(q) -> dict:
    """How many jobs each index of queue ``q`` holds, as they stand."""
    return {"ready": len(q.indexes.ready), "delayed": len(q.indexes.delayed), "in_flight": len(q.indexes.leases),
            "dead": len(q.indexes.dead), "completed": len(q.indexes.completed), "jobs": len(q.jobs), "keys": len(q.keys)}


def job_digest(job, replayed: bool = False, live_only: bool = False) -> dict:
    """Every remembered field of ``job`` by name (``origin`` as ``provenance`` gives it).
    ``requeued`` (which only orders ready jobs) is left out where a replay
    cannot know it: while the job is in flight when ``replayed`` (a job claimed
    again after its lease ran out unnoticed by the log is not marked requeued),
    and for every state but ready and delayed when ``live_only`` (such a job
    may have finished since)."""
    out = {name: getattr(job, name) for name in JOB_FIELDS}
    out["origin"] = provenance(job)
    if (replayed and job.state is IN_FLIGHT) or (live_only and job.state not in (READY, DELAYED)):
        out["requeued"] = None
    return out


def digest(store, now: int | None = None, *, durable_only: bool = False, replayed: bool = False,
           live_only: bool = False, restarted: str | None = None) -> dict:
    """Everything ``store`` remembers, as plain values.

    ``now``: every queue is folded at ``now`` first (due delayed jobs and
    expired leases to ready, retention over; unlogged), so the digest is what a
    client would see then; None: the indexes as they stand.

    What a comparison across a restart leaves out, each by its own keyword:

    - ``durable_only``: the jobs of memory queues and all their indexes (never
      logged nor in a snapshot: docs/semantics.md §1.1);
    - ``replayed``: what replaying the log cannot know: the ``lease_expired``
      counter (counted when a look notices), the counters of memory queues
      (their pushes are not logged) and ``requeued`` of jobs in flight (see
      ``job_digest``);
    - ``live_only`` (a replay compared with the live store that wrote the log,
      which noticed things no record carries): the ``duplicates`` counter (a
      duplicate push changes nothing, so it is not logged) and ``requeued`` of
      jobs neither ready nor delayed (see ``job_digest``);
    - ``restarted="close"`` or ``"crash"``: the store's ``epoch`` (each start
      boots a new one) and where ids continue, which the tests check on their
      own: after a close, ``id_mark`` (the close logs the exact next id, so the
      mark comes down to ``next_id``, which stays compared); after a crash,
      ``next_id`` (ids continue at the logged mark: ids in between may have
      been handed out).
    """
    assert restarted in (None, "close", "crash")
    queues = {}
    for name, q in sorted(store.queues.items()):
        if now is not None:
            q.fold(now)
        memory = q.durability == "memory"
        gone = memory and durable_only
        jobs = {} if gone else q.jobs
        counters = asdict(q.counters)
        if replayed:
            counters["lease_expired"] = None
        if live_only:
            counters["duplicates"] = None
        if replayed and memory:
            counters = None
        queues[name] = {
            "qid": q.qid, "config": q.config, "durability": q.durability,
            "counters": counters,
            "next_id": None if restarted == "crash" else q.next_id,
            "id_mark": None if restarted == "close" else q.id_mark,
            "jobs": [(jid, job_digest(j, replayed, live_only)) for jid, j in jobs.items()],
            "counts": dict.fromkeys(index_counts(q), 0) if gone else index_counts(q),
            "claim order": [] if gone else list(q.indexes.ready),
            "delayed": [] if gone else list(q.indexes.delayed),
            "leases": [] if gone else list(q.indexes.leases),
            "dead": [] if gone else list(q.indexes.dead),
            "completed": [] if gone else list(q.indexes.completed),
            "keys": {} if gone else dict(q.keys),
            "scan order": [] if gone else scan_order(q),
            "payload_bytes": 0 if gone else q.payload_bytes,
        }
    return {"epoch": None if restarted else store.epoch, "next_qid": store.next_qid, "clock": store.clock,
            "dropped": dict(store.dropped_marks), "queues": queues}
