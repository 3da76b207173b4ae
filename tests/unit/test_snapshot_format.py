"""The snapshot's format versions and its SNAP_PLAIN record (storage.snapformat):
plain jobs column by column read back exactly, wherever they fall among
other jobs, a damaged SNAP_PLAIN body is named with file and offset, a
version-1 snapshot (every job in SNAP_JOBS) still loads, and a version this
daemon does not know is refused."""

from __future__ import annotations

import os
import struct

import pytest
from core import take_snapshot, T0, ack, call, claim, client_of, close, datadir_of, nack, nack_dead, new_queue, open_store, \
    push, push_key
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from store_state import digest, job_digest, provenance

from leaseq.storage import records, snapformat, snapshot
from leaseq.storage.job import DEAD, READY, Job

FIXTURE_V1 = os.path.join(os.path.dirname(__file__), "data", "snap-v1.snap")
# written by leaseq at c2a5249 (format version 2): "src" (DEADLETTER "src.dlq") lost job 1 to its
# dead-letter queue by QNACK DEAD ERROR boom; "here" has job 1 dead in place (nack) and job 2 ready
FIXTURE_V2 = os.path.join(os.path.dirname(__file__), "data", "snap-v2.snap")


def frames_of(path) -> list[tuple[int, int, bytes]]:
    """``(offset, type, body)`` of every frame of a snapshot file."""
    data = open(path, "rb").read()
    return list(records.iter_frames(data, snapformat.SNAPSHOT_HEADER_SIZE))


def jobs_frames(path) -> list[tuple[str, int, int]]:
    """``(record, qid, jobs)`` of the job records of a snapshot, in file order."""
    out = []
    for _off, rtype, body in frames_of(path):
        if rtype in (snapformat.SNAP_PLAIN, snapformat.SNAP_JOBS):
            qid, n = struct.unpack_from("<II", body)
            out.append(("plain" if rtype == snapformat.SNAP_PLAIN else "jobs", qid, n))
    return out


def arrive(store, q, ts, n, payload=b"p", priority=5, visible_at=None, requeued=False, deliveries=0):
    """``n`` new jobs through ``Store.push`` with fields no command sets on a
    new job (a job moved back from a dead-letter queue is requeued; one with
    deliveries and no consumer is what an older leaseq could leave)."""
    first = store.take_ids(q, n)
    jobs = []
    for i in range(n):
        job = Job(first + i, payload, priority, ts, ts if visible_at is None else visible_at)
        job.requeued, job.deliveries = requeued, deliveries
        jobs.append(job)
    store.push(q, jobs, ts)
    return jobs


