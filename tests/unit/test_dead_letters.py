"""Dead letters, retention, redrive, deletion, dedupe keys, QSCAN order and
lease holders (leaseq.storage.queue, leaseq.storage.queries, leaseq.storage.store), and the replay of
their log records (DEAD, REDRIVE, MOVE, DEL, CLOCK).  Driven by the commands
a client sends (tests/unit/core.py: ``daemon.dispatch.execute`` with no
socket, on the store of a real data directory), and by the store's
transitions where no command reaches.  The clock is the test's: every call
gets its ``now``; every test has its own data directory."""

from __future__ import annotations

import os
import tempfile

import pytest
from core import (LEASE, T0, ack, call, claim, client_of, close, crash, datadir_of, delete, extend, nack,
                  nack_dead, new_queue, open_store, push, push_key, ticket_of)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_state import digest, index_counts, log_records, provenance

from leaseq.storage import queries, records
from leaseq.storage.recovery import Replayer, read_log
from leaseq.storage.store import Store
from leaseq.storage.config import ASYNC, MEMORY, QueueConfig
from leaseq.storage.job import COMPLETED, DEAD, DELAYED, IN_FLIGHT, READY, Job
from leaseq.storage.jobtable import PureJobTable
from leaseq.storage.queries import SCOPE_CODES

DAY = 86_400_000


def ids(jobs):
    return [j.id for j in jobs]


def redrive(store, q, now):
    """QREDRIVE on a queue with dead jobs: all of them back to ready; returns
    their ids (on a dead-letter queue, its ready jobs go back to their sources too)."""
    q.fold(now)
    dead = [jid for _, jid in q.indexes.dead]
    assert call(client_of(store), "QREDRIVE", q.name, now=now) >= len(dead)
    return dead


def move_back(store, dlq, now):
    """QREDRIVE on a dead-letter queue: its ready jobs back to their sources;
    returns {source name: [(id in dlq, new id in source), ...]}."""
    dlq.fold(now)
    by_source: dict[bytes, list] = {}
    for job in queries.claimable(dlq, now, len(dlq.indexes.ready)):
        if job.origin is not None and job.origin.source != dlq.name:
            by_source.setdefault(job.origin.source, []).append(job)
    moved, next_ids = {}, {}
    for name, jobs in by_source.items():
        source = store.queues.get(name)
        first = source.next_id if source is not None else 1
        moved[name] = [(j.id, first + i) for i, j in enumerate(jobs)]
    dead_here = len(dlq.indexes.dead)          # jobs dead in the dead-letter queue itself are redriven in place
    assert call(client_of(store), "QREDRIVE", dlq.name, now=now) == dead_here + sum(map(len, moved.values()))
    return moved


class FakeHolder:
    """Stands for the daemon's connection that holds SESSION / QWORK leases."""

    def __init__(self):
        self.held = []
        self.ended = []

    def hold(self, queue, job):
        job.holder = self
        self.held.append(job.id)

    def lease_ended(self, job):
        self.ended.append(job.id)


def stop(store, clean):
    """``clean``: a graceful stop (``close``); else the process dies after the
    end of its event-loop turn: the log is written and fsynced, nothing else runs."""
    if clean:
        close(store)
    else:
        crash(store)


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def opened():
    """Stores opened by a test; whichever is still open at the end is closed."""
    stores = []
    yield stores
    for s in stores:
        if not datadir_of(s).closed:
            close(s)


@pytest.fixture
def store(data_dir, opened):
    s = open_store(data_dir, T0)
    opened.append(s)
    return s


@pytest.fixture
def reopen(data_dir, opened):
    def _reopen(store, now, clean=False):
        stop(store, clean)
        s = open_store(data_dir, now)
        opened.append(s)
        return s
    return _reopen


def deliver_until_dead(store, q, now, how):
    """Claim the queue's only job again and again, ending each lease by
    ``how`` (``expire`` or ``nack``); returns (successful claims, now)."""
    delivered = 0
    while True:
        got = claim(store, q, now)
        if not got:
            return delivered, now
        delivered += 1
        assert got[0].deliveries == delivered
        assert delivered <= 100, "never dead-lettered"
        if how == "nack":
            assert nack(store, q, [got[0].token], now) == 1
            now += 1
        else:
            now += LEASE


# -- dead on the MAXDELIVERIES+1-th delivery ----------------------------------------------------------

@pytest.mark.parametrize("how", ["expire", "nack"])
@pytest.mark.parametrize("limit", [1, 2, 5])
def test_queue_maxdeliveries_dead_letters_on_the_attempt_after_the_last_allowed(store, limit, how):
    q = new_queue(store, maxdeliveries=limit)
    (job,) = push(store, q)
    delivered, now = deliver_until_dead(store, q, T0, how)
    assert delivered == limit
    assert job.state is DEAD and job.dead_reason == b"max-deliveries"
    assert job.deliveries == limit                 # the refused attempt is not a delivery
    assert job.token is None
    assert index_counts(q) == {"ready": 0, "delayed": 0, "in_flight": 0, "dead": 1, "completed": 0,
                               "jobs": 1, "keys": 0}
    assert q.counters.dead_lettered == 1
    assert job.retain_until == now + q.config.retain_dead


@pytest.mark.parametrize("queue_limit, job_limit, expected", [
    (0, 1, 1), (0, 3, 3),          # the queue is unlimited, the job is not
    (5, 2, 2),                      # the job's own limit is lower
    (1, 3, 3),                      # ... or higher: the job's limit wins
    (4, 0, 4),                      # no limit of its own: the queue's
])
def test_per_job_max_deliveries_overrides_the_queue(store, queue_limit, job_limit, expected):
    q = new_queue(store, maxdeliveries=queue_limit)
    (job,) = push(store, q, max_deliveries=job_limit)
    delivered, _ = deliver_until_dead(store, q, T0, "expire")
    assert delivered == expected
    assert job.state is DEAD and job.dead_reason == b"max-deliveries"


def test_no_maxdeliveries_means_unlimited(store):
    q = new_queue(store)
    (job,) = push(store, q)
    now = T0
    for i in range(1, 51):
        assert ids(claim(store, q, now)) == [1]
        now += LEASE
    assert job.deliveries == 50 and job.state is IN_FLIGHT
    assert q.counters.dead_lettered == 0


def test_doomed_job_is_skipped_and_the_claim_gets_the_next_ones(store):
    q = new_queue(store, maxdeliveries=1)
    push(store, q, n=3)
    (first,) = claim(store, q, T0)
    nack(store, q, [first.token], T0)          # ready again, first in claim order, at its limit
    got = claim(store, q, T0, count=2)
    assert ids(got) == [2, 3]
    assert first.state is DEAD
    assert (len(q.indexes.ready), len(q.indexes.leases), len(q.indexes.dead)) == (0, 2, 1)


def test_a_job_at_its_limit_is_not_interrupted_while_in_flight(store):
    q = new_queue(store, maxdeliveries=1)
    push(store, q)
    (job,) = claim(store, q, T0)
    assert claim(store, q, T0 + 1) == []
    assert extend(store, q, [job.token], T0 + 500, lease=5000) == 1
    assert job.state is IN_FLIGHT and job.deliveries == 1
    assert ack(store, q, [job.token], T0 + 5000) == 1
    assert len(q.jobs) == 0 and q.counters.dead_lettered == 0


def test_expired_lease_of_a_job_at_its_limit_can_still_be_acked_until_someone_claims(store):
    q = new_queue(store, maxdeliveries=1)
    push(store, q)
    (job,) = claim(store, q, T0)
    token = job.token
    q.fold(T0 + LEASE)
    assert job.state is READY and q.job_for_token(token) is job
    assert claim(store, q, T0 + LEASE) == []           # now it dies: the old token is stale
    assert job.state is DEAD
    assert q.job_for_token(token) is None
    assert ack(store, q, [token], T0 + LEASE) == 0


def test_nack_dead_dead_letters_now_with_reason_nack_and_the_error(store):
    q = new_queue(store, maxdeliveries=10)
    push(store, q)
    (job,) = claim(store, q, T0)
    assert nack_dead(store, q, [job.token], T0 + 5, error=b"fatal") == 1
    assert job.state is DEAD and job.dead_reason == b"nack"
    assert job.last_error == b"fatal" and job.deliveries == 1 and job.token is None
    assert job.retain_until == T0 + 5 + q.config.retain_dead
    assert q.counters.dead_lettered == 1
    assert claim(store, q, T0 + 10) == []


