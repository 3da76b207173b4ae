"""Snapshots (storage.snapshot) and recovery from them (storage.datadir):
a snapshot rebuilds exactly the state the log replay builds, damage is
detected and named, and compaction keeps the fallback it promises."""

from __future__ import annotations

import os
import shutil

import pytest

from leaseq.storage import records, snapformat, snapshot
from leaseq.storage.datadir import DataDir
from leaseq.storage.recovery import CorruptLog
from leaseq.storage.wal import list_segments

from core import (LEASE, T0, ack, call, claim, client_of, close, crash, datadir_of, delete, nack, nack_dead,
                   new_queue, open_store, push, push_key, take_snapshot)
from store_state import digest

def build_varied(store, now=T0) -> None:
    """Jobs in every state and with every optional field."""
    a = new_queue(store, b"a", maxdeliveries=2, deadletter="dl", retain_completed=60_000)
    b = new_queue(store, b"b", durability="async", retain_dead=120_000)
    m = new_queue(store, b"m", durability="memory")
    gone = new_queue(store, b"gone")
    push(store, gone, 3, now=now)
    from core import call, client_of
    call(client_of(store), "QDROP", b"gone", "FORCE", now=now)
    push(store, a, 10, now=now, priority=7)
    push(store, a, 2, now=now, delay=5_000)
    call(client_of(store), "QPUSH", b"a", b"tagged", "PRIORITY", 0, "META", "tenant", "acme", "empty", "",
         now=now)                                           # META on a ready job (SNAP_JOBS, flags bit 6)
    push_key(store, a, b"k1", b"exists", now=now)
    jobs = claim(store, a, now, count=4)
    ack(store, a, [jobs[0].token], now)                     # completed, retained
    nack(store, a, [jobs[1].token], now, delay=0, error=b"boom")
    nack(store, a, [jobs[2].token], now, delay=0, error=b"")  # an empty error is a value
    claim(store, a, now + LEASE + 1, count=1)               # expires jobs[3]; claims the nacked one
    expired = claim(store, a, now + 2 * LEASE + 5, count=3)  # the lease ran out: ready again, token kept
    nack_dead(store, a, [expired[0].token], now + 2 * LEASE + 6, error=b"poison")   # to dl with provenance
    push(store, b, 5, now=now, max_deliveries=1, expire_ms=100_000)
    call(client_of(store), "QPUSHMANY", b"b", 2, b"t1", b"t2", "PRIORITY", 9, "META", "k", b"\xff\x00", now=now)
    bj = claim(store, b, now, count=2)                      # the two with META: one dies in place, one deleted
    nack_dead(store, b, [bj[0].token], now, error=b"dead here")   # dead in its own queue
    delete(store, b, [bj[1].id], now)
    push(store, m, 4, now=now)
    claim(store, m, now, count=1)
    store.set_clock(123, True, now + 7)


def test_snapshot_of_every_job_state_reads_back_identical(tmp_path):
    store = open_store(tmp_path / "d", T0)
    build_varied(store)
    before = digest(store, durable_only=True)
    metas = [j["meta"] for q in before["queues"].values() for _id, j in q["jobs"] if j["meta"] is not None]
    assert metas == [((b"tenant", b"acme"), (b"empty", b"")), ((b"k", b"\xff\x00"),)]
    info = take_snapshot(store)
    loaded, got = snapshot.load(info.path)
    assert digest(loaded) == before
    assert (got.covers, got.queues, got.jobs, got.bytes) == (info.covers, 4, info.jobs, os.path.getsize(info.path))
    assert info.jobs == sum(len(q.jobs) for q in store.queues.values() if q.durability != "memory")
    close(store)


def test_recovery_from_snapshot_and_later_segments_equals_replay_of_the_whole_log(tmp_path):
    d = tmp_path / "d"
    store = open_store(d, T0)
    build_varied(store)
    take_snapshot(store)
    a = store.queues[b"a"]
    later = T0 + 3 * LEASE
    push(store, a, 3, now=later)
    jobs = claim(store, a, later, count=2)
    ack(store, a, [jobs[0].token], later)
    crash(store)
    replay_dir = tmp_path / "replay"
    shutil.copytree(d, replay_dir)
    for _covers, path in snapshot.list_snapshots(str(replay_dir)):
        os.unlink(path)
    from_snapshot = open_store(d, later)
    from_log = open_store(replay_dir, later)
    assert datadir_of(from_snapshot).loaded is not None and datadir_of(from_log).loaded is None
    replay = dict(durable_only=True, replayed=True)
    assert digest(from_snapshot, **replay) == digest(from_log, **replay)
    assert datadir_of(from_snapshot).report.segments < datadir_of(from_log).report.segments
    close(from_snapshot)
    close(from_log)


