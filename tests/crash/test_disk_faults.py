"""A disk that fills or fails (docs/operations.md, "A full or failing disk"):
the daemon keeps running, refuses changes with -MISCONF (never a success, and
never found after a restart), keeps answering reads, cuts a half-written
tail back, and resumes writing by itself once the disk takes it again.

Faults come two ways: injected with ``DEBUG FAULT WRITE|FSYNC|RESERVE ENOSPC|EIO``
(the daemon runs with enable-debug-command), and for real on a small tmpfs
that the test fills up (mounting needs root, as CI runs).
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import hiredis
import pytest
import redis

from harness import Daemon, as_map, error_text, fsync_counts, wait_for, writes_resume
from harness_disk import records_end

from leaseq.storage.wal import list_segments

DEBUG = {"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}
MISCONF = "MISCONF leaseq cannot write its log"


def start(daemons, path, *args, env=DEBUG, **kw) -> Daemon:
    d = Daemon(str(path), *args, env=env, **kw)
    daemons.append(d)
    return d.start()


@pytest.mark.parametrize("kind", ["WRITE", "FSYNC"])
@pytest.mark.parametrize("errno_name", ["ENOSPC", "EIO"])
def test_a_failing_log_refuses_changes_keeps_reads_and_resumes(tmp_path, daemons, kind, errno_name):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    before = c.execute_command("QPUSH", "q", "before")
    token = as_map(c.execute_command("QCLAIM", "q", "w", "LEASE", 600_000)[0])[b"lease"]
    assert c.execute_command("DEBUG", "FAULT", kind, errno_name) == b"OK"
    reason = os.strerror(28 if errno_name == "ENOSPC" else 5)
    # the command whose records met the fault: -MISCONF naming the reason
    assert error_text(c, "QPUSH", "q", "lost") == (
        f"MISCONF leaseq cannot write its log ({reason}): commands that change queues are refused until "
        f"it can, reads keep working; see the server log")
    # every change after it: refused before it runs
    for args in (["QPUSH", "q", "x"], ["QACK", "q", token], ["QCREATE", "other"], ["QCLAIM", "q", "w"],
                 ["BGSAVE"], ["DEBUG", "CLOCK", "ADVANCE", "10"]):
        assert error_text(c, *args).startswith("MISCONF"), args
    # reads go on: from memory at once, from the store rebuilt from disk soon after
    assert c.info("persistence")["log_write_status"] == "err"
    wait_for(lambda: "rebuilt the queues from the disk" in d.log(), 10, "the rebuild")
    # After a failed write the log keeps what was written whole before it
    # (fsynced now); after a failed fsync only what the last good fsync
    # covered: the claim's lease record (written, not waited for) is gone,
    # and its job is ready again, as after a crash (docs/semantics.md §5.3).
    lease_kept = kind == "WRITE"
    assert c.execute_command("QLEN", "q") == (0 if lease_kept else 1)
    assert as_map(c.execute_command("QGET", "q", before))[b"state"] == (b"in_flight" if lease_kept else b"ready")
    assert as_map(c.execute_command("QINFO", "q"))[b"in_flight"] == (1 if lease_kept else 0)
    assert len(c.execute_command("QPEEK", "q")) == (0 if lease_kept else 1)
    assert c.info("persistence")["loading"] == 0
    assert as_map(c.execute_command("DEBUG", "FAULT"))[kind.lower().encode()] == errno_name.encode()
    # the disk comes back: writes resume without a restart
    assert c.execute_command("DEBUG", "FAULT", kind, "NONE") == b"OK"
    after = writes_resume(c)
    assert after > before
    assert c.execute_command("QACK", "q", token) == (1 if lease_kept else 0)
    assert c.info("persistence")["log_write_status"] == "ok"
    d.kill()
    d.restart()
    c = d.client()
    payloads = sorted(as_map(j)[b"payload"] for j in c.execute_command("QPEEK", "q", "COUNT", 10))
    assert payloads == ([b"after"] if lease_kept else [b"after", b"before"])    # "lost" never came back
    assert "truncated 0 torn bytes" in d.log().rsplit("recovered", 1)[1]   # the tail had been cut back
    assert "dropped from the log" in d.log()


def test_a_refused_reservation_of_room_only_makes_the_segment_grow_as_it_is_written(tmp_path, daemons):
    d = start(daemons, tmp_path / "d", "--segment-size", "4096")
    c = d.client()
    c.execute_command("QCREATE", "q", "DURABILITY", "fsync")
    assert as_map(c.execute_command("DEBUG", "FAULT"))[b"reserve"] == b"NONE"
    assert c.execute_command("DEBUG", "FAULT", "RESERVE", "ENOSPC") == b"OK"
    assert as_map(c.execute_command("DEBUG", "FAULT"))[b"reserve"] == b"ENOSPC"
    ids = [c.execute_command("QPUSH", "q", b"x" * 300) for _ in range(40)]      # a few segments of 4 KiB
    assert "cannot reserve room in seg-" in d.log()
    newest = list_segments(d.data_dir)[-1][1]
    assert os.path.getsize(newest) == records_end(newest)                      # no room: it grew as written
    assert c.info("persistence")["log_write_status"] == "ok"
    assert c.execute_command("DEBUG", "FAULT", "RESERVE", "NONE") == b"OK"
    ids += [c.execute_command("QPUSH", "q", b"y" * 300) for _ in range(40)]
    newest = list_segments(d.data_dir)[-1][1]
    assert os.path.getsize(newest) > records_end(newest)                       # room again
    d.kill()
    d.restart()
    c = d.client()
    assert [i for i in ids if c.execute_command("QGET", "q", i) is None] == []


def test_replies_held_for_the_failed_fsync_get_misconf_and_a_read_never_shows_the_refused_change(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    c.execute_command("QPUSH", "q", "one")
    c.execute_command("DEBUG", "FAULT", "FSYNC", "EIO")
    pipe = c.pipeline(transaction=False)
    pipe.execute_command("QPUSH", "q", "a")
    pipe.execute_command("QLEN", "q")              # would show "a": held with it, refused with it
    pipe.execute_command("ECHO", "hi")              # shows no queue: stands
    pipe.execute_command("QPUSHMANY", "q", 2, "b", "c")
    got = pipe.execute(raise_on_error=False)
    assert [type(g).__name__ for g in got] == ["ResponseError", "ResponseError", "bytes", "ResponseError"]
    assert "MISCONF" in str(got[0]) and "MISCONF" in str(got[3])
    assert str(got[1]) == ("MISCONF leaseq cannot write its log (Input/output error): this reply may have shown a change "
                           "that was refused, so it is not sent; reads keep working, ask again")
    assert got[2] == b"hi"
    assert c.execute_command("QLEN", "q") == 1                       # asked again: "one" alone
    c.execute_command("DEBUG", "FAULT", "FSYNC", "NONE")
    writes_resume(c)
    assert c.execute_command("QLEN", "q") == 2                       # "one" and "after"


def test_reads_wait_for_the_rebuild_instead_of_showing_a_refused_change(tmp_path, daemons):
    """The queues are rebuilt from the disk after a fault (long enough here,
    with 100,000 jobs, for a read to arrive meanwhile): reads made in that
    time wait for the rebuilt queues, on every connection, in order."""
    d = start(daemons, tmp_path / "d")
    c, other = d.client(), d.client()
    jobs = 100_000
    pipe = c.pipeline(transaction=False)
    for start_at in range(0, jobs, 1000):
        pipe.execute_command("QPUSHMANY", "q", 1000, *[b"j%d" % i for i in range(start_at, start_at + 1000)])
    pipe.execute()
    assert other.execute_command("QLEN", "q") == jobs
    c.execute_command("DEBUG", "FAULT", "WRITE", "EIO")
    assert "MISCONF" in error_text(c, "QPUSHMANY", "q", 3, "x", "y", "z")
    seen = [other.execute_command("QLEN", "q"), c.execute_command("QLEN", "q"),
            len(other.execute_command("QSCAN", "q", 0, "COUNT", 10)[1])]
    assert seen == [jobs, jobs, 10]
    assert "rebuilt the queues from the disk" in d.log()
    info = as_map(other.execute_command("QINFO", "q"))
    assert (info[b"ready"], info[b"pushed"]) == (jobs, jobs)
    assert "MISCONF" in error_text(c, "QPUSH", "q", "still")       # the disk still refuses
    c.execute_command("DEBUG", "FAULT", "WRITE", "NONE")
    writes_resume(c)
    assert other.execute_command("QLEN", "q") == jobs + 1


def test_a_rebuild_that_cannot_read_the_log_stops_the_daemon(tmp_path, daemons):
    """The store after a fault must come from the disk; when the disk's log
    no longer reads (here a byte of a sealed segment flipped behind the
    daemon's back), serving the old store would show refused changes, so
    the daemon stops, saying why, and a restart refuses the corruption as
    at any start (docs/operations.md, "A full or failing disk")."""
    d = start(daemons, tmp_path / "d", "--segment-size", "4096")
    c = d.client()
    for i in range(40):
        c.execute_command("QPUSH", "q", b"x" * 200)
    segments = sorted((tmp_path / "d").glob("seg-*.wal"))
    assert len(segments) > 2
    first = segments[0]
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF
    first.write_bytes(bytes(data))
    c.execute_command("DEBUG", "FAULT", "WRITE", "EIO")
    assert "MISCONF" in error_text(c, "QPUSH", "q", "lost")
    assert d.proc.wait(20) is not None
    assert "cannot rebuild the queues from the disk after a write failed; stopping" in d.log()


def test_a_blocked_claim_gets_misconf_and_a_qwork_stream_is_closed(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    c.execute_command("QCREATE", "q")
    result: dict = {}

    def blocked():
        try:
            result["reply"] = d.client().execute_command("QCLAIM", "q", "w", "BLOCK", 10_000)
        except redis.ResponseError as e:
            result["error"] = str(e)
    t = threading.Thread(target=blocked)
    t.start()
    worker = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    worker.sendall(hiredis.pack_command(("QWORK", "q", "w2")))
    assert worker.recv(100) == b"+OK\r\n"
    wait_for(lambda: as_map(c.execute_command("QINFO", "q"))[b"consumers_blocked"] == 1, 5, "the claim to block")
    c.execute_command("DEBUG", "FAULT", "WRITE", "ENOSPC")
    assert "MISCONF" in error_text(c, "QPUSH", "q", "x")
    t.join(10)
    assert not t.is_alive() and "MISCONF" in result.get("error", ""), result
    assert worker.recv(100) == b""                                # the stream was closed
    worker.close()
    c.execute_command("DEBUG", "FAULT", "WRITE", "NONE")
    writes_resume(c)


def test_fault_subcommand_errors(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    for bad in (["DEBUG", "FAULT", "WRITE"], ["DEBUG", "FAULT", "READ", "EIO"], ["DEBUG", "FAULT", "WRITE", "EPERM"]):
        assert error_text(c, *bad) == "syntax error", bad
    plain = start(daemons, tmp_path / "plain", env={})
    assert "DEBUG" in error_text(plain.client(), "DEBUG", "FAULT", "WRITE", "EIO")


# -- where the fsync runs: the loop's thread for a light turn, the log's thread for a heavy one -----

def push_turn(c, count: int, prefix: str = "j") -> list:
    """``count`` pushes of 200-byte payloads sent with one write, so that one
    turn runs them all and writes more than a light turn's 2 KiB."""
    pipe = c.pipeline(transaction=False)
    for i in range(count):
        pipe.execute_command("QPUSH", "q", f"{prefix}{i}".ljust(200, "."))
    return pipe.execute(raise_on_error=False)


def test_a_light_turn_fsyncs_on_the_loop_and_a_heavy_turn_in_the_log_thread(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    fsyncs, inline = fsync_counts(c)
    c.execute_command("QPUSH", "q", "light")            # one record: the loop's thread fsyncs it
    assert fsync_counts(c) == (fsyncs + 1, inline + 1)
    fsyncs, inline = fsync_counts(c)
    ids = push_turn(c, 40)                               # 8 KB in one turn: the log's thread
    assert all(isinstance(i, int) for i in ids), ids
    after, after_inline = fsync_counts(c)
    assert after > fsyncs and after_inline == inline
    d.kill()                                              # every push acknowledged is on disk, either way
    d.restart()
    assert d.client().execute_command("QLEN", "q") == 41


def test_a_reply_the_log_reached_goes_before_the_turns_inline_fsync(tmp_path, daemons):
    """A claim's reply needs only its record written (lease-durability
    async); a push's needs it fsynced.  When both come in one turn, the
    claim's goes before the loop's thread waits for the disk, not after.
    (Under min-replicas-to-ack the same holds for the replies a replica's
    acknowledgement released: they do not wait for the next turn's fsync.)"""
    d = start(daemons, tmp_path / "d")
    c = d.client()
    c.execute_command("QPUSH", "q", "ready")
    c.execute_command("DEBUG", "FAULT", "SLOW", 3000)    # the next fsync, a light turn's, holds the loop 3 s
    claimer = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    pusher = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    sleeper = threading.Thread(target=c.execute_command, args=("DEBUG", "SLEEP", "0.5"))
    sleeper.start()
    wait_for(lambda: "nanosleep" in open(f"/proc/{d.proc.pid}/wchan").read(), 5, "the daemon's loop to sleep")
    claimer.sendall(hiredis.pack_command(("QCLAIM", "q", "w")))       # both read in the one turn after the sleep
    pusher.sendall(hiredis.pack_command(("QPUSH", "q2", "durable")))
    reader = hiredis.Reader()
    reply = False
    while reply is False:
        reader.feed(claimer.recv(4096))
        reply = reader.gets()
    assert as_map(reply[0])[b"payload"] == b"ready"
    pusher.setblocking(False)
    with pytest.raises(BlockingIOError):                               # the push's fsync is still under way
        pusher.recv(100)
    pusher.setblocking(True)
    assert pusher.recv(100).startswith(b":")
    sleeper.join(10)
    assert c.execute_command("DEBUG", "FAULT", "SLOW", 0) == b"OK"
    claimer.close()
    pusher.close()


def test_debug_sleep_errors(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    assert c.execute_command("DEBUG", "SLEEP", "0.01") == b"OK"
    assert error_text(c, "DEBUG", "SLEEP", "soon") == "seconds is not a valid float"
    assert error_text(c, "DEBUG", "SLEEP", "-1") == "seconds must be between 0 and 10"
    assert error_text(c, "DEBUG", "SLEEP", "10.5") == "seconds must be between 0 and 10"
    assert error_text(c, "DEBUG", "SLEEP") == "syntax error"


def test_a_failed_fsync_in_the_log_thread_answers_misconf_to_the_whole_turn(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    c.execute_command("QPUSH", "q", "kept")
    _fsyncs, inline = fsync_counts(c)
    assert c.execute_command("DEBUG", "FAULT", "FSYNC", "EIO") == b"OK"
    got = push_turn(c, 40, "lost")
    assert all(isinstance(g, redis.ResponseError) and str(g).startswith("MISCONF") for g in got), got
    assert fsync_counts(c)[1] == inline                  # that fsync was the thread's
    assert c.execute_command("DEBUG", "FAULT", "FSYNC", "NONE") == b"OK"
    writes_resume(c)
    d.kill()
    d.restart()
    payloads = sorted(as_map(j)[b"payload"] for j in d.client().execute_command("QPEEK", "q", "COUNT", 100))
    assert payloads == [b"after", b"kept"]               # none of the refused 40 came back


def test_after_a_slow_fsync_the_log_thread_fsyncs_until_the_disk_is_quick_again(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    assert c.execute_command("DEBUG", "FAULT", "SLOW", 20) == b"OK"
    assert as_map(c.execute_command("DEBUG", "FAULT"))[b"slow"] == 20
    fsyncs, inline = fsync_counts(c)
    c.execute_command("QPUSH", "q", "slow")              # light: on the loop, and it took 20 ms
    assert fsync_counts(c) == (fsyncs + 1, inline + 1)
    c.execute_command("QPUSH", "q", "next")              # light too, but the disk was slow a moment ago
    assert fsync_counts(c) == (fsyncs + 2, inline + 1)
    assert c.execute_command("DEBUG", "FAULT", "SLOW", 0) == b"OK"

    def inline_again() -> bool:
        c.execute_command("QPUSH", "q", "quick")
        return fsync_counts(c)[1] > inline + 1
    wait_for(inline_again, 15, "light turns to fsync on the loop's thread again", interval=0.1)
    assert as_map(c.execute_command("DEBUG", "FAULT"))[b"slow"] == 0    # (no fsync's duration is asserted: a
                                                                        # loaded machine has real slow ones)


def test_fault_slow_errors(tmp_path, daemons):
    d = start(daemons, tmp_path / "d")
    c = d.client()
    assert error_text(c, "DEBUG", "FAULT", "SLOW", "-1") == "ms must be between 0 and 10000"
    assert error_text(c, "DEBUG", "FAULT", "SLOW", "10001") == "ms must be between 0 and 10000"
    assert error_text(c, "DEBUG", "FAULT", "SLOW", "soon") == "value is not an integer or out of range"
    assert error_text(c, "DEBUG", "FAULT", "SLOW") == "syntax error"
    assert as_map(c.execute_command("DEBUG", "FAULT"))[b"slow"] == 0


# -- a real full disk -------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only: CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the injected faults above cover the same paths")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_refuses_writes_and_resumes_when_space_returns(tmp_path, daemons, small_disk):
    conf = tmp_path / "leaseq.conf"
    conf.write_text("segment-size 256kb\nsnapshot-min-bytes 64mb\n")
    d = start(daemons, small_disk / "d", "--config", str(conf), env={}, log_path=str(tmp_path / "d.log"))
    c = d.client()
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (1 << 20))                        # half the disk
    acked, refused = [], 0
    deadline = time.monotonic() + 60
    while refused < 3 and time.monotonic() < deadline:
        try:
            acked.extend(c.execute_command("QPUSHMANY", "q", 50, *[b"p" * 1000] * 50))
        except redis.ResponseError as e:
            assert "MISCONF" in str(e) and "No space left on device" in str(e), e
            refused += 1
    assert refused == 3 and acked
    # Each failure is followed by a rebuild from disk; the cut-back tail may
    # leave room for a new segment, so writes may resume (and fail again)
    # by themselves while the disk stays nearly full.
    wait_for(lambda: d.log().count("rebuilt the queues") >= d.log().count("cannot write the log") > 0, 10,
             "the rebuilds")
    assert c.execute_command("QLEN", "q") == len(acked)             # reads work on a full disk
    assert c.execute_command("QGET", "q", acked[0]) is not None
    filler.unlink()                                                  # space comes back
    after = writes_resume(c, timeout=15)
    assert after > acked[-1]
    d.kill()
    d.restart()
    c = d.client()
    assert c.execute_command("QLEN", "q") == len(acked) + 1        # nothing acknowledged was lost
    pipe = c.pipeline(transaction=False)
    for i in acked[:: max(1, len(acked) // 50)] + [after]:
        pipe.execute_command("QGET", "q", i)
    assert all(r is not None for r in pipe.execute())
