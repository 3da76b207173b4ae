"""Snapshots and compaction in the real daemon (docs/semantics.md §5.4):
BGSAVE / LASTSAVE / INFO as Redis users know them, automatic snapshots that
keep the directory small under churn, archive-dir, and crashes before,
during and after a snapshot."""

from __future__ import annotations

import os
import re
import socket
import threading
import time

import hiredis
import pytest
import redis

from harness import Daemon, as_map, no_retry_client, qinfo

LONG = 600_000


def persistence(c) -> dict:
    return c.info("persistence")


def wait_snapshots(c, count: int, timeout: float = 60.0) -> dict:
    """Wait until ``snapshots_taken`` reaches ``count`` and none runs."""
    deadline = time.monotonic() + timeout
    while True:
        info = persistence(c)
        if info["snapshots_taken"] >= count and not info["snapshot_in_progress"]:
            return info
        assert info["last_snapshot_status"] == "ok", info
        if time.monotonic() > deadline:
            raise AssertionError(f"no snapshot {count} within {timeout} s: {info}")
        time.sleep(0.02)


def files(d: Daemon, prefix: str) -> list[str]:
    return sorted(n for n in os.listdir(d.data_dir) if n.startswith(prefix) and not n.endswith(".tmp"))


def push_many(c, queue: str, n: int, size: int = 100, batch: int = 1000) -> list[int]:
    ids: list[int] = []
    pipe = c.pipeline(transaction=False)
    for start in range(0, n, batch):
        k = min(batch, n - start)
        pipe.execute_command("QPUSHMANY", queue, k, *[b"%08d" % (start + i) + b"x" * (size - 8) for i in range(k)])
    for got in pipe.execute():
        ids.extend(got)
    return ids


def tokens_of(jobs) -> list[bytes]:
    return [as_map(j)[b"lease"] for j in jobs]


LIVE = ("ready", "delayed", "in_flight", "dead", "completed", "pushed", "acked", "dead_lettered")


def start(daemons, path, *args, **kw) -> Daemon:
    d = Daemon(str(path), *args, **kw)
    daemons.append(d)
    return d.start()