def _parent_failed_child_dies_again(tmp_path, name: str, snapshot_first: bool) -> dict:
    """A child dead in place after its parent (parent-failed), redriven,
    then dead again of max-deliveries: what QGET shows of it, with or
    without a restart from a snapshot in between."""
    store = open_store(tmp_path / name, T0)
    c = client_of(store)
    call(c, "QCREATE", "q", "MAXDELIVERIES", 1)
    call(c, "QPUSH", "q", "parent")                                 # 1
    call(c, "QCANCEL", "q", 1)
    call(c, "QPUSH", "q", "child", "AFTER", 1, "q", 1)              # 2: dies at once, parent-failed
    if snapshot_first:
        take_snapshot(store)
        crash(store)
        store = open_store(tmp_path / name, T0)
        c = client_of(store)
    call(c, "QREDRIVE", "q", now=T0 + 1)
    assert [j[b"id"] for j in call(c, "QCLAIM", "q", "w", "LEASE", LEASE, now=T0 + 2)] == [2]
    assert call(c, "QCLAIM", "q", "w", now=T0 + 3 + LEASE) == []   # its lease ran out: max-deliveries
    job = call(c, "QGET", "q", 2)
    close(store)
    return job


def test_a_parent_failed_childs_later_death_reads_the_same_after_a_snapshot(tmp_path):
    """The snapshot keeps whose death took a child along (its provenance's
    parent), so a later death of the child, redriven, names its own reason
    and still that parent, as without the restart."""
    live = _parent_failed_child_dies_again(tmp_path, "live", snapshot_first=False)
    restored = _parent_failed_child_dies_again(tmp_path, "restored", snapshot_first=True)
    assert live[b"dead_letter_reason"] == b"max-deliveries" and live[b"dead_letter_parent"] == [b"q", 1]
    assert restored == live


def test_tokens_of_a_snapshot_still_ack_after_restart(tmp_path):
    d = tmp_path / "d"
    store = open_store(d, T0)
    q = new_queue(store)
    push(store, q, 3)
    tokens = [j.token for j in claim(store, q, T0, count=3)]
    take_snapshot(store)
    crash(store)
    store = open_store(d, T0 + 1)
    q = store.queues[b"q"]
    assert ack(store, q, tokens[:2], T0 + 1) == 2
    assert [j.deliveries for j in q.jobs.values()] == [1]
    close(store)


def test_ids_stay_unique_across_a_snapshot_and_a_crash(tmp_path):
    d = tmp_path / "d"
    store = open_store(d, T0)
    q = new_queue(store)
    m = new_queue(store, b"m", durability="memory")
    top = push(store, q, 5)[-1].id
    mtop = push(store, m, 5)[-1].id
    take_snapshot(store)
    crash(store)
    store = open_store(d, T0 + 1)
    assert push(store, store.queues[b"q"], 1, now=T0 + 1)[0].id > top
    assert push(store, store.queues[b"m"], 1, now=T0 + 1)[0].id > mtop
    assert len(store.queues[b"m"].jobs) == 1                    # memory jobs are not in a snapshot
    close(store)


