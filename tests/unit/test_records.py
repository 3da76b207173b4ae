"""The write-ahead log's record format (leaseq.storage.records)."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from leaseq.storage import records, recovery
from leaseq.storage.job import Job
from leaseq.storage.records import FormatError
from leaseq.storage.store import Store


def J(id, payload, visible_at=0, priority=5, flags=0, max_deliveries=0, expire_ms=0, key=None) -> Job:
    """A job as ``records.push`` reads it."""
    return Job(id, payload, priority, 0, visible_at, key, flags, max_deliveries, expire_ms)


def job_fields(j):
    return (j.id, j.visible_at, j.priority, j.flags, j.max_deliveries, j.expire_ms, j.key, j.payload)


U32, U64 = 2 ** 32 - 1, 2 ** 64 - 1


# -- bodies round-trip ------------------------------------------------------------------

@pytest.mark.parametrize("epoch, ts", [(1, 1_700_000_000_000), (0, 0), (U32, U64)])
def test_boot_round_trip(epoch, ts):
    assert records.decode(records.BOOT, records.boot(epoch, ts)) == (epoch, ts)


def test_boot_body_is_little_endian():
    assert records.boot(1, 2) == b"\x01\x00\x00\x00" + b"\x02" + b"\x00" * 7


@pytest.mark.parametrize("name, config", [
    (b"q", {}),
    (b"jobs:email", {"lease": 30000, "backoff": [1000, 2.0, 1000], "deadletter": None,
                     "durability": "memory"}),
    (b"x" * 255, {"deadletter": "dl\u00e9"}),
])
def test_queue_round_trip(name, config):
    body = records.queue(7, 123, name, config)
    assert records.decode(records.QUEUE, body) == (7, 123, name, config)


def test_drop_round_trip():
    assert records.decode(records.DROP, records.drop(U32, U64)) == (U32, U64)


def test_push_round_trip_keeps_every_job_field():
    jobs = [
        J(1, b"payload"),
        J(2, b"", visible_at=5000, priority=9, flags=2, max_deliveries=3, expire_ms=60000, key=b"k1"),
        J(U64, bytes(range(256)) * 4, visible_at=U64, priority=0, flags=1, max_deliveries=U32,
          expire_ms=U64, key=b"\x00" * 300),
    ]
    qid, ts, decoded = records.decode(records.PUSH, records.push(3, 999, jobs))
    assert (qid, ts) == (3, 999)
    assert [job_fields(d) for d in decoded] == [job_fields(j) for j in jobs]


def test_push_keeps_the_group_and_the_dedupe_scope_apart():
    grouped = J(1, b"p", flags=2, key=b"k")
    grouped.group = b"tenant-\xff"
    _qid, _ts, (job, plain) = records.decode(records.PUSH, records.push(1, 1, [grouped, J(2, b"q")]))
    assert plain.group == b""
    assert (job.group, job.flags, job.key, job.payload) == (b"tenant-\xff", 2, b"k", b"p")


def test_schedule_unschedule_and_fire_round_trip():
    spec = {"name": "n\u00ff", "payload": "p", "every": 200}
    assert records.decode(records.SCHEDULE, records.schedule(4, 5, spec)) == (4, 5, spec)
    assert records.decode(records.UNSCHEDULE, records.unschedule(4, 5, b"n\xff")) == (4, 5, b"n\xff")
    pairs = [(7, 1000), (8, U64)]
    assert records.decode(records.FIRE, records.fire(4, 5, b"beat", 1200, 3, pairs)) == (4, 5, b"beat", 1200, 3, pairs)
    assert records.decode(records.FIRE, records.fire(4, 5, b"beat", 1200, 9, [])) == (4, 5, b"beat", 1200, 9, [])


def test_progress_round_trip():
    assert records.decode(records.PROGRESS, records.progress(1, 2, U64, b"50%")) == (1, 2, U64, b"50%")
    assert records.decode(records.PROGRESS, records.progress(1, 2, 3, b"")) == (1, 2, 3, b"")


def test_replace_round_trip():
    pairs = [(3, b"new"), (U64, b""), (9, bytes(range(256)))]
    assert records.decode(records.REPLACE, records.replace(1, 2, 0, 9, pairs)) == (1, 2, 0, 9, pairs)
    assert records.decode(records.REPLACE, records.replace(1, 2, U64, 0, [])) == (1, 2, U64, 0, [])


def test_push_job_without_key_decodes_key_as_none():
    _qid, _ts, (job,) = records.decode(records.PUSH, records.push(1, 1, [J(1, b"p", key=None)]))
    assert job.key is None


def test_push_of_no_jobs_round_trips():
    assert records.decode(records.PUSH, records.push(1, 2, [])) == (1, 2, [])


@pytest.mark.parametrize("ids", [(), (1,), (1, 2, U64), tuple(range(3000, 4500))])   # past the Structs kept
def test_claim_round_trip(ids):
    body = records.claim(4, 10, 30010, 17, b"worker-1", list(ids), [7] * len(ids))
    assert records.decode(records.CLAIM, body) == (4, 10, 30010, 17, b"worker-1", ids, (7,) * len(ids))


@pytest.mark.parametrize("ids", [(1,), (5, 6, 7)])
def test_a_claim_from_before_deliveries_were_written_still_reads(ids):
    body = records.claim(4, 10, 30010, 17, b"worker-1", list(ids))
    assert records.decode(records.CLAIM, body) == (4, 10, 30010, 17, b"worker-1", ids, None)


def test_claim_with_binary_consumer_round_trips():
    consumer = b"\x00\xff" * 100
    assert records.decode(records.CLAIM, records.claim(1, 2, 3, 4, consumer, [5]))[4] == consumer


@pytest.mark.parametrize("ids", [(), (1,), tuple(range(1, 1001)), tuple(range(1, 2001))])
def test_ack_round_trip(ids):
    assert records.decode(records.ACK, records.ack(2, 55, list(ids))) == (2, 55, ids)


@pytest.mark.parametrize("error", [None, b"", b"boom", b"\x00\r\n" * 50])
def test_nack_round_trip_keeps_error_none_and_empty_apart(error):
    body = records.nack(5, 100, 2100, error, [8, 9])
    assert records.decode(records.NACK, body) == (5, 100, 2100, error, (8, 9), False)


def test_nack_of_a_closed_connection_is_flagged():
    body = records.nack(5, 100, 100, None, [8], closed=True)
    assert records.decode(records.NACK, body) == (5, 100, 100, None, (8,), True)


def test_dead_round_trip_with_and_without_target():
    assert records.decode(records.DEAD, records.dead(1, 9, 2, 4, [(5, 50), (6, 51)])) == \
        (1, 9, 2, 4, [(5, 50), (6, 51)])
    assert records.decode(records.DEAD, records.dead(1, 9, 3, 0, [(5, 0)])) == (1, 9, 3, 0, [(5, 0)])


def test_dead_with_unknown_reason_is_format_error():
    with pytest.raises(FormatError, match="unknown reason"):
        records.decode(records.DEAD, records.dead(1, 9, 7, 0, [(5, 0)]))


def test_redrive_move_del_and_clock_round_trip():
    assert records.decode(records.REDRIVE, records.redrive(2, 3, [4, 5])) == (2, 3, (4, 5))
    assert records.decode(records.MOVE, records.move(2, 3, 7, [(4, 40)])) == (2, 3, 7, [(4, 40)])
    assert records.decode(records.DEL, records.delete(2, 3, [9])) == (2, 3, (9,))
    assert records.decode(records.CLOCK, records.clock(-25, True, 1234)) == (-25, True, 1234)


def test_ping_round_trips_is_replayed_as_nothing_and_refuses_a_wrong_size():
    """PING, a primary's keepalive in its stream: its time, and no change to the store."""
    body = records.ping(1_700_000_000_123)
    assert records.decode(records.PING, body) == (1_700_000_000_123,)
    store = Store()
    before = (store.epoch, dict(store.queues))
    recovery.Replayer(store).apply(records.PING, body)
    assert (store.epoch, dict(store.queues)) == before
    with pytest.raises(FormatError, match="PING record has the wrong size"):
        records.decode(records.PING, body + b"\0")


