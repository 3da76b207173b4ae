"""The queue state machine and the store that logs and replays it
(leaseq.storage.queue, leaseq.storage.indexes, leaseq.storage.store, leaseq.storage.journal,
leaseq.storage.datadir), driven by the commands a client sends
(tests/unit/core.py: ``daemon.dispatch.execute`` with no socket, on the
store of a real data directory) and, where no command reaches, by the
store's transitions directly.  The clock is the test's: every call gets its
``now``."""

from __future__ import annotations

import os
import tempfile

import pytest
from core import (LEASE, T0, ack, call, claim, claim_ids, client_of, close, crash, datadir_of, extend, nack,
                  new_queue, open_store, push, run, ticket_of)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_state import digest, log_records

from leaseq.storage import queries, records
from leaseq.storage.config import ASYNC, FSYNC, MEMORY, QueueConfig
from leaseq.storage.job import DELAYED, IN_FLIGHT, READY, Job
from leaseq.storage.leasing import TOKEN
from leaseq.storage.recovery import CorruptLog
from leaseq.storage.store import ID_BLOCK
from leaseq.storage.wal import DirectoryLocked, lock_directory, segment_name


def types_of(recs):
    return [t for t, _ in recs]


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def store(data_dir):
    s = open_store(data_dir, T0)
    yield s
    if not datadir_of(s).closed:
        close(s)


# -- claim order ------------------------------------------------------------------------------------

def test_claim_order_is_higher_priority_first_then_ascending_id(store):
    q = new_queue(store)
    for prio in (5, 9, 0, 9, 5, 1):
        push(store, q, priority=prio)
    assert [j.id for j in queries.claimable(q, T0, 10)] == [2, 4, 1, 5, 6, 3]
    assert claim_ids(store, q, T0, count=3) == [2, 4, 1]
    assert claim_ids(store, q, T0, count=10) == [5, 6, 3]
    assert claim_ids(store, q, T0) == []


def test_claim_count_limits_the_jobs_leased(store):
    q = new_queue(store)
    push(store, q, n=5)
    assert claim_ids(store, q, T0, count=2) == [1, 2]
    assert (len(q.indexes.ready), len(q.indexes.leases)) == (3, 2)


def test_nacked_job_comes_before_never_delivered_jobs_of_its_priority(store):
    q = new_queue(store)
    push(store, q, n=3)                                   # ids 1-3
    job3 = q.jobs[3]
    store.claim(q, [job3], T0 + LEASE, b"w", T0)           # lease a job from the middle
    assert nack(store, q, [job3.token], T0) == 1
    assert [j.id for j in queries.claimable(q, T0, 5)] == [3, 1, 2]


def test_job_with_expired_lease_comes_before_never_delivered_jobs_of_its_priority(store):
    q = new_queue(store)
    push(store, q, n=3)
    store.claim(q, [q.jobs[3]], T0 + LEASE, b"w", T0)
    assert [j.id for j in queries.claimable(q, T0 + LEASE - 1, 5)] == [1, 2]
    assert [j.id for j in queries.claimable(q, T0 + LEASE, 5)] == [3, 1, 2]


def test_job_ready_again_after_nack_delay_comes_before_never_delivered_ones(store):
    q = new_queue(store)
    push(store, q, n=2)
    job = q.jobs[2]
    store.claim(q, [job], T0 + LEASE, b"w", T0)
    nack(store, q, [job.token], T0, delay=500)
    assert [j.id for j in queries.claimable(q, T0 + 499, 5)] == [1]
    assert [j.id for j in queries.claimable(q, T0 + 500, 5)] == [2, 1]


def test_ready_again_jobs_are_in_ascending_id_order_among_themselves(store):
    q = new_queue(store)
    push(store, q, n=4)
    jobs = [q.jobs[4], q.jobs[2]]
    store.claim(q, jobs, T0 + LEASE, b"w", T0)
    nack(store, q, [j.token for j in jobs], T0)
    assert [j.id for j in queries.claimable(q, T0, 5)] == [2, 4, 1, 3]


