"""Groups inside a queue (docs/semantics.md §3.8): GROUP and GROUPS on pushes,
turns among groups, GROUP-CONCURRENCY (strict order with 1), GROUP-RATE,
QPAUSE / QRESUME ... GROUP, what QINFO, INFO and /metrics show, restarts,
and bad input, against the real daemon.

Rules about time run on ``f``, the module's daemon whose DEBUG clock is
frozen (conftest ``frozen_daemon``), so a stalled machine cannot fail them.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from harness import (DEBUG_ENV, BlockedClaim, CheckedThread, ClockWatch, Daemon, advance, bgsave, claim, error_text,
                     most_in_window, qget, qinfo, run_threads, unique, wait_blocked)
from harness_http import http_daemon, http_get

LEASE = 60_000


def push_groups(c, q, groups: list[str], *options) -> list[int]:
    payloads = [f"{g}-{i}" for i, g in enumerate(groups)]
    return c.execute_command("QPUSHMANY", q, len(groups), *payloads, "GROUPS", *groups, *options)


def take(c, q, count: int = 10, *options) -> list[dict]:
    return claim(c, q, "w", "COUNT", count, "LEASE", LEASE, *options)


def groups_of(jobs: list[dict]) -> list[bytes]:
    return [j.get(b"group", b"") for j in jobs]


def ack(c, q, jobs: list[dict]) -> int:
    return c.execute_command("QACK", q, *[j[b"lease"] for j in jobs])


# -- pushing and showing the group --------------------------------------------------------------------

def test_group_and_groups_are_kept_on_the_job_and_shown(daemon):
    c = daemon.client(protocol=2)
    q = unique("show")
    one = c.execute_command("QPUSH", q, "p", "GROUP", "tenant-1")
    many = c.execute_command("QPUSHMANY", q, 2, "a", "b", "GROUP", "tenant-2")
    each = c.execute_command("QPUSHMANY", q, 3, "x", "y", "z", "GROUPS", "g1", "", "g1")
    plain = c.execute_command("QPUSH", q, "plain")
    assert qget(c, q, one)[b"group"] == b"tenant-1"
    assert [qget(c, q, i)[b"group"] for i in many] == [b"tenant-2"] * 2
    assert [qget(c, q, i).get(b"group") for i in each] == [b"g1", None, b"g1"]     # "" is not shown
    assert b"group" not in qget(c, q, plain)
    peeked = [dict(zip(j[::2], j[1::2])) for j in c.execute_command("QPEEK", q, "COUNT", 10)]
    assert [j.get(b"group") for j in peeked] == [b"tenant-1", b"tenant-2", b"tenant-2", b"g1", None, b"g1", None]
    got = take(c, q, 10)
    assert sorted(j.get(b"group", b"") for j in got) == sorted(
        [b"tenant-1", b"tenant-2", b"tenant-2", b"g1", b"", b"g1", b""])
    info = qinfo(c, q)
    assert info[b"groups"] == 4 and info[b"throttled"] == 0
    ack(c, q, got)
    assert qinfo(c, q)[b"groups"] == 0


def test_groups_with_dedupe_keys_stay_with_their_own_payloads(daemon):
    c = daemon.client(protocol=2)
    q = unique("keys")
    first = c.execute_command("QPUSH", q, "old", "KEY", "k2", "GROUP", "was")
    ids = c.execute_command("QPUSHMANY", q, 3, "a", "b", "c", "KEYS", "k1", "k2", "k3", "GROUPS", "ga", "gb", "gc")
    assert ids[1] == first
    assert qget(c, q, ids[0])[b"group"] == b"ga" and qget(c, q, ids[2])[b"group"] == b"gc"
    assert qget(c, q, first)[b"group"] == b"was"


# -- turns ----------------------------------------------------------------------------------------------

def test_a_noisy_group_does_not_delay_a_quiet_one(daemon):
    c = daemon.client(protocol=2)
    q = unique("fair")
    push_groups(c, q, ["noisy"] * 1000)
    c.execute_command("QPUSH", q, "hello", "GROUP", "quiet")
    got = take(c, q, 2)
    assert groups_of(got) == [b"noisy", b"quiet"]       # one job per group per turn
    assert groups_of(take(c, q, 3)) == [b"noisy"] * 3    # the quiet group has nothing left


def test_groups_take_turns_one_job_each_in_the_order_they_arrived(daemon):
    c = daemon.client(protocol=2)
    q = unique("turns")
    push_groups(c, q, ["a", "a", "a", "b", "b", "c"])
    c.execute_command("QPUSH", q, "nogroup")
    assert groups_of(take(c, q, 7)) == [b"a", b"b", b"c", b"", b"a", b"b", b"a"]


def test_a_served_group_goes_to_the_back_across_claims(daemon):
    c = daemon.client(protocol=2)
    q = unique("back")
    push_groups(c, q, ["a", "a", "b", "b"])
    assert groups_of(take(c, q, 1)) == [b"a"]
    push_groups(c, q, ["c"])                              # joins behind b, and behind a's next turn
    assert groups_of(take(c, q, 1)) == [b"b"]
    assert groups_of(take(c, q, 3)) == [b"a", b"c", b"b"]


def test_priority_decides_before_turns(daemon):
    c = daemon.client(protocol=2)
    q = unique("prio")
    push_groups(c, q, ["a", "a"])
    c.execute_command("QPUSH", q, "urgent", "GROUP", "b", "PRIORITY", 9)
    c.execute_command("QPUSH", q, "urgent-too", "GROUP", "a", "PRIORITY", 9)
    got = take(c, q, 4)
    assert [j[b"payload"] for j in got] == [b"urgent-too", b"urgent", b"a-0", b"a-1"]


# -- GROUP-CONCURRENCY ----------------------------------------------------------------------------------

def test_group_concurrency_caps_each_group_and_an_ack_frees_its_slot(daemon):
    c = daemon.client(protocol=2)
    q = unique("gc")
    c.execute_command("QCREATE", q, "GROUP-CONCURRENCY", 2)
    push_groups(c, q, ["a"] * 5 + ["b"] * 5)
    got = take(c, q, 10)
    assert sorted(groups_of(got)) == [b"a", b"a", b"b", b"b"]
    info = qinfo(c, q)
    assert (info[b"group_concurrency"], info[b"throttled"], info[b"groups"]) == (2, 6, 2)
    assert take(c, q, 10) == []
    a_jobs = [j for j in got if j[b"group"] == b"a"]
    assert ack(c, q, a_jobs[:1]) == 1
    assert groups_of(take(c, q, 10)) == [b"a"]


def test_a_blocked_claimer_is_woken_by_an_ack_that_frees_a_group_slot(daemon):
    c = daemon.client(protocol=2)
    q = unique("wake")
    c.execute_command("QCREATE", q, "GROUP-CONCURRENCY", 1)
    push_groups(c, q, ["a", "a"])
    first = take(c, q, 5)
    assert len(first) == 1
    waiting = BlockedClaim(daemon, q, "w2", "BLOCK", 10_000)
    wait_blocked(c, q, 1)
    assert ack(c, q, first) == 1
    got = waiting.result()
    assert [j[b"payload"] for j in got] == [b"a-1"]


def test_strict_order_with_group_concurrency_1_waits_for_a_retry(f):
    q = unique("strict")
    f.execute_command("QCREATE", q, "GROUP-CONCURRENCY", 1)
    push_groups(f, q, ["a", "a", "a", "b"])
    got = take(f, q, 10)
    assert [j[b"payload"] for j in got] == [b"a-0", b"b-3"]
    a0 = got[0]
    assert f.execute_command("QNACK", q, a0[b"lease"], "DELAY", 1000) == 1
    assert take(f, q, 10) == []                          # a-0 waits for its retry and still holds a's slot
    assert qinfo(f, q)[b"throttled"] == 2
    advance(f, 1000)
    again = take(f, q, 10)
    assert [j[b"payload"] for j in again] == [b"a-0"]     # the retried job is the group's next
    assert f.execute_command("QNACK", q, again[0][b"lease"], "DELAY", 0) == 1   # ready again, first in its group
    assert [j[b"payload"] for j in take(f, q, 10)] == [b"a-0"]


def test_dead_lettering_or_deleting_the_job_in_flight_unblocks_a_strict_group(daemon):
    c = daemon.client(protocol=2)
    q = unique("unblock")
    c.execute_command("QCREATE", q, "GROUP-CONCURRENCY", 1)
    push_groups(c, q, ["a", "a", "a"])
    first = take(c, q, 10)
    assert [j[b"payload"] for j in first] == [b"a-0"]
    assert c.execute_command("QNACK", q, first[0][b"lease"], "DEAD") == 1
    second = take(c, q, 10)
    assert [j[b"payload"] for j in second] == [b"a-1"]
    assert c.execute_command("QDEL", q, second[0][b"id"]) == 1
    assert [j[b"payload"] for j in take(c, q, 10)] == [b"a-2"]


def test_strict_order_per_group_under_concurrent_workers_with_nacks(daemon):
    """Four workers claim, sometimes nack and otherwise ack jobs of 20 groups
    with GROUP-CONCURRENCY 1: at no moment do two jobs of one group run, and
    each group's jobs complete in push order."""
    c = daemon.client(protocol=2)
    q = unique("order")
    c.execute_command("QCREATE", q, "GROUP-CONCURRENCY", 1)
    groups = [f"g{i}" for i in range(20)]
    per_group = 10
    pushed = [g for _ in range(per_group) for g in groups]
    push_groups(c, q, pushed)
    lock = threading.Lock()
    running: dict[bytes, bytes] = {}
    completed: dict[bytes, list[int]] = {}
    overlaps = []
    deadline = time.monotonic() + 60

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        w = daemon.client(protocol=2)
        while time.monotonic() < deadline:
            jobs = claim(w, q, f"w{seed}", "COUNT", 3, "LEASE", LEASE, "BLOCK", 200)
            if not jobs:
                if qinfo(w, q)[b"ready"] == 0 and qinfo(w, q)[b"in_flight"] == 0:
                    return
                continue
            for job in jobs:
                g = job[b"group"]
                with lock:
                    if g in running:
                        overlaps.append((g, running[g], job[b"payload"]))
                    running[g] = job[b"payload"]
                if rng.random() < 0.3:
                    with lock:
                        del running[g]
                    assert w.execute_command("QNACK", q, job[b"lease"], "DELAY", rng.choice([0, 0, 20])) == 1
                else:
                    with lock:
                        del running[g]
                        completed.setdefault(g, []).append(job[b"id"])
                    assert w.execute_command("QACK", q, job[b"lease"]) == 1

    threads = [CheckedThread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
        assert not t.is_alive() and t.failure is None, t.failure
    assert overlaps == []
    assert sum(len(ids) for ids in completed.values()) == len(pushed)
    for g, ids in completed.items():
        assert ids == sorted(ids), (g, ids)


# -- GROUP-RATE --------------------------------------------------------------------------------------------

def test_group_rate_is_a_sliding_window_per_group(f):
    q = unique("grate")
    f.execute_command("QCREATE", q, "GROUP-RATE", 2, 1000)
    push_groups(f, q, ["a"] * 5 + ["b"] * 5)
    assert sorted(groups_of(take(f, q, 10))) == [b"a", b"a", b"b", b"b"]
    assert qinfo(f, q)[b"throttled"] == 6
    advance(f, 999)
    assert take(f, q, 10) == []
    advance(f, 1)
    assert sorted(groups_of(take(f, q, 10))) == [b"a", b"a", b"b", b"b"]
    info = qinfo(f, q)
    assert (info[b"group_rate"], info[b"group_rate_ms"]) == (2, 1000)


def test_a_group_window_outlives_the_groups_last_job(f):
    """The group leaves the turns when its last job is acked; its window does
    not: a job pushed again within the window waits for it."""
    q = unique("outlive")
    f.execute_command("QCREATE", q, "GROUP-RATE", 1, 100)
    push_groups(f, q, ["b"])
    assert ack(f, q, take(f, q, 5)) == 1
    push_groups(f, q, ["b"])
    assert take(f, q, 5) == []
    advance(f, 100)
    assert len(take(f, q, 5)) == 1


def test_a_blocked_claimer_is_served_when_a_group_window_slides(f, frozen_daemon):
    q = unique("gslide")
    f.execute_command("QCREATE", q, "GROUP-RATE", 1, 500)
    push_groups(f, q, ["a", "a"])
    assert len(take(f, q, 10)) == 1
    waiting = BlockedClaim(frozen_daemon, q, "w2", "COUNT", 5, "BLOCK", 10_000)
    wait_blocked(f, q, 1)
    advance(f, 500)                                   # the timer is re-armed for the new time
    assert [j[b"payload"] for j in waiting.result()] == [b"a-1"]


def test_the_daemons_timer_serves_group_windows_and_no_group_window_holds_more_than_n(daemon):
    """About 1.5 s on the running clock, GROUP-RATE 2 200 over two groups and
    three claimers blocked with COUNT 3 in a loop: in every 200 ms of the
    daemon's clock each group hands out at most 2, and the claimers are
    served all along by the queue's timer (their BLOCK of 20 s never ends)."""
    c = daemon.client(protocol=2)
    q = unique("gtimer")
    c.execute_command("QCREATE", q, "GROUP-RATE", 2, 200)
    push_groups(c, q, ["a", "b"] * 40)          # more than 1.5 s can hand out (2 x 2 x 5 per s)
    moments: dict[bytes, list[int]] = {b"a": [], b"b": []}
    lock = threading.Lock()

    def claimer():
        w = daemon.client(protocol=2)
        end = time.monotonic() + 1.5
        watch = ClockWatch()
        while time.monotonic() < end:
            watch.ask()
            jobs = claim(w, q, "t", "COUNT", 3, "LEASE", LEASE, "BLOCK", 20_000)
            assert jobs, f"a blocked claim came back empty: the window's slide did not wake it {watch.said()}"
            with lock:
                for j in jobs:
                    moments[j[b"group"]].append(j[b"deadline"] - LEASE)
        w.close()

    run_threads(claimer, 3)
    for group, times in moments.items():
        times.sort()
        worst = most_in_window(times, 200)
        assert worst <= 2, (group, times)
        assert len(times) >= 6, (group, times)        # served all along, not once per BLOCK timeout


def test_group_and_queue_limits_both_apply(f):
    q = unique("both")
    f.execute_command("QCREATE", q, "GROUP-CONCURRENCY", 2, "CONCURRENCY", 3)
    push_groups(f, q, ["a"] * 4 + ["b"] * 4)
    assert len(take(f, q, 10)) == 3
    assert qinfo(f, q)[b"throttled"] == 5


# -- pausing a group -------------------------------------------------------------------------------------------

def test_a_paused_group_hands_out_nothing_and_a_resume_serves_a_blocked_claimer(daemon):
    c = daemon.client(protocol=2)
    q = unique("gpause")
    push_groups(c, q, ["a", "a", "b"])
    assert c.execute_command("QPAUSE", q, "GROUP", "a") == b"OK"
    assert c.execute_command("QPAUSE", q, "GROUP", "a") == b"OK"          # again: nothing changes
    info = qinfo(c, q)
    assert (info[b"paused"], info[b"paused_groups"], info[b"throttled"]) == (0, 1, 2)
    assert groups_of(take(c, q, 10)) == [b"b"]
    waiting = BlockedClaim(daemon, q, "w2", "COUNT", 5, "BLOCK", 10_000)
    wait_blocked(c, q, 1)
    assert c.execute_command("QRESUME", q) == b"OK"                       # the queue's pause only
    assert qinfo(c, q)[b"paused_groups"] == 1 and waiting.is_alive()
    assert c.execute_command("QRESUME", q, "GROUP", "a") == b"OK"
    assert groups_of(waiting.result()) == [b"a", b"a"]
    assert qinfo(c, q)[b"paused_groups"] == 0


def test_a_group_paused_before_it_has_jobs_holds_them_from_their_push(daemon):
    c = daemon.client(protocol=2)
    q = unique("early")
    c.execute_command("QCREATE", q)
    c.execute_command("QPAUSE", q, "GROUP", "later")
    push_groups(c, q, ["later", "other"])
    assert groups_of(take(c, q, 10)) == [b"other"]
    assert qinfo(c, q)[b"throttled"] == 1


# -- what operators see ---------------------------------------------------------------------------------------

def test_info_and_metrics_show_groups_and_the_group_rule_holding_jobs_back(tmp_path):
    d = http_daemon(tmp_path / "data")
    try:
        c = d.client(protocol=2)
        c.execute_command("QCREATE", "tenants", "GROUP-CONCURRENCY", 1)
        push_groups(c, "tenants", ["a", "a", "a", "b"])
        c.execute_command("QPAUSE", "tenants", "GROUP", "b")
        take(c, "tenants", 10)
        line = c.info("queues")["tenants"]
        assert (line["groups"], line["throttled"], line["paused"]) == (2, 3, 0)
        status, _type, text = http_get(d, "/metrics")
        assert status == 200
        assert 'leaseq_queue_groups{queue="tenants"} 2.0' in text
        assert 'leaseq_queue_throttled{queue="tenants",reason="group-concurrency"} 2.0' in text
        assert 'leaseq_queue_throttled{queue="tenants",reason="group-pause"} 1.0' in text
    finally:
        d.stop()


# -- restarts ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_groups_rules_pauses_and_turns_last_across_kill_9(tmp_path, snapshot):
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = d.client(protocol=2)
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        c.execute_command("QCREATE", "g", "GROUP-CONCURRENCY", 2, "GROUP-RATE", 3, 1000)
        push_groups(c, "g", ["a", "a", "a", "b", "b", "c", "c", "c"])
        c.execute_command("QPAUSE", "g", "GROUP", "c")
        first = take(c, "g", 3)
        assert groups_of(first) == [b"a", b"b", b"a"]
        before = qinfo(c, "g")
        if snapshot:
            bgsave(c)
        d.kill()
        d.restart()
        c = d.client(protocol=2)
        if snapshot:
            assert "from snapshot" in d.log()
        after = qinfo(c, "g")
        for field in (b"group_concurrency", b"group_rate", b"group_rate_ms", b"paused_groups", b"groups",
                      b"ready", b"in_flight", b"throttled"):
            assert after[field] == before[field], field
        assert qget(c, "g", first[0][b"id"])[b"group"] == b"a"
        c.execute_command("QRESUME", "g", "GROUP", "c")
        # c, never served, kept the turn it joined with, before b's (served once); a holds its 2 slots
        assert groups_of(take(c, "g", 10)) == [b"c", b"b", b"c"]
    finally:
        d.kill()


def test_dead_letter_copies_and_jobs_moved_back_keep_their_group(daemon):
    c = daemon.client(protocol=2)
    q, dlq = unique("src"), unique("dlq")
    c.execute_command("QCREATE", q, "DEADLETTER", dlq)
    c.execute_command("QPUSH", q, "p", "GROUP", "tenant")
    job = take(c, q, 1)[0]
    c.execute_command("QNACK", q, job[b"lease"], "DEAD")
    copy = claim(c, dlq, "w", "LEASE", LEASE)[0]
    assert copy[b"group"] == b"tenant"
    c.execute_command("QNACK", dlq, copy[b"lease"], "DELAY", 0)
    assert c.execute_command("QREDRIVE", dlq) == 1
    assert take(c, q, 1)[0][b"group"] == b"tenant"


# -- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (("QPUSH", "{q}", "p", "GROUP"), "syntax error"),
    (("QPUSH", "{q}", "p", "GROUPS", "a"), "syntax error"),
    (("QPUSH", "{q}", "p", "GROUP", "a", "GROUP", "b"), "syntax error"),
    (("QPUSH", "{q}", "p", "GROUP", "x" * 1025), "GROUP is longer than 1024 bytes"),
    (("QPUSHMANY", "{q}", 2, "a", "b", "GROUPS", "g1"), "syntax error"),
    (("QPUSHMANY", "{q}", 2, "a", "b", "GROUPS", "g1", "g2", "g3"), "syntax error"),
    (("QPUSHMANY", "{q}", 2, "a", "b", "GROUP", "g", "GROUPS", "g1", "g2"), "syntax error"),
    (("QPUSHMANY", "{q}", 2, "a", "b", "GROUPS"), "syntax error"),
    (("QPAUSE", "{q}", "GROUP"), "syntax error"),
    (("QPAUSE", "{q}", "GROUP", "x" * 1025), "GROUP is longer than 1024 bytes"),
    (("QRESUME", "{q}", "TENANT", "a"), "syntax error"),
    (("QALTER", "{q}", "GROUP-CONCURRENCY", -1), "GROUP-CONCURRENCY must be between 1 and 4294967295"),
    (("QALTER", "{q}", "GROUP-CONCURRENCY", "two"), "value is not an integer or out of range"),
    (("QALTER", "{q}", "GROUP-RATE", 5, 0), "GROUP-RATE ms must be between 1 and 9007199254740992"),
    (("QALTER", "{q}", "GROUP-RATE", 5, -10), "GROUP-RATE ms must be between 1 and 9007199254740992"),
    (("QALTER", "{q}", "GROUP-RATE", -5, 10), "GROUP-RATE n must be between 1 and 4294967295"),
    (("QALTER", "{q}", "GROUP-RATE", "1.5", 10), "value is not an integer or out of range"),
    (("QALTER", "{q}", "GROUP-RATE", 5), "syntax error"),
])
def test_bad_group_input_is_refused_and_changes_nothing(f, args, message):
    c = f                                         # a frozen clock: QINFO's ages stand still
    q = unique("badg")
    c.execute_command("QCREATE", q, "GROUP-CONCURRENCY", 3, "GROUP-RATE", 4, 100)
    c.execute_command("QPUSH", q, "kept", "GROUP", "g")
    before = qinfo(c, q)
    assert error_text(c, *[a.format(q=q) if isinstance(a, str) else a for a in args]) == message
    after = qinfo(c, q)
    assert after == before
    assert c.execute_command("QLEN", q) == 1


def test_group_pause_of_an_unknown_queue_is_noqueue(daemon):
    c = daemon.client(protocol=2)
    q = unique("nosuch")
    assert error_text(c, "QPAUSE", q, "GROUP", "g") == f"NOQUEUE no such queue '{q}'"
    assert c.execute_command("EXISTS", q) == 0


def test_qcreate_is_idempotent_whatever_the_paused_groups(daemon):
    c = daemon.client(protocol=2)
    q = unique("idem")
    assert c.execute_command("QCREATE", q, "GROUP-CONCURRENCY", 1) == b"OK"
    c.execute_command("QPAUSE", q, "GROUP", "g")
    assert c.execute_command("QCREATE", q, "GROUP-CONCURRENCY", 1) == b"OK"
    assert error_text(c, "QCREATE", q, "GROUP-CONCURRENCY", 2).startswith("EXISTS")
    assert c.execute_command("QALTER", q, "GROUP-CONCURRENCY", "OFF", "GROUP-RATE", "OFF") == b"OK"
    info = qinfo(c, q)
    assert (info[b"group_concurrency"], info[b"group_rate"], info[b"paused_groups"]) == (0, 0, 1)