# -- EXPIRE ----------------------------------------------------------------------------------------------

def test_queue_expire_dead_letters_a_job_older_than_expire_at_claim_time(store):
    q = new_queue(store, expire=1000)
    push(store, q, n=2)
    assert ids(claim(store, q, T0 + 1000)) == [1]           # exactly expire old: still delivered
    assert claim(store, q, T0 + 1001) == []                 # older: dead instead
    job = q.jobs[2]
    assert job.state is DEAD and job.dead_reason == b"expired" and job.deliveries == 0
    assert q.counters.dead_lettered == 1


@pytest.mark.parametrize("queue_expire, job_expire, alive_at, dead_at", [
    (0, 500, 500, 501),             # only the job expires
    (5000, 500, 500, 501),          # the job's own EXPIRE is shorter
    (500, 5000, 5000, 5001),        # ... or longer: the job's wins
    (700, 0, 700, 701),             # none of its own: the queue's
])
def test_per_job_expire_overrides_the_queue(data_dir, opened, queue_expire, job_expire, alive_at, dead_at):
    for at, alive in ((alive_at, True), (dead_at, False)):
        store = open_store(data_dir / str(at), T0)
        opened.append(store)
        q = new_queue(store, expire=queue_expire)
        (job,) = push(store, q, expire_ms=job_expire)
        got = claim(store, q, T0 + at)
        assert (ids(got) == [1]) is alive
        assert (job.state is DEAD) is (not alive)
        if not alive:
            assert job.dead_reason == b"expired"


def test_a_leased_job_is_not_interrupted_by_expire(store):
    q = new_queue(store, expire=1000)
    push(store, q)
    (job,) = claim(store, q, T0 + 900, lease=10_000)
    q.fold(T0 + 5000)
    assert job.state is IN_FLIGHT
    assert extend(store, q, [job.token], T0 + 5000, lease=10_000) == 1
    assert job.state is IN_FLIGHT
    assert ack(store, q, [job.token], T0 + 6000) == 1
    assert q.counters.dead_lettered == 0 and len(q.jobs) == 0


def test_a_leased_job_past_expire_dies_when_it_would_be_delivered_again(store):
    q = new_queue(store, expire=1000)
    push(store, q)
    (job,) = claim(store, q, T0 + 900)
    assert claim(store, q, T0 + 900 + LEASE) == []       # the lease expired: next delivery is refused
    assert job.state is DEAD and job.dead_reason == b"expired" and job.deliveries == 1


def test_a_delayed_job_visible_after_its_expire_dies_instead_of_being_delivered(store):
    q = new_queue(store, expire=1000)
    (job,) = push(store, q, delay=2000)
    assert claim(store, q, T0 + 1999) == []
    assert job.state is DELAYED
    assert claim(store, q, T0 + 2000) == []
    assert job.state is DEAD and job.dead_reason == b"expired"


# -- DEADLETTER queue ----------------------------------------------------------------------------------------

def test_dead_letter_queue_is_created_on_demand_with_the_default_config(store):
    store.default_config = QueueConfig(lease=4321, retain_dead=1234, durability=ASYNC)
    q = new_queue(store, maxdeliveries=1, deadletter="dlq")
    assert b"dlq" not in store.queues
    push(store, q)
    (job,) = claim(store, q, T0)
    nack(store, q, [job.token], T0, error=b"boom")
    assert claim(store, q, T0 + 1) == []
    dlq = store.queues[b"dlq"]
    assert dlq.config == store.default_config
    assert dlq.durability == ASYNC
    assert dlq.qid != q.qid


def test_dead_lettered_job_moves_to_the_target_with_provenance(store):
    q = new_queue(store, maxdeliveries=2, deadletter="dlq")
    dlq = new_queue(store, b"dlq")
    push(store, dlq, n=2)                               # the target's ids 1-2 are taken
    push(store, q, n=3, priority=7, payload=b"src")     # 1-3
    jobs = claim(store, q, T0, count=3)
    token = jobs[1].token
    nack(store, q, [token], T0, error=b"first")
    (again,) = claim(store, q, T0 + 1)
    assert again.id == 2
    token = again.token
    nack(store, q, [token], T0 + 1, error=b"second")
    assert claim(store, q, T0 + 2) == []                # 2 dies: third attempt
    assert 2 not in q.jobs
    assert q.job_for_token(token) is None
    copy = dlq.jobs[3]                                  # a new id in the target
    assert (copy.payload, copy.priority, copy.state, copy.deliveries) == (b"src2", 7, READY, 0)
    assert copy.enqueued_at == T0 + 2
    assert provenance(copy) == (b"q", 2, 2, b"max-deliveries")
    assert copy.last_error == b"second"
    assert copy.key is None and copy.token is None
    assert q.counters.dead_lettered == 1
    assert (len(q.indexes.dead), len(dlq.indexes.dead)) == (0, 0)
    assert [j.id for j in queries.claimable(dlq, T0 + 2, 10)] == [3, 1, 2]     # its priority came along
    assert dlq.next_id == 4


def test_dead_letter_reasons_nack_and_expired_in_the_target(store):
    q = new_queue(store, deadletter="dlq", expire=1000)
    push(store, q, n=2)
    (job,) = claim(store, q, T0)
    nack_dead(store, q, [job.token], T0, error=b"bad input")
    assert claim(store, q, T0 + 1001) == []
    dlq = store.queues[b"dlq"]
    assert {provenance(j) for j in dlq.jobs.values()} == {(b"q", 1, 1, b"nack"), (b"q", 2, 0, b"expired")}
    assert dlq.jobs[1].last_error == b"bad input" and dlq.jobs[2].last_error is None
    assert len(q.jobs) == 0 and q.counters.dead_lettered == 2


def test_dead_letter_is_logged_as_one_dead_record_with_pairs(store, data_dir):
    q = new_queue(store, maxdeliveries=1, deadletter="dlq")
    push(store, q, n=2)
    claim(store, q, T0, count=2)
    datadir_of(store).wal.flush()
    before = len(log_records(data_dir))
    assert claim(store, q, T0 + LEASE, count=2) == []
    datadir_of(store).wal.flush()
    added = [r for r in log_records(data_dir)[before:] if r[0] != records.EXPIRE]   # (notes of leases that ran out)
    assert [t for t, _ in added] == [records.TXN]      # the new queue, its ids and the DEAD: one write
    inner = [(t, records.decode(t, b)) for t, b in added[0][1][0]]
    assert [t for t, _ in inner] == [records.QUEUE, records.IDMARK, records.DEAD]
    dlq = store.queues[b"dlq"]
    assert inner[-1][1] == (q.qid, T0 + LEASE, records.REASON_CODES[b"max-deliveries"], dlq.qid,
                            [(1, 1), (2, 2)])


def test_several_reasons_in_one_claim_are_one_txn(store, data_dir):
    q = new_queue(store, maxdeliveries=1, deadletter="dlq", expire=5000)
    push(store, q)                                       # 1: will exceed its deliveries
    push(store, q, delay=6000)                           # 2: will be expired when visible
    claim(store, q, T0)
    datadir_of(store).wal.flush()
    before = len(log_records(data_dir))
    assert claim(store, q, T0 + 6000, count=5) == []
    datadir_of(store).wal.flush()
    added = [r for r in log_records(data_dir)[before:] if r[0] != records.EXPIRE]   # (notes of leases that ran out)
    assert [t for t, _ in added] == [records.TXN]
    inner = [(t, records.decode(t, b)) for t, b in added[0][1][0]]
    deads = sorted((f[2], f[4]) for t, f in inner if t == records.DEAD)
    assert [reason for reason, _ in deads] == [1, 3]
    assert sorted(p[0] for _, pairs in deads for p in pairs) == [1, 2]
    dlq = store.queues[b"dlq"]
    assert sorted(provenance(j) for j in dlq.jobs.values()) == [(b"q", 1, 1, b"max-deliveries"),
                                                               (b"q", 2, 0, b"expired")]


