"""Schedules (docs/semantics.md §3.9): QSCHEDULE, QUNSCHEDULE, QSCHEDULES,
ticks under the DEBUG clock (EVERY and CRON, with a zone across both
daylight-saving changes), MISFIRE and OVERLAP, restarts, and bad input,
against the real daemon.  The kill -9 soak is in tests/crash/test_schedule_soak.py.

Rules about time run on ``f``, the module's daemon whose DEBUG clock is
frozen, so a tick comes exactly when a test moves the clock.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from harness import (DEBUG_ENV, BlockedClaim, Daemon, advance, as_map, bgsave, claim, error_text, now, qget, qscan_all,
                     unique, wait_blocked)
from harness_http import http_daemon, http_get

NEW_YORK = ZoneInfo("America/New_York")


def schedules(c, q) -> dict[bytes, dict]:
    return {s[b"name"]: s for s in (as_map(x) for x in c.execute_command("QSCHEDULES", q))}


def ticks(c, q) -> list[int]:
    """The ``tick`` of every ready job, in id order (QSCAN walks ids)."""
    return [job[b"tick"] for job in qscan_all(c, q, "STATE", "ready", count=1000)]


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


# -- EVERY ------------------------------------------------------------------------------------------

def test_every_pushes_one_job_per_tick_carrying_schedule_and_tick(f):
    q = unique("every")
    t0 = now(f)
    assert f.execute_command("QSCHEDULE", q, "beat", "ping", "EVERY", 1000, "PRIORITY", 7) == t0 + 1000
    advance(f, 999)
    assert f.execute_command("QLEN", q) == 0
    advance(f, 1)
    job = claim(f, q, "w", "LEASE", 60_000)[0]
    assert (job[b"payload"], job[b"priority"], job[b"schedule"], job[b"tick"]) == (b"ping", 7, b"beat", t0 + 1000)
    assert qget(f, q, job[b"id"])[b"tick"] == t0 + 1000
    advance(f, 2000)
    assert ticks(f, q) == [t0 + 2000, t0 + 3000]
    s = schedules(f, q)[b"beat"]
    assert (s[b"spec"], s[b"next"], s[b"last"], s[b"fired"], s[b"skipped"]) == (
        b"EVERY 1000", t0 + 4000, t0 + 3000, 3, 0)
    assert (s[b"misfire"], s[b"overlap"], s[b"priority"], s[b"payload"]) == (b"skip", b"allow", 7, b"ping")


def test_the_same_definition_changes_nothing_and_another_replaces_it(f):
    q = unique("idem")
    t0 = now(f)
    first = f.execute_command("QSCHEDULE", q, "s", "p", "EVERY", 500)
    advance(f, 500)
    assert f.execute_command("QSCHEDULE", q, "s", "p", "EVERY", 500) == t0 + 1000      # unchanged, next tick
    assert first == t0 + 500 and schedules(f, q)[b"s"][b"fired"] == 1
    assert f.execute_command("QSCHEDULE", q, "s", "other", "EVERY", 500) == t0 + 1000   # replaced, from now
    assert schedules(f, q)[b"s"][b"fired"] == 0 and schedules(f, q)[b"s"][b"payload"] == b"other"


def test_a_blocked_claimer_gets_the_job_of_a_tick(frozen_daemon, f):
    q = unique("wake")
    f.execute_command("QSCHEDULE", q, "s", "hello", "EVERY", 1000)
    waiting = BlockedClaim(frozen_daemon, q, "w", "BLOCK", 10_000)
    wait_blocked(f, q, 1)
    advance(f, 1000)
    assert [j[b"payload"] for j in waiting.result()] == [b"hello"]


# -- MISFIRE and OVERLAP ------------------------------------------------------------------------------

@pytest.mark.parametrize("misfire, fired, skipped, first_tick", [
    ("skip", 2, 3, 4000),       # ticks 1000-3000 are more than 1 s late: missed; 4000 and 5000 in time
    ("once", 3, 2, 3000),       # one job for the missed three (the latest), then the two in time
    ("all", 5, 0, 1000),
])
def test_misfire_decides_what_ticks_more_than_a_second_late_push(f, misfire, fired, skipped, first_tick):
    q = unique("mis")
    t0 = now(f)
    f.execute_command("QSCHEDULE", q, "s", "p", "EVERY", 1000, "MISFIRE", misfire)
    advance(f, 5000)
    got = ticks(f, q)
    assert len(got) == fired and got[0] == t0 + first_tick and got[-1] == t0 + 5000
    s = schedules(f, q)[b"s"]
    assert (s[b"fired"], s[b"skipped"], s[b"next"], s[b"misfire"]) == (fired, skipped, t0 + 6000, misfire.encode())


def test_misfire_all_acts_as_once_beyond_a_thousand_missed_ticks(f):
    q = unique("many")
    f.execute_command("QSCHEDULE", q, "s", "p", "EVERY", 10, "MISFIRE", "all")
    advance(f, 20_000)                      # 2000 ticks: 1899 more than 1 s late, 101 in time
    s = schedules(f, q)[b"s"]
    assert s[b"fired"] == 102 and s[b"skipped"] == 1898 and f.execute_command("QLEN", q) == 102


def test_overlap_skip_waits_while_the_last_job_is_live(f):
    q = unique("over")
    t0 = now(f)
    f.execute_command("QSCHEDULE", q, "s", "p", "EVERY", 1000, "OVERLAP", "skip")
    advance(f, 1000)
    advance(f, 1000)                        # the first job is still ready: skipped
    assert ticks(f, q) == [t0 + 1000]
    job = claim(f, q, "w", "LEASE", 60_000)[0]
    advance(f, 1000)                        # in flight: skipped
    assert f.execute_command("QACK", q, job[b"lease"]) == 1
    advance(f, 1000)
    assert ticks(f, q) == [t0 + 4000]
    s = schedules(f, q)[b"s"]
    assert (s[b"fired"], s[b"skipped"], s[b"overlap"]) == (2, 2, b"skip")


# -- CRON and time zones ------------------------------------------------------------------------------

def test_cron_in_a_zone_across_spring_forward_and_fall_back(f):
    """New York, 2027: 02:30 does not exist on 14 March (fires at 03:00, the
    next time that does); 01:30 happens twice on 7 November (fires once)."""
    start = ms(datetime(2027, 3, 13, 12, 0, tzinfo=NEW_YORK))
    if now(f) < start:
        assert f.execute_command("DEBUG", "CLOCK", "FREEZE", start) == b"OK"
    q = unique("dst")
    spring = ms(datetime(2027, 3, 14, 3, 0, tzinfo=NEW_YORK))
    assert f.execute_command("QSCHEDULE", q, "night", "x", "CRON", "30 2 * * *", "TZ", "America/New_York") == spring
    advance(f, spring - now(f))
    assert ticks(f, q) == [spring]
    assert schedules(f, q)[b"night"][b"next"] == ms(datetime(2027, 3, 15, 2, 30, tzinfo=NEW_YORK))

    q2 = unique("fall")
    f.execute_command("DEBUG", "CLOCK", "FREEZE", ms(datetime(2027, 11, 6, 12, 0, tzinfo=NEW_YORK)))
    first = ms(datetime(2027, 11, 7, 1, 30, fold=0, tzinfo=NEW_YORK))      # 01:30 EDT
    assert f.execute_command("QSCHEDULE", q2, "late", "x", "CRON", "30 1 * * *", "TZ", "America/New_York") == first
    advance(f, first - now(f))
    advance(f, 3_600_000)                                                   # 01:30 EST, the second time
    assert ticks(f, q2) == [first]
    assert schedules(f, q2)[b"late"][b"next"] == ms(datetime(2027, 11, 8, 1, 30, tzinfo=NEW_YORK))


def test_cron_aliases_and_utc_by_default(f):
    q = unique("alias")
    t = now(f)
    hour = 3_600_000
    assert f.execute_command("QSCHEDULE", q, "h", "x", "CRON", "@hourly") == (t // hour + 1) * hour
    assert schedules(f, q)[b"h"][b"spec"] == b"CRON @hourly"
    day = 24 * hour
    assert f.execute_command("QSCHEDULE", q, "d", "x", "CRON", "@daily") == (t // day + 1) * day


# -- removing, listing, restarts ---------------------------------------------------------------------

def test_qunschedule_and_qschedules(f):
    q = unique("un")
    f.execute_command("QSCHEDULE", q, "b", "x", "EVERY", 1000)
    f.execute_command("QSCHEDULE", q, "a", "x", "CRON", "*/5 * * * *", "TZ", "Europe/Paris")
    assert list(schedules(f, q)) == [b"a", b"b"]
    assert schedules(f, q)[b"a"][b"spec"] == b"CRON */5 * * * * TZ Europe/Paris"
    assert f.execute_command("QUNSCHEDULE", q, "b") == 1
    assert f.execute_command("QUNSCHEDULE", q, "b") == 0
    assert f.execute_command("QUNSCHEDULE", unique("nosuch"), "b") == 0
    advance(f, 2000)
    assert f.execute_command("QLEN", q) == 0
    assert error_text(f, "QSCHEDULES", "nosuch-queue") == "NOQUEUE no such queue 'nosuch-queue'"


def test_dropping_the_queue_drops_its_schedules(f):
    q = unique("drop")
    f.execute_command("QSCHEDULE", q, "s", "x", "EVERY", 1000)
    f.execute_command("QDROP", q, "FORCE")
    advance(f, 5000)
    assert f.execute_command("EXISTS", q) == 0
    f.execute_command("QCREATE", q)
    assert f.execute_command("QSCHEDULES", q) == []


@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_schedules_and_their_counts_last_across_kill_9(tmp_path, snapshot):
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = d.client(protocol=2)
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        t0 = now(c)
        c.execute_command("QSCHEDULE", "jobs", "s", "x", "EVERY", 1000, "MISFIRE", "once", "OVERLAP", "skip")
        advance(c, 1000)
        advance(c, 1000)
        before = schedules(c, "jobs")
        if snapshot:
            bgsave(c)
        d.kill()
        d.restart()
        c = d.client(protocol=2)
        assert schedules(c, "jobs") == before
        assert ticks(c, "jobs") == [t0 + 1000]
        assert as_map(c.execute_command("QGET", "jobs", 1))[b"schedule"] == b"s"
    finally:
        d.kill()


def test_ticks_missed_while_the_daemon_was_down_follow_misfire(tmp_path):
    """The clock is frozen, the daemon stopped, and started again with the
    clock moved on (FREEZE at a later moment is logged): the start fires
    the missed ticks before anything is served."""
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = d.client(protocol=2)
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        t0 = now(c)
        c.execute_command("QSCHEDULE", "q", "all", "x", "EVERY", 1000, "MISFIRE", "all")
        c.execute_command("QSCHEDULE", "q", "once", "y", "EVERY", 1000, "MISFIRE", "once")
        d.stop()
        d.start()
        c = d.client(protocol=2)
        c.execute_command("DEBUG", "CLOCK", "FREEZE", t0 + 10_500)
        by_payload = {}
        for j in (as_map(x) for x in c.execute_command("QPEEK", "q", "COUNT", 100)):
            by_payload.setdefault(j[b"payload"], []).append(j[b"tick"])
        assert by_payload[b"x"] == [t0 + 1000 * i for i in range(1, 11)]
        assert by_payload[b"y"] == [t0 + 9000, t0 + 10_000]       # 9000 missed (stands for 1000-9000), 10000 in time
    finally:
        d.kill()


# -- bad input ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (("s", "p", "CRON", "61 * * * *"), "invalid CRON expression '61 * * * *': Bad minute"),
    (("s", "p", "CRON", "* * *"), "invalid CRON expression '* * *': Wrong number of fields"),
    (("s", "p", "CRON", "@reboot"), "invalid CRON expression '@reboot': Wrong number of fields"),
    (("s", "p", "CRON", "0 * * * *", "TZ", "Mars/Olympus"), "unknown time zone 'Mars/Olympus'"),
    (("s", "p", "EVERY", 0), "EVERY must be between 1 and 9007199254740992"),
    (("s", "p", "EVERY", "soon"), "value is not an integer or out of range"),
    (("s", "p", "EVERY", 10, "CRON", "* * * * *"), "syntax error"),
    (("s", "p", "CRON", "* * * * *", "EVERY", 10), "syntax error"),
    (("s", "p", "PRIORITY", 3), "QSCHEDULE needs CRON expr or EVERY ms (one of them)"),
    (("s", "p", "EVERY", 10, "TZ", "UTC"), "TZ goes with CRON"),
    (("s", "p", "EVERY", 10, "MISFIRE", "never"), "MISFIRE must be skip, once or all"),
    (("s", "p", "EVERY", 10, "OVERLAP", "maybe"), "OVERLAP must be allow or skip"),
    (("s", "p", "EVERY", 10, "PRIORITY", 10), "PRIORITY must be between 0 and 9"),
    (("x" * 201, "p", "EVERY", 10), "schedule name must be 1 to 200 bytes"),
    (("", "p", "EVERY", 10), "schedule name must be 1 to 200 bytes"),
    (("s", "p", "EVERY"), "wrong number of arguments for 'qschedule' command"),
    (("s", "p", "EVERY", 10, "PRIORITY"), "syntax error"),
])
def test_bad_schedules_are_refused_and_change_nothing(f, args, message):
    q = unique("bads")
    assert error_text(f, "QSCHEDULE", q, *args) == message
    assert f.execute_command("EXISTS", q) == 0                  # not even the queue
    f.execute_command("QSCHEDULE", q, "s", "kept", "EVERY", 100_000)
    before = f.execute_command("QSCHEDULES", q)
    assert error_text(f, "QSCHEDULE", q, *args) == message
    assert f.execute_command("QSCHEDULES", q) == before


def test_metrics_count_fires_and_skips_per_schedule(tmp_path):
    d = http_daemon(tmp_path / "data", env=DEBUG_ENV)
    try:
        c = d.client(protocol=2)
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        c.execute_command("QSCHEDULE", "reports", "hourly", "x", "EVERY", 1000, "OVERLAP", "skip")
        advance(c, 1000)
        advance(c, 1000)
        status, _type, text = http_get(d, "/metrics")
        assert status == 200
        assert 'leaseq_schedule_fired_total{queue="reports",schedule="hourly"} 1.0' in text
        assert 'leaseq_schedule_skipped_total{queue="reports",schedule="hourly"} 1.0' in text
    finally:
        d.kill()