def test_bgsave_replies_as_redis_and_lastsave_follows(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    assert c.lastsave() is None                         # redis-py's reading of 0: never saved
    assert persistence(c)["snapshots_taken"] == 0
    c.execute_command("QPUSH", "q", "one")
    before = int(time.time())
    pipe = c.pipeline(transaction=False)
    pipe.execute_command("BGSAVE")
    pipe.execute_command("BGSAVE")                      # same turn: the first is still running
    pipe.execute_command("BGSAVE", "SCHEDULE")
    first, second, scheduled = pipe.execute(raise_on_error=False)
    assert first in (b"Background saving started", "Background saving started", True)
    assert str(second) == "Background save already in progress"
    assert scheduled in (b"Background saving scheduled", "Background saving scheduled", True)
    info = wait_snapshots(c, 2)
    assert info["last_snapshot_status"] == "ok" and info["last_snapshot_bytes"] > 0
    assert info["last_snapshot_duration_ms"] >= 0 and info["log_bytes_since_snapshot"] >= 0
    assert before <= c.lastsave().timestamp() <= time.time() + 1     # redis-py gives a datetime
    assert len(files(d, "snap-")) == 2
    for bad in (["BGSAVE", "NOW"], ["BGSAVE", "SCHEDULE", "x"]):
        with pytest.raises(Exception, match="syntax error"):
            c.execute_command(*bad)


def test_restart_after_snapshot_and_kill_keeps_every_job_and_counter(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    c.execute_command("QCREATE", "q", "MAXDELIVERIES", "2", "RETAIN-COMPLETED", LONG)
    ids = push_many(c, "q", 3000)
    jobs = c.execute_command("QCLAIM", "q", "w", "COUNT", "100", "LEASE", LONG)
    tokens = tokens_of(jobs)
    assert c.execute_command("QACK", "q", *tokens[:40]) == 40
    c.execute_command("QPUSH", "q", "keyed", "KEY", "k1", "DELAY", LONG)
    c.execute_command("BGSAVE")
    wait_snapshots(c, 1)
    # after the snapshot: more changes, in the segments after it
    assert c.execute_command("QACK", "q", *tokens[40:50]) == 10
    later = push_many(c, "q", 500)
    before = qinfo(c, "q", str_keys=True)
    d.kill()
    d.restart()
    c = d.client()
    after = qinfo(c, "q", str_keys=True)
    assert {k: after[k] for k in LIVE} == {k: before[k] for k in LIVE}
    assert "snap-" in persistence(c)["recovery_snapshot"]
    assert c.execute_command("QACK", "q", *tokens[50:]) == 50          # leases of the snapshot still hold
    assert c.execute_command("QGET", "q", ids[0]) is not None
    assert c.execute_command("QGET", "q", later[-1]) is not None
    assert c.execute_command("QPUSH", "q", "again", "KEY", "k1") == ids[-1] + 1   # its dedupe key held
    new = c.execute_command("QPUSH", "q", "fresh")
    assert new > later[-1]                                             # ids never reused


def test_churn_keeps_the_directory_a_small_multiple_of_live_data(tmp_path, daemons):
    conf = tmp_path / "leaseq.conf"
    conf.write_text("snapshot-min-bytes 200kb\nsegment-size 64kb\n")
    d = start(daemons, tmp_path / "d", "--config", str(conf))
    c = d.client()
    push_many(c, "q", 200, size=200)                                  # live: 200 jobs of 200 bytes
    deadline = time.monotonic() + 60
    cycles = 0
    while cycles < 20_000 and time.monotonic() < deadline:
        pipe = c.pipeline(transaction=False)
        pipe.execute_command("QPUSHMANY", "q", 100, *[b"y" * 200] * 100)
        pipe.execute_command("QCLAIM", "q", "w", "COUNT", "100")
        _ids, claimed = pipe.execute()
        c.execute_command("QACK", "q", *tokens_of(claimed))
        cycles += 100
    automatic = wait_snapshots(c, 3)["snapshots_taken"]              # taken as the log grew
    # Under churn the directory also holds what was written while a child
    # ran; once quiet, two snapshots in a row leave only them and the log
    # since the older one.
    for n in (1, 2):
        c.execute_command("BGSAVE")
        info = wait_snapshots(c, automatic + n)
    total = sum(os.path.getsize(os.path.join(d.data_dir, n)) for n in os.listdir(d.data_dir))
    assert info["wal_bytes_written"] > 5 * total, (info["wal_bytes_written"], total)
    assert total <= 2 * info["last_snapshot_bytes"] + 3 * 4096, sorted(os.listdir(d.data_dir))
    assert len(files(d, "snap-")) == 2
    assert qinfo(c, "q", str_keys=True)["ready"] + qinfo(c, "q", str_keys=True)["in_flight"] == 200


def test_a_snapshot_runs_until_its_compaction_ends(tmp_path, daemons):
    """Compaction (here: archiving a few hundred segments, a directory fsync
    each) is part of the snapshot: INFO says one runs and BGSAVE answers as
    Redis does while one runs, until it counts as taken."""
    conf = tmp_path / "leaseq.conf"
    conf.write_text(f"segment-size 64kb\narchive-dir {tmp_path / 'archive'}\n")
    d = start(daemons, tmp_path / "d", "--config", str(conf))
    c = d.client()
    for _ in range(150):                                               # about 15 MB of log, little live
        pipe = c.pipeline(transaction=False)
        pipe.execute_command("QPUSHMANY", "q", 100, *[b"z" * 1000] * 100)
        pipe.execute_command("QCLAIM", "q", "w", "COUNT", "100")
        _ids, claimed = pipe.execute()
        c.execute_command("QACK", "q", *tokens_of(claimed))
    c.execute_command("BGSAVE")                                        # the first has nothing to archive
    wait_snapshots(c, 1)
    c.execute_command("BGSAVE")                                        # the second archives the log before it
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pipe = c.pipeline(transaction=False)
        pipe.execute_command("BGSAVE")
        pipe.execute_command("INFO", "persistence")
        bgsave, info = pipe.execute(raise_on_error=False)
        if not isinstance(bgsave, redis.ResponseError):
            break                                                      # a third one started
        assert str(bgsave) == "Background save already in progress"
        assert info["snapshot_in_progress"] == 1 and info["snapshots_taken"] == 1, info
    assert info["snapshots_taken"] == 2, info                          # only once the second counted
    assert len(os.listdir(tmp_path / "archive")) > 100


def test_archive_dir_receives_compacted_segments_readable_in_order(tmp_path, daemons):
    archive = tmp_path / "archive"
    d = start(daemons, tmp_path / "d")
    c = d.client()
    c.config_set("archive-dir", str(archive))
    for round in range(3):
        push_many(c, "q", 50)
        c.execute_command("BGSAVE")
        wait_snapshots(c, round + 1)
    names = sorted(os.listdir(archive))
    assert names and all(re.fullmatch(r"seg-\d{20}\.wal", n) for n in names)
    kept = files(d, "seg-")
    assert not set(names) & set(kept)
    numbers = [int(n[4:24]) for n in names + kept]
    assert numbers == list(range(1, len(numbers) + 1))               # nothing lost between the two


def test_sigkill_during_a_snapshot_loses_nothing_and_leaves_no_child(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    ids = push_many(c, "q", 150_000, size=64)
    mark = len(d.log())
    c.execute_command("BGSAVE")
    d.kill()                                                          # the child is mid-file
    child = int(re.search(r"child pid (\d+)", d.log()[mark:]).group(1))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child), "the snapshot child outlived its daemon"
    d.restart(timeout=60)
    c = d.client()
    assert c.execute_command("QLEN", "q") == len(ids)
    assert not [n for n in os.listdir(d.data_dir) if n.endswith(".tmp")]


def test_sigterm_during_a_snapshot_stops_cleanly(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    push_many(c, "q", 150_000, size=64)
    c.execute_command("BGSAVE")
    assert d.stop() == 0
    assert "shutdown stopped a running snapshot" in d.log() or "snapshot written" in d.log()
    d.restart(timeout=60)
    assert d.client().execute_command("QLEN", "q") == 150_000


def test_a_damaged_snapshot_without_fallback_refuses_to_start_naming_file_and_offset(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    for round in range(3):                         # three snapshots: segment 1 is gone
        push_many(c, "q", 20)
        c.execute_command("BGSAVE")
        wait_snapshots(c, round + 1)
    d.kill()
    snaps = files(d, "snap-")
    for name in snaps:                             # both kept snapshots damaged
        path = os.path.join(d.data_dir, name)
        with open(path, "r+b") as f:
            f.seek(40)
            b = f.read(1)
            f.seek(40)
            f.write(bytes([b[0] ^ 0x01]))
    with pytest.raises(RuntimeError, match="exited with 1") as e:
        d.restart()
    assert os.path.join(d.data_dir, snaps[-1]) in str(e.value)
    assert "offset 32" in str(e.value) and "--repair" in str(e.value)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


# -- while recovering, the port answers -LOADING ------------------------------------------------

def raw_command(port: int, *args: str) -> bytes:
    """One command on a fresh socket; its first reply line(s), or b"" if refused."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(hiredis.pack_command(args))
            return s.recv(65536)
    except OSError:
        return b""


def test_while_recovering_the_port_answers_loading_then_serves(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    push_many(d.client(), "q", 400_000, size=64)
    d.kill()
    d.start(ready=False)
    seen, info_loading = [], False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = raw_command(d.port, "PING")
        if got and (not seen or seen[-1] != got):
            seen.append(got)
        if got.startswith(b"-LOADING"):
            info_loading = info_loading or b"loading:1" in raw_command(d.port, "INFO", "persistence")
        if got == b"+PONG\r\n":
            break
        time.sleep(0.01)
    assert b"-LOADING leaseq is loading the dataset in memory\r\n" in seen, seen
    assert seen[-1] == b"+PONG\r\n" and info_loading
    c = d.client()
    assert c.execute_command("QLEN", "q") == 400_000
    assert persistence(c)["loading"] == 0
    assert re.search(r"recovered 1 queues from no snapshot and \d+ segments .* in [0-9.]+ s", d.log())


def test_sigterm_while_recovering_stops_once_recovered(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    push_many(d.client(), "q", 300_000, size=64)
    d.kill()
    d.start(ready=False)
    deadline = time.monotonic() + 30
    while not raw_command(d.port, "PING").startswith(b"-LOADING") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert d.stop() == 0
    assert "once recovery is done" in d.log() and "the log is fsynced" in d.log()
    d.start()
    assert d.client().execute_command("QLEN", "q") == 300_000


def test_sigkill_while_segments_rotate_keeps_every_acknowledged_push(tmp_path, daemons):
    """4 KiB segments and 1 KiB payloads: a new segment every few pushes, so
    kills land in and around rotations (and snapshots, whose rotation is
    forced by a small snapshot-min-bytes)."""
    conf = tmp_path / "leaseq.conf"
    conf.write_text("segment-size 4096\nsnapshot-min-bytes 20kb\n")
    d = start(daemons, tmp_path / "d", "--config", str(conf))
    acked: list[int] = []
    for round in range(8):
        c = no_retry_client(d, socket_timeout=5)
        stop = threading.Event()

        def pusher():
            while not stop.is_set():
                try:
                    acked.append(c.execute_command("QPUSH", "q", b"r%d-" % round + b"x" * 1000))
                except redis.ConnectionError:
                    return
        t = threading.Thread(target=pusher)
        t.start()
        time.sleep(0.05 + 0.04 * round)
        d.kill()
        stop.set()
        t.join(10)
        d.restart()
        c = d.client()
        pipe = c.pipeline(transaction=False)
        for i in acked:
            pipe.execute_command("QGET", "q", i)
        missing = [i for i, got in zip(acked, pipe.execute()) if got is None]
        assert not missing, f"round {round}: acknowledged pushes lost: {missing[:10]}"
    assert len(acked) > 50 and len(files(d, "seg-")) >= 2


def test_a_compaction_that_fails_is_logged_and_the_snapshot_still_counts(tmp_path, daemons):
    """Compaction runs in a thread of its own after the child's snapshot
    (daemon/snapshots.py); when it cannot delete what it should (here a
    directory squats the oldest snapshot's name), the daemon says so and goes
    on serving, and the next compaction tries again."""
    d = start(daemons, tmp_path / "d")
    c = d.client()
    c.execute_command("QPUSH", "q", "one")
    squatter = os.path.join(d.data_dir, "snap-%020d.snap" % 0)
    os.mkdir(squatter)
    for n in (1, 2):
        c.execute_command("BGSAVE")
        wait_snapshots(c, n)
    assert "compaction after the snapshot failed: [Errno 21] Is a directory" in d.log()
    assert persistence(c)["last_snapshot_status"] == "ok"
    os.rmdir(squatter)
    assert c.execute_command("QPUSH", "q", "two") == 2
    c.execute_command("BGSAVE")
    wait_snapshots(c, 3)
    assert len(files(d, "snap-")) == 2                 # the next compaction did its work