def test_ready_again_job_does_not_jump_ahead_of_higher_priority(store):
    q = new_queue(store)
    push(store, q, priority=3)                                     # id 1
    (job,) = claim(store, q, T0)
    push(store, q, priority=4)                                     # id 2, never delivered
    push(store, q, priority=3)                                     # id 3, never delivered
    nack(store, q, [job.token], T0)
    assert [j.id for j in queries.claimable(q, T0, 5)] == [2, 1, 3]


# -- delayed jobs ---------------------------------------------------------------------------------------

def test_delayed_job_is_never_claimable_before_visible_at_whatever_its_priority(store):
    q = new_queue(store)
    (late,) = push(store, q, priority=9, delay=500)
    push(store, q, priority=0)
    assert late.state is DELAYED
    for now in (T0, T0 + 1, T0 + 499):
        assert [j.id for j in queries.claimable(q, now, 5)] == [2]
    assert claim_ids(store, q, T0 + 499, count=5) == [2]
    assert claim_ids(store, q, T0 + 499, count=5) == []
    assert claim_ids(store, q, T0 + 500, count=5) == [1]


def test_job_delayed_by_nack_is_not_claimable_until_its_delay_passes(store):
    q = new_queue(store)
    push(store, q)
    (job,) = claim(store, q, T0)
    nack(store, q, [job.token], T0 + 10, delay=1000)
    assert job.state is DELAYED
    assert claim_ids(store, q, T0 + 1009) == []
    assert claim_ids(store, q, T0 + 1010) == [1]


def test_next_due_is_the_earliest_delayed_job_or_lease_deadline(store):
    q = new_queue(store)
    assert q.indexes.next_due() is None
    push(store, q, delay=5000)
    assert q.indexes.next_due() == T0 + 5000
    push(store, q)
    claim(store, q, T0, lease=2000)
    assert q.indexes.next_due() == T0 + 2000


# -- leases: lazy expiry, tokens, deliveries ----------------------------------------------------------

def test_lease_is_not_claimable_again_before_its_deadline(store):
    q = new_queue(store)
    push(store, q)
    claim(store, q, T0)
    assert claim_ids(store, q, T0 + LEASE - 1) == []
    assert claim_ids(store, q, T0 + LEASE) == [1]


def test_expired_lease_moves_to_ready_only_when_someone_looks(store):
    q = new_queue(store)
    push(store, q)
    (job,) = claim(store, q, T0)
    # nobody looked: still in flight, long after the deadline
    assert job.state is IN_FLIGHT and len(q.indexes.leases) == 1
    q.fold(T0 + 10 * LEASE)
    assert job.state is READY and len(q.indexes.ready) == 1 and not q.indexes.leases


def test_expired_lease_keeps_its_token_until_claimed_again_so_ack_still_works(store):
    q = new_queue(store)
    push(store, q)
    (job,) = claim(store, q, T0)
    token = job.token
    assert [j.id for j in queries.claimable(q, T0 + LEASE, 1)] == [1]    # expired and folded
    assert q.job_for_token(token) is job
    assert ack(store, q, [token], T0 + LEASE + 1) == 1
    assert 1 not in q.jobs
    assert queries.claimable(q, T0 + LEASE + 1, 5) == []


def test_expired_lease_can_still_be_nacked_and_extended_with_its_token(store):
    q = new_queue(store)
    push(store, q, n=2)
    a, b = claim(store, q, T0, count=2)
    q.fold(T0 + LEASE)
    assert extend(store, q, [a.token], T0 + LEASE, lease=5000) == 1
    assert a.state is IN_FLIGHT and a.deadline == T0 + LEASE + 5000
    assert nack(store, q, [b.token], T0 + LEASE, error=b"late") == 1
    assert b.last_error == b"late"
    assert claim_ids(store, q, T0 + LEASE, count=5) == [2]


def test_new_claim_makes_the_old_token_stale(store):
    q = new_queue(store)
    push(store, q)
    (job,) = claim(store, q, T0)
    old = job.token
    claim(store, q, T0 + LEASE)
    new = job.token
    assert new != old
    assert q.job_for_token(old) is None
    assert ack(store, q, [old], T0 + LEASE) == 0
    assert nack(store, q, [old], T0 + LEASE) == 0
    assert extend(store, q, [old], T0 + LEASE) == 0
    assert job.state is IN_FLIGHT and job.token == new and job.deadline == T0 + 2 * LEASE
    assert ack(store, q, [new], T0 + LEASE) == 1


