"""What a replica reads from its primary, without sockets (daemon/replicalink.py's
``LinkReader``), and the log's side of the stream (``LogBuffer.stream``,
``durable_bytes``)."""

from __future__ import annotations

import pytest

from leaseq.daemon.replicalink import LinkError, LinkReader
from leaseq.storage import records
from leaseq.storage.frames import frame
from leaseq.storage.wal import MemoryLog


def fed_in_pieces(data: bytes, size: int) -> list[tuple]:
    reader, events = LinkReader(), []
    for at in range(0, len(data), size):
        events += reader.feed(data[at:at + size])
    return events


FRAMES = [frame(records.BOOT, records.boot(3, 1000)), frame(records.CLOCK, records.clock(5, False, 0))]


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
def test_a_full_sync_reads_alike_however_the_bytes_come(size):
    data = (b"+PONG\r\n+OK\r\n+OK\r\n+FULLRESYNC " + b"a" * 40 + b" 17\r\n\n\n$5\r\nSNAPS" + b"".join(FRAMES))
    events = fed_in_pieces(data, size)
    lines = [e[1] for e in events if e[0] == "line"]
    assert lines == [b"+PONG", b"+OK", b"+OK", b"+FULLRESYNC " + b"a" * 40 + b" 17"]
    assert b"".join(e[1] for e in events if e[0] == "chunk") == b"SNAPS"
    kinds = [e[0] for e in events if e[0] not in ("chunk", "frames")]
    assert kinds == ["line"] * 4 + ["bulk", "bulk_end"]
    assert [e[0] for e in events][-1] == "frames"
    assert [r for e in events if e[0] == "frames" for r in e[2]] == [(records.BOOT, records.boot(3, 1000)),
                                                                      (records.CLOCK, records.clock(5, False, 0))]
    # the bytes of the frames, written to the replica's log as they came, with each feed's records
    assert b"".join(e[1] for e in events if e[0] == "frames") == b"".join(FRAMES)
    for e in events:
        if e[0] == "frames":
            assert e[1] == b"".join(frame(rtype, body) for rtype, body in e[2])


def test_the_whole_frames_of_one_feed_come_as_one_event():
    reader = LinkReader()
    assert reader.feed(b"+CONTINUE x\r\n" + FRAMES[0] + FRAMES[1] + FRAMES[0][:7]) == [
        ("line", b"+CONTINUE x"),
        ("frames", FRAMES[0] + FRAMES[1], [(records.BOOT, records.boot(3, 1000)),
                                           (records.CLOCK, records.clock(5, False, 0))])]
    assert reader.feed(FRAMES[0][7:]) == [("frames", FRAMES[0], [(records.BOOT, records.boot(3, 1000))])]
    assert reader.feed(b"") == []


def test_a_partial_sync_goes_straight_to_the_frames():
    events = fed_in_pieces(b"+CONTINUE " + b"b" * 40 + b"\r\n" + FRAMES[0], 3)
    assert [e[0] for e in events] == ["line", "frames"]


def test_an_empty_snapshot_and_a_frame_cut_short_wait_for_the_rest():
    reader = LinkReader()
    assert reader.feed(b"+FULLRESYNC x 0\r\n$0\r\n" + FRAMES[0][:5]) == [
        ("line", b"+FULLRESYNC x 0"), ("bulk", 0), ("bulk_end",)]
    assert reader.feed(FRAMES[0][5:]) == [("frames", FRAMES[0], [(records.BOOT, records.boot(3, 1000))])]


def test_a_damaged_frame_or_a_bad_length_line_is_an_error():
    reader = LinkReader()
    reader.feed(b"+CONTINUE\r\n")
    damaged = bytearray(FRAMES[0])
    damaged[-1] ^= 0xFF
    with pytest.raises(LinkError, match="checksum"):
        reader.feed(bytes(damaged))
    with pytest.raises(LinkError, match="snapshot's length"):
        LinkReader().feed(b"+FULLRESYNC x 0\r\n-ERR no\r\n")


def test_the_log_hands_each_write_to_the_stream_and_counts_what_is_durable():
    log, written = MemoryLog(), []
    log.stream = written.append
    log.append(records.BOOT, records.boot(1, 0), sync=True)
    log.append_frame(FRAMES[1], sync=False)
    log.flush()
    assert written == [frame(records.BOOT, records.boot(1, 0)) + FRAMES[1]]
    assert log.bytes_written == len(written[0]) and log.durable_bytes == 0
    log.synced(log.start_sync(), 0)
    assert log.durable_bytes == log.bytes_written
    log.append_frame(FRAMES[0], sync=True)
    log.flush()
    assert log.durable_bytes == log.bytes_written - len(FRAMES[0])      # written, not yet fsynced


def test_the_backlog_keeps_at_least_its_limit_in_whole_writes_and_reads_from_any_offset_it_holds():
    from leaseq.daemon.replication import Backlog
    b = Backlog(100)
    for chunk in (b"aaaa", b"bbb", b"cc", b"d"):
        b.add(chunk, limit=5)
    assert (b.first, b.end, b.size) == (104, 110, 6)          # "aaaa" let go: the rest still hold 5 or more
    assert b.since(104) == b"bbbccd" and b.since(106) == b"bccd" and b.since(110) == b""