def test_jobs_dead_lettered_by_one_claim_arrive_in_claim_order_whatever_their_reasons(store):
    """§1.8: a claim dead-letters jobs on the way, in claim order; the
    dead-letter queue gets them in that order (they used to go reason by
    reason: 1, 3, then 2)."""
    q = new_queue(store, deadletter="dlq")
    push(store, q, max_deliveries=1)                     # 1: will exceed its deliveries
    push(store, q, expire_ms=5000)                       # 2: will be expired
    push(store, q, max_deliveries=1)                     # 3: will exceed its deliveries
    nack(store, q, [j.token for j in claim(store, q, T0, count=3)], T0)    # all handed out before: one band
    assert claim(store, q, T0 + 6000, count=5) == []
    dlq = store.queues[b"dlq"]
    assert [provenance(dlq.jobs[i])[1:] for i in sorted(dlq.jobs)] == [(1, 1, b"max-deliveries"),
                                                                        (2, 1, b"expired"),
                                                                        (3, 1, b"max-deliveries")]


def test_memory_queue_dead_letter_still_moves_the_job_live(store):
    q = new_queue(store, durability=MEMORY, maxdeliveries=1, deadletter="dlq")
    push(store, q)
    claim(store, q, T0)
    assert claim(store, q, T0 + LEASE) == []
    assert len(q.jobs) == 0
    assert provenance(store.queues[b"dlq"].jobs[1]) == (b"q", 1, 1, b"max-deliveries")


# -- dead in its own queue: RETAIN-DEAD ------------------------------------------------------------------------

def test_dead_job_without_deadletter_stays_for_retain_dead_then_fold_removes_it(store):
    q = new_queue(store, maxdeliveries=1, retain_dead=5000)
    push(store, q, n=2)
    (job,) = claim(store, q, T0)
    nack(store, q, [job.token], T0)
    assert ids(claim(store, q, T0 + 10)) == [2]
    assert job.state is DEAD and job.retain_until == T0 + 5010
    assert list(q.indexes.dead) == [(T0 + 5010, 1)]
    q.fold(T0 + 5009)
    assert job.state is DEAD and 1 in q.jobs
    q.fold(T0 + 5010)
    assert 1 not in q.jobs and len(q.indexes.dead) == 0
    assert q.counters.dead_lettered == 1
    assert full_scan(q, 10) == [2]


def test_dead_jobs_are_neither_claimable_nor_peeked(store):
    q = new_queue(store, maxdeliveries=1)
    push(store, q)
    claim(store, q, T0)
    assert claim(store, q, T0 + LEASE) == []
    assert queries.claimable(q, T0 + 10 * LEASE, 10) == []
    assert queries.live(q) == 0 and len(q.indexes.dead) == 1


def test_retain_dead_uses_the_configuration_at_the_time_of_death(store):
    q = new_queue(store, maxdeliveries=1, retain_dead=100)
    push(store, q, n=2)
    claim(store, q, T0, count=2)
    assert claim(store, q, T0 + LEASE) == []           # both die
    store.set_config(q, q.config.with_options(retain_dead=DAY), T0 + LEASE)
    assert {j.retain_until for j in q.jobs.values()} == {T0 + LEASE + 100}
    q.fold(T0 + LEASE + 100)
    assert len(q.jobs) == 0


# -- the latest dead letters (what the status page lists) ------------------------------------------------------------

def test_latest_buried_are_the_jobs_that_died_last_newest_first(store):
    q = new_queue(store)
    push(store, q, n=4)
    jobs = {job.id: job for job in claim(store, q, T0, count=4)}
    for now, jid in enumerate((3, 1, 4), start=T0 + 1):      # they die out of id order; 2 lives
        nack_dead(store, q, [jobs[jid].token], now)
    assert ids(queries.latest_buried(q, 2)) == [4, 1]
    assert ids(queries.latest_buried(q, 10)) == [4, 1, 3]


def test_latest_dead_lettered_are_the_newest_arrivals_with_provenance_within_the_look(store):
    q = new_queue(store, deadletter="dlq")
    dlq = new_queue(store, b"dlq")
    push(store, q, n=3)
    for job in claim(store, q, T0, count=3):
        nack_dead(store, q, [job.token], T0 + 1)        # dlq ids 1-3, each with provenance
    push(store, dlq, n=2)                               # 4-5: pushed there, no provenance
    assert ids(queries.latest_dead_lettered(dlq, 2, look_at=10)) == [3, 2]
    assert ids(queries.latest_dead_lettered(dlq, 5, look_at=3)) == [3]    # the look stops at the third newest
    assert queries.latest_dead_lettered(q, 5, look_at=10) == []


# -- QREDRIVE: dead jobs back to ready ---------------------------------------------------------------------------

def test_redrive_makes_dead_jobs_ready_with_deliveries_reset_and_first_in_claim_order(store):
    q = new_queue(store, maxdeliveries=1)
    push(store, q, n=3)                                  # 1-3
    (job,) = claim(store, q, T0, count=1)
    assert ids(claim(store, q, T0 + LEASE)) == [2]       # 1 dies on the way
    assert job.state is DEAD
    assert redrive(store, q, T0 + LEASE) == [1]
    assert job.state is READY and job.deliveries == 0 and job.dead_reason is None
    assert job.retain_until == 0 and len(q.indexes.dead) == 0
    push(store, q, priority=5, now=T0 + LEASE)            # 4: never delivered
    assert [j.id for j in queries.claimable(q, T0 + LEASE, 5)] == [1, 3, 4]
    # a full new budget of deliveries
    assert ids(claim(store, q, T0 + LEASE)) == [1]
    assert job.deliveries == 1


def test_redriven_job_keeps_payload_priority_key_and_last_error(store):
    q = new_queue(store, maxdeliveries=1)
    jid = push_key(store, q, b"k")
    (job,) = claim(store, q, T0)
    nack_dead(store, q, [job.token], T0, error=b"why")
    redrive(store, q, T0 + 1)
    assert (job.id, job.payload, job.priority, job.key) == (jid, b"keyed1", 5, b"k")
    assert job.last_error == b"why"
    assert q.keys == {b"k": [jid]}


# -- moving back from a dead-letter queue -------------------------------------------------------------------------

def _dead_letter_two(store):
    q = new_queue(store, maxdeliveries=1, deadletter="dlq")
    push(store, q, n=2, payload=b"src")
    a, b = claim(store, q, T0, count=2)
    nack(store, q, [a.token], T0, error=b"broken")
    nack(store, q, [b.token], T0)
    assert claim(store, q, T0 + 1, count=2) == []
    return q, store.queues[b"dlq"]


def test_move_back_returns_ready_jobs_to_their_source_with_new_ids_and_no_provenance(store):
    q, dlq = _dead_letter_two(store)
    push(store, q, now=T0 + 2)                             # 3: never delivered
    before_next = q.next_id
    moved = move_back(store, dlq, T0 + 5)
    assert moved == {b"q": [(1, before_next), (2, before_next + 1)]}
    assert len(dlq.jobs) == 0 and len(dlq.indexes.ready) == 0
    new_a, new_b = q.jobs[before_next], q.jobs[before_next + 1]
    for job in (new_a, new_b):
        assert job.origin is None and job.deliveries == 0 and job.state is READY
        assert job.enqueued_at == T0 + 5
    assert (new_a.payload, new_b.payload) == (b"src1", b"src2")
    assert (new_a.last_error, new_b.last_error) == (b"broken", None)
    # ready again: before the never-delivered job 3
    assert [j.id for j in queries.claimable(q, T0 + 5, 5)] == [before_next, before_next + 1, 3]
    assert 1 not in q.jobs and 2 not in q.jobs               # the old ids are not reused
    assert ids(claim(store, q, T0 + 5)) == [before_next]


def test_move_back_into_a_dropped_source_recreates_it_with_the_default_config(store):
    q, dlq = _dead_letter_two(store)
    store.drop_queue(q, T0 + 2)
    store.default_config = QueueConfig(lease=2222)
    move_back(store, dlq, T0 + 3)
    src = store.queues[b"q"]
    assert src is not q and src.config == QueueConfig(lease=2222)
    new_ids = sorted(src.jobs)
    assert len(new_ids) == 2 and new_ids[0] > 2 and new_ids[1] == new_ids[0] + 1   # above every id used
    assert len(dlq.jobs) == 0


