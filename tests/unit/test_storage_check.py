"""``storage.check`` and the ``modify=False`` reads under it: a check
without repair changes no file, reports what the daemon's start would
change, and with repair changes exactly that."""

from __future__ import annotations

import os

import pytest
from harness_disk import write_segment

from leaseq.storage import records, snapshot
from leaseq.storage.check import CheckError, check
from leaseq.storage.datadir import DataDir, choose_snapshot
from leaseq.storage.config import QueueConfig
from leaseq.storage.job import Job
from leaseq.storage.recovery import CorruptLog, read_log
from leaseq.storage.wal import lock_directory, segment_name

HEADER = records.SEGMENT_HEADER_SIZE
T0 = 1_800_000_000_000


def framed(*ns: int) -> bytes:
    return b"".join(records.frame(records.IDMARK, records.idmark(1, n)) for n in ns)


def files(directory) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


def test_read_log_without_modify_reports_a_torn_tail_and_a_torn_header_and_keeps_them(tmp_path):
    path = write_segment(tmp_path, 1, framed(1, 2) + framed(3)[:-2])
    torn_header = write_segment(tmp_path, 2, b"", header=records.segment_header(2)[:7])
    before = files(tmp_path)
    got = []
    report = read_log(str(tmp_path), lambda t, b: got.append(b), modify=False)
    assert len(got) == 2
    cut = len(framed(3)) - 2
    assert report.torn == [(path, HEADER + len(framed(1, 2)), cut), (torn_header, 0, 7)]
    assert report.truncated_bytes == cut + 7
    assert report.bytes == HEADER + len(framed(1, 2))
    assert report.last_segment == 1                 # as the modifying read would leave it
    assert files(tmp_path) == before
    modified = read_log(str(tmp_path), lambda t, b: None)
    assert (modified.torn, modified.truncated_bytes, modified.last_segment) == (report.torn, cut + 7, 1)
    assert os.path.getsize(path) == HEADER + len(framed(1, 2)) and not os.path.exists(torn_header)


def test_read_log_repair_without_modify_reports_what_it_would_drop(tmp_path):
    first, bad = framed(1), bytearray(framed(2))
    bad[records.FRAME_SIZE] ^= 0xFF
    older = write_segment(tmp_path, 1, first + bytes(bad) + framed(3))
    write_segment(tmp_path, 2, framed(4))
    before = files(tmp_path)
    report = read_log(str(tmp_path), lambda t, b: None, repair=True, modify=False)
    assert report.skipped == [(older, HEADER + len(first), len(bad))]
    assert report.bytes == 2 * HEADER + len(framed(1, 3, 4))
    assert files(tmp_path) == before


def test_choose_snapshot_without_modify_moves_nothing_aside(tmp_path):
    d = DataDir.open(str(tmp_path), T0)
    d.store.create_queue(b"q", QueueConfig(), T0)
    for _ in range(3):                              # compaction lets segment 1 go: no fallback left
        d.take_snapshot(T0)
    d.close()
    assert not os.path.exists(os.path.join(tmp_path, segment_name(1)))
    for _covers, path in snapshot.list_snapshots(str(tmp_path)):
        with open(path, "r+b") as f:
            f.seek(40)
            f.write(b"\xff\xff")
    before = files(tmp_path)
    with pytest.raises(CorruptLog):
        choose_snapshot(str(tmp_path), repair=False, modify=False)
    choice = choose_snapshot(str(tmp_path), repair=True, modify=False)
    assert choice.loaded is None and len(choice.moved) == 2
    assert files(tmp_path) == before


def test_check_reports_a_half_written_snapshot_and_removes_it_only_under_repair(tmp_path):
    write_segment(tmp_path, 1, framed(1))
    tmp = tmp_path / (snapshot.snapshot_name(1) + snapshot.TEMPORARY)
    tmp.write_bytes(b"half")
    report = check(str(tmp_path), now=T0)
    assert report.temporaries == [tmp.name] and tmp.exists()
    assert any(line.startswith("temporary ") for line in report.lines())
    assert not report.locked and not (tmp_path / "LOCK").exists()       # no LOCK file was made
    report = check(str(tmp_path), repair=True, now=T0)
    assert report.temporaries == [tmp.name] and not tmp.exists()
    assert report.locked


def test_check_releases_the_lock_and_refuses_a_locked_directory(tmp_path):
    DataDir.open(str(tmp_path), T0).close()
    check(str(tmp_path), now=T0)
    fd = lock_directory(str(tmp_path))              # as a running daemon holds it
    try:
        with pytest.raises(CheckError, match="in use by another leaseq"):
            check(str(tmp_path), now=T0)
    finally:
        os.close(fd)
    assert check(str(tmp_path), now=T0).queues == []


def test_check_counts_jobs_after_folding_at_now(tmp_path):
    d = DataDir.open(str(tmp_path), T0)
    q = d.store.create_queue(b"q", QueueConfig(), T0)
    d.store.push(q, [Job(1, b"a", 5, T0, T0 + 1000, None, 0, 0, 0),
                     Job(2, b"b", 5, T0, T0, None, 0, 0, 0)], T0)
    d.close()
    early = check(str(tmp_path), now=T0 + 10).queues[0]
    late = check(str(tmp_path), now=T0 + 2000).queues[0]
    assert (early.ready, early.delayed) == (1, 1)
    assert (late.ready, late.delayed) == (2, 0)