def build_mixed(store, now=T0) -> None:
    """Plain jobs of several queues, priorities, delays, requeued, with
    deliveries and empty payloads, among jobs that are not plain (leased,
    nacked, keyed, dead, completed) by id; more plain jobs than one frame
    holds, by count and by bytes; long runs and runs of one job."""
    mix = new_queue(store, b"mix", retain_completed=60_000, retain_dead=60_000, maxdeliveries=1)
    big = new_queue(store, b"big", durability="async")
    only = new_queue(store, b"only")
    m = new_queue(store, b"m", durability="memory")
    push(store, mix, 6, now=now)
    claimed = claim(store, mix, now, count=3)                       # ids 1-3 in flight, 4-6 plain
    push_key(store, mix, b"k", now=now)                             # 7: keyed
    push(store, mix, 4, now=now + 1, priority=9)                    # 8-11 plain
    ack(store, mix, [claimed[0].token], now + 1)                    # 1: completed, retained
    nack(store, mix, [claimed[1].token], now + 1, error=b"e")       # 2: ready, requeued, consumer kept
    push(store, mix, 3, now=now + 2, priority=0, delay=5_000)       # 12-14 plain, delayed
    nack_dead(store, mix, [claimed[2].token], now + 2)              # 3: dead here
    arrive(store, mix, now + 3, 5, payload=b"", requeued=True, deliveries=2)          # empty payloads
    arrive(store, mix, now + 3, 4, payload=b"abcdef", priority=3, visible_at=now + 9_000, requeued=True)
    push_key(store, mix, b"k2", now=now + 4, delay=100)             # keyed, delayed
    arrive(store, mix, now + 5, 3, payload=b"xyz", deliveries=7)
    push(store, big, snapshot.PLAIN_FRAME_JOBS + 300, now=now, payload=b"small")    # frames by count
    for i in range(3):                                              # ... and by bytes
        arrive(store, big, now + 10 + i, 200, payload=b"B" * 4000)
    push(store, big, 2, now=now + 20, priority=1, delay=1)
    push_key(store, only, b"only", now=now)
    push(store, m, 3, now=now)
    cycle = new_queue(store, b"cycle")                              # short runs: a job each
    for i in range(300):
        push(store, cycle, 1, now=now + i // 3, priority=i % 10, delay=(i % 7 == 0) * (i + 1))


def test_plain_jobs_among_others_read_back_identical(tmp_path):
    store = open_store(tmp_path / "d", T0)
    build_mixed(store)
    before = digest(store, durable_only=True)
    info = take_snapshot(store)
    loaded, got = snapshot.load(info.path)
    assert digest(loaded) == before
    assert got.jobs == info.jobs == sum(len(q.jobs) for q in store.queues.values() if q.durability != "memory")
    mix, big, only = (store.queues[n].qid for n in (b"mix", b"big", b"only"))
    kinds = [kind for kind, qid, _n in jobs_frames(info.path) if qid == mix]
    assert kinds == ["jobs", "plain", "jobs", "plain", "jobs", "plain"]    # ids 1-3, 4-6, 7, 8-23, 24, 25-27
    assert [kind for kind, qid, _n in jobs_frames(info.path) if qid == only] == ["jobs"]
    big_frames = [n for kind, qid, n in jobs_frames(info.path) if qid == big]
    assert len(big_frames) >= 4 and max(big_frames) == snapshot.PLAIN_FRAME_JOBS     # cut by count, then by bytes
    assert sum(big_frames) == len(store.queues[b"big"].jobs)
    close(store)


def test_jobs_pushed_together_share_their_times_after_a_load(tmp_path):
    store = open_store(tmp_path / "d", T0)
    q = new_queue(store)
    push(store, q, 3, now=T0, delay=50)
    push(store, q, 2, now=T0 + 1)
    loaded, _info = snapshot.load(take_snapshot(store).path)
    jobs = list(loaded.queues[b"q"].jobs.values())
    assert jobs[0].enqueued_at is jobs[2].enqueued_at and jobs[0].visible_at is jobs[2].visible_at
    assert jobs[3].enqueued_at is jobs[4].enqueued_at and jobs[3].enqueued_at == T0 + 1
    close(store)


def test_a_queue_of_plain_jobs_costs_little_more_than_its_payloads(tmp_path):
    store = open_store(tmp_path / "d", T0)
    q = new_queue(store)
    for i in range(10):
        push(store, q, 1000, now=T0 + i, payload=b"x" * 120)      # payloads of 123-125 bytes
    info = take_snapshot(store)
    payloads = sum(len(job.payload) for job in q.jobs.values())
    assert info.bytes - payloads < 0.1 * len(q.jobs)              # a tenth of a byte a job
    one = new_queue(store, b"one")
    for i in range(1000):                                          # one push a millisecond
        push(store, one, 1, now=T0 + i, payload=b"x" * 120, priority=i % 10)
    grown = take_snapshot(store).bytes - info.bytes - sum(len(job.payload) for job in one.jobs.values())
    assert grown < 7 * len(one.jobs)        # enqueued_at, visible_at, kind: a byte of value, one of length
    close(store)


def test_a_snapshot_is_written_as_version_3(tmp_path):
    store = open_store(tmp_path / "d", T0)
    info = take_snapshot(store)
    head = open(info.path, "rb").read(snapformat.SNAPSHOT_HEADER_SIZE)
    assert snapformat.check_snapshot_header(head) == (3, info.covers, T0)
    assert struct.unpack_from("<H", head, 8) == (snapformat.SNAPSHOT_VERSION,) == (3,)
    assert records.VERSION == 1                                     # the log's own version stays
    close(store)


# -- the record on its own ----------------------------------------------------------------------

@st.composite
def plain_columns(draw):
    n = draw(st.integers(0, 60))
    gaps = draw(st.lists(st.sampled_from([1, 1, 1, 2, 50, 1 << 40]), min_size=n, max_size=n))
    ids, at = [], draw(st.integers(0, 1 << 33))
    for gap in gaps:
        at += gap
        ids.append(at)
    moments = st.sampled_from([0, 1, T0, T0 + 1, T0 - 7, (1 << 63) - 1, (1 << 64) - 1])
    enqueued = draw(st.lists(moments, min_size=n, max_size=n))
    visible = draw(st.lists(moments, min_size=n, max_size=n))
    kinds = draw(st.lists(st.sampled_from([0, 5, 9, 5 | 16, 5 | 32, 9 | 16 | 32]), min_size=n, max_size=n))
    deliveries = draw(st.lists(st.sampled_from([0, 0, 1, 300, (1 << 32) - 1]), min_size=n, max_size=n))
    payloads = draw(st.lists(st.sampled_from([b"", b"a", b"bb", b"c" * 300]), min_size=n, max_size=n))
    return ids, enqueued, visible, kinds, deliveries, payloads


def expanded(runs) -> list:
    values, lengths = runs
    return snapformat.expand(values, lengths)


@settings(max_examples=300, deadline=None)
@given(plain_columns())
def test_snap_plain_reads_back_every_column(cols):
    ids, enqueued, visible, kinds, deliveries, payloads = cols
    body = snapformat.snap_plain(7, ids, enqueued, visible, kinds, deliveries, payloads)
    qid, got_ids, got_enq, got_vis, got_kinds, got_del, got_payloads, payload_bytes = \
        snapformat.decode_snap_plain(body)
    assert (qid, got_ids, got_enq, got_vis) == (7, ids, enqueued, visible)
    assert (expanded(got_kinds), expanded(got_del), got_payloads) == (kinds, deliveries, payloads)
    assert payload_bytes == sum(map(len, payloads))


def test_snap_plain_of_one_push_is_one_run_per_column():
    n = 1000
    body = snapformat.snap_plain(1, list(range(10, 10 + n)), [T0] * n, [T0] * n, [5] * n, [0] * n, [b"x" * 128] * n)
    column = 4 + 1 + 1 + 2                # runs u32, widths u8, one value u8, one length u16 (1000 jobs)
    assert len(body) == (8                  # qid, count
                         + 3 * (8 + column)  # ids, enqueued_at, visible_at: first u64, the run's delta 0
                         + 3 * column        # kind, deliveries, payload_len 128
                         + 128 * n)
    _qid, _ids, enqueued, _vis, kinds, _d, _p, _b = snapformat.decode_snap_plain(body)
    assert kinds == ((5,), (n,)) and enqueued[0] is enqueued[-1]


def _plain_body(n=5):
    return snapformat.snap_plain(3, list(range(1, n + 1)), [T0] * n, [T0 + 1] * n, [5] * n, [0] * n,
                                 [b"pay%d" % i for i in range(n)])


def test_every_prefix_of_a_snap_plain_body_is_refused():
    body = _plain_body()
    for cut in range(len(body)):
        with pytest.raises(records.FormatError):
            snapformat.decode_snap_plain(body[:cut])
    with pytest.raises(records.FormatError, match="length"):
        snapformat.decode_snap_plain(body + b"!")


def _column_offsets(body: bytes) -> list[int]:
    """Where each of the six columns of a SNAP_PLAIN body starts."""
    offsets, off = [], 8
    for column in range(6):
        off += 8 if column < 3 else 0       # (ids and times begin with their first value)
        offsets.append(off)
        k, widths = struct.unpack_from("<IB", body, off)
        off += 5 + k * (1 << (widths & 3)) + k * (1 << (widths >> 2 & 3))
    return offsets


@pytest.mark.parametrize("damage, match", [
    (lambda b, c: b[:4] + struct.pack("<I", 6) + b[8:], "do not add up"),                  # one job more
    (lambda b, c: b[:c[0] + 4] + bytes([b[c[0] + 4] | 0x10]) + b[c[0] + 5:], "widths"),     # unknown width bits
    (lambda b, c: b[:c[3] + 5] + bytes([12]) + b[c[3] + 6:], "kind"),                        # priority 12
    (lambda b, c: b[:c[3] + 5] + bytes([5 | 64]) + b[c[3] + 6:], "kind"),                    # unknown kind bit
    (lambda b, c: b[:c[5] + 6] + bytes([0]) + b[c[5] + 7:], "do not add up"),               # a run of 0 jobs
    (lambda b, c: b[:c[0] - 8] + bytes(8) + b[c[0]:], "id 0"),                               # first id 0
], ids=["count", "widths", "priority", "kind-bit", "empty-run", "id-0"])
def test_a_damaged_snap_plain_body_is_named_with_file_and_offset(tmp_path, damage, match):
    body = _plain_body()
    bad = damage(body, _column_offsets(body))
    with pytest.raises(records.FormatError, match=match):
        snapformat.decode_snap_plain(bad)
    path = _snapshot_with(tmp_path, bad)
    with pytest.raises(snapshot.CorruptSnapshot) as e:
        snapshot.load(path)
    assert e.value.offset == _offset_of(path, snapformat.SNAP_PLAIN)
    assert e.value.path == path and path in str(e.value) and str(e.value.offset) in str(e.value)
    assert match in e.value.reason


@pytest.mark.parametrize("cut", [0, 7, 12, 30, -1])
def test_a_short_snap_plain_body_is_named_with_file_and_offset(tmp_path, cut):
    body = _plain_body()
    path = _snapshot_with(tmp_path, body[:cut])                   # framed whole: its checksum holds
    with pytest.raises(snapshot.CorruptSnapshot) as e:
        snapshot.load(path)
    assert e.value.offset == _offset_of(path, snapformat.SNAP_PLAIN) and "SNAP_PLAIN" in e.value.reason


def test_a_snap_plain_of_more_jobs_than_a_record_may_hold_is_refused():
    n = snapformat.PLAIN_MAX_JOBS + 1
    body = snapformat.snap_plain(1, list(range(1, n + 1)), [T0] * n, [T0] * n, [5] * n, [0] * n, [b""] * n)
    with pytest.raises(records.FormatError, match="more than"):
        snapformat.decode_snap_plain(body)


def _snapshot_with(tmp_path, plain_body: bytes, version: int = snapformat.SNAPSHOT_VERSION) -> str:
    """A snapshot file of one queue ``q`` (qid 3) whose jobs are ``plain_body``."""
    head = struct.pack("<8sHHQQ", snapformat.SNAPSHOT_MAGIC, version, 0, 1, T0)
    parts = [head + struct.pack("<I", crc32c(head)),
             records.frame(snapformat.SNAP_STORE, snapformat.snap_store(1, 0, 4, (0, False, 0), {})),
             records.frame(snapformat.SNAP_QUEUE, snapformat.snap_queue(3, 6, 4096, (5, 0, 0, 0, 0, 0), b"q",
                                                                    {"durability": "fsync"})),
             records.frame(snapformat.SNAP_PLAIN, plain_body),
             records.frame(snapformat.SNAP_END, snapformat.snap_end(1, 5))]
    path = str(tmp_path / f"snap-{len(plain_body)}-v{version}.snap")
    with open(path, "wb") as f:
        f.write(b"".join(parts))
    return path


def _offset_of(path: str, rtype: int) -> int:
    return next(off for off, t, _b in frames_of(path) if t == rtype)


def test_a_hand_built_snapshot_loads_its_plain_jobs(tmp_path):
    loaded, info = snapshot.load(_snapshot_with(tmp_path, _plain_body()))
    q = loaded.queues[b"q"]
    assert (info.jobs, list(q.jobs), [j.payload for j in q.jobs.values()]) == \
        (5, [1, 2, 3, 4, 5], [b"pay%d" % i for i in range(5)])
    assert list(q.indexes.ready) == [1, 2, 3, 4, 5] and q.payload_bytes == 20
    assert q.jobs.scan(0, 10)[1] == list(q.jobs.values())


# -- versions -----------------------------------------------------------------------------------

def build_v1_fixture(store) -> None:
    """The store tests/unit/data/snap-v1.snap holds: written by leaseq before
    SNAP_PLAIN (commit 3bf3261, format version 1) from this store, on a fresh
    data directory at T0 (``take_snapshot(store)`` right after this)."""
    a = new_queue(store, b"a", retain_completed=60_000, deadletter="dl")
    b = new_queue(store, b"b", retain_dead=120_000)
    push(store, a, 5, priority=7)
    push(store, a, 2, delay=5_000)
    push_key(store, a, b"k1")
    jobs = claim(store, a, T0, count=3)
    ack(store, a, [jobs[0].token], T0)
    nack(store, a, [jobs[1].token], T0, error=b"boom")
    push(store, b, 3, max_deliveries=1)
    bj = claim(store, b, T0, count=1)
    nack_dead(store, b, [bj[0].token], T0, error=b"dead here")


def test_a_version_1_snapshot_still_loads(tmp_path):
    data = open(FIXTURE_V1, "rb").read()
    assert snapformat.check_snapshot_header(data)[0] == 1
    assert {t for _o, t, _b in frames_of(FIXTURE_V1)} >= {snapformat.SNAP_JOBS}
    assert snapformat.SNAP_PLAIN not in {t for _o, t, _b in frames_of(FIXTURE_V1)}
    store = open_store(tmp_path / "d", T0)
    build_v1_fixture(store)
    loaded, info = snapshot.load(FIXTURE_V1)
    assert digest(loaded) == digest(store, durable_only=True)
    assert (info.queues, info.jobs, info.bytes) == (2, 11, len(data))
    close(store)


def test_a_data_directory_whose_snapshot_is_version_1_starts_and_writes_version_3(tmp_path):
    d = tmp_path / "d"
    os.makedirs(d)
    with open(FIXTURE_V1, "rb") as src, open(d / snapshot.snapshot_name(1), "wb") as dst:
        dst.write(src.read())
    store = open_store(d, T0)
    assert datadir_of(store).loaded.path.endswith(snapshot.snapshot_name(1))
    assert call(client_of(store), "QLEN", "a", now=T0) == 4
    info = take_snapshot(store)
    assert snapformat.check_snapshot_header(open(info.path, "rb").read(32))[0] == 3
    loaded, _ = snapshot.load(info.path)
    assert digest(loaded) == digest(store, durable_only=True)
    close(store)


def test_a_snap_plain_record_in_a_version_1_snapshot_is_refused(tmp_path):
    path = _snapshot_with(tmp_path, _plain_body(), version=1)
    with pytest.raises(snapshot.CorruptSnapshot) as e:
        snapshot.load(path)
    assert e.value.offset == _offset_of(path, snapformat.SNAP_PLAIN)
    assert "record type 33 does not belong in a version 1 snapshot" in str(e.value)


@pytest.mark.parametrize("version", [0, 4])
def test_a_snapshot_of_an_unknown_version_is_refused_with_a_clear_message(tmp_path, version):
    path = _snapshot_with(tmp_path, _plain_body(), version=version)
    with pytest.raises(snapshot.CorruptSnapshot) as e:
        snapshot.load(path)
    assert e.value.offset == 0
    assert f"snapshot format version {version} is not supported (this daemon reads versions 1, 2, 3" in str(e.value)


def test_a_version_2_snapshot_reads_its_dead_reasons_and_provenance(tmp_path):
    """Version 2 kept a dead job's reason in ``bits`` (3-4), version 3 in the
    state byte: both read the same."""
    loaded, _info = snapshot.load(FIXTURE_V2)
    here, dlq = loaded.queues[b"here"], loaded.queues[b"src.dlq"]
    assert (here.jobs[1].state, here.jobs[1].dead_reason, here.jobs[2].state) == (DEAD, b"nack", READY)
    assert (provenance(dlq.jobs[1]), dlq.jobs[1].last_error) == ((b"src", 1, 1, b"nack"), b"boom")
    d = tmp_path / "d"
    os.makedirs(d)
    with open(FIXTURE_V2, "rb") as src, open(d / snapshot.snapshot_name(1), "wb") as dst:
        dst.write(src.read())
    store = open_store(d, T0)
    info = take_snapshot(store)                   # written again as version 3: the same store
    again, _ = snapshot.load(info.path)
    assert _jobs_of(again) == _jobs_of(loaded)
    close(store)


def _jobs_of(store) -> dict:
    return {name: {jid: job_digest(j) for jid, j in q.jobs.items()} for name, q in store.queues.items()}