@pytest.mark.parametrize("where", ["header", "first-frame", "middle", "last-frame"])
def test_a_flipped_bit_in_a_snapshot_is_named_with_file_and_offset(tmp_path, where):
    store = open_store(tmp_path / "d", T0)
    build_varied(store)
    info = take_snapshot(store)
    close(store)
    data = bytearray(open(info.path, "rb").read())
    at = {"header": 9, "first-frame": snapformat.SNAPSHOT_HEADER_SIZE + 2,
          "middle": len(data) // 2, "last-frame": len(data) - 3}[where]
    data[at] ^= 0x10
    open(info.path, "wb").write(bytes(data))
    with pytest.raises(snapshot.CorruptSnapshot) as e:
        snapshot.load(info.path)
    assert e.value.path == info.path
    assert e.value.offset <= at and (where != "header" or e.value.offset == 0)
    assert info.path in str(e.value) and str(e.value.offset) in str(e.value)


@pytest.mark.parametrize("keep", [0, 10, snapformat.SNAPSHOT_HEADER_SIZE, 0.5, -1])
def test_a_snapshot_cut_short_is_refused(tmp_path, keep):
    store = open_store(tmp_path / "d", T0)
    build_varied(store)
    info = take_snapshot(store)
    close(store)
    data = open(info.path, "rb").read()
    n = int(len(data) * keep) if isinstance(keep, float) else (len(data) + keep if keep < 0 else keep)
    open(info.path, "wb").write(data[:n])
    with pytest.raises(snapshot.CorruptSnapshot):
        snapshot.load(info.path)


def _three_snapshots(d, archive=""):
    store = open_store(d, T0)
    datadir_of(store).archive_dir = archive
    q = new_queue(store)
    for i in range(3):
        push(store, q, 4)
        jobs = claim(store, q, T0, count=2)
        ack(store, q, [j.token for j in jobs], T0)
        take_snapshot(store)
    return store


def test_compaction_keeps_two_snapshots_and_the_segments_after_the_older(tmp_path):
    d = tmp_path / "d"
    store = _three_snapshots(d)
    snaps = snapshot.list_snapshots(str(d))
    assert len(snaps) == 2
    older = snaps[0][0]
    numbers = [n for n, _p in list_segments(str(d))]
    assert numbers and numbers[0] == older + 1
    assert numbers == list(range(older + 1, numbers[-1] + 1))
    before = digest(store, durable_only=True, restarted="crash")
    crash(store)
    store = open_store(d, T0)
    assert digest(store, durable_only=True, restarted="crash") == before
    close(store)


def test_archive_dir_receives_the_segments_compaction_lets_go(tmp_path):
    d, archive = tmp_path / "d", tmp_path / "archive"
    store = _three_snapshots(d, archive=str(archive))
    archived = sorted(os.listdir(archive))
    kept = [os.path.basename(p) for _n, p in list_segments(str(d))]
    assert archived and not set(archived) & set(kept)
    assert [n for n, _p in list_segments(str(archive))] == list(range(1, len(archived) + 1))
    close(store)


def test_a_damaged_newest_snapshot_falls_back_to_the_previous_one(tmp_path, caplog):
    d = tmp_path / "d"
    store = _three_snapshots(d)
    before = digest(store, durable_only=True, restarted="crash")
    crash(store)
    newest = snapshot.list_snapshots(str(d))[-1][1]
    data = bytearray(open(newest, "rb").read())
    data[len(data) // 2] ^= 1
    open(newest, "wb").write(bytes(data))
    store = open_store(d, T0)
    assert datadir_of(store).loaded.path == snapshot.list_snapshots(str(d))[0][1]
    assert digest(store, durable_only=True, restarted="crash") == before
    assert "instead of the damaged" in caplog.text and os.path.basename(newest) in caplog.text
    close(store)


def test_a_damaged_snapshot_with_nothing_to_fall_back_on_refuses_to_start(tmp_path):
    d = tmp_path / "d"
    store = _three_snapshots(d)
    crash(store)
    for _covers, path in snapshot.list_snapshots(str(d)):
        data = bytearray(open(path, "rb").read())
        data[snapformat.SNAPSHOT_HEADER_SIZE + 1] ^= 1
        open(path, "wb").write(bytes(data))
    newest = snapshot.list_snapshots(str(d))[-1][1]
    with pytest.raises(CorruptLog) as e:
        DataDir.open(str(d), T0)
    assert e.value.path == newest and e.value.offset == snapformat.SNAPSHOT_HEADER_SIZE
    assert "--repair" in str(e.value)
    repaired = DataDir.open(str(d), T0, repair=True)        # starts, from what the segments hold
    recovered = digest(repaired.store, restarted="crash")
    repaired.close()
    assert len([n for n in os.listdir(d) if n.endswith(".snap.corrupt")]) == 2
    # and seals what it recovered in a snapshot, so the next start needs no --repair
    newest_segment = max(n for n, _p in list_segments(str(d)))
    sealed = snapshot.list_snapshots(str(d))
    assert len(sealed) == 1 and sealed[0][0] >= newest_segment - 1
    again = DataDir.open(str(d), T0)
    assert digest(again.store, restarted="crash") == recovered
    again.close()


def test_a_segment_missing_after_the_snapshot_refuses_to_start(tmp_path):
    d = tmp_path / "d"
    store = open_store(d, T0)
    q = new_queue(store)
    take_snapshot(store)
    push(store, q, 2)
    datadir_of(store).begin_snapshot()      # flush and rotate, as a snapshot begins
    push(store, q, 2)
    crash(store)
    covers = snapshot.list_snapshots(str(d))[-1][0]
    missing = dict(list_segments(str(d)))[covers + 1]
    os.unlink(missing)
    with pytest.raises(CorruptLog) as e:
        DataDir.open(str(d), T0)
    assert e.value.path == missing and "missing" in str(e.value)


def test_a_half_written_snapshot_is_removed_at_start(tmp_path, caplog):
    d = tmp_path / "d"
    store = open_store(d, T0)
    push(store, new_queue(store), 2)
    crash(store)
    stray = d / (snapshot.snapshot_name(1) + snapshot.TEMPORARY)
    stray.write_bytes(b"LEASEQSN partial")
    store = open_store(d, T0)
    assert not stray.exists()
    assert "did not finish" in caplog.text
    assert len(store.queues[b"q"].jobs) == 2
    close(store)


def test_log_bytes_since_snapshot_counts_from_the_snapshot_start(tmp_path):
    d = tmp_path / "d"
    store = open_store(d, T0)
    q = new_queue(store)
    push(store, q, 50, payload=b"x" * 100)
    dd = datadir_of(store)
    dd.wal.flush()
    assert dd.log_bytes_since_snapshot > 50 * 100
    take_snapshot(store)
    assert dd.log_bytes_since_snapshot == 0
    push(store, q, 1)
    dd.wal.flush()
    grew = dd.log_bytes_since_snapshot
    assert 0 < grew < 200
    crash(store)
    store = open_store(d, T0)
    assert datadir_of(store).log_bytes_since_snapshot >= grew
    close(store)


# -- the newest segment cut at every byte offset of its last records ---------------------------------

def _frame_ends(path) -> list[int]:
    data = open(path, "rb").read()
    return [off + records.FRAME_SIZE + len(body)
            for off, _t, body in records.iter_frames(data, records.SEGMENT_HEADER_SIZE)]


def test_the_newest_segment_cut_at_every_offset_of_its_last_records_recovers_the_whole_ones(tmp_path):
    d = tmp_path / "d"
    store = open_store(d, T0)
    q = new_queue(store)
    push(store, q, 3)
    jobs = claim(store, q, T0, count=2)
    ack(store, q, [jobs[0].token], T0)
    push(store, q, 2, payload=b"p" * 40)           # the last four records: CLAIM, ACK, PUSH, NACK
    nack(store, q, [jobs[1].token], T0, error=b"e")
    crash(store)
    newest = list_segments(str(d))[-1][1]
    ends = _frame_ends(newest)
    whole = open(newest, "rb").read()
    assert len(ends) >= 4 and ends[-1] == len(whole)
    expected = {}                                   # state of the log cut exactly after record k
    for boundary in ends[-4:]:
        exact = tmp_path / f"exact-{boundary}"
        shutil.copytree(d, exact)
        os.truncate(os.path.join(exact, os.path.basename(newest)), boundary)
        s = open_store(exact, T0)
        expected[boundary] = digest(s, restarted="crash")
        close(s)
    for cut in range(ends[-4] + 1, len(whole)):
        if cut in ends:
            continue
        cut_dir = tmp_path / f"cut-{cut}"
        shutil.copytree(d, cut_dir)
        os.truncate(os.path.join(cut_dir, os.path.basename(newest)), cut)
        s = open_store(cut_dir, T0)
        boundary = max(e for e in ends if e <= cut)
        assert datadir_of(s).report.truncated_bytes == cut - boundary, cut
        assert digest(s, restarted="crash") == expected[boundary], cut
        assert os.path.getsize(os.path.join(cut_dir, os.path.basename(newest))) == boundary
        close(s)
        shutil.rmtree(cut_dir)


# -- leases that ran out are logged, and a restart keeps what they did --------------------------------

def test_an_expired_lease_is_logged_when_noticed_and_replayed(tmp_path):
    from core import call, client_of
    d = tmp_path / "d"
    store = open_store(d, T0)
    q = new_queue(store)
    push(store, q, 2)
    claim(store, q, T0, count=2)
    assert call(client_of(store), "QLEN", "q", now=T0 + LEASE) == 2        # a look: both leases ran out
    crash(store)
    data = b"".join(open(p, "rb").read()[records.SEGMENT_HEADER_SIZE:] for _n, p in list_segments(str(d)))
    logged = [(t, records.decode(t, b)) for _o, t, b in records.iter_frames(data, 0) if t == records.EXPIRE]
    assert logged == [(records.EXPIRE, (q.qid, T0 + LEASE, (1, 2)))]
    store = open_store(d, T0 + LEASE)
    q = store.queues[b"q"]
    assert (len(q.indexes.ready), len(q.indexes.leases), q.counters.lease_expired) == (2, 0, 2)   # the counter survives too
    close(store)