def test_move_back_leaves_jobs_without_provenance_and_in_flight_jobs_in_place(store):
    q, dlq = _dead_letter_two(store)
    push(store, dlq, now=T0 + 2)                            # 3: pushed straight to the dlq
    (held,) = claim(store, dlq, T0 + 2)                      # 1: in flight in the dlq
    moved = move_back(store, dlq, T0 + 3)
    assert [old for old, _ in moved[b"q"]] == [2]
    assert sorted(dlq.jobs) == [1, 3] and held.state is IN_FLIGHT


# -- QDEL: any state ----------------------------------------------------------------------------------------------

def jobs_in_every_state(store, q, now=T0):
    """Job ids by state; the queue needs maxdeliveries=1 and retain_completed."""
    push(store, q, n=6)                                    # 1-6
    push(store, q, delay=DAY)                               # 7: delayed
    a, b, c, d = claim(store, q, now, count=4)              # 1-4
    ack(store, q, [a.token], now)                           # 1: completed (retained)
    nack(store, q, [b.token], now)                          # 2: ready at its limit...
    assert ids(claim(store, q, now, count=1, lease=10 * LEASE)) == [5]   # ... and dies on the way
    # 3 in flight (expires at now + LEASE), 4 in flight, 5 in flight (long), 6 ready
    q.fold(now + LEASE)                                     # 3 and 4: expired, tokens still work
    extend(store, q, [d.token], now + LEASE)                # 4: in flight again
    states = {jid: j.state for jid, j in q.jobs.items()}
    assert states == {1: COMPLETED, 2: DEAD, 3: READY, 4: IN_FLIGHT, 5: IN_FLIGHT, 6: READY, 7: DELAYED}
    return now + LEASE


def test_delete_removes_jobs_in_every_state_and_makes_their_leases_stale(store):
    q = new_queue(store, maxdeliveries=1, retain_completed=DAY)
    now = jobs_in_every_state(store, q)
    tokens = {jid: j.token for jid, j in q.jobs.items() if j.token is not None}
    assert set(tokens) == {3, 4, 5}                          # 3's expired lease still has its token
    assert delete(store, q, list(range(1, 8)) + [99], now) == 7
    assert len(q.jobs) == 0
    assert index_counts(q) == {"ready": 0, "delayed": 0, "in_flight": 0, "dead": 0, "completed": 0,
                               "jobs": 0, "keys": 0}
    for token in tokens.values():
        assert q.job_for_token(token) is None
    assert ack(store, q, list(tokens.values()), now) == 0
    assert nack(store, q, list(tokens.values()), now) == 0
    assert extend(store, q, list(tokens.values()), now) == 0
    assert queries.claimable(q, now + DAY, 10) == []
    assert q.counters.acked == 1                             # deleting is not acking


@pytest.mark.parametrize("jid", [1, 2, 3, 4, 5, 6, 7])
def test_delete_of_one_job_leaves_the_others_untouched(store, jid):
    q = new_queue(store, maxdeliveries=1, retain_completed=DAY)
    now = jobs_in_every_state(store, q)
    before = {i: (j.state, j.token) for i, j in q.jobs.items() if i != jid}
    counts = index_counts(q)
    state = q.jobs[jid].state
    assert delete(store, q, [jid], now) == 1
    assert {i: (j.state, j.token) for i, j in q.jobs.items()} == before
    name = {READY: "ready", DELAYED: "delayed", IN_FLIGHT: "in_flight", DEAD: "dead",
            COMPLETED: "completed"}[state]
    counts[name] -= 1
    counts["jobs"] -= 1
    assert index_counts(q) == counts


def test_delete_is_logged_as_one_del_record(store, data_dir):
    q = new_queue(store)
    push(store, q, n=3)
    datadir_of(store).wal.flush()
    before = len(log_records(data_dir))
    delete(store, q, [3, 1], T0 + 1)
    datadir_of(store).wal.flush()
    assert log_records(data_dir)[before:] == [(records.DEL, (q.qid, T0 + 1, (1, 3)))]


# -- RETAIN-COMPLETED ------------------------------------------------------------------------------------------------

def test_retain_completed_keeps_acked_jobs_completed_then_fold_removes_them(store):
    q = new_queue(store, retain_completed=2000)
    push(store, q, n=2)
    a, b = claim(store, q, T0, count=2)
    token = a.token
    assert ack(store, q, [token], T0 + 100) == 1
    assert a.state is COMPLETED and a.retain_until == T0 + 2100 and a.token is None
    assert q.job_for_token(token) is None
    assert ack(store, q, [token], T0 + 100) == 0             # acking twice is harmless
    assert q.counters.acked == 1
    assert list(q.indexes.completed) == [(T0 + 2100, 1)]
    assert [j.id for j in queries.claimable(q, T0 + 2099, 10)] == [2]      # b's lease expired; a is not claimable
    assert a.state is COMPLETED and queries.live(q) == 1
    q.fold(T0 + 2100)
    assert 1 not in q.jobs and len(q.indexes.completed) == 0
    assert b.state is READY                                  # its lease expired meanwhile


def test_without_retain_completed_an_acked_job_is_gone_at_once(store):
    q = new_queue(store)
    push(store, q)
    (job,) = claim(store, q, T0)
    ack(store, q, [job.token], T0)
    assert len(q.jobs) == 0 and len(q.indexes.completed) == 0 and job.state is None


def test_completed_job_can_be_deleted_before_its_retention_ends(store):
    q = new_queue(store, retain_completed=DAY)
    push(store, q)
    (job,) = claim(store, q, T0)
    ack(store, q, [job.token], T0)
    assert delete(store, q, [1], T0 + 1) == 1
    assert len(q.jobs) == 0 and len(q.indexes.completed) == 0
    q.fold(T0 + 2 * DAY)                                     # nothing left to fold
    assert len(q.jobs) == 0


# -- dedupe keys ---------------------------------------------------------------------------------------------------------

def keyed_job_in_state(store, q, state):
    """A job with key b"k" in ``state`` (queue: maxdeliveries=1, retain_completed)."""
    jid = push_key(store, q, b"k", delay=DAY if state is DELAYED else 0)
    job = q.jobs[jid]
    if state in (IN_FLIGHT, DEAD, COMPLETED):
        claim(store, q, T0)
        if state is COMPLETED:
            ack(store, q, [job.token], T0)
        elif state is DEAD:
            nack_dead(store, q, [job.token], T0)
    assert job.state is state
    return jid


SCOPE_TABLE = {
    b"queued": {DELAYED, READY},
    b"active": {DELAYED, READY, IN_FLIGHT},
    b"exists": {DELAYED, READY, IN_FLIGHT, DEAD, COMPLETED},
}


@pytest.mark.parametrize("scope", [b"queued", b"active", b"exists"])
@pytest.mark.parametrize("state", [DELAYED, READY, IN_FLIGHT, DEAD, COMPLETED], ids=lambda s: s.decode())
def test_duplicate_of_per_scope_and_state(store, state, scope):
    q = new_queue(store, maxdeliveries=1, retain_completed=DAY)
    jid = keyed_job_in_state(store, q, state)
    dup = queries.duplicate_of(q, b"k", scope)
    if state in SCOPE_TABLE[scope]:
        assert dup is q.jobs[jid]
        assert push_key(store, q, b"k", scope, now=T0 + 1) == jid
        assert q.counters.duplicates == 1 and q.counters.pushed == 1
    else:
        assert dup is None
        new = push_key(store, q, b"k", scope, now=T0 + 1)
        assert new != jid and q.keys[b"k"] == [jid, new]     # both hold the key
        assert q.counters.duplicates == 0 and q.counters.pushed == 2


def test_keys_are_per_queue(store):
    a = new_queue(store, b"a")
    b = new_queue(store, b"b")
    assert push_key(store, a, b"k") == 1
    assert push_key(store, b, b"k") == 1
    assert a.counters.duplicates == 0 and b.counters.duplicates == 0
    assert push_key(store, a, b"k") == 1 and a.counters.duplicates == 1


def _gone_by_ack(store, q, jid):
    (job,) = claim(store, q, T0)
    ack(store, q, [job.token], T0)


def _gone_by_delete(store, q, jid):
    delete(store, q, [jid], T0)


def _gone_to_dead_letter_queue(store, q, jid):
    (job,) = claim(store, q, T0)
    nack_dead(store, q, [job.token], T0)


