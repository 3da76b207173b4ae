"""The store: every queue, and the one set of functions that change them.

Commands decide *what* happens (which jobs a claim gets, what a nack's delay
is) and then call a transition here: ``push``, ``claim``, ``ack``, ``nack``,
``extend``, ``create_queue``, ``set_config``, ``drop_queue``.  Each transition
changes the in-memory state and appends the matching log record.  Recovery
decodes the same records and calls the same transitions with logging off
(``replay``), so live state and recovered state come from one piece of code.

What is logged, and whether a reply waits for fsync:

=========================  ===========  ==========  =========================
record                     fsync queue  async queue memory queue
=========================  ===========  ==========  =========================
QUEUE, DROP, IDMARK, CLOCK wait         wait        wait (queues, ids survive)
PUSH, ACK, DEAD, REDRIVE,  wait         written     not written
MOVE, DEL
CLAIM, NACK, EXTEND        written *    written     not written
=========================  ===========  ==========  =========================

(*) wait too with ``lease-durability fsync``.  "Written" records reach the
file at the end of the event-loop turn, before their replies are sent (so
they survive a crash of the process), and are fsynced within
``fsync-interval``.  ``write_needed`` / ``sync_needed`` tell the daemon which
of the two the command just run must wait for.
"""

from __future__ import annotations

import logging
import os
import time

from . import records
from .queue import ASYNC, FSYNC, MEMORY, Job, Provenance, Queue, QueueConfig
from .wal import RecoveryReport, WriteAheadLog, lock_directory, read_log

log = logging.getLogger(__name__)

# ids are reserved in blocks: one fsynced IDMARK record per block per queue
ID_BLOCK = 1 << 16


# Lease tokens: ``<job id>.<boot epoch>.<lease number>`` in hex.  Unique for
# every lease ever granted (the epoch grows at every start), they name their
# job (``Queue.job_for_token``), contain a dot so they never equal an option
# keyword, and are short.
TOKEN = b"%x.%x.%x"


