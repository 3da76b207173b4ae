"""``leaseq bench fsync``: what an fdatasync of the log costs on this disk,
with and without room made ahead of the writes.

One file per way, ``--count`` writes of ``--bytes`` each (the bytes of a
light turn of the event loop), each write followed by an fdatasync, as the
log does under a light load:

- ``grows``: every write lands past the end of the file, which grows (how
  the log wrote before it made room);
- ``fallocated``: writes into room given ``--reserve`` bytes at a time with
  ``posix_fallocate`` (how the log made room before it wrote zeros);
- ``reserved``: writes into room given ``--reserve`` bytes at a time by
  writing zeros, as ``WriteAheadLog`` does (``RESERVE``, 256 KiB: the
  default, which tests/integration/test_bench.py holds to the daemon's);
- ``zero-filled``: writes over zeros written (and fsynced) beforehand, the
  whole file at once, for comparison.

The ways take turns, ``--rounds`` times, so a slow spell of the disk hits
all of them; the table shows, per way, the median over rounds of each
figure: the fdatasync's time (p50, p90, p99, p99.9, max) and the process's
CPU for one write and its fdatasync.  The files go in ``--dir`` (default:
a temporary directory in the current one, so on the disk the daemon would
use when started here) and are removed.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

from .common import percentile, print_table, publish, progress

WAYS = ("grows", "fallocated", "reserved", "zero-filled")
RESERVE = 256 << 10      # storage.wal.RESERVE (bench/ does not import the daemon's modules)
POINTS = (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9))


def run(count: int, size: int, rounds: int, reserve: int, directory: str | None, json_path: str | None,
        say=None) -> dict:
    say = say or progress
    try:
        work = tempfile.mkdtemp(prefix="leaseq-bench-fsync-", dir=directory or ".")
    except OSError as e:
        raise RuntimeError(f"cannot make a directory for the files in {directory or '.'}: {e}") from None
    result: dict = {"settings": {"count": count, "bytes": size, "rounds": rounds, "reserve": reserve,
                                 "dir": os.path.abspath(work)}, "rounds": []}
    try:
        for i in range(rounds):
            say(f"round {i + 1}/{rounds}")
            result["rounds"].append({way: _one(os.path.join(work, way), way, count, size, reserve)
                                     for way in WAYS})
    except OSError as e:
        raise RuntimeError(f"cannot write and fdatasync in {work}: {e}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["ways"] = {way: {key: statistics.median(r[way][key] for r in result["rounds"])
                            for key in result["rounds"][0][way]} for way in WAYS}
    return publish(result, report, json_path)


def _one(path: str, way: str, count: int, size: int, reserve: int) -> dict:
    """``count`` writes of ``size`` bytes, each then fdatasynced; figures in µs."""
    record = b"\x5a" * size
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        room = 0
        if way == "zero-filled":
            room = count * size
            os.pwrite(fd, bytes(room), 0)
            os.fsync(fd)
        zeros = bytes(reserve)               # made once, as the log keeps its own
        took = []
        cpu0 = time.process_time()
        at = 0
        for _ in range(count):
            if at + size > room and way in ("fallocated", "reserved"):
                if way == "fallocated":
                    os.posix_fallocate(fd, room, reserve)
                else:
                    os.pwrite(fd, zeros, room)
                room += reserve
            os.pwrite(fd, record, at)
            at += size
            t0 = time.perf_counter_ns()
            os.fdatasync(fd)
            took.append((time.perf_counter_ns() - t0) / 1000)
        cpu = (time.process_time() - cpu0) / count * 1e6
    finally:
        os.close(fd)
        os.unlink(path)
    figures = {name: percentile(took, p) for name, p in POINTS}
    return {**figures, "max": max(took), "mean": statistics.fmean(took), "cpu": cpu}


def report(r: dict) -> None:
    s, ways = r["settings"], r["ways"]
    rows = []
    for key in [name for name, _p in POINTS] + ["max", "mean", "cpu"]:
        what = "CPU a write + fdatasync" if key == "cpu" else f"fdatasync {key}"
        rows.append((what, " / ".join(f"{ways[w][key]:,.0f}" for w in WAYS), "µs", ""))
    print_table(f"leaseq bench fsync: {s['count']:,} writes of {s['bytes']} bytes, each fdatasynced, "
                f"{s['rounds']} rounds (medians), ways: {' / '.join(WAYS)} "
                f"(fallocated, reserved: {s['reserve'] // 1024} KiB at a time)", rows, baseline="")
