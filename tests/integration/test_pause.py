"""CLIENT PAUSE and CLIENT UNPAUSE, as Redis's (docs/semantics.md, "CLIENT
PAUSE"): the commands a pause holds back wait, in order, and run when it
ends; the others are answered meanwhile."""

from __future__ import annotations

import time

import pytest
import redis
from harness import CheckedThread, Daemon, error_text, no_retry_client, wait_for


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "data").start()
    yield d
    d.kill()          # (a test that failed may leave an ALL pause, which holds even CLIENT UNPAUSE)


def in_thread(fn) -> tuple[CheckedThread, list]:
    """Run ``fn`` in a thread; what it returns lands in the list."""
    out: list = []
    t = CheckedThread(target=lambda: out.append(fn()))
    t.start()
    return t, out


def test_a_write_pause_holds_writes_in_order_and_answers_reads(daemon):
    c = daemon.client()
    c.execute_command("QPUSH", "pw", "before")
    assert c.execute_command("CLIENT", "PAUSE", 30000, "WRITE") == b"OK"
    try:
        writer = daemon.client()

        def push_then_count():
            p = writer.pipeline(transaction=False)
            p.execute_command("QPUSH", "pw", "held")
            p.execute_command("QLEN", "pw")            # after the held push, so it waits behind it
            return p.execute()

        t, out = in_thread(push_then_count)
        wait_for(lambda: c.info("clients")["blocked_clients"] == 1, timeout=10, what="the push to be held")
        assert c.execute_command("QLEN", "pw") == 1               # reads are answered; the push did not run
        assert c.execute_command("QPEEK", "pw") is not None
        time.sleep(0.2)
        assert t.is_alive() and not out
    finally:
        assert c.execute_command("CLIENT", "UNPAUSE") == b"OK"
    t.join(10)
    assert t.failure is None
    assert out == [[2, 2]]                                        # run in order once the pause ended
    assert c.info("clients")["blocked_clients"] == 0


def test_a_pause_ends_by_itself_at_its_timeout(daemon):
    c = daemon.client()
    c.execute_command("CLIENT", "PAUSE", 400)                    # no mode: ALL
    started = time.monotonic()
    t, out = in_thread(lambda: daemon.client().ping())
    t.join(10)
    assert t.failure is None and out == [True]
    assert time.monotonic() - started >= 0.3                      # even PING waited: ALL holds every command


def test_a_transaction_that_writes_waits_at_its_write_and_at_exec(daemon):
    c = daemon.client()
    c.execute_command("CLIENT", "PAUSE", 30000, "WRITE")
    try:
        def transaction():
            p = daemon.client().pipeline(transaction=True)
            p.execute_command("PING")
            p.execute_command("QPUSH", "tx", "a")
            return p.execute()

        t, out = in_thread(transaction)
        wait_for(lambda: c.info("clients")["blocked_clients"] == 1, timeout=10, what="the transaction to be held")
        reads = daemon.client().pipeline(transaction=True)
        reads.execute_command("PING")
        reads.execute_command("DBSIZE")
        assert reads.execute() == [True, 0]                       # a transaction of reads alone runs
    finally:
        c.execute_command("CLIENT", "UNPAUSE")
    t.join(10)
    assert t.failure is None
    assert out == [[True, 1]]


def test_a_second_pause_only_lengthens_and_strengthens_it(daemon):
    """A WRITE pause of 400 ms, then an ALL pause of 50 ms: ALL until 400 ms
    (under ALL even CLIENT UNPAUSE waits, as in Redis: only the deadline
    ends it)."""
    c = daemon.client()
    started = time.monotonic()
    c.execute_command("CLIENT", "PAUSE", 400, "WRITE")
    c.execute_command("CLIENT", "PAUSE", 50, "ALL")              # (CLIENT does not write: it ran)
    assert daemon.client().ping() is True
    assert time.monotonic() - started >= 0.35


def test_pause_errors_are_redis_words(daemon):
    c = daemon.client()
    assert error_text(c, "CLIENT", "PAUSE", "soon") == "timeout is not an integer or out of range"
    assert error_text(c, "CLIENT", "PAUSE", -1) == "timeout is negative"
    assert error_text(c, "CLIENT", "PAUSE", 10, "READS") == "CLIENT PAUSE mode must be WRITE or ALL"
    assert error_text(c, "CLIENT", "PAUSE") == "wrong number of arguments for 'client|pause' command"
    assert c.execute_command("CLIENT", "UNPAUSE") == b"OK"       # nothing paused: OK all the same
    assert c.execute_command("QPUSH", "errs", "x") == 1          # and nothing was paused by the errors


def test_a_client_that_leaves_while_held_is_forgotten(daemon):
    c = daemon.client()
    c.execute_command("CLIENT", "PAUSE", 30000, "WRITE")
    try:
        gone = no_retry_client(daemon, socket_timeout=0.3)
        with pytest.raises(redis.exceptions.TimeoutError):
            gone.execute_command("QPUSH", "left", "x")
        gone.close()
        wait_for(lambda: c.info("clients")["blocked_clients"] == 0, timeout=10, what="the held client to leave")
    finally:
        c.execute_command("CLIENT", "UNPAUSE")
    assert error_text(c, "QLEN", "left").startswith("NOQUEUE")   # its push never ran