def test_extend_round_trip():
    assert records.decode(records.EXTEND, records.extend(6, 7, 8, [1, 3])) == (6, 7, 8, (1, 3))


def test_idmark_round_trip():
    assert records.decode(records.IDMARK, records.idmark(9, 65537)) == (9, 65537)


def test_txn_round_trip_keeps_inner_records_in_order():
    inner = [
        (records.PUSH, records.push(1, 1, [J(10, b"a")])),
        (records.ACK, records.ack(1, 2, [3])),
        (records.IDMARK, records.idmark(1, 100)),
    ]
    assert records.decode(records.TXN, records.txn(inner)) == (inner,)


def test_empty_txn_round_trips():
    assert records.decode(records.TXN, records.txn([])) == ([],)


def test_record_type_numbers_are_the_documented_ones():
    assert (records.BOOT, records.QUEUE, records.DROP, records.PUSH, records.CLAIM, records.ACK,
            records.NACK, records.EXTEND, records.IDMARK, records.TXN, records.DEAD, records.REDRIVE,
            records.MOVE, records.DEL, records.CLOCK) == tuple(range(1, 16))
    assert (records.SCHEDULE, records.UNSCHEDULE, records.FIRE, records.REPLACE, records.RELEASE,
            records.PROGRESS, records.RESULT, records.CANCEL) == (18, 19, 26, 27, 28, 29, 30, 31)
    assert set(records.NAMES) == set(range(1, 20)) | {26, 27, 28, 29, 30, 31, 34}


