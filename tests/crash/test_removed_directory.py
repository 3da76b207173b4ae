"""A data directory removed while the daemon runs (docs/operations.md, "A
data directory removed while the daemon runs"): the log's segment lives on
only through the daemon's descriptor, so the daemon refuses changes with
-MISCONF until a snapshot of what it holds is back in the directory, which
it makes again; nothing it acknowledged is lost, even to a kill -9 after.
"""

from __future__ import annotations

import os
import shutil
import signal

import hiredis
import pytest
import redis

from harness import DEBUG_ENV, Daemon, RespSocket, as_map, bgsave, error_text, qscan_all, wait_for, writes_resume

from leaseq.storage.snapshot import list_snapshots
from leaseq.storage.wal import list_segments

REMOVED = ("MISCONF leaseq cannot write its log (its data directory was removed): commands that change queues are "
           "refused until it can, reads keep working; see the server log")


@pytest.fixture
def daemon_at(tmp_path):
    started = []

    def start(*args: str, env: dict | None = None) -> Daemon:
        d = Daemon(str(tmp_path / "data"), *args, env=env)
        started.append(d)
        return d.start()
    yield start
    for d in started:
        d.kill()


def peek(c, q: str = "q") -> dict:
    """Each job's payload and state."""
    return {j[b"payload"]: j[b"state"] for j in qscan_all(c, q, count=100)}


def remove_current_segment(data_dir: str) -> None:
    os.unlink(list_segments(data_dir)[-1][1])


@pytest.mark.parametrize("remove", [shutil.rmtree, remove_current_segment], ids=["directory", "segment"])
def test_a_removed_data_directory_is_made_again_and_every_acknowledged_change_survives_a_crash(daemon_at, remove):
    d = daemon_at()
    c = d.client()
    for i in range(20):
        c.execute_command("QPUSH", "q", f"old{i}")
    bgsave(c)                                                 # a snapshot and a segment after it, then gone
    for i in range(20, 40):
        c.execute_command("QPUSH", "q", f"old{i}")
    claimed = [as_map(j) for j in c.execute_command("QCLAIM", "q", "w", "COUNT", 3, "LEASE", 600_000)]
    assert c.execute_command("QACK", "q", claimed[0][b"lease"]) == 1
    remove(d.data_dir)
    wait_for(lambda: "writes resume" in d.log(), 10, "the queues back on the disk")
    assert os.path.isdir(d.data_dir) and list_snapshots(d.data_dir)
    writes_resume(c)
    info = c.info("persistence")
    assert info["log_write_status"] == "ok" and info["log_write_error"] == ""
    d.kill()
    d.restart()
    c = d.client()
    jobs = peek(c)
    assert len(jobs) == 40                                    # 40 pushed, one acked, "after"
    assert claimed[0][b"payload"] not in jobs
    assert [jobs[j[b"payload"]] for j in claimed[1:]] == [b"in_flight", b"in_flight"]
    assert jobs[b"after"] == b"ready"
    assert "the log's current segment was removed" in d.log()


def test_a_snapshot_that_finds_the_directory_gone_first_hands_it_to_the_watch(daemon_at):
    """The removal told by a snapshot's new segment (ENOENT) before the
    watch's look: a disk fault would cut back and rebuild from a directory
    that holds nothing; the watch takes over instead."""
    d = daemon_at(env=DEBUG_ENV)
    c = d.client()
    c.execute_command("QPUSH", "q", "kept")
    s = RespSocket(d.port, timeout=10)
    # one read: the BGSAVE runs right after the sleep, in the same turn, before the watch can look
    s.send_raw(hiredis.pack_command(("DEBUG", "SLEEP", "0.5")) + hiredis.pack_command(("BGSAVE",)))
    wait_for(lambda: "nanosleep" in open(f"/proc/{d.proc.pid}/wchan").read(), 5, "the daemon's loop to sleep")
    shutil.rmtree(d.data_dir)
    assert s.read() == b"OK"
    assert str(s.read()) == REMOVED
    wait_for(lambda: "writes resume" in d.log(), 10, "the queues back on the disk")
    assert "cannot start a snapshot" in d.log() and "cannot rebuild" not in d.log()
    writes_resume(c)
    d.kill()
    d.restart()
    assert peek(d.client()) == {b"kept": b"ready", b"after": b"ready"}


def test_while_the_directory_cannot_be_made_again_changes_wait_reads_go_on_and_a_shutdown_waits(daemon_at):
    d = daemon_at()
    c = d.client()
    c.execute_command("QPUSH", "q", "before")
    shutil.rmtree(d.data_dir)
    open(d.data_dir, "w").close()                             # a file has the directory's name now
    wait_for(lambda: "cannot make the data directory again" in d.log(), 10, "the failed attempt")
    assert error_text(c, "QPUSH", "q", "refused") == REMOVED
    info = c.info("persistence")                              # INFO answers without the directory
    assert (info["log_write_status"], info["log_write_error"]) == ("err", "its data directory was removed")
    assert info["wal_segments"] == 1
    assert peek(c) == {b"before": b"ready"}                   # reads go on
    with pytest.raises(redis.ResponseError, match=r"^Errors trying to SHUTDOWN\. Check logs\.$"):
        c.execute_command("SHUTDOWN")
    assert c.ping()
    d.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "it shuts down (signal SIGTERM) once the queues are back on the disk" in d.log(), 10,
             "the deferred shutdown")
    assert d.proc.poll() is None and c.ping()
    os.unlink(d.data_dir)                                     # the path is free: the daemon makes it again
    assert d.proc.wait(20) == 0
    d.restart()
    assert peek(d.client()) == {b"before": b"ready"}


def test_shutdown_force_stops_even_with_the_queues_off_the_disk(daemon_at):
    d = daemon_at()
    c = d.client()
    c.execute_command("QPUSH", "q", "lost")
    shutil.rmtree(d.data_dir)
    open(d.data_dir, "w").close()
    wait_for(lambda: "cannot make the data directory again" in d.log(), 10, "the failed attempt")
    with pytest.raises(redis.ConnectionError):
        c.execute_command("SHUTDOWN", "FORCE")
    assert d.proc.wait(20) == 0


def test_shutdown_on_sigterm_force_makes_sigterm_a_shutdown_force(daemon_at):
    """Redis's ``shutdown-on-sigterm force``: the operator chose a stop over
    the queues kept in memory for the directory's return."""
    d = daemon_at("--shutdown-on-sigterm", "force")
    c = d.client()
    c.execute_command("QPUSH", "q", "lost")
    shutil.rmtree(d.data_dir)
    open(d.data_dir, "w").close()
    wait_for(lambda: "cannot make the data directory again" in d.log(), 10, "the failed attempt")
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(20) == 0
    assert "once the queues are back on the disk" not in d.log()