def test_acked_or_nacked_token_is_stale(store):
    q = new_queue(store)
    push(store, q, n=2)
    a, b = claim(store, q, T0, count=2)
    ta, tb = a.token, b.token
    assert ack(store, q, [ta], T0) == 1
    assert ack(store, q, [ta], T0) == 0
    assert nack(store, q, [tb], T0) == 1
    assert nack(store, q, [tb], T0) == 0
    assert ack(store, q, [tb], T0) == 0
    assert q.jobs[2].state is READY


@pytest.mark.parametrize("token", [b"", b"zz.1.1", b"1", b"1.1", b"999.1.1", b"1.0.1"])
def test_unknown_or_malformed_token_names_no_job(store, token):
    q = new_queue(store)
    push(store, q)
    claim(store, q, T0)
    assert q.job_for_token(token) is None


def test_deliveries_count_distinct_leases(store):
    q = new_queue(store)
    push(store, q)
    job = q.jobs[1]
    assert job.deliveries == 0
    claim(store, q, T0)                                     # 1
    extend(store, q, [job.token], T0 + 10)                  # an extension is the same lease
    assert job.deliveries == 1
    claim(store, q, T0 + 10 + LEASE)                        # 2: after the lease expired
    nack(store, q, [job.token], T0 + 10 + LEASE)
    claim(store, q, T0 + 10 + LEASE)                        # 3: after a nack
    assert job.deliveries == 3
    assert claim_ids(store, q, T0 + 10 + LEASE) == []      # no lease without a claim


def test_tokens_are_unique_and_name_their_job_and_epoch(store):
    q = new_queue(store)
    push(store, q, n=5)
    seen = set()
    now = T0
    for _round in range(4):
        for job in claim(store, q, now, count=5):
            assert job.token not in seen
            seen.add(job.token)
            head, epoch, _seq = job.token.split(b".")
            assert int(head, 16) == job.id
            assert int(epoch, 16) == store.epoch
        now += LEASE
    assert len(seen) == 20


def test_token_format_is_hex_id_epoch_and_lease_number():
    assert TOKEN % (255, 2, 16) == b"ff.2.10"


def test_claim_record_carries_deadline_consumer_and_ids(store, data_dir):
    q = new_queue(store)
    push(store, q, n=2)
    jobs = claim(store, q, T0, count=2, consumer=b"w-7")
    assert [j.consumer for j in jobs] == [b"w-7", b"w-7"]
    datadir_of(store).wal.flush()
    claims = [f for t, f in log_records(data_dir) if t == records.CLAIM]
    assert claims == [(q.qid, T0, T0 + LEASE, 1, b"w-7", (1, 2), (1, 1))]      # ids, then their deliveries


# -- ids ----------------------------------------------------------------------------------------------------

def test_ids_are_consecutive_from_one(store):
    q = new_queue(store)
    assert [j.id for j in push(store, q, n=3)] == [1, 2, 3]
    assert [j.id for j in push(store, q, n=2)] == [4, 5]
    assert q.next_id == 6


def test_ids_are_reserved_in_blocks_with_one_idmark_per_block(store, data_dir):
    q = new_queue(store)
    for _ in range(10):
        push(store, q)
    datadir_of(store).wal.flush()
    marks = [f for t, f in log_records(data_dir) if t == records.IDMARK]
    assert marks == [(q.qid, 2 + ID_BLOCK)]


def test_reopen_without_close_never_reuses_an_id(data_dir):
    store = open_store(data_dir, T0)
    q = new_queue(store)
    push(store, q, n=3)
    store.take_ids(q, 2)          # handed out, never pushed (a failed push)
    crash(store)
    store = open_store(data_dir, T0 + 1)
    q = store.queues[b"q"]
    (job,) = push(store, q, now=T0 + 1)
    assert job.id > 5
    close(store)


def test_reopen_without_close_above_a_reservation_bigger_than_a_block(data_dir):
    store = open_store(data_dir, T0)
    q = new_queue(store)
    store.take_ids(q, ID_BLOCK + 10)
    crash(store)
    store = open_store(data_dir, T0 + 1)
    assert store.queues[b"q"].next_id > ID_BLOCK + 10
    close(store)