# -- malformed bodies ---------------------------------------------------------------------

@pytest.mark.parametrize("rtype", [0, 20, 99, 255])
def test_unknown_record_type_is_format_error(rtype):
    with pytest.raises(FormatError, match="unknown record type"):
        records.decode(rtype, b"\x00" * 16)


@pytest.mark.parametrize("rtype, body", [
    (records.BOOT, records.boot(1, 2)[:-1]),
    (records.BOOT, records.boot(1, 2) + b"\x00"),
    (records.QUEUE, records.queue(1, 2, b"q", {})[:5]),
    (records.QUEUE, records.queue(1, 2, b"q", {})[:-1]),                 # JSON cut short
    (records.QUEUE, records.queue(1, 2, b"q", {}).replace(b"{}", b"\xff\xfe")),  # not UTF-8
    (records.QUEUE, struct.pack("<IQB", 1, 2, 50) + b"q{}"),               # name runs past the end
    (records.DROP, records.drop(1, 2) + b"\x00"),
    (records.DROP, b""),
    (records.PUSH, records.push(1, 2, [J(1, b"abc")])[:-1]),            # payload cut short
    (records.PUSH, records.push(1, 2, [J(1, b"abc")]) + b"\x00"),       # trailing byte
    (records.PUSH, records.push(1, 2, [J(1, b"abc"), J(2, b"d")])[:40]),  # second job header cut
    (records.PUSH, struct.pack("<IQI", 1, 2, 1000)),                     # count but no jobs
    (records.CLAIM, records.claim(1, 2, 3, 4, b"c", [1, 2])[:-1]),
    (records.CLAIM, records.claim(1, 2, 3, 4, b"c", [1, 2]) + b"\x00" * 4),
    (records.CLAIM, b"\x00" * 10),
    (records.ACK, records.ack(1, 2, [1, 2])[:-8]),
    (records.ACK, records.ack(1, 2, [1]) + b"\x00"),
    (records.ACK, b""),
    (records.NACK, records.nack(1, 2, 3, b"err", [1])[:-1]),
    (records.NACK, records.nack(1, 2, 3, b"err", [1])[:20]),
    (records.EXTEND, records.extend(1, 2, 3, [4])[:-1]),
    (records.EXTEND, records.extend(1, 2, 3, [4]) + b"\x00" * 8),
    (records.IDMARK, records.idmark(1, 2)[:-1]),
    (records.IDMARK, records.idmark(1, 2) + b"\x00"),
    (records.SCHEDULE, records.schedule(1, 2, {})[:-1]),
    (records.SCHEDULE, b"\x00" * 4),
    (records.UNSCHEDULE, records.unschedule(1, 2, b"name")[:-1]),
    (records.UNSCHEDULE, records.unschedule(1, 2, b"name") + b"\x00"),
    (records.FIRE, records.fire(1, 2, b"s", 3, 0, [(1, 2)])[:-1]),
    (records.REPLACE, records.replace(1, 2, 3, 4, [(5, b"abc")])[:-1]),
    (records.PROGRESS, records.progress(1, 2, 3, b"abc")[:-1]),
    (records.PROGRESS, records.progress(1, 2, 3, b"abc") + b"\x00"),
    (records.REPLACE, records.replace(1, 2, 3, 4, [(5, b"abc")]) + b"\x00"),
    (records.FIRE, records.fire(1, 2, b"s", 3, 0, [(1, 2)]) + b"\x00"),
    (records.TXN, b"\x01\x00"),
    (records.TXN, records.txn([(records.ACK, records.ack(1, 2, [3]))])[:-1]),
    (records.TXN, records.txn([(records.ACK, records.ack(1, 2, [3]))]) + b"\x00"),
    (records.TXN, struct.pack("<I", 2) + records.txn([(records.IDMARK, records.idmark(1, 2))])[4:]),
])
def test_malformed_body_is_format_error(rtype, body):
    with pytest.raises(FormatError):
        records.decode(rtype, body)


