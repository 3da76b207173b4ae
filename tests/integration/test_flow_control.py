"""Flow control on a queue (docs/semantics.md §3.7): RATE n ms, CONCURRENCY n,
QPAUSE / QRESUME, against the real daemon.

Rules about time run on ``f``, the module's daemon whose DEBUG clock is frozen
(conftest ``frozen_daemon``),
so they are exact and a stalled machine cannot fail them; the one test of
the daemon's own timer runs on the running clock of ``daemon`` and reads
every moment off the daemon's clock (a claim's moment is its new deadline
minus its lease).
"""

from __future__ import annotations

import time

import pytest
import redis

from harness import (DEBUG_ENV, BlockedClaim, ClockWatch, Daemon, RespSocket, advance, as_map, claim, error_text,
                     most_in_window, qinfo, run_threads, unique, wait_blocked, wait_for)

LEASE = 60_000


def push(c, q, n: int) -> list[int]:
    return [c.execute_command("QPUSH", q, f"job-{i}") for i in range(n)]


def take(c, q, count: int = 10, *options) -> int:
    return len(claim(c, q, "w", "COUNT", count, "LEASE", LEASE, *options))


# -- RATE ------------------------------------------------------------------------------------------

def test_rate_hands_out_at_most_n_per_window(f):
    q = unique("rate")
    assert f.execute_command("QCREATE", q, "RATE", 3, 1000) == b"OK"
    push(f, q, 10)
    assert take(f, q) == 3
    assert take(f, q) == 0 and qinfo(f, q)[b"throttled"] == 7
    advance(f, 999)
    assert take(f, q) == 0
    advance(f, 1)
    assert take(f, q) == 3
    info = qinfo(f, q)
    assert (info[b"rate"], info[b"rate_ms"], info[b"in_flight"], info[b"ready"]) == (3, 1000, 6, 4)


def test_rate_is_a_sliding_window_not_a_fixed_bucket(f):
    """Two at 0 ms, then at 500 ms nothing: a bucket reset at 1000 ms would
    let two more through at 999 + 1 ms after one more at 500 ms; the window
    counts each hand-out for exactly 1000 ms from its own moment."""
    q = unique("slide")
    f.execute_command("QCREATE", q, "RATE", 2, 1000)
    push(f, q, 10)
    assert take(f, q, 1) == 1            # t = 0
    advance(f, 500)
    assert take(f, q, 1) == 1            # t = 500: the window is full
    advance(f, 499)
    assert take(f, q) == 0               # t = 999
    advance(f, 1)
    assert take(f, q) == 1               # t = 1000: only the hand-out of t = 0 has left
    advance(f, 499)
    assert take(f, q) == 0               # t = 1499
    advance(f, 1)
    assert take(f, q) == 1               # t = 1500: the one of t = 500 has left


def test_a_redelivery_counts_in_the_window(f):
    q = unique("redeliver")
    f.execute_command("QCREATE", q, "RATE", 2, 1000, "LEASE", 100)
    push(f, q, 1)
    assert len(claim(f, q, "w")) == 1                        # the first delivery, t = 0
    advance(f, 100)                                          # its lease ran out
    assert len(claim(f, q, "w")) == 1                        # the second delivery, t = 100: the window is full
    advance(f, 100)
    assert claim(f, q, "w") == []                            # a third would be the third in 1000 ms
    advance(f, 800)
    [job] = claim(f, q, "w")
    assert job[b"deliveries"] == 3


def test_a_blocked_claimer_is_served_the_moment_the_window_slides(frozen_daemon, f):
    q = unique("wake")
    f.execute_command("QCREATE", q, "RATE", 1, 1000)
    push(f, q, 2)
    assert take(f, q) == 1
    waiter = BlockedClaim(frozen_daemon, q, "b", "COUNT", 10, "LEASE", LEASE, "BLOCK", 20_000)
    wait_blocked(f, q, 1)
    advance(f, 999)
    assert qinfo(f, q)[b"consumers_blocked"] == 1
    advance(f, 1)
    assert len(waiter.result()) == 1