def test_reopen_after_close_continues_ids_without_a_gap(data_dir):
    store = open_store(data_dir, T0)
    q = new_queue(store)
    push(store, q, n=3)
    close(store)
    store = open_store(data_dir, T0 + 1)
    q = store.queues[b"q"]
    assert [j.id for j in push(store, q, n=2, now=T0 + 1)] == [4, 5]
    close(store)
    store = open_store(data_dir, T0 + 2)
    assert [j.id for j in push(store, store.queues[b"q"], now=T0 + 2)] == [6]
    close(store)


def test_ids_never_go_backwards_across_many_restarts(data_dir):
    handed_out = []
    for i in range(6):
        store = open_store(data_dir, T0 + i)
        q = store.queues.get(b"q") or new_queue(store, now=T0 + i)
        handed_out += [j.id for j in push(store, q, n=2, now=T0 + i)]
        if i % 2:
            close(store)
        else:
            crash(store)
    assert handed_out == sorted(set(handed_out))


# -- open, reopen, replay ----------------------------------------------------------------------------------

def test_first_open_starts_epoch_one_with_a_fsynced_boot_record(store, data_dir):
    assert store.epoch == 1
    assert log_records(data_dir) == [(records.BOOT, (1, T0))]
    assert os.path.exists(data_dir / segment_name(1))


def test_each_open_starts_a_new_segment_and_the_next_epoch(data_dir):
    for i in range(1, 4):
        store = open_store(data_dir, T0 + i)
        assert store.epoch == i
        assert datadir_of(store).wal.segment_number == i
        if i == 2:
            crash(store)
        else:
            close(store)


def test_open_locks_the_directory(store, data_dir):
    with pytest.raises(DirectoryLocked):
        open_store(data_dir, T0)


def test_close_releases_the_lock(data_dir):
    close(open_store(data_dir, T0))
    store = open_store(data_dir, T0)
    assert store.epoch == 2
    close(store)


def scenario(store, now=T0):
    """Jobs in every state on an fsync and an async queue; returns the time after."""
    a = new_queue(store, b"a", now=now, lease=LEASE, maxdeliveries=5, backoff=(10, 1.5, 0))
    b = new_queue(store, b"b", durability=ASYNC, now=now)
    push(store, a, n=3, priority=7, now=now)                   # 1-3
    push(store, a, n=2, priority=2, now=now, payload=b"\x00\xff")  # 4-5
    push(store, a, delay=60_000, now=now)                      # 6: delayed
    push(store, b, n=4, now=now)                               # 1-4
    now += 5
    j1, j2, j3 = claim(store, a, now, count=3)
    nack(store, a, [j1.token], now, error=b"boom")             # 1: ready again with an error
    nack(store, a, [j2.token], now, delay=30_000, error=b"")   # 2: delayed by nack, empty error
    ack(store, a, [j3.token], now)                             # 3: gone
    b1, b2 = claim(store, b, now, count=2, lease=100)
    now += 200                                                 # b's leases expire
    (b1again,) = claim(store, b, now)                          # b1: 2nd delivery, new token
    extend(store, b, [b1again.token], now, lease=10_000)
    ack(store, b, [b2.token], now)                             # old token of an expired lease: still works
    store.journal.begin()
    push(store, a, priority=9, now=now)                        # 7
    (j7,) = claim(store, a, now)
    store.journal.commit()
    claim(store, a, now, count=1, lease=50_000)                # 1 again: 2nd delivery
    return now


def test_reopen_after_crash_replays_to_identical_state(data_dir):
    store = open_store(data_dir, T0)
    now = scenario(store)
    before = digest(store, now, restarted="crash")
    next_ids = {n: q.next_id for n, q in store.queues.items()}
    crash(store)
    store = open_store(data_dir, now)
    after = digest(store, now, restarted="crash")
    assert after == before
    assert [before["queues"][b"a"]["counts"][k] for k in ("ready", "delayed", "in_flight")] == [2, 2, 2]
    assert [before["queues"][b"b"]["counts"][k] for k in ("ready", "delayed", "in_flight")] == [2, 0, 1]
    for name, q in store.queues.items():
        assert q.next_id >= next_ids[name]
    close(store)