def test_format_error_is_a_value_error():
    assert issubclass(FormatError, ValueError)


# -- TXN nesting -----------------------------------------------------------------------------

def test_txn_inside_txn_is_format_error():
    inner = records.txn([(records.IDMARK, records.idmark(1, 2))])
    body = records.txn([(records.IDMARK, records.idmark(1, 3)), (records.TXN, inner)])
    with pytest.raises(FormatError, match="TXN"):
        records.decode(records.TXN, body)


def test_empty_txn_inside_txn_is_still_format_error():
    with pytest.raises(FormatError):
        records.decode(records.TXN, records.txn([(records.TXN, records.txn([]))]))


def test_txn_inner_records_are_not_decoded_by_the_txn_itself():
    # the inner bodies come back raw; each is decoded when it is applied
    inner = [(records.ACK, records.ack(1, 2, [3])), (records.DROP, records.drop(4, 5))]
    (got,) = records.decode(records.TXN, records.txn(inner))
    assert [records.decode(t, b) for t, b in got] == [(1, 2, (3,)), (4, 5)]


# -- framing --------------------------------------------------------------------------------

def test_frame_layout_is_crc_length_type_body():
    body = records.ack(1, 2, [3])
    data = records.frame(records.ACK, body)
    crc, length, rtype = struct.unpack_from("<IIB", data)
    assert (length, rtype) == (len(body), records.ACK)
    assert data[records.FRAME_SIZE:] == body
    assert crc == crc32c(data[4:])          # covers length, type and body
    assert records.FRAME_SIZE == 9


def test_read_frame_returns_type_body_and_next_offset():
    body = records.boot(3, 4)
    data = b"junk" + records.frame(records.BOOT, body) + b"more"
    assert records.read_frame(data, 4) == (records.BOOT, body, 4 + records.FRAME_SIZE + len(body))


def test_read_frame_accepts_memoryview():
    data = records.frame(records.IDMARK, records.idmark(1, 2))
    assert records.read_frame(memoryview(data), 0) == (records.IDMARK, records.idmark(1, 2), len(data))


def test_frame_with_empty_body_round_trips():
    data = records.frame(records.TXN, b"")
    assert records.read_frame(data, 0) == (records.TXN, b"", records.FRAME_SIZE)