def _gone_by_retention(store, q, jid):
    (job,) = claim(store, q, T0)
    nack_dead(store, q, [job.token], T0)          # dead in its own queue: retained
    q.fold(T0 + q.config.retain_dead)


@pytest.mark.parametrize("how, options", [
    (_gone_by_ack, {}),
    (_gone_by_delete, {}),
    (_gone_to_dead_letter_queue, {"deadletter": "dlq"}),
    (_gone_by_retention, {"retain_dead": 500}),
])
def test_key_is_removed_when_its_job_goes(store, how, options):
    q = new_queue(store, **options)
    jid = push_key(store, q, b"k", b"exists")
    how(store, q, jid)
    assert jid not in q.jobs
    assert q.keys == {}
    assert queries.duplicate_of(q, b"k", b"exists") is None
    assert push_key(store, q, b"k", b"exists", now=T0 + DAY) > jid


def test_key_of_a_retained_completed_job_goes_when_retention_ends(store):
    q = new_queue(store, retain_completed=1000)
    jid = push_key(store, q, b"k", b"exists")
    (job,) = claim(store, q, T0)
    ack(store, q, [job.token], T0)
    assert push_key(store, q, b"k", b"exists", now=T0 + 999) == jid
    assert push_key(store, q, b"k", b"exists", now=T0 + 1000) != jid


def test_dead_lettered_copy_carries_no_key(store):
    q = new_queue(store, deadletter="dlq")
    push_key(store, q, b"k")
    (job,) = claim(store, q, T0)
    nack_dead(store, q, [job.token], T0)
    dlq = store.queues[b"dlq"]
    assert dlq.keys == {} and dlq.jobs[1].key is None


def test_key_still_held_by_an_older_job_is_found_after_a_newer_holder_goes(store):
    # docs/semantics.md §3.2: "while a job with the same key exists in the scope,
    # QPUSH creates nothing".  Job 1 holds k and is in flight, so a `queued` push of k creates
    # job 2; job 1 is nacked (ready again, still with k); job 2 is deleted.  Job 1
    # is a ready job with key k: the next `queued` push of k is its duplicate.
    q = new_queue(store)
    first = push_key(store, q, b"k")
    (job,) = claim(store, q, T0)
    second = push_key(store, q, b"k")
    assert second != first
    nack(store, q, [job.token], T0)
    delete(store, q, [second], T0)
    assert q.jobs[first].state is READY and q.jobs[first].key == b"k"
    assert queries.duplicate_of(q, b"k", b"queued") is q.jobs[first]
    assert push_key(store, q, b"k", now=T0 + 1) == first


def test_keys_survive_reopen(store, reopen):
    q = new_queue(store, maxdeliveries=1, retain_completed=DAY)
    held = {}
    for state, key in ((IN_FLIGHT, b"f"), (COMPLETED, b"c"), (DEAD, b"x"), (DELAYED, b"d"), (READY, b"r")):
        jid = push_key(store, q, key, delay=DAY if state is DELAYED else 0)
        if state is not DELAYED and state is not READY:
            (job,) = claim(store, q, T0)
            assert job.id == jid
            if state is COMPLETED:
                ack(store, q, [job.token], T0)
            elif state is DEAD:
                nack_dead(store, q, [job.token], T0)
        held[key] = jid
    gone = push_key(store, q, b"g")
    delete(store, q, [gone], T0)
    assert q.keys == {key: [jid] for key, jid in held.items()}
    store = reopen(store, T0 + 1)
    q = store.queues[b"q"]
    assert q.keys == {key: [jid] for key, jid in held.items()}
    for key, jid in held.items():
        assert queries.duplicate_of(q, key, b"exists") is q.jobs[jid]
    assert queries.duplicate_of(q, b"g", b"exists") is None
    assert push_key(store, q, b"r", now=T0 + 1) == held[b"r"]
    assert push_key(store, q, b"f", now=T0 + 1) not in held.values()      # in flight: not `queued`


# -- QSCAN order ---------------------------------------------------------------------------------------------------------

def full_scan(q, count, state=None, between=None):
    """Walk the cursor from 0 to 0; ``between(step)`` runs between calls."""
    cursor, seen, step = 0, [], 0
    while True:
        cursor, jobs = queries.scan(q, cursor, count, state)
        seen += [j.id for j in jobs]
        if cursor == 0:
            return seen
        step += 1
        assert step < 100_000
        if between is not None:
            between(step)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 100])
def test_scan_returns_every_job_once_in_ascending_id_order(store, count):
    q = new_queue(store)
    push(store, q, n=20)
    assert full_scan(q, count) == list(range(1, 21))


def test_scan_of_an_empty_queue_ends_at_once(store):
    q = new_queue(store)
    assert queries.scan(q, 0, 10, None) == (0, [])


def test_scan_count_limits_the_jobs_looked_at_and_state_filters_them(store):
    q = new_queue(store, retain_completed=DAY)
    push(store, q, n=6)
    for job in claim(store, q, T0, count=3):          # 1-3 in flight
        if job.id == 2:
            ack(store, q, [job.token], T0)            # 2 completed
    cursor, jobs = queries.scan(q, 0, 3, READY)
    assert jobs == [] and cursor == 3
    cursor, jobs = queries.scan(q, cursor, 3, READY)
    assert [j.id for j in jobs] == [4, 5, 6] and cursor == 0
    assert full_scan(q, 2, IN_FLIGHT) == [1, 3]
    assert full_scan(q, 2, COMPLETED) == [2]
    assert full_scan(q, 2, DEAD) == []


def test_scan_skips_jobs_removed_during_the_scan_and_never_repeats(store):
    q = new_queue(store)
    push(store, q, n=10)
    removed = set()

    def between(step):
        if step == 1:
            delete(store, q, [2, 5, 6], T0)          # one behind the cursor, two ahead
            removed.update((2, 5, 6))
            push(store, q, n=2)                      # 11, 12: added during the scan
    seen = full_scan(q, 3, between=between)
    assert len(seen) == len(set(seen))
    assert set(range(1, 11)) - removed <= set(seen)
    assert not ({5, 6} & set(seen))
    assert seen == sorted(seen)


def test_order_compaction_keeps_the_scan_correct(store):
    q = new_queue(store)
    push(store, q, n=6000)
    compacted = []

    def between(step):
        if step == 3:                                    # cursor at 300: remove most, both sides
            delete(store, q, [i for i in range(1, 6001) if i % 10], T0)
            compacted.append(len(q.jobs.order) if isinstance(q.jobs, PureJobTable) else None)
            push(store, q, n=5)                          # 6001-6005
    seen = full_scan(q, 100, between=between)
    assert compacted and (compacted[0] is None or compacted[0] < 6000)    # the pure table's id list was compacted
    survivors = [i for i in range(1, 6001) if i % 10 == 0]
    assert set(survivors) <= set(seen)
    assert len(seen) == len(set(seen)) and seen == sorted(seen)
    assert set(seen) <= set(range(1, 301)) | set(survivors) | set(range(6001, 6006))
    assert list(q.jobs) == sorted(q.jobs)
    assert full_scan(q, 7) == sorted(q.jobs)


scan_ops = st.lists(st.lists(st.one_of(
    st.tuples(st.just("push"), st.integers(1, 4)),
    st.tuples(st.just("delete"), st.integers(0, 1000)),
    st.tuples(st.just("claim_ack"), st.integers(1, 3)),
    st.tuples(st.just("claim"), st.integers(1, 3)),
    st.tuples(st.just("dead"), st.integers(0, 1000)),
), max_size=4), max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=st.integers(0, 25), count=st.integers(1, 6), between=scan_ops)
def test_scan_returns_every_job_present_for_the_whole_scan_exactly_once(initial, count, between):
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(os.path.join(tmp, "data"), T0)
        try:
            q = new_queue(store, deadletter="dlq")
            if initial:
                push(store, q, n=initial)
            present = set(q.jobs)
            removed = set()
            now = T0
            seen = []
            cursor = 0
            step = 0
            while True:
                cursor, jobs = queries.scan(q, cursor, count, None)
                assert all(j.id in q.jobs for j in jobs)
                seen += [j.id for j in jobs]
                if cursor == 0:
                    break
                for op in (between[step] if step < len(between) else []):
                    now += 1
                    live = sorted(q.jobs)
                    if op[0] == "push":
                        push(store, q, n=op[1], now=now)
                    elif op[0] == "delete" and live:
                        jid = live[op[1] % len(live)]
                        delete(store, q, [jid], now)
                        removed.add(jid)
                    elif op[0] in ("claim", "claim_ack"):
                        got = claim(store, q, now, count=op[1])
                        if op[0] == "claim_ack":
                            ack(store, q, [j.token for j in got], now)
                            removed.update(j.id for j in got)
                    elif op[0] == "dead":
                        flying = [j for j in q.jobs.values() if j.token is not None]
                        if flying:
                            job = flying[op[1] % len(flying)]
                            removed.add(job.id)
                            nack_dead(store, q, [job.token], now)
                step += 1
            assert len(seen) == len(set(seen))
            assert present - removed <= set(seen)
            assert seen == sorted(seen)
        finally:
            close(store)