def test_reopen_after_close_replays_to_identical_state_and_ids(data_dir):
    store = open_store(data_dir, T0)
    now = scenario(store)
    before = digest(store, now, restarted="close")
    next_ids = {n: q.next_id for n, q in store.queues.items()}
    close(store)
    store = open_store(data_dir, now)
    assert digest(store, now, restarted="close") == before
    assert {n: q.next_id for n, q in store.queues.items()} == next_ids
    close(store)


def test_state_is_identical_at_every_later_time_after_replay(data_dir, tmp_path):
    store = open_store(data_dir, T0)
    now = scenario(store)
    close(store)
    reopened = open_store(data_dir, now)
    live = open_store(str(tmp_path / "live"), T0)
    scenario(live)
    try:
        for later in (now, now + 1000, now + 30_000, now + 100_000):
            assert digest(reopened, later, restarted="close") == digest(live, later, restarted="close")
    finally:
        close(reopened)
        close(live)


def test_replayed_job_keeps_deliveries_and_last_error(data_dir):
    store = open_store(data_dir, T0)
    q = new_queue(store)
    push(store, q)
    for i in range(3):
        (job,) = claim(store, q, T0 + i)
        nack(store, q, [job.token], T0 + i, error=b"err%d" % i)
    crash(store)
    store = open_store(data_dir, T0 + 10)
    job = store.queues[b"q"].jobs[1]
    assert (job.deliveries, job.last_error, job.state) == (3, b"err2", READY)
    close(store)


def test_in_flight_token_survives_a_restart_and_new_tokens_use_the_new_epoch(data_dir):
    store = open_store(data_dir, T0)
    q = new_queue(store)
    push(store, q, n=2)
    a, b = claim(store, q, T0, count=2, lease=10 * LEASE)
    old_a, old_b = a.token, b.token
    crash(store)
    store = open_store(data_dir, T0 + 1)
    assert store.epoch == 2
    q = store.queues[b"q"]
    assert q.job_for_token(old_a) is q.jobs[1]
    assert ack(store, q, [old_a], T0 + 1) == 1
    (b,) = claim(store, q, T0 + 10 * LEASE)                  # b's lease expired: claimed anew
    assert b.token not in (old_a, old_b)
    assert b.token.split(b".")[1] == b"2"
    assert q.job_for_token(old_b) is None
    assert b.deliveries == 2
    close(store)


def test_tokens_stay_unique_across_restarts(data_dir):
    seen = set()
    now = T0
    for i in range(4):
        store = open_store(data_dir, now)
        q = store.queues.get(b"q") or new_queue(store, now=now)
        if i == 0:
            push(store, q, n=3, now=now)
        for _ in range(2):
            now += LEASE
            for job in claim(store, q, now, count=3):
                assert job.token not in seen
                seen.add(job.token)
        if i % 2:
            crash(store)
        else:
            close(store)
    assert len(seen) == 24


def test_dropped_queue_stays_dropped_and_its_number_is_not_reused(data_dir):
    store = open_store(data_dir, T0)
    a = new_queue(store, b"a")
    push(store, a, n=2)
    store.drop_queue(a, T0 + 1)
    new_queue(store, b"b")
    crash(store)
    store = open_store(data_dir, T0 + 2)
    assert set(store.queues) == {b"b"}
    c = new_queue(store, b"c", now=T0 + 2)
    assert c.qid == 3
    close(store)


def test_changed_configuration_is_replayed(data_dir):
    store = open_store(data_dir, T0)
    q = new_queue(store)
    new = q.config.with_options(lease=5000, deadletter="dead", backoff=(5, 3.0, 7), durability=ASYNC)
    store.set_config(q, new, T0 + 1)
    crash(store)
    store = open_store(data_dir, T0 + 2)
    q = store.queues[b"q"]
    assert q.config == new
    assert q.durability == ASYNC
    close(store)


# -- TXN: begin / commit ----------------------------------------------------------------------------

def test_begin_commit_writes_one_txn_record_for_all_changes(store, data_dir):
    q = new_queue(store)
    push(store, q)
    datadir_of(store).wal.flush()
    before = len(log_records(data_dir))
    store.journal.begin()
    (job,) = claim(store, q, T0)
    ack(store, q, [job.token], T0)
    push(store, q, n=2)
    store.journal.commit()
    datadir_of(store).wal.flush()
    added = log_records(data_dir)[before:]
    assert types_of(added) == [records.TXN]
    (inner,) = added[0][1]
    assert [t for t, _ in inner] == [records.CLAIM, records.ACK, records.PUSH]