def test_read_frame_of_every_cut_short_frame_is_none():
    data = records.frame(records.ACK, records.ack(1, 2, [3, 4]))
    for cut in range(len(data)):
        assert records.read_frame(data[:cut], 0) is None


def test_read_frame_detects_any_flipped_bit():
    data = records.frame(records.NACK, records.nack(1, 2, 3, b"error", [4]))
    for i in range(len(data)):
        for bit in (0x01, 0x80):
            bad = bytearray(data)
            bad[i] ^= bit
            got = records.read_frame(bytes(bad), 0)
            # a changed length may make the frame look incomplete; either way it is refused
            assert got is None, f"flip of bit {bit:#x} in byte {i} went unnoticed"


def test_read_frame_detects_changed_record_type_even_with_same_body():
    body = records.drop(1, 2)
    data = bytearray(records.frame(records.DROP, body))
    data[8] = records.IDMARK  # DROP and IDMARK bodies have the same size
    assert records.read_frame(bytes(data), 0) is None


def test_iter_frames_yields_every_frame_with_its_offset():
    bodies = [(records.BOOT, records.boot(1, 2)), (records.IDMARK, records.idmark(1, 5)),
              (records.ACK, records.ack(1, 2, [])), (records.TXN, b"")]
    data = b"H" * 3 + b"".join(records.frame(t, b) for t, b in bodies)
    got = list(records.iter_frames(data, 3))
    assert [(t, b) for _o, t, b in got] == bodies
    offsets = [o for o, _t, _b in got]
    assert offsets[0] == 3
    for (o1, _t, b), o2 in zip(got, offsets[1:]):
        assert o2 == o1 + records.FRAME_SIZE + len(b)


def test_iter_frames_stops_at_the_first_bad_frame():
    good = records.frame(records.IDMARK, records.idmark(1, 1))
    bad = bytearray(records.frame(records.IDMARK, records.idmark(1, 2)))
    bad[-1] ^= 0xFF
    data = good + bytes(bad) + good
    assert [o for o, _t, _b in records.iter_frames(data, 0)] == [0]


def test_iter_frames_stops_at_a_torn_tail():
    f = records.frame(records.ACK, records.ack(1, 2, [3]))
    data = f + f + f[:-3]
    assert len(list(records.iter_frames(data, 0))) == 2


def test_iter_frames_on_empty_input_yields_nothing():
    assert list(records.iter_frames(b"", 0)) == []


# -- segment header ---------------------------------------------------------------------------

def test_segment_header_round_trip():
    for number in (0, 1, 12345, U64):
        header = records.segment_header(number)
        assert len(header) == records.SEGMENT_HEADER_SIZE == 24
        assert records.check_segment_header(header) == number


def test_segment_header_layout():
    header = records.segment_header(7)
    assert header[:8] == b"LEASEQWL"
    assert struct.unpack_from("<HHQ", header, 8) == (records.VERSION, 0, 7)
    assert struct.unpack_from("<I", header, 20)[0] == crc32c(header[:20])


def test_segment_header_ignores_what_follows_it():
    assert records.check_segment_header(records.segment_header(3) + b"frames...") == 3


def test_short_segment_header_is_format_error():
    header = records.segment_header(1)
    for cut in range(len(header)):
        with pytest.raises(FormatError):
            records.check_segment_header(header[:cut])


def test_segment_header_checksum_mismatch_is_format_error():
    header = bytearray(records.segment_header(1))
    header[16] ^= 1  # the segment number
    with pytest.raises(FormatError, match="checksum"):
        records.check_segment_header(bytes(header))


def _header_with(magic=records.MAGIC, version=records.VERSION, number=1):
    head = struct.pack("<8sHHQ", magic, version, 0, number)
    return head + struct.pack("<I", crc32c(head))


def test_segment_header_with_bad_magic_is_format_error():
    with pytest.raises(FormatError, match="magic"):
        records.check_segment_header(_header_with(magic=b"NOTLEASE"))


def test_segment_header_of_another_version_is_format_error():
    with pytest.raises(FormatError, match="version 2"):
        records.check_segment_header(_header_with(version=2))