def test_the_daemons_timer_serves_blocked_claimers_and_no_window_holds_more_than_n(daemon, r):
    """About 2.5 s on the running clock, RATE 4 200, three blocked claimers
    claiming COUNT 3 in a loop: every window of 200 ms of the daemon's clock
    holds at most 4 hand-outs (the largest count over n is printed), and
    the claimers get jobs all along (served by the queue's timer when the
    window slides: their BLOCK of 20 s never ends)."""
    q = unique("timer")
    r.execute_command("QCREATE", q, "RATE", 4, 200)
    push(r, q, 100)             # more than 2.5 s can hand out (4 + 20 per s), so no claim finds none
    moments: list[int] = []

    def claimer():
        c = daemon.client(protocol=2)
        end = time.monotonic() + 2.5
        watch = ClockWatch()
        while time.monotonic() < end:
            watch.ask()
            jobs = [as_map(j) for j in c.execute_command("QCLAIM", q, "t", "COUNT", 3, "LEASE", LEASE,
                                                          "BLOCK", 20_000)]
            assert jobs, f"a blocked claim came back empty: the window's slide did not wake it {watch.said()}"
            moments.extend(j[b"deadline"] - LEASE for j in jobs)
        c.close()

    run_threads(claimer, 3)
    moments.sort()
    worst = most_in_window(moments, 200)
    print(f"\nRATE 4 200 over {moments[-1] - moments[0]} ms: {len(moments)} jobs, "
          f"most in any 200 ms window {worst} (= {worst / 4:.2f} n)")
    assert worst <= 4
    assert len(moments) >= 20          # served all along, not once per BLOCK timeout


# -- CONCURRENCY -------------------------------------------------------------------------------------

def test_concurrency_caps_the_jobs_in_flight(f):
    q = unique("conc")
    f.execute_command("QCREATE", q, "CONCURRENCY", 2)
    push(f, q, 5)
    jobs = claim(f, q, "w", "COUNT", 5, "LEASE", 1000)
    assert len(jobs) == 2 and take(f, q) == 0
    info = qinfo(f, q)
    assert (info[b"concurrency"], info[b"in_flight"], info[b"throttled"]) == (2, 2, 3)
    assert f.execute_command("QACK", q, jobs[0][b"lease"]) == 1
    assert len(claim(f, q, "w", "COUNT", 5, "LEASE", 1000)) == 1        # the ack freed one slot
    assert f.execute_command("QNACK", q, jobs[1][b"lease"], "DELAY", 0) == 1
    assert len(claim(f, q, "w", "COUNT", 5, "LEASE", 1000)) == 1        # so did the nack
    advance(f, 1000)                                                      # both leases run out
    assert len(claim(f, q, "w", "COUNT", 5, "LEASE", 1000)) == 2


def test_a_blocked_claimer_is_served_when_an_ack_frees_a_slot(frozen_daemon, f):
    q = unique("slot")
    f.execute_command("QCREATE", q, "CONCURRENCY", 1)
    push(f, q, 2)
    [held] = claim(f, q, "w")
    waiter = BlockedClaim(frozen_daemon, q, "b", "COUNT", 10, "LEASE", LEASE, "BLOCK", 20_000)
    wait_blocked(f, q, 1)
    assert f.execute_command("QACK", q, held[b"lease"]) == 1
    assert len(waiter.result()) == 1


def test_a_work_stream_keeps_to_the_concurrency_and_takes_more_when_it_rises(frozen_daemon, f):
    q = unique("stream")
    f.execute_command("QCREATE", q, "CONCURRENCY", 2)
    push(f, q, 5)
    stream = RespSocket(frozen_daemon.port)
    stream.send("QWORK", q, "s", "MAX", 5, "LEASE", LEASE)
    assert stream.read() == b"OK"
    frames = [stream.read(), stream.read()]
    assert all(frame[0] == b"job" for frame in frames), frames
    assert qinfo(f, q)[b"in_flight"] == 2
    assert f.execute_command("QALTER", q, "CONCURRENCY", 3) == b"OK"
    assert stream.read()[0] == b"job"
    wait_for(lambda: qinfo(f, q)[b"in_flight"] == 3, what="the stream's third job")
    stream.sock.close()


# -- QPAUSE / QRESUME --------------------------------------------------------------------------------

def test_a_paused_queue_takes_pushes_and_hands_out_nothing_until_resumed(frozen_daemon, f):
    q = unique("pause")
    push(f, q, 2)
    [held] = claim(f, q, "w")
    assert f.execute_command("QPAUSE", q) == b"OK"
    assert f.execute_command("QPAUSE", q) == b"OK"                        # again: no change
    assert f.execute_command("QPUSH", q, "more") == 3                    # pushes go on
    assert take(f, q) == 0
    assert f.execute_command("QEXTEND", q, held[b"lease"])[0] is not None    # so do extends
    info = qinfo(f, q)
    assert (info[b"paused"], info[b"ready"], info[b"throttled"]) == (1, 2, 2)
    waiter = BlockedClaim(frozen_daemon, q, "b", "COUNT", 10, "LEASE", LEASE, "BLOCK", 20_000)
    wait_blocked(f, q, 1)
    assert f.execute_command("QACK", q, held[b"lease"]) == 1             # and acks
    assert qinfo(f, q)[b"consumers_blocked"] == 1                         # the claimer still waits
    assert f.execute_command("QRESUME", q) == b"OK"
    assert len(waiter.result()) == 2
    assert (qinfo(f, q)[b"paused"], qinfo(f, q)[b"throttled"]) == (0, 0)


