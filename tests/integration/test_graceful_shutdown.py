"""A shutdown lets the replicas catch up first, as Redis 7's
(docs/operations.md, "Graceful shutdown"): writes wait, reads are answered,
the node stops once every replica acknowledged everything or after
shutdown-timeout; SHUTDOWN NOW, a second SIGINT and a signal whose
shutdown-on-sig* setting says ``now`` stop at once, SHUTDOWN ABORT goes on
serving.  The replica is made to lag by stopping its process
(SIGSTOP) after it linked: the primary answers pushes (min-replicas-to-ack
0) that only it has."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager

import pytest
import redis
from harness import CheckedThread, error_text, no_retry_client, start_pair, wait_for


@contextmanager
def lagging_pair(tmp_path, *args: str):
    """A primary and its replica, the replica's process stopped: every push
    the primary answers from here on, only the primary has."""
    tmp_path.mkdir(exist_ok=True)
    primary, replica = start_pair(tmp_path, *args)
    try:
        os.kill(replica.proc.pid, signal.SIGSTOP)
        yield primary, replica
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
        primary.kill()
        replica.kill()


def waiting(c) -> bool:
    return "shutdown_in_milliseconds" in c.info("server")


def exited(primary, timeout: float = 20) -> int:
    return primary.proc.wait(timeout)


def shutdown_in_thread(primary, *modifiers) -> CheckedThread:
    """SHUTDOWN from its own connection: no reply, the connection closes (or
    the error a shutdown that did not happen gives)."""
    def run():
        try:
            no_retry_client(primary).execute_command("SHUTDOWN", *modifiers)
        except redis.exceptions.ConnectionError:
            pass
    t = CheckedThread(target=run)
    t.start()
    return t


def test_a_primary_stops_once_its_replica_has_everything_and_writes_wait_meanwhile(tmp_path):
    with lagging_pair(tmp_path) as (primary, replica):
        c = primary.client()
        for i in range(20):
            c.execute_command("QPUSH", "q", f"job-{i}")
        asked = shutdown_in_thread(primary)
        wait_for(lambda: waiting(c), timeout=10, what="the shutdown to wait for the replica")
        assert 0 < c.info("server")["shutdown_in_milliseconds"] <= 10_000
        assert c.execute_command("QLEN", "q") == 20                        # reads are answered

        held: list = []
        late = no_retry_client(primary)
        writer = CheckedThread(target=lambda: held.append(late.execute_command("QPUSH", "q", "late")))
        writer.start()
        wait_for(lambda: c.info("clients")["blocked_clients"] >= 2, timeout=10, what="the push to be held")
        time.sleep(0.2)
        assert primary.proc.poll() is None and not held                   # it waits: the replica has not caught up

        os.kill(replica.proc.pid, signal.SIGCONT)
        assert exited(primary) == 0
        asked.join(10)
        writer.join(10)
        assert not held and "ConnectionError" in writer.failure            # the held push never ran: closed
        assert replica.client().execute_command("QLEN", "q") == 20          # the replica has every answered push
        log = primary.log()
        assert "1 of 1 replicas have everything at shutdown" in log
        assert "bytes behind at shutdown" not in log


def test_after_shutdown_timeout_it_stops_and_says_which_replica_was_behind(tmp_path):
    with lagging_pair(tmp_path, "--shutdown-timeout", "1") as (primary, _replica):
        primary.client().execute_command("QPUSH", "q", "only-here")
        started = time.monotonic()
        primary.proc.send_signal(signal.SIGTERM)
        assert exited(primary) == 0
        assert time.monotonic() - started >= 0.9
        log = primary.log()
        assert "bytes behind at shutdown (state online" in log
        assert "0 of 1 replicas have everything at shutdown" in log


def test_shutdown_now_and_a_second_sigint_stop_at_once(tmp_path):
    with lagging_pair(tmp_path / "now") as (primary, _replica):
        c = no_retry_client(primary)
        c.execute_command("QPUSH", "q", "x")
        with pytest.raises(redis.exceptions.ConnectionError):
            c.execute_command("SHUTDOWN", "NOW")
        assert exited(primary, 5) == 0
        assert "shutting down (SHUTDOWN from client" in primary.log()
        assert "once the replicas have everything" not in primary.log()

    with lagging_pair(tmp_path / "sigint") as (primary, _replica):
        c = primary.client()
        c.execute_command("QPUSH", "q", "x")
        primary.proc.send_signal(signal.SIGINT)
        wait_for(lambda: waiting(c), timeout=10, what="the shutdown to wait")
        primary.proc.send_signal(signal.SIGTERM)                           # a second SIGTERM: it still waits
        time.sleep(0.3)
        assert primary.proc.poll() is None
        primary.proc.send_signal(signal.SIGINT)                            # a second SIGINT: no longer
        assert exited(primary, 5) == 0
        assert "a second signal (SIGINT)" in primary.log()


def test_shutdown_abort_answers_the_waiting_shutdown_and_serves_again(tmp_path):
    with lagging_pair(tmp_path) as (primary, replica):
        c = primary.client()
        assert error_text(c, "SHUTDOWN", "ABORT") == "No shutdown in progress."
        c.execute_command("QPUSH", "q", "x")
        answers: list = []

        def ask():
            try:
                no_retry_client(primary).execute_command("SHUTDOWN")
            except redis.exceptions.ResponseError as e:
                answers.append(str(e))
        asked = CheckedThread(target=ask)
        asked.start()
        wait_for(lambda: waiting(c), timeout=10, what="the shutdown to wait")
        late = []
        writer = CheckedThread(target=lambda: late.append(primary.client().execute_command("QPUSH", "q", "late")))
        writer.start()
        wait_for(lambda: c.info("clients")["blocked_clients"] >= 2, timeout=10, what="the push to be held")

        assert c.execute_command("SHUTDOWN", "ABORT") is True                # +OK
        asked.join(10)
        writer.join(10)
        assert asked.failure is None and writer.failure is None
        assert answers == ["Errors trying to SHUTDOWN. Check logs."]       # Redis's words
        assert late == [2]                                                 # the held push ran
        assert not waiting(c)
        assert c.execute_command("QPUSH", "q", "after") == 3
        assert primary.proc.poll() is None
        os.kill(replica.proc.pid, signal.SIGCONT)
        primary.stop()                                                     # (its replica caught up: at once)


def test_shutdown_modifiers_follow_redis(tmp_path):
    with lagging_pair(tmp_path, "--shutdown-timeout", "0") as (primary, _replica):
        c = primary.client()
        for bad in (("ABORT", "NOW"), ("SAVE", "NOSAVE"), ("SOON",)):
            assert error_text(c, "SHUTDOWN", *bad) == "syntax error"
        c.execute_command("QPUSH", "q", "x")
        started = time.monotonic()
        primary.proc.send_signal(signal.SIGTERM)                           # shutdown-timeout 0: no wait
        assert exited(primary, 5) == 0
        assert time.monotonic() - started < 5
        assert "once the replicas have everything" not in primary.log()


def test_shutdown_on_sigterm_and_sigint_now_stop_without_waiting(tmp_path):
    """Redis's ``shutdown-on-sigterm`` / ``shutdown-on-sigint``: ``now``
    makes the signal a SHUTDOWN NOW, from the command line or CONFIG SET."""
    with lagging_pair(tmp_path / "flag", "--shutdown-on-sigterm", "now") as (primary, _replica):
        c = primary.client()
        assert c.config_get("shutdown-on-sig*") == {"shutdown-on-sigterm": "now", "shutdown-on-sigint": "default"}
        c.execute_command("QPUSH", "q", "x")
        primary.proc.send_signal(signal.SIGTERM)
        assert exited(primary, 5) == 0
        assert "once the replicas have everything" not in primary.log()

    with lagging_pair(tmp_path / "set") as (primary, _replica):
        c = primary.client()
        assert error_text(c, "CONFIG", "SET", "shutdown-on-sigint", "now soon") == (
            "CONFIG SET failed (possibly related to argument 'shutdown-on-sigint') - 'shutdown-on-sigint' must be "
            "words of default, save, nosave, now, force, not 'now soon'")
        assert c.config_set("shutdown-on-sigint", "NOSAVE now") is True
        assert c.config_get("shutdown-on-sigint") == {"shutdown-on-sigint": "nosave now"}
        c.execute_command("QPUSH", "q", "x")
        primary.proc.send_signal(signal.SIGINT)
        assert exited(primary, 5) == 0
        assert "once the replicas have everything" not in primary.log()


def test_redis_cli_sees_the_wait(tmp_path):
    """What an operator sees: INFO's countdown while the primary waits."""
    with lagging_pair(tmp_path) as (primary, _replica):
        primary.client().execute_command("QPUSH", "q", "x")
        primary.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: waiting(primary.client()), timeout=10, what="the shutdown to wait")
        out = subprocess.run(["redis-cli", "-p", str(primary.port), "INFO", "server"], capture_output=True,
                             text=True, timeout=10).stdout
        assert "shutdown_in_milliseconds:" in out