# -- lease holders ----------------------------------------------------------------------------------------------------------

def held_job(store, q, now=T0, lease=LEASE):
    holder = FakeHolder()
    (job,) = claim(store, q, now, lease=lease, holder=holder)
    assert holder.held == [job.id] and job.holder is holder and holder.ended == []
    return holder, job


def test_holder_is_told_when_its_lease_is_acked(store):
    q = new_queue(store)
    push(store, q)
    holder, job = held_job(store, q)
    ack(store, q, [job.token], T0)
    assert holder.ended == [1] and job.holder is None


def test_holder_is_told_when_its_lease_is_acked_into_retention(store):
    q = new_queue(store, retain_completed=DAY)
    push(store, q)
    holder, job = held_job(store, q)
    ack(store, q, [job.token], T0)
    assert holder.ended == [1] and job.holder is None and job.state is COMPLETED


def test_holder_is_told_when_its_lease_is_nacked_and_nack_counts(store):
    q = new_queue(store)
    push(store, q)
    holder, job = held_job(store, q)
    nack(store, q, [job.token], T0, error=b"e")
    assert holder.ended == [1] and job.holder is None
    assert q.counters.nacked == 1


def test_extend_keeps_the_lease_and_its_holder(store):
    q = new_queue(store)
    push(store, q)
    holder, job = held_job(store, q)
    extend(store, q, [job.token], T0 + 500, lease=5000)
    assert holder.ended == [] and job.holder is holder
    ack(store, q, [job.token], T0 + 600)
    assert holder.ended == [1]


def test_holder_is_told_when_the_expired_lease_is_claimed_again_not_when_it_expires(store):
    q = new_queue(store)
    push(store, q)
    holder, job = held_job(store, q)
    q.fold(T0 + LEASE)                                # expired, folded: the old token still works
    assert job.state is READY and holder.ended == [] and job.holder is holder
    other = FakeHolder()
    claim(store, q, T0 + LEASE, holder=other)
    assert holder.ended == [1]
    assert job.holder is other and other.ended == []


def test_holder_is_told_when_the_expired_lease_is_claimed_again_without_a_fold_first(store):
    q = new_queue(store)
    push(store, q)
    holder, job = held_job(store, q)
    assert ids(claim(store, q, T0 + 2 * LEASE)) == [1]
    assert holder.ended == [1] and job.holder is None


def test_holder_is_told_when_its_job_is_deleted(store):
    q = new_queue(store)
    push(store, q)
    holder, job = held_job(store, q)
    delete(store, q, [1], T0)
    assert holder.ended == [1]


def test_holder_is_told_once_when_its_job_is_nacked_dead(store):
    q = new_queue(store)
    push(store, q)
    holder, job = held_job(store, q)
    nack_dead(store, q, [job.token], T0)
    assert holder.ended == [1] and job.state is DEAD


@pytest.mark.parametrize("options", [{}, {"deadletter": "dlq"}])
def test_holder_is_told_when_its_expired_job_dies_on_the_next_claim(store, options):
    q = new_queue(store, maxdeliveries=1, **options)
    push(store, q)
    holder, job = held_job(store, q)
    assert claim(store, q, T0 + LEASE) == []
    assert holder.ended == [1] and job.holder is None


def test_holder_is_told_when_its_queue_is_dropped(store):
    q = new_queue(store)
    push(store, q)
    holder, job = held_job(store, q)
    store.drop_queue(q, T0)
    assert holder.ended == [1]


def test_release_on_close_ends_the_lease_but_is_not_a_nack(store):
    q = new_queue(store)
    push(store, q, n=2)
    holder = FakeHolder()
    a, b = claim(store, q, T0, count=2, holder=holder)
    store.nack(q, [a, b], T0, None, T0, closed=True)
    assert sorted(holder.ended) == [1, 2]
    assert q.counters.nacked == 0
    assert a.state is READY and b.state is READY and a.deliveries == 1
    assert [j.id for j in queries.claimable(q, T0, 5)] == [1, 2]


def test_a_stale_token_never_reaches_the_holder_twice(store):
    q = new_queue(store)
    push(store, q)
    holder, job = held_job(store, q)
    token = job.token
    ack(store, q, [token], T0)
    assert ack(store, q, [token], T0) == 0
    assert nack(store, q, [token], T0) == 0
    assert holder.ended == [1]


# -- replay: every new transition -----------------------------------------------------------------------------------------
# Each scenario applies transitions live and returns the time after; the test
# stops the store (crash or clean) and compares the recovered state with the live one.

def sc_dead_in_own_queue(store):
    q = new_queue(store, b"q", maxdeliveries=2, retain_dead=DAY)
    push(store, q, n=2)                                   # 1, 2: the queue's limit (2)
    push(store, q, max_deliveries=1)                      # 3: its own limit (1)
    push(store, q, expire_ms=500, delay=LEASE)            # 4: expires before it is visible
    push(store, q)                                        # 5: nacked DEAD
    j1, j2, j3 = claim(store, q, T0, count=3)
    nack(store, q, [j1.token], T0, error=b"e1")
    now = T0 + LEASE                                      # 2 and 3: leases expire
    assert ids(claim(store, q, now, count=5)) == [1, 2, 5]     # 3 and 4 die on the way
    nack_dead(store, q, [q.jobs[5].token], now, error=b"bad")
    nack(store, q, [j1.token], now)
    ack(store, q, [j2.token], now)
    now += 10
    push(store, q, now=now)                               # 6: stays ready
    assert ids(claim(store, q, now)) == [6]               # 1 dies on the way; 6 in flight
    assert {j.id: j.dead_reason for j in q.jobs.values() if j.state is DEAD} == {
        1: b"max-deliveries", 3: b"max-deliveries", 4: b"expired", 5: b"nack"}
    return now


def sc_dead_to_deadletter_queue(store):
    store.default_config = QueueConfig(lease=4321, retain_dead=1234, durability=ASYNC)
    q = new_queue(store, b"q", maxdeliveries=1, deadletter="dlq", expire=5000)
    push(store, q, n=3, priority=3)                       # 1-3
    push(store, q, delay=6000)                            # 4: expired when visible
    j1, j2, j3 = claim(store, q, T0, count=3)
    nack(store, q, [j1.token], T0, error=b"boom")
    nack_dead(store, q, [j2.token], T0, error=b"fatal")  # dlq created here
    now = T0 + 6000
    push(store, q, now=now)                               # 5
    assert ids(claim(store, q, now, count=5)) == [5]      # 1, 3 (max-deliveries), 4 (expired) die
    dlq = store.queues[b"dlq"]
    assert len(dlq.jobs) == 4 and q.counters.dead_lettered == 4
    (c,) = claim(store, dlq, now)                         # the dlq is an ordinary queue
    nack(store, dlq, [c.token], now, error=b"again")
    return now


def sc_dead_to_existing_deadletter_queue(store):
    dlq = new_queue(store, b"dlq", durability=ASYNC)
    push(store, dlq, n=2)
    q = new_queue(store, b"q", maxdeliveries=1, deadletter="dlq")
    push(store, q, n=2)
    claim(store, q, T0, count=2)
    now = T0 + LEASE
    assert claim(store, q, now) == []
    assert sorted(dlq.jobs) == [1, 2, 3, 4]
    return now


