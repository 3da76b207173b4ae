"""docs/semantics.md §3 (queues, producing, claiming, completing, inspecting)
and the §4 rules they carry, against the real daemon as implemented now.

Most tests share one daemon and each uses queue names of its own (``q``);
tests that need server settings or a restart start their own daemon.
Times are checked against the daemon's own figures where it gives them (a
claim's moment is ``deadline - lease``), and against the local clock, which
is the daemon's clock too, with a few ms of slack.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis

from harness import (Daemon, as_map, claim, claim_one, error_text, no_retry_client, qget, qinfo, unique,
                     wait_blocked, wait_for)

# -- helpers -----------------------------------------------------------------------------------

@pytest.fixture
def other(daemon):
    """A second connection (another worker / producer)."""
    c = daemon.client(protocol=2)
    yield c
    c.close()


def now_ms() -> int:
    return int(time.time() * 1000)


class Claimer(threading.Thread):
    """A blocking QCLAIM on a connection of its own, in a thread."""

    def __init__(self, daemon: Daemon, *args) -> None:
        super().__init__(daemon=True)
        self.client = daemon.client(protocol=2)
        self.args = args
        self.reply = None
        self.error = None
        self.elapsed = None
        self.start()

    def run(self) -> None:
        t0 = time.monotonic()
        try:
            self.reply = self.client.execute_command("QCLAIM", *self.args)
        except redis.RedisError as e:
            self.error = e
        finally:
            self.elapsed = time.monotonic() - t0
            self.client.close()

    def result(self, timeout: float = 10.0):
        self.join(timeout)
        assert not self.is_alive(), f"QCLAIM {self.args} still blocked after {timeout} s"
        return self.reply


# -- QCREATE (docs/semantics.md §3.1) ---------------------------------------------------------------

DEFAULTS = {
    b"lease": 30000, b"maxdeliveries": 0, b"deadletter": None, b"backoff_base": 1000,
    b"backoff_exponent": b"2.0", b"backoff_jitter": 1000, b"maxlen": 0, b"expire": 0,
    b"retain_completed": 0, b"retain_dead": 604800000, b"window": 0, b"durability": b"fsync",
}


def test_qcreate_defaults_are_shown_by_qinfo(r, q):
    assert r.execute_command("QCREATE", q) == b"OK"
    info = qinfo(r, q)
    assert info[b"name"] == q.encode()
    assert {k: info[k] for k in DEFAULTS} == DEFAULTS


def test_qcreate_every_option_is_stored_and_shown_by_qinfo(r, q):
    dlq = q + ":dead"
    assert r.execute_command(
        "QCREATE", q, "LEASE", "5000", "MAXDELIVERIES", "3", "DEADLETTER", dlq, "BACKOFF", "200", "1.5", "50",
        "MAXLEN", "10", "EXPIRE", "60000", "RETAIN-COMPLETED", "1000", "RETAIN-DEAD", "2000", "WINDOW", "10",
        "DURABILITY", "async") == b"OK"
    info = qinfo(r, q)
    assert {k: info[k] for k in DEFAULTS} == {
        b"lease": 5000, b"maxdeliveries": 3, b"deadletter": dlq.encode(), b"backoff_base": 200,
        b"backoff_exponent": b"1.5", b"backoff_jitter": 50, b"maxlen": 10, b"expire": 60000,
        b"retain_completed": 1000, b"retain_dead": 2000, b"window": 10, b"durability": b"async",
    }


@pytest.mark.parametrize("given,stored", [("100", 100), ("1", 100), ("0", 100), ("86400000", 86400000),
                                          ("999999999999", 86400000), ("12345", 12345)])
def test_qcreate_lease_is_clamped_to_100_86400000(r, q, given, stored):
    assert r.execute_command("QCREATE", q, "LEASE", given) == b"OK"
    assert qinfo(r, q)[b"lease"] == stored


@pytest.mark.parametrize("option,value,message", [
    ("LEASE", "-1", "LEASE must be between 100 and 86400000"),
    ("LEASE", "abc", "value is not an integer or out of range"),
    ("MAXDELIVERIES", "-1", "MAXDELIVERIES must be between"),
    ("MAXDELIVERIES", "1.5", "value is not an integer or out of range"),
    ("MAXLEN", "-5", "MAXLEN must be between"),
    ("EXPIRE", "-1", "EXPIRE must be between"),
    ("RETAIN-COMPLETED", "-1", "RETAIN-COMPLETED must be between"),
    ("RETAIN-DEAD", "x", "value is not an integer or out of range"),
    ("WINDOW", "-1", "WINDOW must be between"),
    ("WINDOW", "60001", "WINDOW must be between"),
    ("DURABILITY", "sometimes", "DURABILITY must be fsync, async or memory"),
    ("DEADLETTER", "bad name", "invalid queue name"),
])
def test_qcreate_bad_option_value_is_refused_and_creates_nothing(r, q, option, value, message):
    assert message in error_text(r, "QCREATE", q, option, value)
    assert error_text(r, "QINFO", q) == f"NOQUEUE no such queue '{q}'"


@pytest.mark.parametrize("backoff,message", [
    (("-1", "2", "0"), "BACKOFF base-ms must be between"),
    (("100", "x", "0"), "BACKOFF exponent is not a valid float"),
    (("100", "11", "0"), "BACKOFF exponent must be between 0 and 10"),
    (("100", "nan", "0"), "BACKOFF exponent is not a valid float"),
    (("100", "2", "-1"), "BACKOFF jitter-ms must be between"),
    (("100", "2"), "syntax error"),
])
def test_qcreate_backoff_takes_base_exponent_jitter(r, q, backoff, message):
    assert message in error_text(r, "QCREATE", q, "BACKOFF", *backoff)
    assert r.execute_command("QCREATE", q, "BACKOFF", "100", "3", "7") == b"OK"
    info = qinfo(r, q)
    assert (info[b"backoff_base"], info[b"backoff_exponent"], info[b"backoff_jitter"]) == (100, b"3.0", 7)


def test_qcreate_deadletter_must_differ_from_the_queue(r, q):
    assert error_text(r, "QCREATE", q, "DEADLETTER", q) == f"DEADLETTER of queue '{q}' must be another queue"
    assert "NOQUEUE" in error_text(r, "QINFO", q)


@pytest.mark.parametrize("durability", ["fsync", "async", "memory", "MEMORY", "Async"])
def test_qcreate_durability_choices(r, q, durability):
    assert r.execute_command("QCREATE", q, "DURABILITY", durability) == b"OK"
    assert qinfo(r, q)[b"durability"] == durability.lower().encode()


def test_qcreate_same_configuration_again_is_ok(r, q):
    assert r.execute_command("QCREATE", q, "LEASE", "5000", "MAXLEN", "3") == b"OK"
    assert r.execute_command("QCREATE", q, "maxlen", "3", "lease", "5000") == b"OK"   # order, case
    assert r.execute_command("QCREATE", q, "LEASE", "5000", "MAXLEN", "3", "WINDOW", "0") == b"OK"  # a default


def test_qcreate_different_configuration_is_exists(r, q):
    r.execute_command("QCREATE", q, "LEASE", "5000")
    assert error_text(r, "QCREATE", q, "LEASE", "6000") == f"EXISTS queue '{q}' exists with another configuration"
    assert error_text(r, "QCREATE", q).startswith("EXISTS")
    assert qinfo(r, q)[b"lease"] == 5000


def test_qcreate_of_an_auto_created_queue_with_defaults_is_ok(r, q):
    r.execute_command("QPUSH", q, "x")
    assert r.execute_command("QCREATE", q) == b"OK"
    assert r.execute_command("QLEN", q) == 1


@pytest.mark.parametrize("args", [("BOGUS", "1"), ("LEASE",), ("LEASE", "100", "LEASE", "200"), ("FORCE",)],
                         ids=["unknown", "missing-value", "repeated", "other-command-option"])
def test_qcreate_unknown_repeated_or_incomplete_option_is_syntax_error(r, q, args):
    assert error_text(r, "QCREATE", q, *args) == "syntax error"
    assert "NOQUEUE" in error_text(r, "QINFO", q)


@pytest.mark.parametrize("name", [b"", b"has space", b"tab\there", b"ctl\x01", b"nl\n", b"\xff\xfe",
                                  b"x" * 201], ids=["empty", "space", "tab", "control", "newline",
                                                     "non-ascii", "201-bytes"])
def test_qcreate_bad_queue_names_are_refused(r, name):
    assert error_text(r, "QCREATE", name).startswith("invalid queue name")
    assert error_text(r, "QPUSH", name, "x").startswith("invalid queue name")


def test_qcreate_200_byte_printable_name_is_fine(r):
    name = (unique("n") + "~!@#$%^&*()_+{}|:<>?" * 10)[:200]
    assert len(name) == 200
    assert r.execute_command("QCREATE", name) == b"OK"
    assert qinfo(r, name)[b"name"] == name.encode()


# -- QALTER ------------------------------------------------------------------------------------

def test_qalter_changes_options_and_keeps_the_rest(r, q):
    r.execute_command("QCREATE", q, "LEASE", "5000", "MAXLEN", "7")
    assert r.execute_command("QALTER", q, "LEASE", "9000", "BACKOFF", "10", "1", "0") == b"OK"
    info = qinfo(r, q)
    assert info[b"lease"] == 9000 and info[b"maxlen"] == 7 and info[b"backoff_base"] == 10
    assert r.execute_command("QCREATE", q, "LEASE", "9000", "MAXLEN", "7", "BACKOFF", "10", "1", "0") == b"OK"


def test_qalter_lease_applies_to_the_next_claims(r, q):
    r.execute_command("QCREATE", q, "LEASE", "5000")
    r.execute_command("QPUSH", q, "x")
    r.execute_command("QALTER", q, "LEASE", "20000")
    before = now_ms()
    job = claim_one(r, q)
    assert before + 20000 <= job[b"deadline"] <= now_ms() + 20000


def test_qalter_between_fsync_and_async_is_allowed(r, q):
    r.execute_command("QCREATE", q)
    assert r.execute_command("QALTER", q, "DURABILITY", "async") == b"OK"
    assert r.execute_command("QALTER", q, "DURABILITY", "fsync") == b"OK"
    assert qinfo(r, q)[b"durability"] == b"fsync"


@pytest.mark.parametrize("start,target", [("fsync", "memory"), ("async", "memory"), ("memory", "fsync"),
                                          ("memory", "async")])
def test_qalter_durability_between_memory_and_logged_is_refused(r, q, start, target):
    r.execute_command("QCREATE", q, "DURABILITY", start)
    assert error_text(r, "QALTER", q, "DURABILITY", target) == (
        f"DURABILITY of queue '{q}' cannot change between memory and fsync/async")
    assert qinfo(r, q)[b"durability"] == start.encode()


def test_qalter_validates_like_qcreate(r, q):
    r.execute_command("QCREATE", q)
    assert error_text(r, "QALTER", q, "BOGUS", "1") == "syntax error"
    assert error_text(r, "QALTER", q, "DEADLETTER", q).endswith("must be another queue")
    assert "MAXLEN must be between" in error_text(r, "QALTER", q, "MAXLEN", "-1")
    assert qinfo(r, q)[b"maxlen"] == 0


def test_qalter_unknown_queue_is_noqueue_and_does_not_create(r, q):
    assert error_text(r, "QALTER", q, "LEASE", "1000") == f"NOQUEUE no such queue '{q}'"
    assert "NOQUEUE" in error_text(r, "QINFO", q)


# -- QDROP ---------------------------------------------------------------------------------------

def test_qdrop_empty_queue_returns_0_and_removes_it(r, q):
    r.execute_command("QCREATE", q)
    assert r.execute_command("QDROP", q) == 0
    assert "NOQUEUE" in error_text(r, "QINFO", q)
    assert r.execute_command("QLIST", "MATCH", q) == []


def test_qdrop_with_jobs_needs_force(r, q):
    r.execute_command("QPUSHMANY", q, "3", "a", "b", "c")
    assert error_text(r, "QDROP", q) == f"NOTEMPTY queue '{q}' has 3 jobs; use QDROP {q} FORCE"
    assert r.execute_command("QLEN", q) == 3


def test_qdrop_force_returns_jobs_removed_in_every_state(r, q):
    r.execute_command("QPUSHMANY", q, "3", "a", "b", "c")
    r.execute_command("QPUSH", q, "later", "DELAY", "60000")
    token = claim_one(r, q)[b"lease"]
    assert r.execute_command("QDROP", q, "FORCE") == 4
    assert "NOQUEUE" in error_text(r, "QINFO", q)
    assert error_text(r, "QACK", q, token) == f"NOQUEUE no such queue '{q}'"


def test_qdrop_force_wakes_a_blocked_claimer_with_an_error(daemon, r, q):
    r.execute_command("QPUSH", q, "x")
    claim_one(r, q, "holder")
    waiter = Claimer(daemon, q, "waiter", "BLOCK", "10000")
    wait_blocked(r, q, 1)
    assert r.execute_command("QDROP", q, "FORCE") == 1
    waiter.result()
    assert waiter.reply is None and isinstance(waiter.error, redis.ResponseError)
    assert str(waiter.error) == f"CLOSED queue '{q}' was dropped while waiting"
    assert waiter.elapsed < 5


def test_qdrop_unknown_queue_and_bad_option(r, q):
    assert error_text(r, "QDROP", q) == f"NOQUEUE no such queue '{q}'"
    r.execute_command("QCREATE", q)
    assert error_text(r, "QDROP", q, "NOW") == "syntax error"


def test_qdrop_then_recreate_starts_an_empty_queue_with_new_ids(r, q):
    first = r.execute_command("QPUSH", q, "x")
    r.execute_command("QDROP", q, "FORCE")
    second = r.execute_command("QPUSH", q, "y")
    assert r.execute_command("QLEN", q) == 1
    assert second > first     # ids are never reused (docs/semantics.md §1.2)


# -- QLIST ---------------------------------------------------------------------------------------

@pytest.fixture
def listed(r):
    prefix = unique("list")
    names = [f"{prefix}:{s}" for s in ("b", "a", "jobs:2", "c", "jobs:1", "jobs:10")]
    for n in names:
        r.execute_command("QCREATE", n)
    return prefix, sorted(n.encode() for n in names)


def test_qlist_match_is_ascending(r, listed):
    prefix, names = listed
    assert r.execute_command("QLIST", "MATCH", prefix + ":*") == names


def test_qlist_match_glob(r, listed):
    prefix, _ = listed
    assert r.execute_command("QLIST", "MATCH", prefix + ":jobs:*") == [
        f"{prefix}:jobs:1".encode(), f"{prefix}:jobs:10".encode(), f"{prefix}:jobs:2".encode()]
    assert r.execute_command("QLIST", "MATCH", prefix + ":jobs:?") == [
        f"{prefix}:jobs:1".encode(), f"{prefix}:jobs:2".encode()]


def test_qlist_after_and_count_page_through(r, listed):
    prefix, names = listed
    pages, after = [], None
    for _ in range(10):
        args = ["QLIST", "MATCH", prefix + ":*", "COUNT", "4"] + (["AFTER", after] if after else [])
        page = r.execute_command(*args)
        assert len(page) <= 4
        pages += page
        if len(page) < 4:
            break
        after = page[-1]
    assert pages == names
    assert r.execute_command("QLIST", "MATCH", prefix + ":*", "AFTER", names[2], "COUNT", "2") == names[3:5]


def test_qlist_count_limits(r):
    assert "COUNT must be between 1 and 1000" in error_text(r, "QLIST", "COUNT", "0")
    assert "COUNT must be between 1 and 1000" in error_text(r, "QLIST", "COUNT", "1001")
    assert isinstance(r.execute_command("QLIST", "COUNT", "1000"), list)
    assert error_text(r, "QLIST", "BOGUS") == "syntax error"


def test_qlist_default_count_is_100(own):
    d = own()
    c = d.client(protocol=2)
    p = c.pipeline(transaction=False)
    for i in range(120):
        p.execute_command("QCREATE", f"many:{i:03d}")
    p.execute()
    first = c.execute_command("QLIST")
    assert first == [f"many:{i:03d}".encode() for i in range(100)]
    assert c.execute_command("QLIST", "AFTER", first[-1]) == [f"many:{i:03d}".encode() for i in range(100, 120)]
    c.close()


# -- QINFO / QLEN --------------------------------------------------------------------------------

def test_qinfo_counters_follow_the_jobs(r, q):
    r.execute_command("QPUSHMANY", q, "5", "a", "b", "c", "d", "e")
    r.execute_command("QPUSH", q, "later", "DELAY", "60000")
    jobs = claim(r, q, "w", "COUNT", "3")
    assert r.execute_command("QACK", q, jobs[0][b"lease"]) == 1
    assert r.execute_command("QNACK", q, jobs[1][b"lease"], "DELAY", "60000") == 1
    info = qinfo(r, q)
    assert {k: info[k] for k in (b"ready", b"delayed", b"in_flight", b"dead", b"completed", b"pushed",
                                 b"acked", b"nacked", b"lease_expired", b"dead_lettered", b"duplicates",
                                 b"consumers_blocked")} == {
        b"ready": 2, b"delayed": 2, b"in_flight": 1, b"dead": 0, b"completed": 0, b"pushed": 6,
        b"acked": 1, b"nacked": 1, b"lease_expired": 0, b"dead_lettered": 0, b"duplicates": 0,
        b"consumers_blocked": 0}


def test_qinfo_counts_an_expired_lease(r, q):
    r.execute_command("QPUSH", q, "x")
    first = claim_one(r, q, "w1", "LEASE", "100")
    again = claim_one(r, q, "w2", "BLOCK", "3000")
    assert again[b"id"] == first[b"id"]
    info = qinfo(r, q)
    assert info[b"lease_expired"] == 1 and info[b"in_flight"] == 1 and info[b"ready"] == 0


def test_qinfo_oldest_ready_age(r, q):
    r.execute_command("QCREATE", q)
    assert qinfo(r, q)[b"oldest_ready_age_ms"] == 0
    job_id = r.execute_command("QPUSH", q, "old", "PRIORITY", "1")
    r.execute_command("QPUSH", q, "new", "PRIORITY", "9")
    enqueued = qget(r, q, job_id)[b"enqueued_at"]
    age = qinfo(r, q)[b"oldest_ready_age_ms"]
    assert 0 <= age <= now_ms() - enqueued + 5


def test_qinfo_and_qlen_of_unknown_queue_are_noqueue(r, q):
    assert error_text(r, "QINFO", q) == f"NOQUEUE no such queue '{q}'"
    assert error_text(r, "QLEN", q) == f"NOQUEUE no such queue '{q}'"


def test_qlen_counts_ready_jobs_only(r, q):
    r.execute_command("QPUSHMANY", q, "3", "a", "b", "c")
    r.execute_command("QPUSH", q, "later", "DELAY", "60000")
    assert r.execute_command("QLEN", q) == 3
    claim_one(r, q)
    assert r.execute_command("QLEN", q) == 2


# -- QPUSH (docs/semantics.md §3.2) -----------------------------------------------------------------

def test_qpush_returns_increasing_ids_and_stores_the_payload(r, q):
    payload = bytes(range(256))
    ids = [r.execute_command("QPUSH", q, payload) for _ in range(5)]
    assert ids == sorted(set(ids)) and all(isinstance(i, int) for i in ids)
    job = qget(r, q, ids[0])
    before = now_ms()
    assert job[b"payload"] == payload and job[b"state"] == b"ready" and job[b"priority"] == 5
    assert job[b"deliveries"] == 0 and before - 5000 <= job[b"enqueued_at"] <= before


def test_qpush_empty_payload(r, q):
    job_id = r.execute_command("QPUSH", q, "")
    assert claim_one(r, q)[b"payload"] == b""
    assert job_id == 1


@pytest.mark.parametrize("priority", ["0", "9", "5"])
def test_qpush_priority_0_to_9(r, q, priority):
    job_id = r.execute_command("QPUSH", q, "x", "PRIORITY", priority)
    assert qget(r, q, job_id)[b"priority"] == int(priority)


@pytest.mark.parametrize("priority,message", [("10", "PRIORITY must be between 0 and 9"),
                                              ("-1", "PRIORITY must be between 0 and 9"),
                                              ("high", "value is not an integer or out of range")])
def test_qpush_priority_out_of_range_is_refused_and_pushes_nothing(r, q, priority, message):
    r.execute_command("QCREATE", q)
    assert error_text(r, "QPUSH", q, "x", "PRIORITY", priority) == message
    assert qinfo(r, q)[b"pushed"] == 0


def test_qpush_delay_makes_the_job_delayed_until_visible_at(r, q):
    before = now_ms()
    job_id = r.execute_command("QPUSH", q, "x", "DELAY", "60000")
    after = now_ms()
    job = qget(r, q, job_id)
    assert job[b"state"] == b"delayed"
    assert before + 60000 <= job[b"visible_at"] <= after + 60000
    assert r.execute_command("QLEN", q) == 0
    assert claim(r, q) == []


def test_qpush_at_future_epoch_is_delayed_until_exactly_then(r, q):
    at = now_ms() + 3_600_000
    job_id = r.execute_command("QPUSH", q, "x", "AT", str(at))
    job = qget(r, q, job_id)
    assert job[b"state"] == b"delayed" and job[b"visible_at"] == at


def test_qpush_at_past_epoch_is_ready_now(r, q):
    job_id = r.execute_command("QPUSH", q, "x", "AT", "1000")
    assert qget(r, q, job_id)[b"state"] == b"ready"
    assert claim_one(r, q)[b"id"] == job_id


def test_qpush_delay_0_is_ready_now(r, q):
    job_id = r.execute_command("QPUSH", q, "x", "DELAY", "0")
    assert qget(r, q, job_id)[b"state"] == b"ready"


@pytest.mark.parametrize("options,message", [
    (("DELAY", "100", "AT", "5"), "syntax error"),
    (("AT", "5", "DELAY", "100"), "syntax error"),
    (("DELAY", "-1"), "DELAY must be between"),
    (("DELAY",), "syntax error"),
    (("PRIORITY", "1", "PRIORITY", "2"), "syntax error"),
    (("NOSUCH", "1"), "syntax error"),
])
def test_qpush_bad_options(r, q, options, message):
    assert message in error_text(r, "QPUSH", q, "x", *options)


def test_qpush_maxlen_full_error_and_nothing_pushed(r, q):
    r.execute_command("QCREATE", q, "MAXLEN", "2")
    r.execute_command("QPUSH", q, "a")
    r.execute_command("QPUSH", q, "b")
    assert error_text(r, "QPUSH", q, "c") == f"FULL queue '{q}' is at MAXLEN (2 live jobs)"
    info = qinfo(r, q)
    assert info[b"ready"] == 2 and info[b"pushed"] == 2


def test_qpush_maxlen_counts_in_flight_and_delayed_and_frees_on_ack(r, q):
    r.execute_command("QCREATE", q, "MAXLEN", "2")
    r.execute_command("QPUSH", q, "a")
    r.execute_command("QPUSH", q, "later", "DELAY", "60000")
    token = claim_one(r, q)[b"lease"]
    assert error_text(r, "QPUSH", q, "c").startswith("FULL ")
    assert r.execute_command("QACK", q, token) == 1
    assert isinstance(r.execute_command("QPUSH", q, "c"), int)


def test_qpush_payload_over_max_payload_is_toobig(own):
    d = own(env={"LEASEQ_MAX_PAYLOAD": "100"})
    c = d.client(protocol=2)
    assert c.execute_command("QPUSH", "big", b"x" * 100) == 1
    assert error_text(c, "QPUSH", "big", b"x" * 101) == "TOOBIG payload of 101 bytes exceeds max-payload (100 bytes)"
    assert error_text(c, "QPUSHMANY", "big", "2", b"ok", b"y" * 500).startswith("TOOBIG payload of 500 bytes")
    assert qinfo(c, "big")[b"pushed"] == 1
    assert error_text(c, "QPUSH", "fresh-queue", b"z" * 101).startswith("TOOBIG")
    assert c.execute_command("QLIST") == [b"big"]          # the refused push created nothing
    c.close()


# -- QPUSHMANY -------------------------------------------------------------------------------------

def test_qpushmany_returns_consecutive_ids_in_order(r, q):
    ids = r.execute_command("QPUSHMANY", q, "4", "a", "b", "c", "d")
    assert ids == list(range(ids[0], ids[0] + 4))
    assert [qget(r, q, i)[b"payload"] for i in ids] == [b"a", b"b", b"c", b"d"]


def test_qpushmany_options_apply_to_every_job(r, q):
    ids = r.execute_command("QPUSHMANY", q, "3", "a", "b", "c", "PRIORITY", "8", "DELAY", "60000")
    jobs = [qget(r, q, i) for i in ids]
    assert {j[b"priority"] for j in jobs} == {8}
    assert {j[b"state"] for j in jobs} == {b"delayed"}


def test_qpushmany_is_all_or_none_at_maxlen(r, q):
    r.execute_command("QCREATE", q, "MAXLEN", "5")
    r.execute_command("QPUSHMANY", q, "3", "a", "b", "c")
    assert error_text(r, "QPUSHMANY", q, "3", "d", "e", "f").startswith(f"FULL queue '{q}' is at MAXLEN")
    assert r.execute_command("QLEN", q) == 3 and qinfo(r, q)[b"pushed"] == 3
    assert len(r.execute_command("QPUSHMANY", q, "2", "d", "e")) == 2


@pytest.mark.parametrize("args,message", [
    (("3", "a", "b"), "wrong number of arguments for 'qpushmany' command"),
    (("0", "a"), "count must be between 1"),
    (("-2", "a", "b"), "count must be between 1"),
    (("two", "a", "b"), "value is not an integer or out of range"),
    (("2", "a", "b", "PRIORITY", "12"), "PRIORITY must be between 0 and 9"),
    (("1", "a", "BOGUS"), "syntax error"),
])
def test_qpushmany_bad_arguments_push_nothing(r, q, args, message):
    r.execute_command("QCREATE", q)
    assert message in error_text(r, "QPUSHMANY", q, *args)
    assert qinfo(r, q)[b"pushed"] == 0


# -- QCLAIM (docs/semantics.md §3.3) ----------------------------------------------------------------

JOB_FIELDS = {b"id", b"payload", b"lease", b"deadline", b"deliveries", b"priority", b"enqueued_at"}


def test_qclaim_job_map_fields(r, q):
    job_id = r.execute_command("QPUSH", q, b"\x00body", "PRIORITY", "7")
    before = now_ms()
    job = claim_one(r, q, "w1", "LEASE", "5000")
    after = now_ms()
    assert set(job) == JOB_FIELDS
    assert job[b"id"] == job_id and job[b"payload"] == b"\x00body" and job[b"priority"] == 7
    assert job[b"deliveries"] == 1
    assert before + 5000 <= job[b"deadline"] <= after + 5000
    assert job[b"enqueued_at"] <= after
    assert isinstance(job[b"lease"], bytes) and b" " not in job[b"lease"]


def test_qclaim_job_map_in_resp3_is_a_map(daemon, q):
    c = daemon.client(protocol=3)
    c.execute_command("QPUSH", q, "x")
    [job] = c.execute_command("QCLAIM", q, "w")
    assert isinstance(job, dict) and set(job) == JOB_FIELDS
    assert c.execute_command("QCLAIM", q, "w", "BLOCK", "10") == []
    c.close()


def test_qclaim_count_defaults_to_1(r, q):
    r.execute_command("QPUSHMANY", q, "3", "a", "b", "c")
    assert len(claim(r, q)) == 1
    assert len(claim(r, q, "w", "COUNT", "5")) == 2      # fewer than COUNT: near-empty, not an error
    assert claim(r, q, "w", "COUNT", "5") == []


def test_qclaim_count_max_1000(r, q):
    r.execute_command("QPUSHMANY", q, "1001", *[str(i) for i in range(1001)])
    assert "COUNT must be between 1 and 1000" in error_text(r, "QCLAIM", q, "w", "COUNT", "1001")
    assert "COUNT must be between 1 and 1000" in error_text(r, "QCLAIM", q, "w", "COUNT", "0")
    assert len(claim(r, q, "w", "COUNT", "1000")) == 1000
    assert r.execute_command("QLEN", q) == 1


def test_qclaim_lease_option_sets_the_deadline_and_is_clamped(r, q):
    r.execute_command("QPUSHMANY", q, "2", "a", "b")
    before = now_ms()
    short = claim_one(r, q, "w", "LEASE", "1")          # clamped to 100
    after = now_ms()
    assert before + 100 <= short[b"deadline"] <= after + 100
    before = now_ms()
    long = claim_one(r, q, "w", "LEASE", "999999999999")   # clamped to 86400000
    assert before + 86400000 <= long[b"deadline"] <= now_ms() + 86400000


def test_qclaim_default_lease_is_the_queues(r, q):
    r.execute_command("QCREATE", q, "LEASE", "7000")
    r.execute_command("QPUSH", q, "x")
    before = now_ms()
    job = claim_one(r, q)
    assert before + 7000 <= job[b"deadline"] <= now_ms() + 7000


@pytest.mark.parametrize("options,message", [
    (("BLOCK", "-1"), "BLOCK must be between"),
    (("BLOCK", "x"), "value is not an integer or out of range"),
    (("LEASE", "-5"), "LEASE must be between"),
    (("COUNT",), "syntax error"),
    (("SESSIONS",), "syntax error"),
])
def test_qclaim_bad_options(r, q, options, message):
    assert message in error_text(r, "QCLAIM", q, "w", *options)


def test_qclaim_order_is_priority_then_ascending_id(r, q):
    a = r.execute_command("QPUSH", q, "a", "PRIORITY", "5")
    b = r.execute_command("QPUSH", q, "b", "PRIORITY", "5")
    c = r.execute_command("QPUSH", q, "c", "PRIORITY", "9")
    d = r.execute_command("QPUSH", q, "d", "PRIORITY", "0")
    e = r.execute_command("QPUSH", q, "e", "PRIORITY", "9")
    one_by_one = [claim_one(r, q)[b"id"] for _ in range(5)]
    assert one_by_one == [c, e, a, b, d]


def test_qclaim_order_serves_nacked_jobs_before_fresh_ones(r, q):
    """Within a priority, a job ready again (here: nacked) beats a never-delivered
    job with a smaller id; a higher priority still beats both."""
    fresh = r.execute_command("QPUSH", q, "fresh", "DELAY", "150")
    again = r.execute_command("QPUSH", q, "again")
    job = claim_one(r, q)
    assert job[b"id"] == again
    assert r.execute_command("QNACK", q, job[b"lease"], "DELAY", "0") == 1
    wait_for(lambda: qget(r, q, fresh)[b"state"] == b"ready", what="delayed job due")
    top = r.execute_command("QPUSH", q, "top", "PRIORITY", "9")
    assert [j[b"id"] for j in claim(r, q, "w", "COUNT", "10")] == [top, again, fresh]


def test_qclaim_order_serves_expired_lease_jobs_before_fresh_ones(r, q):
    fresh = r.execute_command("QPUSH", q, "fresh", "DELAY", "150")
    again = r.execute_command("QPUSH", q, "again")
    assert claim_one(r, q, "w1", "LEASE", "100")[b"id"] == again
    wait_for(lambda: qget(r, q, fresh)[b"state"] == b"ready" and qget(r, q, again)[b"state"] == b"ready",
             what="lease expiry and delayed job due")
    assert [j[b"id"] for j in claim(r, q, "w2", "COUNT", "10")] == [again, fresh]


def test_qclaim_block_times_out_with_an_empty_array(r, q):
    t0 = time.monotonic()
    assert r.execute_command("QCLAIM", q, "w", "BLOCK", "150") == []
    elapsed = time.monotonic() - t0
    assert 0.14 <= elapsed < 10      # never early; the upper bound only catches a claim that never ends
    assert qinfo(r, q)[b"consumers_blocked"] == 0


def test_qclaim_block_wakes_on_push_from_another_connection(daemon, r, q):
    r.execute_command("QCREATE", q)
    waiter = Claimer(daemon, q, "w", "BLOCK", "10000")
    wait_blocked(r, q, 1)
    job_id = r.execute_command("QPUSH", q, "wake up")
    [job] = waiter.result()
    job = as_map(job)
    assert job[b"id"] == job_id and job[b"payload"] == b"wake up"
    assert waiter.elapsed < 5
    assert qget(r, q, job_id)[b"state"] == b"in_flight"


def test_qclaim_block_0_waits_until_a_push(daemon, r, q):
    r.execute_command("QCREATE", q)
    waiter = Claimer(daemon, q, "w", "BLOCK", "0")
    wait_blocked(r, q, 1)
    r.execute_command("QPUSH", q, "x")
    assert len(waiter.result()) == 1


def test_blocked_claimer_is_woken_by_an_expiring_lease(other, r, q):
    """docs/semantics.md §4.4: a blocked claimer gets the job when its lease
    runs out, never before, and by the daemon's timer, long before its own
    BLOCK would end.  The claim's moment is read off the daemon's clock (the
    new deadline minus its lease).  The 50 ms bound itself is checked in
    test_semantics.py (rule 4), exactly on the DEBUG clock and on the
    median of several rounds on the running one, where a stall cannot fail it."""
    r.execute_command("QPUSH", q, "x")
    first = claim_one(r, q, "w1", "LEASE", "200")
    again = claim_one(other, q, "w2", "LEASE", "1000", "BLOCK", "20000")
    claimed_at = again[b"deadline"] - 1000          # the daemon's clock at the new claim
    assert again[b"id"] == first[b"id"] and again[b"deliveries"] == 2
    assert first[b"deadline"] <= claimed_at < first[b"deadline"] + 15_000, \
        f"claimed {claimed_at - first[b'deadline']} ms after the deadline"


def test_blocked_claimer_is_woken_when_a_lease_is_shortened_by_qextend(daemon, r, q):
    """docs/semantics.md §4.4 and §3.3 ('at its moment, not at the next poll'): the
    deadline that counts is the one QEXTEND set, also when it is earlier."""
    r.execute_command("QPUSH", q, "x")
    job = claim_one(r, q, "w1", "LEASE", "20000")
    waiter = Claimer(daemon, q, "w2", "LEASE", "1000", "BLOCK", "25000")
    wait_blocked(r, q, 1)
    [new_deadline] = r.execute_command("QEXTEND", q, job[b"lease"], "LEASE", "200")
    [again] = waiter.result(timeout=30)
    claimed_at = as_map(again)[b"deadline"] - 1000
    # woken by the shortened deadline, not the old one, 19.8 s later (a margin no stall reaches)
    assert new_deadline <= claimed_at < job[b"deadline"], \
        f"claimed {claimed_at - new_deadline} ms after the shortened deadline (old one {job[b'deadline']})"


def test_blocked_claimer_is_woken_when_a_nacked_job_becomes_due(daemon, r, q):
    """docs/semantics.md §3.3: a due delayed job wakes the waiter at its moment — also one
    made delayed by QNACK ... DELAY while the claimer was already waiting."""
    r.execute_command("QPUSH", q, "x")
    job = claim_one(r, q, "w1", "LEASE", "20000")
    waiter = Claimer(daemon, q, "w2", "LEASE", "1000", "BLOCK", "25000")
    wait_blocked(r, q, 1)
    assert r.execute_command("QNACK", q, job[b"lease"], "DELAY", "200") == 1
    visible_at = qget(r, q, job[b"id"])[b"visible_at"]
    [again] = waiter.result(timeout=30)
    claimed_at = as_map(again)[b"deadline"] - 1000
    # woken when the nack's delay ends, not when the old lease would have, 19.8 s later
    assert visible_at <= claimed_at < job[b"deadline"], \
        f"claimed {claimed_at - visible_at} ms after visible_at (the old lease ended {job[b'deadline']})"


def test_blocked_claimer_on_a_delayed_job_wakes_when_due_never_before(r, q):
    """docs/semantics.md §4.7 and §3.3: not claimable before visible_at; woken at that moment."""
    job_id = r.execute_command("QPUSH", q, "later", "DELAY", "300", "PRIORITY", "9")
    visible_at = qget(r, q, job_id)[b"visible_at"]
    job = claim_one(r, q, "w", "LEASE", "1000", "BLOCK", "20000")
    claimed_at = job[b"deadline"] - 1000
    assert job[b"id"] == job_id
    # never before visible_at; woken by the daemon's timer, long before the BLOCK ends
    assert visible_at <= claimed_at < visible_at + 15_000


def test_delayed_job_is_never_claimable_before_visible_at_whatever_its_priority(r, q):
    delayed = r.execute_command("QPUSH", q, "urgent-later", "PRIORITY", "9", "DELAY", "60000")
    ready = r.execute_command("QPUSH", q, "low-now", "PRIORITY", "0")
    assert [j[b"id"] for j in claim(r, q, "w", "COUNT", "10")] == [ready]
    assert qget(r, q, delayed)[b"state"] == b"delayed"
    assert claim(r, q, "w", "BLOCK", "50") == []


def test_ten_blocked_claimers_share_a_qpushmany_of_50(daemon, r, q):
    """docs/semantics.md §3.3 fairness: jobs divided among the waiters, not first-come-takes-all."""
    r.execute_command("QCREATE", q)
    waiters = [Claimer(daemon, q, f"w{i}", "COUNT", "10", "BLOCK", "10000") for i in range(10)]
    wait_blocked(r, q, 10)
    ids = r.execute_command("QPUSHMANY", q, "50", *[f"job{i}" for i in range(50)])
    got = [[as_map(j)[b"id"] for j in w.result()] for w in waiters]
    sizes = [len(g) for g in got]
    assert all(s >= 1 for s in sizes), sizes
    assert sum(sizes) == 50 and max(sizes) - min(sizes) <= 1, sizes
    assert sorted(i for g in got for i in g) == ids
    assert qinfo(r, q)[b"in_flight"] == 50


def test_blocked_claimer_that_disconnects_gets_nothing_leased(daemon, r, q):
    r.execute_command("QCREATE", q)
    c = no_retry_client(daemon, socket_timeout=0.2)
    with pytest.raises(redis.TimeoutError):
        c.execute_command("QCLAIM", q, "gone", "BLOCK", "10000")
    c.close()
    wait_blocked(r, q, 0)
    job_id = r.execute_command("QPUSH", q, "x")
    assert qget(r, q, job_id)[b"state"] == b"ready"
    assert claim_one(r, q, "alive")[b"id"] == job_id


# -- QACK (docs/semantics.md §3.4) ------------------------------------------------------------------

def test_qack_counts_acked_jobs_and_removes_them(r, q):
    r.execute_command("QPUSHMANY", q, "3", "a", "b", "c")
    jobs = claim(r, q, "w", "COUNT", "3")
    assert r.execute_command("QACK", q, jobs[0][b"lease"], jobs[1][b"lease"]) == 2
    assert qget(r, q, jobs[0][b"id"]) is None
    assert qinfo(r, q)[b"acked"] == 2 and qinfo(r, q)[b"in_flight"] == 1


def test_qack_skips_stale_and_garbage_tokens(r, q):
    other_q = q + ":other"
    r.execute_command("QPUSHMANY", q, "2", "a", "b")
    r.execute_command("QPUSH", other_q, "z")
    foreign = claim_one(r, other_q)[b"lease"]
    t1, t2 = [j[b"lease"] for j in claim(r, q, "w", "COUNT", "2")]
    garbage = ["zzz", "", "1", "ffffffffffffffffffffffff.1.1", "-1.2.3", "1.1.1.1", "\xff\xfe", "DELAY", foreign]
    assert r.execute_command("QACK", q, *garbage, t1, t1, *garbage) == 1
    assert r.execute_command("QACK", q, t1) == 0          # acking twice is harmless
    assert r.execute_command("QACK", q, t2, t1) == 1
    assert qinfo(r, q)[b"acked"] == 2
    assert qget(r, other_q, 1)[b"state"] == b"in_flight"   # the foreign token was not applied


def test_qack_unknown_queue_is_noqueue_and_creates_nothing(r, q):
    assert error_text(r, "QACK", q, "1.1.1") == f"NOQUEUE no such queue '{q}'"
    assert "NOQUEUE" in error_text(r, "QINFO", q)


def test_qack_needs_a_token(r, q):
    assert error_text(r, "QACK", q) == "wrong number of arguments for 'qack' command"


# -- QNACK ----------------------------------------------------------------------------------------

def test_qnack_delay_makes_the_job_delayed(r, q):
    r.execute_command("QPUSH", q, "x")
    job = claim_one(r, q)
    before = now_ms()
    assert r.execute_command("QNACK", q, job[b"lease"], "DELAY", "60000") == 1
    after = now_ms()
    got = qget(r, q, job[b"id"])
    assert got[b"state"] == b"delayed"
    assert before + 60000 <= got[b"visible_at"] <= after + 60000
    assert got[b"deliveries"] == 1                # a nack does not count a delivery


def test_qnack_delay_0_makes_it_ready_at_once(r, q):
    r.execute_command("QPUSH", q, "x")
    job = claim_one(r, q)
    assert r.execute_command("QNACK", q, job[b"lease"], "DELAY", "0") == 1
    assert qget(r, q, job[b"id"])[b"state"] == b"ready"
    assert r.execute_command("QLEN", q) == 1
    again = claim_one(r, q)
    assert again[b"id"] == job[b"id"] and again[b"deliveries"] == 2 and again[b"lease"] != job[b"lease"]


def test_qnack_error_is_stored_as_last_error(r, q):
    r.execute_command("QPUSH", q, "x")
    job = claim_one(r, q)
    assert r.execute_command("QNACK", q, job[b"lease"], "DELAY", "0", "ERROR", "boom: disk full") == 1
    assert qget(r, q, job[b"id"])[b"last_error"] == b"boom: disk full"
    again = claim_one(r, q)
    assert again[b"last_error"] == b"boom: disk full"
    # a nack without ERROR keeps the last one; a new ERROR replaces it
    r.execute_command("QNACK", q, again[b"lease"], "DELAY", "0")
    assert qget(r, q, job[b"id"])[b"last_error"] == b"boom: disk full"
    third = claim_one(r, q)
    r.execute_command("QNACK", q, third[b"lease"], "ERROR", "second", "DELAY", "0")
    assert qget(r, q, job[b"id"])[b"last_error"] == b"second"


def test_qnack_without_delay_applies_the_queues_backoff(r, q):
    """base x deliveries^exponent + random(0, jitter): 100 x 1^3 then 100 x 2^3."""
    r.execute_command("QCREATE", q, "BACKOFF", "100", "3", "50")
    r.execute_command("QPUSH", q, "x")
    for deliveries, base_delay in ((1, 100), (2, 800)):
        job = claim_one(r, q, "w", "BLOCK", "3000")
        assert job[b"deliveries"] == deliveries
        before = now_ms()
        assert r.execute_command("QNACK", q, job[b"lease"]) == 1
        after = now_ms()
        got = qget(r, q, job[b"id"])
        assert got[b"state"] == b"delayed"
        assert before + base_delay <= got[b"visible_at"] <= after + base_delay + 50, \
            (deliveries, got[b"visible_at"] - before)


def test_qnack_default_backoff_is_1s_plus_jitter(r, q):
    r.execute_command("QPUSH", q, "x")
    job = claim_one(r, q)
    before = now_ms()
    r.execute_command("QNACK", q, job[b"lease"])
    visible_at = qget(r, q, job[b"id"])[b"visible_at"]
    assert before + 1000 <= visible_at <= now_ms() + 2000


def test_qnack_counts_only_live_tokens(r, q):
    r.execute_command("QPUSHMANY", q, "2", "a", "b")
    t1, t2 = [j[b"lease"] for j in claim(r, q, "w", "COUNT", "2")]
    r.execute_command("QACK", q, t2)
    assert r.execute_command("QNACK", q, t1, t2, "garbage", t1, "DELAY", "0") == 1
    assert r.execute_command("QNACK", q, t1, "DELAY", "0") == 0     # already released
    assert qinfo(r, q)[b"nacked"] == 1


@pytest.mark.parametrize("args,message", [
    (("DELAY", "0"), "wrong number of arguments for 'qnack' command"),
    (("T", "DELAY", "-1"), "DELAY must be between"),
    (("T", "DELAY"), "syntax error"),
    (("T", "ERROR"), "syntax error"),
    (("T", "DELAY", "1", "DELAY", "2"), "syntax error"),
])
def test_qnack_bad_arguments(r, q, args, message):
    r.execute_command("QCREATE", q)
    assert message in error_text(r, "QNACK", q, *args)


def test_qnack_unknown_queue_is_noqueue(r, q):
    assert error_text(r, "QNACK", q, "1.1.1") == f"NOQUEUE no such queue '{q}'"
    assert "NOQUEUE" in error_text(r, "QINFO", q)


# -- QEXTEND ----------------------------------------------------------------------------------------

def test_qextend_sets_deadline_to_now_plus_lease(r, q):
    r.execute_command("QPUSH", q, "x")
    job = claim_one(r, q, "w", "LEASE", "1000")
    before = now_ms()
    [deadline] = r.execute_command("QEXTEND", q, job[b"lease"], "LEASE", "5000")
    after = now_ms()
    assert before + 5000 <= deadline <= after + 5000
    got = qget(r, q, job[b"id"])
    assert got[b"deadline"] == deadline and got[b"deliveries"] == 1     # QEXTEND is not a delivery


def test_qextend_does_not_add(r, q):
    r.execute_command("QPUSH", q, "x")
    token = claim_one(r, q, "w", "LEASE", "5000")[b"lease"]
    t0 = time.time()
    [d1] = r.execute_command("QEXTEND", q, token, "LEASE", "5000")
    [d2] = r.execute_command("QEXTEND", q, token, "LEASE", "5000")
    took_ms = (time.time() - t0) * 1000
    # each sets now + 5000, so they differ by the time between them (adding would make it 5000)
    assert 0 <= d2 - d1 <= took_ms + 2, (d1, d2, took_ms)


def test_qextend_default_is_the_queues_lease(r, q):
    r.execute_command("QCREATE", q, "LEASE", "20000")
    r.execute_command("QPUSH", q, "x")
    token = claim_one(r, q, "w", "LEASE", "1000")[b"lease"]
    before = now_ms()
    [deadline] = r.execute_command("QEXTEND", q, token)
    assert before + 20000 <= deadline <= now_ms() + 20000


def test_qextend_lease_is_clamped(r, q):
    r.execute_command("QPUSH", q, "x")
    token = claim_one(r, q)[b"lease"]
    before = now_ms()
    [deadline] = r.execute_command("QEXTEND", q, token, "LEASE", "1")
    assert before + 100 <= deadline <= now_ms() + 100


def test_qextend_gives_nil_for_stale_tokens(r, q):
    r.execute_command("QPUSHMANY", q, "2", "a", "b")
    t1, t2 = [j[b"lease"] for j in claim(r, q, "w", "COUNT", "2")]
    r.execute_command("QACK", q, t2)
    reply = r.execute_command("QEXTEND", q, t1, t2, "garbage", "LEASE", "5000")
    assert isinstance(reply[0], int) and reply[1:] == [None, None]


def test_qextend_unknown_queue_is_noqueue(r, q):
    assert error_text(r, "QEXTEND", q, "1.1.1") == f"NOQUEUE no such queue '{q}'"


def test_qextend_nil_in_resp3(daemon, q):
    c = daemon.client(protocol=3)
    c.execute_command("QCREATE", q)
    assert c.execute_command("QEXTEND", q, "1.1.1") == [None]
    c.close()


# -- QGET (docs/semantics.md §3.5) ------------------------------------------------------------------

def test_qget_state_follows_the_job(r, q):
    delayed = r.execute_command("QPUSH", q, "d", "DELAY", "60000")
    ready = r.execute_command("QPUSH", q, "r")
    assert qget(r, q, delayed)[b"state"] == b"delayed"
    assert qget(r, q, ready)[b"state"] == b"ready"
    job = claim_one(r, q, "worker-9")
    got = qget(r, q, ready)
    assert got[b"state"] == b"in_flight" and got[b"deadline"] == job[b"deadline"]
    assert got[b"consumer"] == b"worker-9" and got[b"deliveries"] == 1
    r.execute_command("QACK", q, job[b"lease"])
    assert qget(r, q, ready) is None


def test_qget_unknown_id_is_nil_and_bad_id_is_an_error(r, q):
    r.execute_command("QCREATE", q)
    assert qget(r, q, 424242) is None
    assert error_text(r, "QGET", q, "abc") == "value is not an integer or out of range"
    assert "NOQUEUE" in error_text(r, "QGET", q + ":missing", "1")


def test_qget_nil_in_resp3(daemon, q):
    c = daemon.client(protocol=3)
    c.execute_command("QCREATE", q)
    assert c.execute_command("QGET", q, "1") is None
    c.close()


# -- auto-create (docs/semantics.md §3.1) ------------------------------------------------------------

def test_qpush_and_qclaim_create_missing_queues_with_defaults(r, q):
    pushed, claimed = q + ":pushed", q + ":claimed"
    r.execute_command("QPUSH", pushed, "x")
    assert r.execute_command("QCLAIM", claimed, "w") == []
    assert r.execute_command("QLIST", "MATCH", q + ":*") == [claimed.encode(), pushed.encode()]
    for name in (pushed, claimed):
        info = qinfo(r, name)
        assert {k: info[k] for k in DEFAULTS} == DEFAULTS


@pytest.mark.parametrize("command", [("QACK", "1.1.1"), ("QNACK", "1.1.1"), ("QEXTEND", "1.1.1"), ("QGET", "1"),
                                     ("QINFO",), ("QLEN",), ("QALTER", "LEASE", "1000"), ("QDROP",)],
                         ids=lambda c: c[0])
def test_commands_other_than_push_and_claim_never_create(r, q, command):
    assert error_text(r, command[0], q, *command[1:]) == f"NOQUEUE no such queue '{q}'"
    assert r.execute_command("QLIST", "MATCH", q) == []


def test_auto_create_no_refuses_push_and_claim(own):
    d = own(env={"LEASEQ_AUTO_CREATE": "no"})
    c = d.client(protocol=2)
    assert error_text(c, "QPUSH", "missing", "x") == "NOQUEUE no such queue 'missing'"
    assert error_text(c, "QPUSHMANY", "missing", "1", "x") == "NOQUEUE no such queue 'missing'"
    assert error_text(c, "QCLAIM", "missing", "w", "BLOCK", "100") == "NOQUEUE no such queue 'missing'"
    assert c.execute_command("DBSIZE") == 0
    assert c.execute_command("QCREATE", "made") == b"OK"
    assert c.execute_command("QPUSH", "made", "x") == 1
    c.close()


# -- stale-token fencing (docs/semantics.md §4.8, §1.4) ---------------------------------------------------

def test_expired_lease_token_still_works_until_the_job_is_claimed_again(r, q):
    job_id = r.execute_command("QPUSH", q, "x")
    token = claim_one(r, q, "slow", "LEASE", "100")[b"lease"]
    wait_for(lambda: qget(r, q, job_id)[b"state"] == b"ready", what="lease expiry")
    assert r.execute_command("QACK", q, token) == 1          # nobody claimed it since: the late ack counts
    assert qget(r, q, job_id) is None


def test_stale_token_after_reclaim_is_skipped_by_ack_nack_extend(other, r, q):
    job_id = r.execute_command("QPUSH", q, "x")
    slow = claim_one(r, q, "slow", "LEASE", "100")
    fast = claim_one(other, q, "fast", "LEASE", "10000", "BLOCK", "3000")   # after the expiry
    assert fast[b"id"] == job_id and fast[b"lease"] != slow[b"lease"] and fast[b"deliveries"] == 2
    assert r.execute_command("QACK", q, slow[b"lease"]) == 0
    assert r.execute_command("QNACK", q, slow[b"lease"], "DELAY", "0", "ERROR", "late") == 0
    assert r.execute_command("QEXTEND", q, slow[b"lease"], "LEASE", "100") == [None]
    got = qget(r, q, job_id)
    assert got[b"state"] == b"in_flight" and got[b"consumer"] == b"fast"
    assert got[b"deadline"] == fast[b"deadline"] and b"last_error" not in got
    assert other.execute_command("QACK", q, fast[b"lease"]) == 1


def test_no_job_is_leased_twice_while_both_leases_are_unexpired(r, other, q):
    """docs/semantics.md §4.3, with two workers claiming everything."""
    r.execute_command("QPUSHMANY", q, "20", *[str(i) for i in range(20)])
    a = claim(r, q, "a", "COUNT", "15", "LEASE", "60000")
    b = claim(other, q, "b", "COUNT", "15", "LEASE", "60000")
    ids_a, ids_b = {j[b"id"] for j in a}, {j[b"id"] for j in b}
    assert len(ids_a) == 15 and len(ids_b) == 5 and not ids_a & ids_b
    assert claim(other, q, "c", "COUNT", "5") == []


# -- restart (durability of queue state) ------------------------------------------------------------------

def test_restart_keeps_fsync_jobs_deliveries_and_last_error(own):
    d = own()
    c = d.client(protocol=2)
    c.execute_command("QCREATE", "durable", "DURABILITY", "fsync", "LEASE", "60000")
    a, b, plain = c.execute_command("QPUSHMANY", "durable", "3", "a", "b", "c")
    delayed = c.execute_command("QPUSH", "durable", "later", "DELAY", "3600000", "PRIORITY", "8")
    for error in ("first failure", "second failure"):
        job = claim_one(c, "durable", "w")
        assert job[b"id"] == a
        c.execute_command("QNACK", "durable", job[b"lease"], "DELAY", "0", "ERROR", error)
    first, second = claim(c, "durable", "w", "COUNT", "2")
    assert (first[b"id"], first[b"deliveries"], second[b"id"]) == (a, 3, b)
    assert c.execute_command("QACK", "durable", second[b"lease"]) == 1
    assert c.execute_command("QNACK", "durable", first[b"lease"], "DELAY", "0") == 1
    ids = [a, b, plain, delayed]
    before = {i: qget(c, "durable", i) for i in ids}
    info_before = qinfo(c, "durable")
    c.close()
    d.stop()
    d.restart()
    c = d.client(protocol=2)
    after = {i: qget(c, "durable", i) for i in ids}
    assert before[b] is None and after[b] is None                    # acked stays acked
    assert after[a][b"deliveries"] == 3 and after[a][b"last_error"] == b"second failure"
    for i in (a, plain, delayed):
        assert after[i] == before[i], i
    info = qinfo(c, "durable")
    for field in (b"ready", b"delayed", b"in_flight", b"lease", b"durability"):
        assert info[field] == info_before[field], field
    assert c.execute_command("QPUSH", "durable", "after restart") > max(ids)   # ids never reused
    c.close()


def test_restart_keeps_in_flight_lease_on_fsync_queue(own):
    d = own()
    c = d.client(protocol=2)
    c.execute_command("QPUSH", "leased", "x")
    job = claim_one(c, "leased", "w", "LEASE", "600000")
    c.close()
    d.stop()
    d.restart()
    c = d.client(protocol=2)
    got = qget(c, "leased", job[b"id"])
    assert got[b"state"] == b"in_flight" and got[b"deadline"] == job[b"deadline"] and got[b"deliveries"] == 1
    assert c.execute_command("QACK", "leased", job[b"lease"]) == 1    # the token survives a clean restart
    c.close()


def test_restart_loses_memory_queue_jobs_but_keeps_the_queue(own):
    d = own()
    c = d.client(protocol=2)
    c.execute_command("QCREATE", "volatile", "DURABILITY", "memory", "LEASE", "4321")
    ids = c.execute_command("QPUSHMANY", "volatile", "3", "a", "b", "c")
    claim_one(c, "volatile")
    c.close()
    d.stop()
    d.restart()
    c = d.client(protocol=2)
    info = qinfo(c, "volatile")
    assert info[b"durability"] == b"memory" and info[b"lease"] == 4321
    assert (info[b"ready"], info[b"delayed"], info[b"in_flight"]) == (0, 0, 0)
    assert c.execute_command("QLEN", "volatile") == 0
    assert all(qget(c, "volatile", i) is None for i in ids)
    assert c.execute_command("QPUSH", "volatile", "new") > max(ids)   # ids never reused
    c.close()


@pytest.mark.parametrize("command", [
    ("QPUSH", "{q}", "x", "PRIORITY", "10"),
    ("QPUSHMANY", "{q}", "2", "a", "b", "NOSUCH"),
    ("QCLAIM", "{q}", "w", "COUNT", "0"),
    ("QWORK", "{q}", "w", "MAX", "0"),
    ("QWORK", "{q}", "w", "NOSUCH"),
])
def test_bad_arguments_never_auto_create_the_queue(r, q, command):
    with pytest.raises(redis.ResponseError):
        r.execute_command(*[a.format(q=q) for a in command])
    assert q.encode() not in r.execute_command("QLIST", "COUNT", 1000)