def test_nested_begin_commit_emits_once_at_the_outermost_commit(store, data_dir):
    q = new_queue(store)
    push(store, q, n=2)
    datadir_of(store).wal.flush()
    before = len(log_records(data_dir))
    store.journal.begin()
    claim(store, q, T0)
    store.journal.begin()
    claim(store, q, T0)
    store.journal.commit()
    assert not datadir_of(store).wal.pending                       # inner commit: nothing yet
    store.journal.begin()
    store.journal.commit()
    assert not datadir_of(store).wal.pending
    store.journal.commit()
    assert datadir_of(store).wal.pending
    datadir_of(store).wal.flush()
    added = log_records(data_dir)[before:]
    assert types_of(added) == [records.TXN]
    assert [t for t, _ in added[0][1][0]] == [records.CLAIM, records.CLAIM]


def test_txn_of_one_record_is_written_as_that_record(store, data_dir):
    q = new_queue(store)
    push(store, q)
    datadir_of(store).wal.flush()
    before = len(log_records(data_dir))
    store.journal.begin()
    claim(store, q, T0)
    store.journal.commit()
    datadir_of(store).wal.flush()
    assert types_of(log_records(data_dir)[before:]) == [records.CLAIM]


def test_empty_txn_writes_nothing(store):
    datadir_of(store).wal.flush()
    store.journal.begin()
    store.journal.begin()
    store.journal.commit()
    store.journal.commit()
    assert not datadir_of(store).wal.pending


def test_txn_asks_for_fsync_if_any_record_in_it_does(store):
    a = new_queue(store, b"a", durability=ASYNC)
    f = new_queue(store, b"f", durability=FSYNC)
    push(store, a)
    push(store, f)
    wal = datadir_of(store).wal
    wal.flush_and_sync()
    c = client_of(store)
    call(c, "MULTI")
    call(c, "QCLAIM", b"a", b"w")
    call(c, "QPUSH", b"a", b"x")
    _, ticket = run(c, "EXEC")
    wal.flush()
    assert not ticket.fsync and not wal.sync_wanted
    call(c, "MULTI")
    call(c, "QCLAIM", b"a", b"w")
    call(c, "QPUSH", b"f", b"x")
    _, ticket = run(c, "EXEC")
    wal.flush()
    assert ticket.fsync and wal.sync_wanted


def test_txn_replays_all_its_changes(data_dir):
    store = open_store(data_dir, T0)
    q = new_queue(store)
    push(store, q, n=2)
    store.journal.begin()
    (job,) = claim(store, q, T0)
    ack(store, q, [job.token], T0)
    push(store, q, priority=9)
    claim(store, q, T0)
    store.journal.commit()
    before = digest(store, T0, restarted="crash")
    crash(store)
    store = open_store(data_dir, T0)
    assert digest(store, T0, restarted="crash") == before
    close(store)


# -- durability -----------------------------------------------------------------------------------------

def waits_for_fsync(store, *command) -> bool:
    """Run one command; does its reply wait for fsync for its own records
    (else only for their write)?  What earlier commands logged is made
    durable first: a reply also waits for that (docs/semantics.md §5.2)."""
    store.journal.log.flush_and_sync()
    ticket = ticket_of(store, *command)
    assert ticket is not None, f"{command[0]} logged nothing"
    return ticket.fsync


def test_fsync_queue_waits_for_push_and_ack_but_not_for_leases(store):
    q = new_queue(store, durability=FSYNC)
    assert waits_for_fsync(store, "QPUSH", q.name, b"job")
    (job,) = claim(store, q, T0)
    assert not waits_for_fsync(store, "QEXTEND", q.name, job.token)
    assert not waits_for_fsync(store, "QNACK", q.name, job.token, "DELAY", 0)
    assert not waits_for_fsync(store, "QCLAIM", q.name, b"w")
    assert waits_for_fsync(store, "QACK", q.name, q.jobs[1].token)