def test_id_lists_of_every_length_pack_the_same_bytes_as_their_format():
    """One Struct per length, the last lengths used kept up to a bound;
    either way the bytes are the format's."""
    for n in (0, 1, 7, records._LENGTHS_KEPT, records._LENGTHS_KEPT + 1, 3000):
        ids = list(range(U64 - n, U64))
        for _twice in range(2):
            assert records._u64s(n).pack(*ids) == struct.pack("<%dQ" % n, *ids)
            assert records._u32s(n).pack(*[i & 0xFFFFFFFF for i in ids]) == struct.pack("<%dI" % n, *[i & 0xFFFFFFFF for i in ids])
    assert 0 < records._u64s.cache_info().currsize <= records._LENGTHS_KEPT
    assert 0 < records._u32s.cache_info().currsize <= records._LENGTHS_KEPT


def test_every_record_type_has_one_replay_step():
    """storage/recovery.py replays a record by its type's row in one of its
    two tables (TXN unwraps into them): every type the format names has
    exactly one row, and a type it does not name is refused."""
    rows = set(recovery.STORE_RECORDS) | set(recovery.QUEUE_RECORDS) | {records.TXN}
    assert rows == set(records.NAMES)
    assert not set(recovery.STORE_RECORDS) & set(recovery.QUEUE_RECORDS)
    unknown = max(records.NAMES) + 1
    records._DECODERS[unknown] = lambda body: (1,)         # (decodable, so that the replay is what refuses it)
    try:
        with pytest.raises(records.FormatError, match=f"record type {unknown} cannot be replayed"):
            recovery.Replayer(Store()).apply(unknown, b"")
    finally:
        del records._DECODERS[unknown]


def test_push_columns_are_the_push_records_jobs_without_their_payloads():
    """``push_columns`` (the Spark reader's) walks keys, groups and parents
    as ``decode`` does and gives ids, priorities and payload sizes."""
    grouped = J(7, b"group me", priority=2, key=b"k")
    grouped.group = b"tenant"
    child = J(8, b"c" * 300, priority=9)
    child.waiting_for = {(1, 7), (2, 3)}
    jobs = [J(1, b"payload"), grouped, child, J(U64, b"", key=b"\x00" * 300)]
    body = records.push(3, 999, jobs)
    decoded = records.decode(records.PUSH, body)[2]
    assert records.push_columns(body) == (3, 999, [d.id for d in decoded], [d.priority for d in decoded],
                                          [len(d.payload) for d in decoded], True, None)
    assert records.push_columns(records.push(1, 2, jobs[:2]))[5] is False
    with pytest.raises(FormatError):
        records.push_columns(body + b"x")


def test_push_columns_give_each_jobs_meta_when_one_has_it():
    tagged = J(2, b"x", key=b"k")
    tagged.group = b"g"
    tagged.waiting_for = {(1, 1)}
    tagged.meta = ((b"tenant", b"acme"), (b"trace", b""))
    body = records.push(3, 999, [J(1, b"plain"), tagged, J(3, b"y")])
    cols = records.push_columns(body)
    assert cols[2] == [1, 2, 3] and cols[4] == [5, 1, 1]
    assert cols[6] == [None, ((b"tenant", b"acme"), (b"trace", b"")), None]


def test_push_round_trip_keeps_meta_after_key_group_and_parents():
    """META is the job's fields in the order given, after the parents
    (flags bit 4); a job without it writes no byte more than before."""
    full = J(5, b"payload", key=b"k", flags=1)
    full.group = b"tenant"
    full.waiting_for = {(2, 9)}
    full.meta = ((b"a", b"1"), (b"b" * 64, b"\x00" * 8000), (b"c", b""))
    only = J(6, b"p")
    only.meta = ((b"x", b"y"),)
    plain = J(7, b"q")
    body = records.push(1, 50, [full, only, plain])
    decoded = records.decode(records.PUSH, body)[2]
    assert [d.meta for d in decoded] == [full.meta, only.meta, None]
    assert decoded[0].flags == 1 and decoded[0].group == b"tenant" and (decoded[0].after_delay, decoded[0].onfail_run, decoded[0].waiting_for) == (0, False, {(2, 9)})
    assert [d.payload for d in decoded] == [b"payload", b"p", b"q"]
    assert len(records.push(1, 50, [only])) == len(records.push(1, 50, [J(6, b"p")])) + 1 + 1 + 1 + 2 + 1