def sc_redrive(store):
    q = new_queue(store, b"q", maxdeliveries=1)
    push(store, q, n=4)
    claim(store, q, T0, count=3)
    now = T0 + LEASE
    assert ids(claim(store, q, now)) == [4]               # 1-3 die
    redrive_ids = redrive(store, q, now)
    assert redrive_ids == [1, 2, 3]
    (again,) = claim(store, q, now)                       # 1, deliveries 1 again
    assert again.id == 1 and again.deliveries == 1
    now += 5
    push(store, q, now=now)                               # 5
    return now


def sc_move_back(store):
    q = new_queue(store, b"q", maxdeliveries=1, deadletter="dlq")
    push(store, q, n=3, payload=b"src")
    a, b, c = claim(store, q, T0, count=3)
    nack(store, q, [a.token], T0, error=b"broken")
    now = T0 + LEASE
    assert claim(store, q, now, count=5) == []            # 1-3 to the dlq
    dlq = store.queues[b"dlq"]
    claim(store, dlq, now)                                # one stays in flight in the dlq
    moved = move_back(store, dlq, now + 1)
    assert len(moved[b"q"]) == 2
    now += 2
    (job,) = claim(store, q, now)                         # a moved job: claimed in its source
    assert job.origin is None
    return now


def sc_move_back_to_a_recreated_source(store):
    q = new_queue(store, b"q", maxdeliveries=1, deadletter="dlq")
    push(store, q, n=2)
    claim(store, q, T0, count=2)
    now = T0 + LEASE
    claim(store, q, now)
    store.drop_queue(q, now)
    store.default_config = QueueConfig(lease=2500)
    move_back(store, store.queues[b"dlq"], now + 1)       # "q" created on demand
    assert len(store.queues[b"q"].jobs) == 2 and min(store.queues[b"q"].jobs) > 2
    return now + 1


def sc_delete_every_state(store):
    q = new_queue(store, b"q", maxdeliveries=1, retain_completed=DAY)
    now = jobs_in_every_state(store, q)
    delete(store, q, [1, 2, 3, 5, 7], now)                # completed, dead, expired-ready, in flight, delayed
    push(store, q, now=now)                               # 8
    claim(store, q, now)
    return now


def sc_retain_completed(store):
    q = new_queue(store, b"q", retain_completed=5000)
    push(store, q, n=4)
    a, b, c = claim(store, q, T0, count=3)
    ack(store, q, [a.token], T0)
    now = T0 + 3000
    ack(store, q, [b.token], now)
    q.fold(T0 + 5000)                                     # 1 goes
    now = T0 + 5000
    assert sorted(j.id for j in q.jobs.values() if j.state is COMPLETED) == [2]
    ack(store, q, [c.token], now)                          # an expired lease's token still acks
    return now


def sc_dedupe_keys(store):
    q = new_queue(store, b"q", maxdeliveries=1, retain_completed=DAY, deadletter="dlq")
    push_key(store, q, b"ready")
    push_key(store, q, b"delayed", delay=DAY)
    push_key(store, q, b"flying", b"active")
    push_key(store, q, b"done", b"exists")
    push_key(store, q, b"deleted")
    push_key(store, q, b"to-dlq")
    push_key(store, q, b"ready")                          # a duplicate: nothing new
    claim(store, q, T0, count=5)                          # 1, 3, 4, 5, 6
    ack(store, q, [q.jobs[4].token], T0)
    delete(store, q, [5], T0)
    nack_dead(store, q, [q.jobs[6].token], T0)
    push_key(store, q, b"ready", now=T0 + 1)               # 1 is in flight: a new job 7 holds the key
    return T0 + 1


def sc_clock(store):
    store.set_clock(-12_345, True, T0 + 99)
    store.set_clock(60_000, False, 0)
    store.set_clock(-1, True, T0 + 7)
    q = new_queue(store, b"q")
    push(store, q)
    return T0


SCENARIOS = [sc_dead_in_own_queue, sc_dead_to_deadletter_queue, sc_dead_to_existing_deadletter_queue,
             sc_redrive, sc_move_back, sc_move_back_to_a_recreated_source, sc_delete_every_state,
             sc_retain_completed, sc_dedupe_keys, sc_clock]


@pytest.mark.parametrize("clean", [False, True], ids=["crash", "close"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__[3:])
def test_replay_recovers_the_live_state(store, reopen, scenario, clean):
    now = scenario(store)
    restart = "close" if clean else "crash"
    before = digest(store, now, replayed=True, live_only=True, restarted=restart)
    next_ids = {n: q.next_id for n, q in store.queues.items()}
    store = reopen(store, now, clean)
    assert digest(store, now, replayed=True, live_only=True, restarted=restart) == before
    for name, q in store.queues.items():
        if clean:
            assert q.next_id == next_ids[name]
        else:
            assert q.next_id >= next_ids[name]


@pytest.mark.parametrize("scenario", [sc_dead_in_own_queue, sc_dead_to_deadletter_queue, sc_redrive,
                                      sc_move_back, sc_delete_every_state, sc_retain_completed,
                                      sc_dedupe_keys], ids=lambda f: f.__name__[3:])
def test_replayed_state_equals_live_state_at_every_later_time(tmp_path, opened, scenario):
    live = open_store(tmp_path / "live", T0)
    opened.append(live)
    replayed = open_store(tmp_path / "replayed", T0)
    opened.append(replayed)
    now = scenario(live)
    assert scenario(replayed) == now
    stop(replayed, clean=False)
    replayed = open_store(tmp_path / "replayed", now)
    opened.append(replayed)
    restart = dict(replayed=True, live_only=True, restarted="crash")
    for later in (now, now + LEASE, now + 5000, now + DAY, now + 8 * DAY):
        assert digest(replayed, later, **restart) == digest(live, later, **restart)


def test_replayed_dead_record_recovers_the_target_ids_and_provenance(store, reopen):
    sc_dead_to_deadletter_queue(store)
    dlq = store.queues[b"dlq"]
    expected = {jid: (provenance(j), j.last_error, j.state, j.deliveries) for jid, j in dlq.jobs.items()}
    assert {p[3] for p, _, _, _ in expected.values()} == {b"nack", b"max-deliveries", b"expired"}
    store = reopen(store, T0 + 6000)
    dlq = store.queues[b"dlq"]
    assert {jid: (provenance(j), j.last_error, j.state, j.deliveries) for jid, j in dlq.jobs.items()} == expected
    assert dlq.config == QueueConfig(lease=4321, retain_dead=1234, durability=ASYNC)
    assert sorted(store.queues[b"q"].jobs) == [5]


def test_replayed_redrive_resets_deliveries(store, reopen):
    q = new_queue(store, maxdeliveries=2)
    push(store, q)
    deliver_until_dead(store, q, T0, "nack")
    redrive(store, q, T0 + 100)
    store = reopen(store, T0 + 100)
    job = store.queues[b"q"].jobs[1]
    assert (job.state, job.deliveries, job.dead_reason, job.requeued) == (READY, 0, None, True)
    assert ids(claim(store, store.queues[b"q"], T0 + 100)) == [1]


def test_replayed_delete_leaves_stale_tokens_stale(store, reopen):
    q = new_queue(store)
    push(store, q, n=2)
    a, b = claim(store, q, T0, count=2, lease=DAY)
    tokens = (a.token, b.token)
    delete(store, q, [1], T0)
    store = reopen(store, T0 + 1)
    q = store.queues[b"q"]
    assert q.job_for_token(tokens[0]) is None
    assert q.job_for_token(tokens[1]) is q.jobs[2]
    assert sorted(q.jobs) == [2]


@pytest.mark.parametrize("clean", [False, True], ids=["crash", "close"])
def test_clock_survives_reopen(store, reopen, clean):
    assert store.clock == (0, False, 0)
    store.set_clock(-5000, True, T0 + 123)
    assert store.clock == (-5000, True, T0 + 123)
    store = reopen(store, T0, clean)
    assert store.clock == (-5000, True, T0 + 123)
    store.set_clock(2 ** 40, False, 0)
    store = reopen(store, T0, clean)
    assert store.clock == (2 ** 40, False, 0)


def test_clock_is_a_fsynced_record(store, data_dir):
    mark = store.journal.mark()
    store.set_clock(7, True, 8)
    assert store.journal.ticket_since(mark).fsync
    datadir_of(store).wal.flush()
    assert log_records(data_dir)[-1] == (records.CLOCK, (7, True, 8))


def test_memory_dead_letter_queue_gets_no_jobs_back_after_replay(store, reopen):
    store.default_config = QueueConfig(durability=MEMORY)
    q = new_queue(store, maxdeliveries=1, deadletter="dlq")
    push(store, q, n=3)
    claim(store, q, T0, count=2)
    assert ids(claim(store, q, T0 + LEASE)) == [3]           # 1, 2 to the memory dlq
    dlq = store.queues[b"dlq"]
    assert sorted(dlq.jobs) == [1, 2]
    handed_out = dlq.next_id
    store = reopen(store, T0 + LEASE)
    q, dlq = store.queues[b"q"], store.queues[b"dlq"]
    assert dlq.durability == MEMORY
    assert len(dlq.jobs) == 0 and index_counts(dlq)["ready"] == 0
    assert sorted(q.jobs) == [3]                              # the dead jobs left the source for good
    assert q.counters.dead_lettered == 2
    assert store.take_ids(dlq, 1) >= handed_out               # ids of the lost jobs are not reused


def test_move_back_into_a_memory_source_gets_no_jobs_back_after_replay(store, reopen):
    q = new_queue(store, maxdeliveries=1, deadletter="dlq")
    push(store, q)
    claim(store, q, T0)
    assert claim(store, q, T0 + LEASE) == []                 # to the (fsync) dlq
    store.drop_queue(q, T0 + LEASE)
    memory_q = new_queue(store, now=T0 + LEASE, durability=MEMORY)
    moved = move_back(store, store.queues[b"dlq"], T0 + LEASE)
    (new_id,) = [new for _, new in moved[b"q"]]
    assert list(memory_q.jobs) == [new_id] and len(store.queues[b"dlq"].jobs) == 0
    store = reopen(store, T0 + LEASE)
    assert len(store.queues[b"q"].jobs) == 0                     # memory: lost on restart, as docs/semantics.md §3.1 says
    assert len(store.queues[b"dlq"].jobs) == 0                   # and it left the durable dlq for good
    assert store.take_ids(store.queues[b"q"], 1) > new_id    # its id is not reused


# -- property: any history of the new transitions replays to the same state ----------------------------------------------

# (kind, then three numbers each kind reads as it needs); claims and ticks are
# listed more than once so that histories reach deliveries limits and retention
KINDS = ["push", "push", "push_key", "claim", "claim", "claim", "ack", "nack", "nack_dead", "extend",
         "delete", "redrive", "move_back", "clock", "tick", "tick", "tick"]
NAMES = [b"a", b"b", b"dl"]
history_op = st.tuples(st.sampled_from(KINDS), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99))