def test_lease_sync_makes_claims_on_fsync_queues_wait(data_dir):
    store = open_store(data_dir, T0, lease_sync=True)
    q = new_queue(store)
    push(store, q)
    assert waits_for_fsync(store, "QCLAIM", q.name, b"w")
    close(store)


def test_async_queue_writes_jobs_without_waiting(store, data_dir):
    q = new_queue(store, durability=ASYNC)
    store.take_ids(q, 1)                          # the id block is reserved (and waited for) once
    store.journal.log.flush_and_sync()
    mark = store.journal.mark()
    store.push(q, [Job(1, b"x", 5, T0, T0)], T0)
    assert not store.journal.ticket_since(mark).fsync
    (got,), ticket = run(client_of(store), "QCLAIM", q.name, b"w")
    assert not ticket.fsync
    job = q.jobs[got[b"id"]]
    assert not waits_for_fsync(store, "QACK", q.name, job.token)
    datadir_of(store).wal.flush()
    assert types_of(log_records(data_dir))[-3:] == [records.PUSH, records.CLAIM, records.ACK]


def test_memory_queue_writes_no_job_records(store, data_dir):
    q = new_queue(store, durability=MEMORY)
    push(store, q, n=3)
    a, b, c = claim(store, q, T0, count=3)
    ack(store, q, [a.token], T0)
    nack(store, q, [b.token], T0, error=b"e")
    extend(store, q, [c.token], T0)
    store.journal.begin()
    push(store, q)
    claim(store, q, T0)
    store.journal.commit()
    datadir_of(store).wal.flush()
    assert set(types_of(log_records(data_dir))) == {records.BOOT, records.QUEUE, records.IDMARK}


def test_memory_queue_definition_and_ids_survive_but_its_jobs_do_not(data_dir):
    store = open_store(data_dir, T0)
    config = QueueConfig(durability=MEMORY, lease=2000, maxlen=10)
    q = store.create_queue(b"m", config, T0)
    push(store, q, n=3)
    claim(store, q, T0)
    crash(store)
    store = open_store(data_dir, T0 + 1)
    q = store.queues[b"m"]
    assert q.config == config
    assert q.durability == MEMORY
    assert len(q.jobs) == 0 and queries.live(q) == 0
    (job,) = push(store, q, now=T0 + 1)
    assert job.id > 3
    close(store)
    store = open_store(data_dir, T0 + 2)
    q = store.queues[b"m"]
    assert [j.id for j in push(store, q, now=T0 + 2)] == [job.id + 1]
    close(store)


def test_memory_queue_beside_a_durable_one_in_one_txn(data_dir):
    store = open_store(data_dir, T0)
    m = new_queue(store, b"m", durability=MEMORY)
    d = new_queue(store, b"d", durability=FSYNC)
    store.journal.begin()
    push(store, m)
    push(store, d)
    store.journal.commit()
    crash(store)
    store = open_store(data_dir, T0 + 1)
    assert len(store.queues[b"m"].jobs) == 0
    assert list(store.queues[b"d"].jobs) == [1]
    close(store)


# -- refusing bad logs ---------------------------------------------------------------------------------------

def test_open_refuses_a_corrupt_log_and_releases_the_lock(data_dir):
    store = open_store(data_dir, T0)
    q = new_queue(store)
    push(store, q)
    close(store)
    close(open_store(data_dir, T0 + 1))           # segment 1 is now an older segment
    path = data_dir / segment_name(1)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLog) as e:
        open_store(data_dir, T0 + 2)
    assert str(path) in str(e.value)
    os.close(lock_directory(str(data_dir)))             # the failed open let go of the lock


def test_open_with_repair_starts_despite_corruption(data_dir):
    store = open_store(data_dir, T0)
    q = new_queue(store)
    push(store, q)
    push(store, q)
    close(store)
    close(open_store(data_dir, T0 + 1))
    path = data_dir / segment_name(1)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF                                      # the last record (the IDMARK of close)
    path.write_bytes(bytes(data))
    store = open_store(data_dir, T0 + 2, repair=True)
    assert datadir_of(store).report.skipped and datadir_of(store).report.skipped[0][0] == str(path)
    assert sorted(store.queues[b"q"].jobs) == [1, 2]
    assert store.queues[b"q"].next_id > 2
    close(store)