def test_a_push_record_written_before_meta_reads_as_it_did():
    """The bytes of a PUSH record of a job with a key and a group, written
    by hand as logs before META hold them (flags bit 4 clear)."""
    job = struct.pack("<QQBBIQHI", 4, 10, 3, 1 | records.PUSH_GROUP, 2, 0, 1, 2) + b"k" + struct.pack("<H", 1) + b"g"
    body = struct.pack("<IQI", 9, 10, 1) + job + b"pl"
    (d,) = records.decode(records.PUSH, body)[2]
    assert (d.id, d.key, d.group, d.payload, d.flags, d.meta) == (4, b"k", b"g", b"pl", 1, None)


def test_a_cut_short_meta_is_a_format_error():
    tagged = J(2, b"")
    tagged.meta = ((b"name", b"value"),)
    body = records.push(3, 999, [tagged])
    with pytest.raises(FormatError):
        records.decode(records.PUSH, body[:-3])
    with pytest.raises(FormatError):
        records.push_columns(body[:-3])


def test_a_schedule_keeps_its_meta_in_json_and_one_written_before_meta_has_none():
    from leaseq.storage.schedules import Schedule
    s = Schedule(b"beat", b"ping", every=1000, meta=((b"source", b"cron"), (b"raw", b"\xff\x00")))
    assert Schedule.from_json(s.to_json()) == s
    old = Schedule(b"beat", b"ping", every=1000).to_json()
    assert "meta" not in old and Schedule.from_json(old).meta is None
    with pytest.raises(FormatError):
        Schedule.from_json({**old, "meta": [["only a name"]]})


def test_the_offsets_a_reader_uses_without_decoding_point_at_their_fields():
    """``TS_AT``, ``CLAIM_COUNT_AT`` ...: what the history reads of a body
    without decoding it (storage/history.py) is where the encoder put it."""
    u16, u32, u64 = (lambda b, at, f=f: struct.unpack_from(f, b, at)[0] for f in ("<H", "<I", "<Q"))
    claim = records.claim(7, 1234, 5678, 9, b"worker", [11, 12], [1, 2])
    assert u64(claim, records.TS_AT) == 1234 and u32(claim, records.CLAIM_COUNT_AT) == 2
    assert u16(claim, records.CLAIM_CONSUMER_LEN_AT) == 6
    assert claim[records.CLAIM_CONSUMER_AT:records.CLAIM_CONSUMER_AT + 6] == b"worker"
    assert u64(claim, records.CLAIM_CONSUMER_AT + 6) == 11
    for body in (records.ack(7, 99, [5, 6]), records.cancel(7, 99, [5, 6]), records.expire(7, 99, [5, 6])):
        assert u64(body, records.TS_AT) == 99 and u32(body, records.IDS_COUNT_AT) == 2
        assert u64(body, records.IDS_AT) == 5 and u64(body, records.IDS_AT + 8) == 6
    nack = records.nack(7, 99, 100, b"boom", [5])
    assert u32(nack, records.NACK_COUNT_AT) == 1 and u32(nack, records.NACK_ERROR_LEN_AT) == 4
    error_at = records.NACK_ERROR_AT
    assert nack[error_at:error_at + 4] == b"boom" and u64(nack, error_at + 4) == 5
    dead = records.dead(7, 99, 1, 8, [(5, 50), (6, 60)])
    assert u32(dead, records.DEAD_COUNT_AT) == 2
    assert [u64(dead, records.DEAD_PAIRS_AT + 8 * k) for k in range(4)] == [5, 50, 6, 60]