def test_qcreate_of_a_paused_queue_with_its_options_is_ok(f):
    q = unique("paused-create")
    f.execute_command("QCREATE", q, "RATE", 5, 1000)
    f.execute_command("QPAUSE", q)
    assert f.execute_command("QCREATE", q, "RATE", 5, 1000) == b"OK"
    with pytest.raises(redis.ResponseError, match="EXISTS"):
        f.execute_command("QCREATE", q, "RATE", 6, 1000)
    assert qinfo(f, q)[b"paused"] == 1


# -- options: removed, kept, refused -------------------------------------------------------------------

@pytest.mark.parametrize("off", [("RATE", "OFF"), ("RATE", "0"), ("RATE", "0", "1000"), ("rate", "off")])
def test_rate_off_or_0_removes_the_limit(f, off):
    q = unique("rate-off")
    f.execute_command("QCREATE", q, "RATE", 1, 1000, "CONCURRENCY", 3)
    assert f.execute_command("QALTER", q, *off) == b"OK"
    info = qinfo(f, q)
    assert (info[b"rate"], info[b"rate_ms"], info[b"concurrency"]) == (0, 0, 3)
    push(f, q, 5)
    assert take(f, q) == 3


@pytest.mark.parametrize("off", ["OFF", "0"])
def test_concurrency_off_or_0_removes_the_limit(f, off):
    q = unique("conc-off")
    f.execute_command("QCREATE", q, "CONCURRENCY", 1)
    assert f.execute_command("QALTER", q, "CONCURRENCY", off) == b"OK"
    push(f, q, 3)
    assert take(f, q) == 3


@pytest.mark.parametrize("args, message", [
    (("RATE", "-1", "1000"), "RATE n must be between 1 and 4294967295"),
    (("RATE", "5"), "syntax error"),
    (("RATE", "5", "0"), "RATE ms must be between 1 and 9007199254740992"),
    (("RATE", "5", "-100"), "RATE ms must be between 1 and 9007199254740992"),
    (("RATE", "x", "100"), "value is not an integer or out of range"),
    (("RATE", "5", "1.5"), "value is not an integer or out of range"),
    (("RATE",), "syntax error"),
    (("CONCURRENCY", "-1"), "CONCURRENCY must be between 1 and 4294967295"),
    (("CONCURRENCY", "x"), "value is not an integer or out of range"),
    (("CONCURRENCY",), "syntax error"),
    (("CONCURRENCY", "1", "CONCURRENCY", "2"), "syntax error"),
])
def test_bad_limits_are_refused_and_change_nothing(f, args, message):
    q = unique("bad")
    assert error_text(f, "QCREATE", q, *args) == message
    assert f.execute_command("EXISTS", q) == 0
    f.execute_command("QCREATE", q, "RATE", 2, 500, "CONCURRENCY", 4)
    assert error_text(f, "QALTER", q, *args) == message
    info = qinfo(f, q)
    assert (info[b"rate"], info[b"rate_ms"], info[b"concurrency"]) == (2, 500, 4)


@pytest.mark.parametrize("command", ["QPAUSE", "QRESUME"])
def test_pause_and_resume_of_an_unknown_queue_is_noqueue_and_creates_nothing(f, command):
    q = unique("missing")
    assert error_text(f, command, q) == f"NOQUEUE no such queue '{q}'"
    assert f.execute_command("EXISTS", q) == 0
    assert error_text(f, command) == f"wrong number of arguments for '{command.lower()}' command"
    assert error_text(f, command, q, "GROUP") == "syntax error"           # checked before the queue is looked up
    assert error_text(f, command, q, "GROUP", "g") == f"NOQUEUE no such queue '{q}'"
    assert f.execute_command("EXISTS", q) == 0


def test_limits_and_pause_last_across_kill_9(tmp_path):
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = d.client()
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        c.execute_command("QCREATE", "limited", "RATE", 2, 1000, "CONCURRENCY", 5)
        push(c, "limited", 4)
        assert take(c, "limited") == 2
        c.execute_command("QCREATE", "stopped")
        push(c, "stopped", 1)
        c.execute_command("QPAUSE", "stopped")
        d.kill()
        d.restart()
        c = d.client()
        info = qinfo(c, "limited")
        assert (info[b"rate"], info[b"rate_ms"], info[b"concurrency"], info[b"in_flight"]) == (2, 1000, 5, 2)
        assert take(c, "limited") == 0          # the window was rebuilt from the log's claims
        assert qinfo(c, "stopped")[b"paused"] == 1 and take(c, "stopped") == 0
        c.execute_command("QRESUME", "stopped")
        assert take(c, "stopped") == 1
    finally:
        d.kill()