class Store:
    def __init__(self) -> None:
        self.queues: dict[bytes, Queue] = {}
        self.by_qid: dict[int, Queue] = {}
        self.next_qid = 1
        self.dropped_marks: dict[bytes, int] = {}   # name -> first id a re-created queue may use
        self.epoch = 0
        self.lease_seq = 0
        self.wal: WriteAheadLog | None = None
        self.lock_fd = -1
        self.replaying = False
        self.lease_sync = False
        self.write_needed = False    # a record was appended since the last reset: reply after it is written
        self.sync_needed = False     # ... and it needs fsync before replying
        self.woken: set[Queue] = set()   # queues whose ready jobs or next due moment changed
        self.report: RecoveryReport | None = None
        self.default_config = QueueConfig()     # for dead-letter queues created on demand
        self.clock = (0, False, 0)              # DEBUG clock: offset ms, frozen, frozen at
        self.recovery_seconds = 0.0
        self._txn: list | None = None
        self._txn_sync = False
        self._txn_depth = 0

    # -- opening and closing --------------------------------------------------------

    @classmethod
    def open(cls, directory: str, now: int, segment_size: int = 64 << 20, lease_sync: bool = False,
             repair: bool = False) -> "Store":
        """Lock ``directory``, recover from its log, and start a new segment."""
        os.makedirs(directory, exist_ok=True)
        lock_fd = lock_directory(directory)
        store = cls()
        store.lock_fd = lock_fd
        store.lease_sync = lease_sync
        t0 = time.monotonic()
        store.replaying = True
        try:
            store.report = read_log(directory, store.replay, repair=repair)
        except BaseException:
            os.close(lock_fd)
            raise
        finally:
            store.replaying = False
        for q in store.queues.values():
            q.next_id = max(q.next_id, q.id_mark)
        store.wal = WriteAheadLog(directory, segment_size, store.report.last_segment + 1)
        store.epoch += 1
        store.lease_seq = 0
        store.wal.append(records.BOOT, records.boot(store.epoch, now), sync=True)
        store.wal.flush()
        store.wal.sync()
        store.recovery_seconds = time.monotonic() - t0
        r = store.report
        log.info("recovered %d queues from %d segments, %d records, %d bytes (truncated %d torn bytes%s) "
                 "in %.3f s; boot epoch %d", len(store.queues), r.segments, r.records, r.bytes,
                 r.truncated_bytes, f", skipped {len(r.skipped)} corrupt ranges" if r.skipped else "",
                 store.recovery_seconds, store.epoch)
        return store

    def close(self) -> None:
        """Record exact id marks (so a clean restart leaves no gap) and fsync."""
        if self.wal is None:
            return
        for q in self.queues.values():
            if q.next_id != q.id_mark:
                q.id_mark = q.next_id
                self.wal.append(records.IDMARK, records.idmark(q.qid, q.next_id), sync=True)
        self.wal.close()
        self.wal = None
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1

    # -- logging ------------------------------------------------------------------------

    def _log(self, q: Queue, rtype: int, body: bytes, lease_record: bool = False) -> None:
        if self.replaying or self.wal is None or q.durability is MEMORY:
            return
        sync = q.durability is FSYNC and (not lease_record or self.lease_sync)
        self._emit(rtype, body, sync)

    def _log_meta(self, rtype: int, body: bytes) -> None:
        if not self.replaying and self.wal is not None:
            self._emit(rtype, body, True)

    def _emit(self, rtype: int, body: bytes, sync: bool) -> None:
        if self._txn is not None:
            self._txn.append((rtype, body))
            self._txn_sync = self._txn_sync or sync
            return
        self.wal.append(rtype, body, sync)
        self.write_needed = True
        if sync:
            self.sync_needed = True

    def begin(self) -> None:
        """Collect the records of the following transitions into one TXN record
        (nestable: only the outermost ``commit`` emits)."""
        if self._txn is None:
            self._txn = []
            self._txn_sync = False
        self._txn_depth += 1

    def commit(self) -> None:
        self._txn_depth -= 1
        if self._txn_depth:
            return
        got, sync = self._txn, self._txn_sync
        self._txn = None
        if not got:
            return
        if len(got) == 1:
            self._emit(got[0][0], got[0][1], sync)
        else:
            self._emit(records.TXN, records.txn(got), sync)

    # -- queues -------------------------------------------------------------------------

    def create_queue(self, name: bytes, config: QueueConfig, ts: int, qid: int | None = None) -> Queue:
        if qid is None:
            qid = self.next_qid
        self.next_qid = max(self.next_qid, qid + 1)
        q = Queue(qid, name, config)
        q.next_id = q.id_mark = self.dropped_marks.pop(name, 1)
        _set_durability(q)
        self.queues[name] = q
        self.by_qid[qid] = q
        self._log_meta(records.QUEUE, records.queue(qid, ts, name, config.to_json()))
        return q

    def set_config(self, q: Queue, config: QueueConfig, ts: int) -> None:
        q.config = config
        _set_durability(q)
        self._log_meta(records.QUEUE, records.queue(q.qid, ts, q.name, config.to_json()))

    def drop_queue(self, q: Queue, ts: int) -> int:
        del self.queues[q.name]
        del self.by_qid[q.qid]
        q.dropped = True
        # a queue re-created under this name continues above every id handed out
        self.dropped_marks[q.name] = max(q.next_id, q.id_mark)
        self.woken.discard(q)
        self._log_meta(records.DROP, records.drop(q.qid, ts))
        return q.remove_all()

    def take_ids(self, q: Queue, n: int) -> int:
        """Reserve ``n`` consecutive job ids; return the first."""
        first = q.next_id
        end = first + n
        if end > q.id_mark:
            q.id_mark = end + ID_BLOCK
            self._log_meta(records.IDMARK, records.idmark(q.qid, q.id_mark))
        q.next_id = end
        return first

    # -- jobs ----------------------------------------------------------------------------

    def push(self, q: Queue, jobs: list[Job], ts: int) -> None:
        body = records.push(q.qid, ts, jobs)     # encode first: a bad job changes nothing
        q.add_many(jobs, ts)
        q.counters.pushed += len(jobs)
        self._log(q, records.PUSH, body)
        self.woken.add(q)

    def claim(self, q: Queue, jobs: list[Job], deadline: int, consumer: bytes, ts: int,
              first_seq: int | None = None, front: bool = False) -> None:
        """Lease ``jobs``; each gets a new token (``job.token``).  ``front``: the
        jobs are exactly ``q.claimable()``'s answer (the head of ``ready``)."""
        if first_seq is None:
            first_seq = self.lease_seq + 1
        self.lease_seq = max(self.lease_seq, first_seq + len(jobs) - 1)
        epoch = self.epoch
        tokens = [TOKEN % (job.id, epoch, first_seq + i) for i, job in enumerate(jobs)]
        if front:
            q.lease_front(jobs, tokens, deadline, consumer)
        else:
            for job, token in zip(jobs, tokens):
                q.lease(job, token, deadline, consumer)
        self._log(q, records.CLAIM, records.claim(q.qid, ts, deadline, first_seq, consumer,
                                                  [j.id for j in jobs]), lease_record=True)

    def ack(self, q: Queue, jobs: list[Job], ts: int) -> None:
        for job in jobs:
            q.complete(job, ts)
        self._log(q, records.ACK, records.ack(q.qid, ts, [j.id for j in jobs]))

    def nack(self, q: Queue, jobs: list[Job], visible_at: int, error: bytes | None, ts: int,
             closed: bool = False) -> None:
        """Release leases (``closed``: because the holding connection closed)."""
        for job in jobs:
            q.release(job, visible_at, ts, error, error is not None, closed)
        self._log(q, records.NACK, records.nack(q.qid, ts, visible_at, error, [j.id for j in jobs], closed),
                  lease_record=True)
        self.woken.add(q)

    def extend(self, q: Queue, jobs: list[Job], deadline: int, ts: int) -> None:
        for job in jobs:
            q.extend(job, deadline)
        self._log(q, records.EXTEND, records.extend(q.qid, ts, deadline, [j.id for j in jobs]),
                  lease_record=True)
        self.woken.add(q)   # a shortened lease moves the moment blocked claimers wake

    # -- dead jobs, redrive, deletion ----------------------------------------------------

    def take_claimable(self, q: Queue, now: int, count: int) -> list[Job]:
        """The next ``count`` jobs that may be delivered, in claim order.  A job
        that would be delivered one time too many, or is older than EXPIRE, is
        dead-lettered on the way instead (SPEC 1) and the next one is taken."""
        while True:
            jobs = q.claimable(now, count)
            doomed = [(job, reason) for job in jobs if (reason := q.death_reason(job, now)) is not None]
            if not doomed:
                return jobs
            groups: dict[bytes, list] = {}        # by reason, in claim order
            for job, reason in doomed:
                groups.setdefault(reason, []).append(job)
            self.begin()
            try:
                for reason, group in groups.items():
                    self.dead_letter(q, group, reason, now)
            finally:
                self.commit()

    def dead_letter(self, q: Queue, jobs: list[Job], reason: bytes, ts: int) -> None:
        """Jobs that must not be delivered again: to the DEADLETTER queue (created
        with defaults if missing) with provenance, or dead in their own queue."""
        target = None
        if q.config.deadletter:
            name = q.config.deadletter.encode()
            target = self.queues.get(name) or self.create_queue(name, self.default_config, ts)
            first = self.take_ids(target, len(jobs))
            pairs = [(job.id, first + i) for i, job in enumerate(jobs)]
        else:
            pairs = [(job.id, 0) for job in jobs]
        self._apply_dead(q, ts, reason, target, pairs)
        self._log(q, records.DEAD, records.dead(q.qid, ts, records.REASON_CODES[reason],
                                                target.qid if target else 0, pairs))

    def _apply_dead(self, q: Queue, ts: int, reason: bytes, target: Queue | None, pairs) -> None:
        jobs = q.jobs
        if target is None:
            for jid, _ in pairs:
                q.bury(jobs[jid], reason, ts)
            return
        moved = []
        for jid, new_id in pairs:
            job = jobs[jid]
            copy = Job(new_id, job.payload, job.priority, ts, ts)
            copy.last_error = job.last_error
            copy.origin = Provenance(q.name, job.id, job.deliveries, reason)
            moved.append(copy)
            q.remove(job)
            q.counters.dead_lettered += 1
        if not (self.replaying and target.durability is MEMORY):
            target.add_many(moved, ts)
            self.woken.add(target)

    def redrive(self, q: Queue, jobs: list[Job], ts: int) -> None:
        """Dead jobs of ``q`` back to ready, deliveries reset to 0."""
        for job in jobs:
            q.revive(job, ts)
        self._log(q, records.REDRIVE, records.redrive(q.qid, ts, [j.id for j in jobs]))
        self.woken.add(q)

    def move_back(self, q: Queue, jobs: list[Job], source: Queue, ts: int) -> None:
        """Ready jobs of dead-letter queue ``q`` back to ``source`` as new ready jobs."""
        first = self.take_ids(source, len(jobs))
        pairs = [(job.id, first + i) for i, job in enumerate(jobs)]
        self._apply_move(q, ts, source, pairs)
        self._log(q, records.MOVE, records.move(q.qid, ts, source.qid, pairs))

    def _apply_move(self, q: Queue, ts: int, source: Queue, pairs) -> None:
        jobs = q.jobs
        back = []
        for jid, new_id in pairs:
            job = jobs[jid]
            copy = Job(new_id, job.payload, job.priority, ts, ts)
            copy.last_error = job.last_error
            copy.requeued = True
            back.append(copy)
            q.remove(job)
        if not (self.replaying and source.durability is MEMORY):
            source.add_many(back, ts)
            self.woken.add(source)

    def delete(self, q: Queue, jobs: list[Job], ts: int) -> None:
        """Jobs removed whatever their state (QDEL, QPURGE); leases become stale."""
        for job in jobs:
            q.remove(job)
        self._log(q, records.DEL, records.delete(q.qid, ts, [j.id for j in jobs]))

    def set_clock(self, offset: int, frozen: bool, frozen_at: int) -> None:
        """The DEBUG clock, logged so a restart keeps the test's time."""
        self.clock = (offset, frozen, frozen_at)
        self._log_meta(records.CLOCK, records.clock(offset, frozen, frozen_at))

    # -- replay -----------------------------------------------------------------------------

    def replay(self, rtype: int, body: bytes) -> None:
        """Apply one log record (recovery).  Records naming a queue or job that
        is gone (possible only after ``--repair`` dropped bytes) are skipped."""
        fields = records.decode(rtype, body)
        if rtype == records.TXN:
            for inner_type, inner_body in fields[0]:
                self.replay(inner_type, inner_body)
            return
        if rtype == records.BOOT:
            self.epoch, _ts = fields
            self.lease_seq = 0
            return
        if rtype == records.CLOCK:
            self.clock = fields
            return
        if rtype == records.QUEUE:
            qid, ts, name, config = fields
            config = QueueConfig.from_json(config)
            q = self.by_qid.get(qid)
            if q is None:
                self.create_queue(name, config, ts, qid)
            else:
                self.set_config(q, config, ts)
            return
        q = self.by_qid.get(fields[0])
        if q is None:
            return
        if rtype == records.PUSH:
            _qid, ts, jobs = fields
            self.push(q, [Job(r.id, r.payload, r.priority, ts, r.visible_at, r.key, r.flags,
                              r.max_deliveries, r.expire_ms) for r in jobs], ts)
        elif rtype == records.CLAIM:
            _qid, ts, deadline, first_seq, consumer, ids = fields
            self.claim(q, _jobs(q, ids), deadline, consumer, ts, first_seq)
        elif rtype == records.ACK:
            _qid, ts, ids = fields
            self.ack(q, _jobs(q, ids), ts)
        elif rtype == records.NACK:
            _qid, ts, visible_at, error, ids, closed = fields
            self.nack(q, _jobs(q, ids), visible_at, error, ts, closed)
        elif rtype == records.EXTEND:
            _qid, ts, deadline, ids = fields
            self.extend(q, _jobs(q, ids), deadline, ts)
        elif rtype == records.IDMARK:
            q.id_mark = fields[1]
        elif rtype == records.DEAD:
            _qid, ts, reason, target_qid, pairs = fields
            target = self.by_qid.get(target_qid) if target_qid else None
            pairs = [p for p in pairs if p[0] in q.jobs]
            if target_qid and target is None:       # only after --repair dropped its QUEUE record
                for jid, _ in pairs:
                    q.remove(q.jobs[jid])
                return
            self._apply_dead(q, ts, records.REASONS[reason], target, pairs)
        elif rtype == records.REDRIVE:
            _qid, ts, ids = fields
            self.redrive(q, _jobs(q, ids), ts)
        elif rtype == records.MOVE:
            _qid, ts, target_qid, pairs = fields
            source = self.by_qid.get(target_qid)
            pairs = [p for p in pairs if p[0] in q.jobs]
            if source is None:
                for jid, _ in pairs:
                    q.remove(q.jobs[jid])
                return
            self._apply_move(q, ts, source, pairs)
        elif rtype == records.DEL:
            _qid, ts, ids = fields
            self.delete(q, _jobs(q, ids), ts)
        elif rtype == records.DROP:
            self.drop_queue(q, fields[1])
        else:
            raise records.FormatError(f"record type {rtype} cannot be replayed")


def _jobs(q: Queue, ids) -> list[Job]:
    jobs = q.jobs
    return [jobs[i] for i in ids if i in jobs]


def _set_durability(q: Queue) -> None:
    d = q.config.durability
    q.durability = FSYNC if d == FSYNC else ASYNC if d == ASYNC else MEMORY
