"""Segment files: writing, generations and tickets, rotation, locking
(leaseq.storage.wal) and recovery reads (leaseq.storage.recovery)."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import struct

import pytest
from harness_disk import write_segment

from leaseq.storage import records
from leaseq.storage.recovery import CorruptLog, read_log
from leaseq.storage.wal import (RESERVE, DirectoryLocked, MemoryLog, Ticket, WriteAheadLog, list_segments,
                                lock_directory, segment_name, sizes_of)

HEADER = records.SEGMENT_HEADER_SIZE


def rec(n: int) -> tuple[int, bytes]:
    """A small, distinct record."""
    return records.IDMARK, records.idmark(1, n)


def framed(*recs) -> bytes:
    return b"".join(records.frame(t, b) for t, b in recs)


def read_all(directory, repair=False):
    got = []
    report = read_log(str(directory), lambda t, b: got.append((t, b)), repair=repair)
    return got, report


def corrupt(data: bytes, at: int) -> bytes:
    bad = bytearray(data)
    bad[at] ^= 0xFF
    return bytes(bad)


# -- names ------------------------------------------------------------------------------------

def test_segment_names_sort_in_log_order():
    names = [segment_name(n) for n in (1, 2, 9, 10, 100, 10 ** 15)]
    assert names == sorted(names)
    assert segment_name(42) == "seg-00000000000000000042.wal"


def test_list_segments_sorts_by_number_and_ignores_other_files(tmp_path):
    for n in (10, 2, 1):
        write_segment(tmp_path, n, b"")
    for other in ("LOCK", "seg-abc.wal", "seg-1.tmp", "snapshot-1.snap"):
        (tmp_path / other).write_bytes(b"x")
    assert list_segments(str(tmp_path)) == [(n, str(tmp_path / segment_name(n))) for n in (1, 2, 10)]


# -- writing ------------------------------------------------------------------------------------

def test_new_log_starts_a_segment_with_only_a_header(tmp_path):
    wal = WriteAheadLog(str(tmp_path), 1 << 20, 5)
    try:
        path = tmp_path / segment_name(5)
        assert path.read_bytes() == records.segment_header(5)
        assert wal.segment_number == 5
    finally:
        wal.close()


def test_append_buffers_without_writing(tmp_path):
    wal = WriteAheadLog(str(tmp_path), 1 << 20, 1)
    try:
        wal.append(*rec(1), sync=False)
        assert wal.pending
        assert (tmp_path / segment_name(1)).stat().st_size == HEADER
        assert wal.written_generation == 0
    finally:
        wal.close()


def test_flush_writes_all_appended_records_as_one_generation(tmp_path):
    wal = WriteAheadLog(str(tmp_path), 1 << 20, 1)
    try:
        mark = wal.mark()
        for n in range(3):
            wal.append(*rec(n), sync=False)
        assert wal.ticket_since(mark) == Ticket(1, False)
        assert wal.flush() == 1
        assert not wal.pending
        mark = wal.mark()
        wal.append(*rec(4), sync=False)
        assert wal.written_generation == 1 and wal.ticket_since(mark).generation == 2
        written = records.segment_header(1) + framed(*map(rec, range(3)))
        assert (tmp_path / segment_name(1)).read_bytes()[:len(written)] == written
        assert records.reserved_from((tmp_path / segment_name(1)).read_bytes(), len(written))     # then room
        assert wal.bytes_written == len(framed(*map(rec, range(3))))
    finally:
        wal.close()


def test_flush_with_nothing_buffered_is_not_a_new_generation(tmp_path):
    wal = WriteAheadLog(str(tmp_path), 1 << 20, 1)
    try:
        assert wal.flush() == 0
        wal.append(*rec(1), sync=False)
        assert wal.flush() == 1
        assert wal.flush() == 1
    finally:
        wal.close()


def test_only_sync_records_ask_for_fsync(tmp_path):
    wal = WriteAheadLog(str(tmp_path), 1 << 20, 1)
    try:
        wal.append(*rec(1), sync=False)
        wal.flush()
        assert not wal.sync_wanted
        wal.append(*rec(2), sync=True)
        wal.flush()
        assert wal.sync_wanted
    finally:
        wal.close()


def test_flush_then_sync_leaves_records_readable(tmp_path):
    wal = WriteAheadLog(str(tmp_path), 1 << 20, 1)
    wal.append(*rec(1), sync=True)
    wal.flush()
    assert wal.unsynced
    wal.sync()
    got, _ = read_all(tmp_path)
    assert got == [rec(1)]
    wal.close()


def test_close_flushes_what_is_still_buffered(tmp_path):
    wal = WriteAheadLog(str(tmp_path), 1 << 20, 1)
    wal.append(*rec(1), sync=False)
    wal.append(*rec(2), sync=False)
    wal.close()
    got, _ = read_all(tmp_path)
    assert got == [rec(1), rec(2)]


def test_new_log_never_appends_to_an_existing_segment(tmp_path):
    write_segment(tmp_path, 1, framed(rec(1)))
    with pytest.raises(FileExistsError):
        WriteAheadLog(str(tmp_path), 1 << 20, 1)
    assert (tmp_path / segment_name(1)).read_bytes() == records.segment_header(1) + framed(rec(1))


def test_segment_rotates_once_it_reaches_segment_size(tmp_path):
    one = len(framed(rec(0)))
    wal = WriteAheadLog(str(tmp_path), HEADER + 2 * one, 1)
    wal.append(*rec(0), sync=False)
    wal.flush()
    assert wal.segment_number == 1              # below segment_size: same segment
    wal.append(*rec(1), sync=False)
    wal.flush()
    assert wal.segment_number == 2              # reached segment_size: next segment
    assert sorted(n for n, _ in list_segments(str(tmp_path))) == [1, 2]
    assert (tmp_path / segment_name(1)).stat().st_size == HEADER + 2 * one
    assert (tmp_path / segment_name(2)).read_bytes() == records.segment_header(2)
    wal.append(*rec(2), sync=False)
    wal.flush()
    wal.sync()
    wal.close()
    assert (tmp_path / segment_name(2)).read_bytes() == records.segment_header(2) + framed(rec(2))
    got, report = read_all(tmp_path)
    assert got == [rec(0), rec(1), rec(2)]
    assert report.segments == 2 and report.last_segment == 2


def test_info_counts_the_segments_still_there_when_compaction_removed_a_listed_one(tmp_path):
    """Compaction removes segments in its own thread while the loop answers
    INFO: a segment listed and then removed is left out, not an internal
    error (FileNotFoundError, seen in the model test's BGSAVE polling)."""
    one = len(framed(rec(0)))
    wal = WriteAheadLog(str(tmp_path), HEADER + one, 1)
    for i in range(3):
        wal.append(*rec(i), sync=False)
        wal.flush()
    listed = [path for _n, path in list_segments(str(tmp_path))]
    assert len(listed) == 4
    os.unlink(listed[0])                        # what compaction does between the listing and the sizes
    assert sizes_of(listed) == [HEADER + one, HEADER + one, HEADER]
    info = dict(wal.info_fields())
    assert (info["wal_segments"], info["wal_bytes"]) == (3, 3 * HEADER + 2 * one)
    wal.close()


def test_a_log_whose_directory_was_removed_says_so_and_still_counts_its_segment(tmp_path):
    directory = tmp_path / "d"
    directory.mkdir()
    wal = WriteAheadLog(str(directory), 1 << 20, 1)
    wal.append(*rec(0), sync=True)
    wal.flush_and_sync()
    assert not wal.unlinked()
    size = dict(wal.info_fields())["wal_bytes"]
    shutil.rmtree(directory)
    assert wal.unlinked()                       # (daemon/dirwatch.py looks every 0.1 s)
    info = dict(wal.info_fields())              # INFO and /metrics still answer
    assert (info["wal_segments"], info["wal_bytes"]) == (1, size)
    directory.write_text("")                    # a file under the directory's name
    assert dict(wal.info_fields())["wal_segments"] == 1
    wal.close()


def test_one_flush_is_never_split_across_segments(tmp_path):
    one = len(framed(rec(0)))
    wal = WriteAheadLog(str(tmp_path), HEADER + one, 1)
    for n in range(5):
        wal.append(*rec(n), sync=False)
    wal.flush()
    wal.close()
    assert (tmp_path / segment_name(1)).stat().st_size == HEADER + 5 * one
    assert (tmp_path / segment_name(2)).stat().st_size == HEADER


def test_many_rotations_read_back_in_order_and_each_sealed_segment_ends_at_its_last_record(tmp_path):
    one = len(framed(rec(0)))
    wal = WriteAheadLog(str(tmp_path), HEADER + 3 * one, 1)
    for n in range(20):
        wal.append(*rec(n), sync=False)
        wal.flush()
        if n % 4 == 0:
            wal.sync()
    *sealed, (_n, current) = list_segments(str(tmp_path))
    assert [os.path.getsize(p) for _n, p in sealed] == [HEADER + 3 * one] * len(sealed)     # no room left
    assert os.path.getsize(current) > HEADER + 2 * one                                       # the room
    wal.close()
    got, report = read_all(tmp_path)
    assert got == [rec(n) for n in range(20)]
    assert report.segments == len(list_segments(str(tmp_path))) > 5


# -- room reserved ahead of the writes -------------------------------------------------------------

def test_the_file_written_has_room_reserved_past_its_records(tmp_path):
    wal = WriteAheadLog(str(tmp_path), 64 << 20, 1)
    path = tmp_path / segment_name(1)
    try:
        assert path.stat().st_size == HEADER           # nothing reserved before the first write
        wal.append(*rec(1), sync=True)
        wal.flush()
        wal.sync()
        body = records.segment_header(1) + framed(rec(1))
        assert path.stat().st_size == HEADER + RESERVE
        assert path.read_bytes() == body + bytes(HEADER + RESERVE - len(body))
        assert os.stat(path).st_blocks * 512 >= RESERVE   # allocated, not a hole
        big = b"x" * RESERVE                              # a write past the room gets more room
        wal.append(records.IDMARK, big, sync=False)
        wal.flush()
        assert path.stat().st_size >= len(body) + len(records.frame(records.IDMARK, big))
        info = dict(wal.info_fields())
        assert info["wal_bytes"] == len(body) + len(records.frame(records.IDMARK, big))   # records, not room
    finally:
        wal.close()
    assert path.read_bytes() == body + records.frame(records.IDMARK, big)      # a clean close cuts the room


FS_IOC_FIEMAP = 0xC020660B        # linux/fs.h: the extents of a file
FIEMAP_EXTENT_UNWRITTEN = 0x800   # allocated, not written: reads as zeros until a write converts it


def unwritten_extents(path) -> int:
    """How many of the file's extents are allocated and unwritten (FIEMAP)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        count, size = 64, 56                          # struct fiemap_extent is 56 bytes
        buf = bytearray(struct.pack("QQIIII", 0, 2 ** 64 - 1, 1, 0, count, 0) + bytes(size * count))
        try:
            fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
        except OSError as e:
            pytest.skip(f"this file system does not map extents (FIEMAP: {e.strerror}); the room's bytes are checked above")
        mapped = struct.unpack_from("I", buf, 20)[0]
        return sum(1 for i in range(mapped) if struct.unpack_from("I", buf, 32 + size * i + 40)[0] & FIEMAP_EXTENT_UNWRITTEN)
    finally:
        os.close(fd)


def test_the_room_is_zeros_written_not_space_only_allocated(tmp_path):
    """A write into room that ``posix_fallocate`` gave turns unwritten
    extents into written ones, which each fdatasync commits through the
    file system's journal; the room is written as zeros instead."""
    wal = WriteAheadLog(str(tmp_path), 64 << 20, 1)
    try:
        wal.append(*rec(1), sync=True)
        wal.flush()
        wal.sync()
        path = tmp_path / segment_name(1)
        assert path.stat().st_size == HEADER + RESERVE
        assert unwritten_extents(path) == 0
    finally:
        wal.close()


def test_a_write_far_past_the_room_makes_its_own_blocks_and_room_follows_it(tmp_path):
    """Zeros are not written where a write is about to go: for a write that
    runs more than ``RESERVE`` past the room, the room starts at its end."""
    wal = WriteAheadLog(str(tmp_path), 64 << 20, 1)
    path = tmp_path / segment_name(1)
    try:
        wal.append(*rec(1), sync=True)
        wal.flush()
        huge = b"h" * (3 * RESERVE)
        wal.append(records.IDMARK, huge, sync=True)
        wal.flush()
        wal.sync()
        body = records.segment_header(1) + framed(rec(1)) + records.frame(records.IDMARK, huge)
        assert path.stat().st_size == len(body) + RESERVE
        assert path.read_bytes() == body + bytes(RESERVE)
    finally:
        wal.close()
    assert path.read_bytes() == body


def crashed_copy(tmp_path, wal) -> str:
    """The segment files as a crash would leave them (room and all): a copy
    taken while ``wal`` is still open."""
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for number, path in list_segments(wal.directory):
        (crashed / segment_name(number)).write_bytes(open(path, "rb").read())
    return str(crashed)


def test_room_left_by_a_crash_is_the_end_of_the_records_not_a_torn_tail(tmp_path):
    os.mkdir(tmp_path / "log")
    wal = WriteAheadLog(str(tmp_path / "log"), 64 << 20, 1)
    for n in range(3):
        wal.append(*rec(n), sync=True)
        wal.flush()
    wal.sync()
    crashed = crashed_copy(tmp_path, wal)
    wal.close()
    path = os.path.join(crashed, segment_name(1))
    assert os.path.getsize(path) == HEADER + RESERVE
    got = []
    report = read_log(crashed, lambda t, b: got.append((t, b)), modify=False)     # leaseq check: nothing changes
    assert got == [rec(n) for n in range(3)]
    assert (report.torn, report.truncated_bytes, report.skipped) == ([], 0, [])
    assert os.path.getsize(path) == HEADER + RESERVE
    got, report = read_all(crashed)                                              # a start: the room is cut off
    assert got == [rec(n) for n in range(3)]
    assert (report.torn, report.truncated_bytes, report.bytes) == ([], 0, HEADER + len(framed(*map(rec, range(3)))))
    assert open(path, "rb").read() == records.segment_header(1) + framed(*map(rec, range(3)))


def test_room_at_the_end_of_an_older_segment_is_its_end_too(tmp_path):
    """A crash between reserving room and sealing the segment at a
    rotation, with the next segment's records on disk."""
    write_segment(tmp_path, 1, framed(rec(1)) + bytes(5000))
    write_segment(tmp_path, 2, framed(rec(2)))
    got, report = read_all(tmp_path)
    assert got == [rec(1), rec(2)]
    assert (report.torn, report.truncated_bytes) == ([], 0)
    assert os.path.getsize(tmp_path / segment_name(1)) == HEADER + len(framed(rec(1)))


def test_zeros_at_the_end_of_a_segment_two_before_the_last_are_damage(tmp_path):
    """A sealed segment was cut at its last record before the next one got
    a durable record: zeros at the end of one older than that are not room."""
    older = write_segment(tmp_path, 1, framed(rec(1)) + bytes(5000))
    write_segment(tmp_path, 2, framed(rec(2)))
    write_segment(tmp_path, 3, framed(rec(3)))
    with pytest.raises(CorruptLog) as e:
        read_all(tmp_path)
    assert (e.value.path, e.value.offset) == (older, HEADER + len(framed(rec(1))))


def test_a_write_cut_short_in_the_room_is_a_torn_tail(tmp_path, caplog):
    half = framed(rec(2))[:5]                       # its checksum and the low byte of its length
    path = write_segment(tmp_path, 1, framed(rec(1)) + half + bytes(RESERVE))
    got, report = read_all(tmp_path)
    assert got == [rec(1)]
    assert report.truncated_bytes == len(half) + RESERVE     # what was cut from the file
    assert f"({len(half) + RESERVE} bytes, the last {RESERVE} of them zeros)" in caplog.text
    assert [(p, o) for p, o, _n in report.torn] == [(path, HEADER + len(framed(rec(1))))]
    assert os.path.getsize(path) == HEADER + len(framed(rec(1)))


def test_a_bad_frame_then_zeros_then_a_valid_frame_is_still_corruption(tmp_path):
    """Stepping over a run of zeros when looking for the next valid frame
    still finds it."""
    first = framed(rec(1))
    path = write_segment(tmp_path, 1, first + b"\x05" * 3 + bytes(300_000) + framed(rec(3)))
    with pytest.raises(CorruptLog) as e:
        read_all(tmp_path)
    assert (e.value.path, e.value.offset) == (path, HEADER + len(first))
    got, report = read_all(tmp_path, repair=True)
    assert got == [rec(1), rec(3)]
    assert [(o, n) for _p, o, n in report.skipped] == [(HEADER + len(first), 3 + 300_000)]


def test_a_refused_reservation_only_means_the_writes_grow_the_file(tmp_path, caplog):
    wal = WriteAheadLog(str(tmp_path), HEADER + 2 * RESERVE, 1)
    wal.faults.reserve = errno.ENOSPC
    path = tmp_path / segment_name(1)
    wal.append(*rec(1), sync=True)
    wal.flush()
    wal.sync()
    assert path.read_bytes() == records.segment_header(1) + framed(rec(1))       # no room
    assert "cannot reserve room in " + segment_name(1) in caplog.text
    wal.append(*rec(2), sync=True)
    wal.flush()
    assert path.read_bytes() == records.segment_header(1) + framed(rec(1), rec(2))
    assert caplog.text.count("cannot reserve room") == 1                       # once a segment
    wal.faults.reserve = 0
    wal.rotate()                                                                # the next segment tries again
    wal.append(*rec(3), sync=True)
    wal.flush()
    assert (tmp_path / segment_name(2)).stat().st_size == HEADER + RESERVE
    wal.close()
    got, _ = read_all(tmp_path)
    assert got == [rec(1), rec(2), rec(3)]


def test_cut_back_after_a_failed_write_counts_its_bytes_not_the_room(tmp_path):
    wal = WriteAheadLog(str(tmp_path), 64 << 20, 1)
    wal.append(*rec(1), sync=True)
    wal.flush()
    wal.sync()
    wal.faults.write = errno.EIO
    wal.append(*rec(2), sync=True)
    with pytest.raises(OSError):
        wal.flush()
    half = len(framed(rec(2))) // 2
    keep = HEADER + len(framed(rec(1)))
    assert wal.cut_back(fsync_failed=False) == [f"{segment_name(1)}: {half} bytes from offset {keep}"]
    assert (tmp_path / segment_name(1)).read_bytes() == records.segment_header(1) + framed(rec(1))


# -- reading ---------------------------------------------------------------------------------------

def test_read_log_of_empty_directory_reports_nothing(tmp_path):
    got, report = read_all(tmp_path)
    assert got == []
    assert (report.segments, report.records, report.bytes, report.truncated_bytes, report.skipped,
            report.last_segment) == (0, 0, 0, 0, [], 0)


def test_read_log_applies_records_of_all_segments_in_order(tmp_path):
    write_segment(tmp_path, 2, framed(rec(3), rec(4)))
    write_segment(tmp_path, 1, framed(rec(1), rec(2)))
    write_segment(tmp_path, 3, b"")
    got, report = read_all(tmp_path)
    assert got == [rec(1), rec(2), rec(3), rec(4)]
    assert report.records == 4
    assert report.segments == 3
    assert report.last_segment == 3
    assert report.bytes == 3 * HEADER + len(framed(rec(1), rec(2), rec(3), rec(4)))


@pytest.mark.parametrize("cut", [1, 4, records.FRAME_SIZE, records.FRAME_SIZE + 3])
def test_torn_tail_of_newest_segment_is_truncated_and_reported(tmp_path, cut):
    good = framed(rec(1), rec(2))
    last = framed(rec(3))
    path = write_segment(tmp_path, 1, good + last[:-cut])
    got, report = read_all(tmp_path)
    assert got == [rec(1), rec(2)]
    assert report.truncated_bytes == len(last) - cut
    assert os.path.getsize(path) == HEADER + len(good)
    assert report.bytes == HEADER + len(good)


def test_bad_checksum_at_end_of_newest_segment_is_a_torn_tail(tmp_path):
    good = framed(rec(1))
    bad = corrupt(framed(rec(2)), -1)
    path = write_segment(tmp_path, 1, good + bad)
    got, report = read_all(tmp_path)
    assert got == [rec(1)]
    assert report.truncated_bytes == len(bad)
    assert os.path.getsize(path) == HEADER + len(good)


def test_garbage_after_the_last_frame_of_newest_segment_is_truncated(tmp_path):
    path = write_segment(tmp_path, 1, framed(rec(1)) + b"\x07" * 100)
    got, report = read_all(tmp_path)
    assert got == [rec(1)]
    assert report.truncated_bytes == 100
    assert os.path.getsize(path) == HEADER + len(framed(rec(1)))


def test_truncated_log_reads_cleanly_the_second_time(tmp_path):
    write_segment(tmp_path, 1, framed(rec(1)) + framed(rec(2))[:-2])
    read_all(tmp_path)
    got, report = read_all(tmp_path)
    assert got == [rec(1)]
    assert report.truncated_bytes == 0


def test_torn_tail_only_in_newest_segment_older_ones_are_intact(tmp_path):
    write_segment(tmp_path, 1, framed(rec(1)))
    write_segment(tmp_path, 2, framed(rec(2)) + framed(rec(3))[:5])
    got, report = read_all(tmp_path)
    assert got == [rec(1), rec(2)]
    assert report.truncated_bytes == 5


def test_bad_frame_followed_by_a_valid_one_is_corruption_naming_file_and_offset(tmp_path):
    first = framed(rec(1))
    bad = corrupt(framed(rec(2)), records.FRAME_SIZE + 2)
    path = write_segment(tmp_path, 1, first + bad + framed(rec(3)))
    size = os.path.getsize(path)
    applied = []
    with pytest.raises(CorruptLog) as e:
        read_log(str(tmp_path), lambda t, b: applied.append((t, b)))
    offset = HEADER + len(first)
    assert e.value.path == path
    assert e.value.offset == offset
    assert path in str(e.value) and f"offset {offset}" in str(e.value)
    assert "--repair" in str(e.value)
    assert os.path.getsize(path) == size          # nothing was truncated
    assert applied == [rec(1)]


def test_bad_frame_in_an_older_segment_is_corruption_even_at_its_end(tmp_path):
    older = write_segment(tmp_path, 1, framed(rec(1)) + framed(rec(2))[:-1])
    write_segment(tmp_path, 2, framed(rec(3)))
    with pytest.raises(CorruptLog) as e:
        read_all(tmp_path)
    offset = HEADER + len(framed(rec(1)))
    assert (e.value.path, e.value.offset) == (older, offset)
    assert older in str(e.value) and f"offset {offset}" in str(e.value)
    assert os.path.getsize(older) == HEADER + 2 * len(framed(rec(1))) - 1


def test_repair_skips_a_bad_frame_and_reads_on(tmp_path):
    first = framed(rec(1))
    bad = corrupt(framed(rec(2)), 0)
    path = write_segment(tmp_path, 1, first + bad + framed(rec(3), rec(4)))
    got, report = read_all(tmp_path, repair=True)
    assert got == [rec(1), rec(3), rec(4)]
    assert report.skipped == [(path, HEADER + len(first), len(bad))]
    assert report.records == 3


def test_repair_skips_the_bad_tail_of_an_older_segment(tmp_path):
    torn = framed(rec(2))[:-3]
    older = write_segment(tmp_path, 1, framed(rec(1)) + torn)
    write_segment(tmp_path, 2, framed(rec(3)))
    got, report = read_all(tmp_path, repair=True)
    assert got == [rec(1), rec(3)]
    assert report.skipped == [(older, HEADER + len(framed(rec(1))), len(torn))]


def test_repair_still_truncates_a_torn_tail_of_the_newest_segment(tmp_path):
    path = write_segment(tmp_path, 1, framed(rec(1)) + framed(rec(2))[:-1])
    got, report = read_all(tmp_path, repair=True)
    assert got == [rec(1)]
    assert report.skipped == []
    assert report.truncated_bytes == len(framed(rec(2))) - 1
    assert os.path.getsize(path) == HEADER + len(framed(rec(1)))


def test_torn_header_of_newest_segment_removes_the_segment(tmp_path):
    write_segment(tmp_path, 1, framed(rec(1)))
    torn = write_segment(tmp_path, 2, b"", header=records.segment_header(2)[:10])
    got, report = read_all(tmp_path)
    assert got == [rec(1)]
    assert not os.path.exists(torn)
    assert report.truncated_bytes == 10
    assert report.last_segment == 1      # the next run writes segment 2 again: no gap


def test_segments_whose_beginning_is_gone_without_a_snapshot_are_refused(tmp_path):
    write_segment(tmp_path, 4, framed(rec(4)))
    write_segment(tmp_path, 5, framed(rec(5)))
    with pytest.raises(CorruptLog) as e:
        read_all(tmp_path)
    assert e.value.path == str(tmp_path / segment_name(1)) and "missing" in str(e.value)


def test_a_segment_missing_between_others_is_corruption_naming_it(tmp_path):
    write_segment(tmp_path, 1, framed(rec(1)))
    write_segment(tmp_path, 3, framed(rec(3)))
    with pytest.raises(CorruptLog) as e:
        read_all(tmp_path)
    assert e.value.path == str(tmp_path / segment_name(2))
    assert "missing" in str(e.value)


def test_bad_header_of_an_older_segment_is_corruption_at_offset_zero(tmp_path):
    older = write_segment(tmp_path, 1, framed(rec(1)), header=corrupt(records.segment_header(1), 0))
    write_segment(tmp_path, 2, framed(rec(2)))
    with pytest.raises(CorruptLog) as e:
        read_all(tmp_path)
    assert (e.value.path, e.value.offset) == (older, 0)
    assert older in str(e.value)


def test_segment_whose_header_names_another_number_is_corruption(tmp_path):
    path = write_segment(tmp_path, 1, framed(rec(1)), header=records.segment_header(9))
    with pytest.raises(CorruptLog) as e:
        read_all(tmp_path)
    assert e.value.path == path and e.value.offset == 0


def test_repair_skips_a_segment_with_a_bad_header(tmp_path):
    data = framed(rec(1))
    older = write_segment(tmp_path, 1, data, header=corrupt(records.segment_header(1), 3))
    write_segment(tmp_path, 2, framed(rec(2)))
    got, report = read_all(tmp_path, repair=True)
    assert got == [rec(2)]
    assert report.skipped == [(older, 0, HEADER + len(data))]


def test_log_written_by_write_ahead_log_reads_back_through_read_log(tmp_path):
    wal = WriteAheadLog(str(tmp_path), 1 << 20, 1)
    recs = [(records.BOOT, records.boot(1, 2)), (records.ACK, records.ack(1, 2, [1, 2])),
            (records.TXN, records.txn([rec(5)]))]
    for r in recs:
        wal.append(*r, sync=True)
    wal.close()
    got, report = read_all(tmp_path)
    assert got == recs
    assert report.truncated_bytes == 0 and report.skipped == []


# -- locking ------------------------------------------------------------------------------------------

def test_second_lock_on_the_same_directory_is_refused(tmp_path):
    fd = lock_directory(str(tmp_path))
    try:
        with pytest.raises(DirectoryLocked) as e:
            lock_directory(str(tmp_path))
        assert str(tmp_path) in str(e.value)
        assert f"pid {os.getpid()}" in str(e.value)
    finally:
        os.close(fd)


def test_lock_file_holds_the_owner_pid(tmp_path):
    fd = lock_directory(str(tmp_path))
    try:
        assert (tmp_path / "LOCK").read_text() == f"{os.getpid()}\n"
    finally:
        os.close(fd)


def test_lock_can_be_taken_again_once_released(tmp_path):
    os.close(lock_directory(str(tmp_path)))
    fd = lock_directory(str(tmp_path))
    try:
        with pytest.raises(DirectoryLocked):
            lock_directory(str(tmp_path))
    finally:
        os.close(fd)


def test_locks_on_different_directories_are_independent(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    fa = lock_directory(str(tmp_path / "a"))
    try:
        fb = lock_directory(str(tmp_path / "b"))
        os.close(fb)
        with pytest.raises(DirectoryLocked):
            lock_directory(str(tmp_path / "a"))
    finally:
        os.close(fa)


def test_a_journal_takes_a_log_buffer_or_none():
    """The compiled journal reads its log as a ``LogBuffer`` (or none)."""
    from leaseq.storage.journal import Journal

    assert Journal(None).log is None and isinstance(Journal(MemoryLog()).log, MemoryLog)
    with pytest.raises(TypeError, match="a journal's log is a LogBuffer or None, not list"):
        Journal([])


def test_a_journal_without_a_log_holds_no_reply():
    """A command's mark and ticket come from the journal's log; with none,
    no reply waits for anything."""
    from leaseq.storage.journal import Journal

    journal = Journal(None)
    assert journal.mark() == 0 and journal.ticket_since(0) is None and journal.settled_since(0, 5) is None
    logged = Journal(MemoryLog())
    mark = logged.mark()
    assert logged.ticket_since(mark) is None
    logged.meta_record(records.CLOCK, records.clock(0, False, 0))
    assert logged.ticket_since(mark) is not None and logged.settled_since(mark) is not None