def apply_op(store, op, now, tokens):
    """Apply one history step; returns the time after it."""
    kind, x, y, z = op
    queues = store.queues
    name = NAMES[x % 3]
    q = queues.get(name)
    if kind == "push" and name != b"dl":
        push(store, q, 1 + y % 3, now, priority=z % 10, delay=[0, 0, 400][y % 3], max_deliveries=z % 2)
    elif kind == "push_key" and name != b"dl":
        push_key(store, q, [b"k1", b"k2"][y % 2], [b"queued", b"active", b"exists"][z % 3], now)
    elif kind == "claim" and q is not None:
        tokens += [(name, j.token) for j in claim(store, q, now, 1 + y % 3, [100, 1000][z % 2])]
    elif kind in ("ack", "nack", "nack_dead", "extend") and tokens:
        name, token = tokens[y % len(tokens)]
        q = queues.get(name)
        if q is None:
            return now
        if kind == "ack":
            ack(store, q, [token], now)
        elif kind == "nack":
            nack(store, q, [token], now, [0, 300][z % 2], [None, b"x"][x % 2])
        elif kind == "nack_dead":
            nack_dead(store, q, [token], now, [None, b"dead!"][z % 2])
        else:
            extend(store, q, [token], now)
    elif kind == "delete" and q is not None and q.jobs:
        live = sorted(q.jobs)
        delete(store, q, [live[y % len(live)]], now)
    elif kind == "redrive" and q is not None:
        redrive(store, q, now)
    elif kind == "move_back" and b"dl" in queues:
        move_back(store, queues[b"dl"], now)
    elif kind == "clock":
        store.set_clock(y - 50, bool(z % 2), now)
    elif kind == "tick":
        now += [1, 100, 350, 1000][y % 4]
    return now


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(history_op, min_size=10, max_size=50), clean=st.booleans())
def test_any_history_with_dead_letters_replays_to_the_same_state(ops, clean):
    with tempfile.TemporaryDirectory() as tmp:
        directory = os.path.join(tmp, "data")
        store = open_store(directory, T0)
        try:
            a = new_queue(store, b"a", maxdeliveries=2, deadletter="dl", retain_completed=500)
            b = new_queue(store, b"b", durability=ASYNC, maxdeliveries=1, retain_dead=700, expire=1500)
            push(store, a, 3)
            push(store, b, 3)
            tokens = []
            now = T0
            for op in ops:
                now = apply_op(store, op, now, tokens)
            restart = "close" if clean else "crash"
            before = digest(store, now, replayed=True, live_only=True, restarted=restart)
            next_ids = {n: q.next_id for n, q in store.queues.items()}
            stop(store, clean)
            store = open_store(directory, now)
            assert digest(store, now, replayed=True, live_only=True, restarted=restart) == before
            for name, q in store.queues.items():
                assert q.next_id >= next_ids[name]
        finally:
            if not datadir_of(store).closed:
                close(store)


def _parent_failed_log(store, now):
    """A parent in "p" dies (QNACK DEAD); its child in "c" (DEADLETTER "c.dlq")
    dies with it, and so does one in "s" (no DEADLETTER: dead in place)."""
    client = client_of(store)
    call(client, "QCREATE", "c", "DEADLETTER", "c.dlq", now=now)
    parent = call(client, "QPUSH", "p", "parent", now=now)
    call(client, "QPUSH", "c", "moved", "AFTER", 1, "p", parent, now=now)
    call(client, "QPUSH", "s", "stays", "AFTER", 1, "p", parent, now=now)
    (job,) = claim(store, store.queues[b"p"], now)
    call(client, "QNACK", "p", job.token, "DEAD", now=now)
    return parent


def test_a_parent_failed_child_keeps_its_provenance_and_names_its_parent_live_and_replayed(store, reopen):
    parent = _parent_failed_log(store, T0)
    copy = store.queues[b"c.dlq"].jobs[1]
    stays = store.queues[b"s"].jobs[1]
    assert provenance(copy) == (b"c", 1, 0, b"parent-failed", (b"p", parent))
    assert provenance(stays) == (b"s", 1, 0, b"parent-failed", (b"p", parent))
    assert stays.dead_reason == b"parent-failed"
    again = reopen(store, T0 + 1)
    assert provenance(again.queues[b"c.dlq"].jobs[1]) == provenance(copy)
    assert provenance(again.queues[b"s"].jobs[1]) == provenance(stays)


def test_a_log_written_before_the_parent_was_named_replays_as_it_did(store, data_dir):
    """DEAD records of parent-failed children written with reason 4 (before
    2026-11-27) replay as they did then: the child's provenance is its
    parent's, and no parent is named."""
    parent = _parent_failed_log(store, T0)
    crash(store)
    old = []
    read_log(str(data_dir), lambda t, b: old.append((t, _as_written_before(t, b))))
    replayed = Store()
    for rtype, body in old:
        Replayer(replayed).apply(rtype, body)
    assert provenance(replayed.queues[b"c.dlq"].jobs[1]) == (b"p", parent, 1, b"parent-failed")
    assert provenance(replayed.queues[b"s"].jobs[1]) == (b"p", parent, 1, b"parent-failed")


def _as_written_before(rtype: int, body: bytes) -> bytes:
    """A record as a log before 2026-11-27 wrote it: DEAD's parent-failed was reason 4."""
    if rtype == records.TXN:
        return records.txn([(t, _as_written_before(t, b)) for t, b in records.decode(rtype, body)[0]])
    if rtype == records.DEAD:
        qid, ts, reason, target, pairs = records.decode(rtype, body)
        if reason == records.REASON_CODES[b"parent-failed"]:
            return records.dead(qid, ts, records.PARENT_FAILED_AS_PARENT, target, pairs)
    return body