def _append_checksummed_frame(path, rtype, body):
    with open(path, "ab") as f:
        f.write(records.frame(rtype, body))


@pytest.mark.parametrize("rtype, body", [
    (42, b"from a newer daemon"),
    (records.ACK, b"\x01\x02"),
])
def test_open_refuses_a_checksummed_record_it_cannot_decode_naming_file_and_offset(data_dir, rtype, body):
    # records.py: "an unknown type is corruption"; docs/semantics.md §5.1: corruption
    # refuses to start with a clear message naming file and offset (CorruptLog, which
    # the CLI reports)
    close(open_store(data_dir, T0))
    path = data_dir / segment_name(1)
    offset = path.stat().st_size
    _append_checksummed_frame(path, rtype, body)
    with pytest.raises(CorruptLog) as e:
        open_store(data_dir, T0 + 1)
    assert str(path) in str(e.value) and f"offset {offset}" in str(e.value)


# -- property: live state == replayed state ---------------------------------------------------------------

op_st = st.one_of(
    st.tuples(st.just("push"), st.sampled_from([b"a", b"b", b"m"]), st.integers(1, 3), st.integers(0, 9),
              st.sampled_from([0, 0, 50, 500])),
    st.tuples(st.just("claim"), st.sampled_from([b"a", b"b", b"m"]), st.integers(1, 4),
              st.sampled_from([100, 300, 1000])),
    st.tuples(st.just("ack"), st.integers(0, 50)),
    st.tuples(st.just("nack"), st.integers(0, 50), st.sampled_from([0, 0, 200]),
              st.sampled_from([None, b"", b"oops"])),
    st.tuples(st.just("extend"), st.integers(0, 50), st.sampled_from([100, 2000])),
    st.tuples(st.just("tick"), st.sampled_from([1, 99, 100, 250, 1000])),
    st.tuples(st.just("begin")),
    st.tuples(st.just("commit")),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op_st, max_size=40), clean=st.booleans())
def test_any_history_replays_to_the_same_state(ops, clean):
    with tempfile.TemporaryDirectory() as tmp:
        directory = os.path.join(tmp, "data")
        store = open_store(directory, T0)
        queues = {b"a": new_queue(store, b"a", durability=FSYNC),
                  b"b": new_queue(store, b"b", durability=ASYNC),
                  b"m": new_queue(store, b"m", durability=MEMORY)}
        tokens = []      # (queue name, token), stale ones included
        ids = {n: [] for n in queues}
        now = T0
        depth = 0
        for op in ops:
            kind = op[0]
            if kind == "push":
                ids[op[1]] += [j.id for j in push(store, queues[op[1]], op[2], now, op[3], op[4])]
            elif kind == "claim":
                tokens += [(op[1], j.token) for j in claim(store, queues[op[1]], now, op[2], op[3])]
            elif kind in ("ack", "nack", "extend") and tokens:
                name, token = tokens[op[1] % len(tokens)]
                if kind == "ack":
                    ack(store, queues[name], [token], now)
                elif kind == "nack":
                    nack(store, queues[name], [token], now, op[2], op[3])
                else:
                    extend(store, queues[name], [token], now, op[2])
            elif kind == "tick":
                now += op[1]
            elif kind == "begin":
                store.journal.begin()
                depth += 1
            elif kind == "commit" and depth:
                store.journal.commit()
                depth -= 1
        while depth:
            store.journal.commit()
            depth -= 1
        assert len({t for _, t in tokens}) == len(tokens)
        restart = dict(durable_only=True, replayed=True, restarted="close" if clean else "crash")   # m: memory
        before = digest(store, now, **restart)
        next_ids = {n: q.next_id for n, q in queues.items()}
        if clean:
            close(store)
        else:
            crash(store)
        store = open_store(directory, now)
        try:
            assert digest(store, now, **restart) == before
            for name, q in store.queues.items():
                if clean:
                    assert q.next_id == next_ids[name]
                else:
                    assert q.next_id >= next_ids[name]
                new_id = store.take_ids(q, 1)
                assert all(new_id > i for i in ids[name])
            for name, token in tokens:
                q = store.queues[name]
                job = q.job_for_token(token)
                if job is not None:
                    assert int(token.split(b".")[1], 16) < store.epoch
        finally:
            close(store)
