"""``leaseq check DIR [--repair]`` as a subprocess, on directories a real
daemon wrote and a test then damaged: what it reports, that it changes no
file without --repair, that its errors name file and offset as the daemon's
start does, and that a directory it repaired starts without --repair."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from harness import LEASEQ, Daemon, as_map, bgsave, qinfo
from harness_disk import write_torn
from leaseq.storage import records

LONG = 600_000
STATES = ("ready", "delayed", "in_flight", "dead", "completed")


def run_check(path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(LEASEQ + ["check", str(path), *args], capture_output=True, text=True, timeout=120)


def start(daemons, path, *args) -> Daemon:
    d = Daemon(str(path), *args)
    daemons.append(d)
    return d.start()


def contents(directory) -> dict[str, bytes]:
    """Every file but the lock, by its path under ``directory`` (the
    history's files in history/ too), with its bytes."""
    out = {}
    for root, _dirs, files in os.walk(directory):
        for name in sorted(files):
            path = os.path.join(root, name)
            if os.path.relpath(path, directory) != "LOCK":
                with open(path, "rb") as f:
                    out[os.path.relpath(path, directory)] = f.read()
    return out


def names(directory, prefix: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(prefix) and n[-4:] in ("snap", ".wal"))


def queue_counts(stdout: str) -> dict[str, dict[str, int]]:
    got = {}
    for m in re.finditer(r"^queue +(\S+) (.*)$", stdout, re.M):
        fields = dict(kv.split("=") for kv in m.group(2).split())
        got[m.group(1)] = {k: int(fields[k]) for k in STATES}
    return got


def labels(stdout: str) -> set[str]:
    """The first word of every line of a report."""
    return {line.split()[0] for line in stdout.splitlines() if line.strip()}


def expected_counts(c, *queues: str) -> dict[str, dict[str, int]]:
    return {q: {k: qinfo(c, q, str_keys=True)[k] for k in STATES} for q in queues}


def flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def frame_offsets(path: str) -> list[int]:
    with open(path, "rb") as f:
        data = f.read()
    return [off for off, _t, _b in records.iter_frames(data, records.SEGMENT_HEADER_SIZE)]


def some_of_every_state(c, q: str) -> None:
    """Jobs of ``q`` in each state: ready, delayed, in flight, dead, completed."""
    c.execute_command("QCREATE", q, "RETAIN-COMPLETED", LONG, "BACKOFF", 0, 1, 0)
    for i in range(10):
        c.execute_command("QPUSH", q, f"job-{i}")
    c.execute_command("QPUSH", q, "later", "DELAY", LONG)
    jobs = [as_map(j) for j in c.execute_command("QCLAIM", q, "w", "COUNT", 6, "LEASE", LONG)]
    c.execute_command("QACK", q, jobs[0][b"lease"], jobs[1][b"lease"])
    c.execute_command("QNACK", q, jobs[2][b"lease"], "DEAD")


# -- (a) a clean directory -----------------------------------------------------------------------

def test_clean_directory_reports_snapshot_segments_and_the_counts_qinfo_showed(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    some_of_every_state(c, "emails")
    bgsave(c)
    some_of_every_state(c, "thumbs")               # after the snapshot: in the segments it does not cover
    c.execute_command("QPUSH", "emails", "one more")
    want = expected_counts(c, "emails", "thumbs")
    d.kill()
    before = contents(d.data_dir)
    got = run_check(d.data_dir)
    assert got.returncode == 0, got.stderr
    out = got.stdout
    snap = names(d.data_dir, "snap-")[-1]
    assert re.search(rf"^snapshot +{snap} covers segments <= 1, \d+ jobs, \d+ bytes$", out, re.M), out
    assert re.search(r"^segments +\d+ read after the snapshot .*, \d+ records, \d+ bytes$", out, re.M), out
    assert not labels(out) & {"torn", "damaged", "dropped", "temporary", "lock"}
    assert queue_counts(out) == want
    assert want["emails"] == {"ready": 5, "delayed": 1, "in_flight": 3, "dead": 1, "completed": 2}
    assert re.search(r"^result +ok", out, re.M)
    assert contents(d.data_dir) == before            # not one byte changed
    d.restart()                                      # and the lock was let go
    assert expected_counts(d.client(), "emails", "thumbs") == want


def test_a_directory_without_snapshots_is_the_log_alone(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    some_of_every_state(c, "q")
    want = expected_counts(c, "q")
    d.stop()
    got = run_check(d.data_dir)
    assert got.returncode == 0, got.stderr
    assert re.search(r"^snapshot +none", got.stdout, re.M)
    assert re.search(r"^segments +1 read \(seg-0+1\.wal\), \d+ records", got.stdout, re.M), got.stdout
    assert queue_counts(got.stdout) == want


# -- (b) a torn tail --------------------------------------------------------------------------------

def test_torn_tail_is_reported_and_left_alone_then_truncated_by_repair(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    some_of_every_state(c, "q")
    want = expected_counts(c, "q")
    d.kill()
    newest = os.path.join(d.data_dir, names(d.data_dir, "seg-")[-1])
    torn = records.frame(records.PUSH, b"x" * 40)[:-9]                 # a write cut short
    size = write_torn(newest, torn)
    room = os.path.getsize(newest) - size - len(torn)                  # the rest of the room reserved
    before = contents(d.data_dir)

    got = run_check(d.data_dir)
    assert got.returncode == 0, got.stderr
    line = (f"torn tail {os.path.basename(newest)} at offset {size}, {len(torn) + room} bytes "
            f"(not truncated; the next start or --repair truncates it)")
    assert re.search(rf"^torn +{re.escape(line)}$", got.stdout, re.M), got.stdout
    assert queue_counts(got.stdout) == want
    assert contents(d.data_dir) == before
    assert room > 0 and os.path.getsize(newest) == size + len(torn) + room

    got = run_check(d.data_dir, "--repair")
    assert got.returncode == 0, got.stderr
    assert re.search(rf"^torn +torn tail {os.path.basename(newest)} at offset {size}, {len(torn) + room} bytes "
                     rf"\(truncated\)$", got.stdout, re.M), got.stdout
    assert os.path.getsize(newest) == size
    assert queue_counts(got.stdout) == want
    again = run_check(d.data_dir)
    assert again.returncode == 0 and "torn" not in labels(again.stdout)


# -- (c) a bad record in a sealed segment, a missing segment ---------------------------------------

def two_runs(daemons, path) -> tuple[Daemon, str]:
    """A directory whose segment 1 is sealed: five PUSH records, a stop, more."""
    d = start(daemons, path)
    c = d.client()
    for i in range(5):
        c.execute_command("QPUSH", "q", f"first-{i}")
    d.stop()
    d.restart()
    c = d.client()
    for i in range(3):
        c.execute_command("QPUSH", "q", f"second-{i}")
    assert c.execute_command("QLEN", "q") == 8
    d.kill()
    return d, os.path.join(d.data_dir, names(d.data_dir, "seg-")[0])


def test_flipped_byte_in_a_sealed_segment_exits_1_naming_file_and_offset_and_repair_drops_it(tmp_path, daemons):
    d, sealed = two_runs(daemons, tmp_path / "d")
    offsets = frame_offsets(sealed)
    bad = offsets[4]                                # BOOT, QUEUE, then PUSHes: the third push
    length = offsets[5] - bad
    flip(sealed, bad + records.FRAME_SIZE + 3)
    before = contents(d.data_dir)

    got = run_check(d.data_dir)
    assert got.returncode == 1
    assert got.stdout == ""
    assert f"write-ahead log is corrupt in {sealed} at offset {bad}: a record fails its checksum" in got.stderr
    assert "--repair" in got.stderr
    assert contents(d.data_dir) == before

    with pytest.raises(RuntimeError, match=f"offset {bad}"):
        d.restart()                                 # the daemon says the same
    got = run_check(d.data_dir, "--repair")
    assert got.returncode == 0, got.stderr
    assert re.search(rf"^dropped +{os.path.basename(sealed)} at offset {bad}, {length} bytes "
                     rf"\(unreadable bytes, cut out of the segment\)$", got.stdout, re.M), got.stdout
    assert queue_counts(got.stdout)["q"]["ready"] == 7
    assert os.path.getsize(sealed) == len(before[os.path.basename(sealed)]) - length
    d.restart()                                     # no --repair needed any more
    assert d.client().execute_command("QLEN", "q") == 7


def test_a_missing_segment_exits_1_naming_it(tmp_path, daemons):
    d, sealed = two_runs(daemons, tmp_path / "d")
    d.restart()
    d.kill()                                        # three segments: take out the middle one
    middle = os.path.join(d.data_dir, names(d.data_dir, "seg-")[1])
    os.unlink(middle)
    before = contents(d.data_dir)
    got = run_check(d.data_dir)
    assert got.returncode == 1
    assert f"write-ahead log is corrupt in {middle} at offset 0: this segment is missing" in got.stderr
    assert contents(d.data_dir) == before
    # --repair replays what remains (what the missing segment held is lost) and
    # seals the result in a snapshot covering every segment, so the gap no
    # longer matters: the next start needs no --repair
    got = run_check(d.data_dir, "--repair")
    assert got.returncode == 0, got.stderr
    newest = names(d.data_dir, "seg-")[-1]
    assert re.search(rf"^sealed +snap-{newest[4:24]}\.snap: a snapshot of what was recovered", got.stdout,
                     re.M), got.stdout
    assert re.search(r"^result +ok: the daemon starts on this directory without --repair", got.stdout, re.M)
    d.restart()
    assert d.client().execute_command("PING") is True


def test_a_bad_segment_header_exits_1_and_repair_moves_the_segment_aside(tmp_path, daemons):
    d, sealed = two_runs(daemons, tmp_path / "d")
    flip(sealed, 2)
    got = run_check(d.data_dir)
    assert got.returncode == 1
    assert f"write-ahead log is corrupt in {sealed} at offset 0" in got.stderr
    size = os.path.getsize(sealed)
    got = run_check(d.data_dir, "--repair")
    assert got.returncode == 0, got.stderr
    assert re.search(rf"^dropped +{os.path.basename(sealed)} at offset 0, {size} bytes \(unreadable segment "
                     rf"header, moved aside to \.corrupt\)$", got.stdout, re.M), got.stdout
    assert os.path.exists(sealed + ".corrupt") and not os.path.exists(sealed)


# -- (d) and (e) damaged snapshots ----------------------------------------------------------------

def snapshots(daemons, path, count: int) -> tuple[Daemon, dict]:
    d = start(daemons, path)
    c = d.client()
    for n in range(count):
        some_of_every_state(c, f"q{n}")
        bgsave(c)
    c.execute_command("QPUSH", "q0", "after the snapshots")
    want = expected_counts(c, *[f"q{n}" for n in range(count)])
    d.kill()
    return d, want


def test_damaged_newest_snapshot_falls_back_to_the_one_before(tmp_path, daemons):
    d, want = snapshots(daemons, tmp_path / "d", 2)
    older, newest = names(d.data_dir, "snap-")
    flip(os.path.join(d.data_dir, newest), 40)
    before = contents(d.data_dir)
    got = run_check(d.data_dir)
    assert got.returncode == 0, got.stderr
    assert re.search(rf"^damaged +{newest} unreadable at offset 32: .*; recovery falls back past it$",
                     got.stdout, re.M), got.stdout
    assert re.search(rf"^snapshot +{older} covers segments <= \d+", got.stdout, re.M), got.stdout
    assert queue_counts(got.stdout) == want
    assert contents(d.data_dir) == before


def test_both_snapshots_damaged_after_compaction_exits_1_naming_the_newest(tmp_path, daemons):
    d, _want = snapshots(daemons, tmp_path / "d", 3)
    assert not os.path.exists(os.path.join(d.data_dir, "seg-00000000000000000001.wal"))
    snaps = names(d.data_dir, "snap-")
    assert len(snaps) == 2
    for name in snaps:
        flip(os.path.join(d.data_dir, name), 40)
    before = contents(d.data_dir)
    got = run_check(d.data_dir)
    assert got.returncode == 1
    newest = os.path.join(d.data_dir, snaps[-1])
    assert f"corrupt in {newest} at offset 32" in got.stderr, got.stderr
    assert "no older snapshot with its segments is left to fall back on" in got.stderr
    assert contents(d.data_dir) == before

    got = run_check(d.data_dir, "--repair")
    assert got.returncode == 0, got.stderr
    for name in snaps:
        size = len(before[name])
        assert re.search(rf"^dropped +{name} at offset 0, {size} bytes \(damaged snapshot, moved aside",
                         got.stdout, re.M), got.stdout
        assert os.path.exists(os.path.join(d.data_dir, name + ".corrupt"))
    assert re.search(r"^snapshot +none", got.stdout, re.M)
    d.restart()                                     # starts without --repair (what the snapshots held is lost)


# -- (f) a running daemon, (g) missing and empty directories ------------------------------------

def test_a_running_daemon_makes_check_refuse(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    d.client().execute_command("QPUSH", "q", "x")
    for args in ((), ("--repair",)):
        got = run_check(d.data_dir, *args)
        assert got.returncode == 1
        assert f"data directory {d.data_dir} is in use by another leaseq (pid {d.proc.pid})" in got.stderr
        assert "refusing to check" in got.stderr
    assert d.client().execute_command("QLEN", "q") == 1


def test_a_missing_directory_exits_1(tmp_path):
    got = run_check(tmp_path / "nope")
    assert got.returncode == 1
    assert f"data directory {tmp_path / 'nope'} does not exist" in got.stderr
    assert not os.path.exists(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    got = run_check(tmp_path / "file")
    assert got.returncode == 1 and "is not a directory" in got.stderr


def test_an_empty_directory_is_reported_empty_and_left_empty(tmp_path):
    (tmp_path / "e").mkdir()
    got = run_check(tmp_path / "e")
    assert got.returncode == 0, got.stderr
    assert re.search(r"^empty +no segments and no snapshots", got.stdout, re.M)
    assert os.listdir(tmp_path / "e") == []
