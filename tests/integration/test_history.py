"""The per-minute history (docs/operations.md, "History"): what QHISTORY
counts for a known workload in both flavours, that it survives SIGTERM and
kill -9 up to the last whole minute and a torn tail of its file, that it
goes past history-hours, QHISTORY's FROM/TO and errors, and
GET /api/queues/<q>/history with the page's auth.  Time is the daemon's
DEBUG clock, frozen and moved by the test: a minute closes when the clock
passes its end."""

from __future__ import annotations

import os

import pytest
import redis
from harness import (
    DEBUG_ENV,
    Daemon,
    advance,
    as_map,
    claim,
    error_text,
    now,
    unique,
)
from harness_http import PASSWORDS, acl_daemon, http_daemon, http_get, request

MINUTE = 60_000
FIELDS = ("pushed", "claimed", "acked", "nacked", "dead", "cancelled", "expired", "wait_p50", "wait_p95",
          "wait_p99", "run_p50", "run_p95", "run_p99", "ready", "in_flight")


def near(got: int, want: int) -> bool:
    """A percentile as the history reports it: its bucket's middle, within 1/16."""
    return abs(got - want) <= want / 16


def minutes(c, q, *args) -> list[dict]:
    return [as_map(m, str_keys=True) for m in c.execute_command("QHISTORY", q, *args)]


def to_next_minute(c, plus: int = 0) -> int:
    """Move the frozen clock to the start of the next minute (and ``plus`` ms): returns that minute's start."""
    t = now(c)
    start = t - t % MINUTE + MINUTE
    advance(c, start - t + plus)
    return start


def frozen(d) -> redis.Redis:
    c = d.client(protocol=2)
    c.execute_command("DEBUG", "CLOCK", "FREEZE")
    return c


@pytest.fixture(scope="module", params=["compiled", "pure"])
def flavoured(request, tmp_path_factory):
    """A daemon of each flavour (LEASEQ_PURE=1: the pure one): the history is counted where both pass."""
    env = dict(DEBUG_ENV, **({"LEASEQ_PURE": "1"} if request.param == "pure" else {}))
    d = Daemon(tmp_path_factory.mktemp(request.param) / "data", env=env).start()
    flavour = d.client().execute_command("INFO", "server").get("leaseq_flavour", "")
    assert (flavour == "pure") == (request.param == "pure"), flavour
    yield d
    d.kill()


@pytest.fixture(scope="module")
def hd(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("history") / "data", env=DEBUG_ENV).start()
    yield d
    d.kill()


def test_counts_and_percentiles_of_a_known_workload(flavoured):
    """Ten jobs: five claimed after 1 s, five after 4 s; acked 300 ms or
    2.5 s after their claims, one nacked; one cancelled, one nacked DEAD,
    one whose lease ran out.  Single QPUSH/QCLAIM/QACK take the plain
    transitions' short ways: the counts are the same either way."""
    c = frozen(flavoured)
    q = unique("known")
    c.execute_command("QCREATE", q, "LEASE", 60_000)
    start = to_next_minute(c, 1000)
    for i in range(10):
        c.execute_command("QPUSH", q, f"job-{i}")
    advance(c, 1000)
    early = [claim(c, q)[0] for _ in range(5)]            # single claims: the short way
    advance(c, 300)
    for job in early[:4]:
        assert c.execute_command("QACK", q, job[b"lease"]) == 1
    c.execute_command("QNACK", q, early[4][b"lease"], "DELAY", 600_000)
    advance(c, 2700)
    late = claim(c, q, "w", "COUNT", 5)                  # waited 4 s
    advance(c, 2500)
    assert c.execute_command("QACK", q, *[j[b"lease"] for j in late]) == 5
    cancel = c.execute_command("QPUSH", q, "extra-0")
    c.execute_command("QPUSHMANY", q, 2, "extra-1", "extra-2")   # one to die, one whose lease runs out
    c.execute_command("QCANCEL", q, cancel)
    job = claim(c, q)[0]
    c.execute_command("QNACK", q, job[b"lease"], "DEAD", "ERROR", "boom")
    c.execute_command("QCLAIM", q, "w", "LEASE", 1000)
    advance(c, 1500)
    c.execute_command("QINFO", q)                        # looks: the lease that ran out is noticed (EXPIRE)
    assert minutes(c, q) == []                           # the minute is still open
    advance(c, start + MINUTE - now(c))
    got = minutes(c, q)
    assert len(got) == 1, got
    m = got[0]
    assert m["minute"] == start
    # (QNACK ... DEAD is a nack too, as QINFO's nacked counts it)
    assert {f: m[f] for f in FIELDS[:7]} == {"pushed": 13, "claimed": 12, "acked": 9, "nacked": 2, "dead": 1,
                                             "cancelled": 1, "expired": 1}
    info = as_map(c.execute_command("QINFO", q), str_keys=True)
    assert (info["pushed"], info["acked"], info["nacked"], info["dead_lettered"], info["lease_expired"]) == (
        m["pushed"], m["acked"], m["nacked"], m["dead"], m["expired"])
    # waits: 5 of 1000 ms, 5 of 4000 ms, and the two extras claimed as soon as pushed (0 ms): 12 first claims
    assert near(m["wait_p50"], 1000) and near(m["wait_p95"], 4000) and near(m["wait_p99"], 4000), m
    # runs: 4 of 300 ms, 5 of 2500 ms
    assert near(m["run_p50"], 2500) and near(m["run_p95"], 2500) and near(m["run_p99"], 2500), m
    assert (m["ready"], m["in_flight"]) == (1, 0), m     # the lease that ran out is ready again; the nacked is delayed
    # RESP3: the same minute as a map
    c3 = flavoured.client(protocol=3)
    [m3] = c3.execute_command("QHISTORY", q)
    assert {k.decode(): v for k, v in m3.items()} == m


def test_a_minute_of_single_claims_has_its_run_percentiles_apart(hd):
    """p50 and p99 of a spread: 90 runs of 100 ms and 10 of 5 s."""
    c = frozen(hd)
    q = unique("spread")
    c.execute_command("QCREATE", q, "LEASE", 60_000)
    start = to_next_minute(c, 10)
    c.execute_command("QPUSHMANY", q, 100, *[b"x"] * 100)
    fast = claim(c, q, "w", "COUNT", 90)
    slow = claim(c, q, "w", "COUNT", 10)
    advance(c, 100)
    c.execute_command("QACK", q, *[j[b"lease"] for j in fast])
    advance(c, 4900)
    c.execute_command("QACK", q, *[j[b"lease"] for j in slow])
    advance(c, start + MINUTE - now(c))
    [m] = minutes(c, q)
    assert near(m["run_p50"], 100) and near(m["run_p95"], 5000) and near(m["run_p99"], 5000), m
    assert m["wait_p50"] == m["wait_p99"] == 0, m        # claimed in the ms they were pushed


def test_a_memory_queue_has_its_counts_and_depth_but_no_claims(hd):
    """A memory queue's job records are never logged: its minutes come from
    its counters and its depth alone."""
    c = frozen(hd)
    q = unique("memory")
    c.execute_command("QCREATE", q, "DURABILITY", "memory")
    start = to_next_minute(c, 5)
    c.execute_command("QPUSHMANY", q, 3, b"a", b"b", b"c")
    jobs = claim(c, q, "w", "COUNT", 2)
    advance(c, 100)
    c.execute_command("QACK", q, jobs[0][b"lease"])
    to_next_minute(c)
    [m] = minutes(c, q)
    assert m["minute"] == start
    assert (m["pushed"], m["acked"], m["ready"], m["in_flight"]) == (3, 1, 1, 1), m
    assert (m["claimed"], m["wait_p99"], m["run_p99"]) == (0, 0, 0), m


def test_qhistory_from_and_to_pick_minutes(hd):
    c = frozen(hd)
    q = unique("range")
    starts = []
    for i in range(3):
        starts.append(to_next_minute(c, 5))
        c.execute_command("QPUSHMANY", q, i + 1, *[b"x"] * (i + 1))
    to_next_minute(c)
    assert [m["pushed"] for m in minutes(c, q)] == [1, 2, 3]
    assert [m["minute"] for m in minutes(c, q, "FROM", starts[1])] == starts[1:]
    assert [m["minute"] for m in minutes(c, q, "TO", starts[1])] == starts[:2]        # TO is included
    assert [m["minute"] for m in minutes(c, q, "from", starts[1] - 1, "to", starts[1] + 1)] == [starts[1]]
    assert minutes(c, q, "FROM", starts[2], "TO", starts[0]) == []                      # FROM after TO: none
    assert minutes(c, q, "FROM", starts[2] + 1) == []
    # a queue that exists with no minute yet: an empty array; a dropped one keeps its minutes
    fresh = unique("fresh")
    c.execute_command("QCREATE", fresh)
    assert minutes(c, fresh) == []
    c.execute_command("QDROP", q, "FORCE")
    assert [m["pushed"] for m in minutes(c, q)] == [1, 2, 3]


def test_qhistory_errors(hd):
    c = hd.client(protocol=2)
    q = unique("errs")
    c.execute_command("QCREATE", q)
    assert error_text(c, "QHISTORY") == "wrong number of arguments for 'qhistory' command"
    assert error_text(c, "QHISTORY", unique("nothing")).startswith("NOQUEUE no such queue")
    assert error_text(c, "QHISTORY", q, "FROM", "soon") == "value is not an integer or out of range"
    assert error_text(c, "QHISTORY", q, "FROM", "-1") == f"FROM must be between 0 and {1 << 53}"
    assert error_text(c, "QHISTORY", q, "TO", str(1 << 60)) == f"TO must be between 0 and {1 << 53}"
    assert error_text(c, "QHISTORY", q, "FROM") == "syntax error"
    assert error_text(c, "QHISTORY", q, "FROM", "1", "FROM", "2") == "syntax error"
    assert error_text(c, "QHISTORY", q, "SINCE", "1") == "syntax error"
    assert error_text(c, "QHISTORY", "bad name").startswith("invalid queue name")
    assert c.execute_command("QLEN", q) == 0                 # nothing changed


def test_history_survives_sigterm_and_kill9(tmp_path):
    """SIGTERM writes the open minute too (and the next run's part of that
    minute is added to it); kill -9 keeps every whole minute and loses
    only the open one."""
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = frozen(d)
        q = unique("durable")
        first = to_next_minute(c, 5)
        c.execute_command("QPUSHMANY", q, 4, *[b"x"] * 4)
        second = to_next_minute(c, 5)                    # closes the first
        c.execute_command("QPUSHMANY", q, 2, b"a", b"b")
        d.stop()                                         # SIGTERM: the open second minute is written
        d.start()
        c = d.client(protocol=2)
        assert [(m["minute"], m["pushed"]) for m in minutes(c, q)] == [(first, 4), (second, 2)]
        c.execute_command("QPUSH", q, "c")               # the clock is still frozen in the second minute
        to_next_minute(c, 5)
        assert [(m["minute"], m["pushed"]) for m in minutes(c, q)] == [(first, 4), (second, 3)]   # merged
        third = now(c) - now(c) % MINUTE
        c.execute_command("QPUSHMANY", q, 5, *[b"y"] * 5)
        to_next_minute(c, 5)                             # the third closes: on disk
        c.execute_command("QPUSH", q, "lost with the open minute")
        d.kill()
        d.start()
        c = d.client(protocol=2)
        assert [(m["minute"], m["pushed"]) for m in minutes(c, q)] == [(first, 4), (second, 3), (third, 5)]
        assert minutes(c, q)[-1]["ready"] == 4 + 3 + 5
    finally:
        d.kill()


def test_a_torn_tail_is_ignored_and_cut_at_the_next_write(tmp_path):
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = frozen(d)
        q = unique("torn")
        first = to_next_minute(c, 5)
        c.execute_command("QPUSH", q, "x")
        to_next_minute(c, 5)
        d.kill()
        folder = tmp_path / "data" / "history"
        [name] = os.listdir(folder)
        with open(folder / name, "ab") as f:
            f.write(b"\x01\x02\x03 half a record")       # a write cut short by the crash
        d.start()
        c = d.client(protocol=2)
        assert [(m["minute"], m["pushed"]) for m in minutes(c, q)] == [(first, 1)]
        assert "after its last whole record ignored" in d.log()
        later = now(c) - now(c) % MINUTE
        c.execute_command("QPUSHMANY", q, 2, b"a", b"b")
        to_next_minute(c, 5)
        d.kill()
        d.start()                                        # the torn bytes were cut: the later minute reads
        c = d.client(protocol=2)
        got = [(m["minute"], m["pushed"]) for m in minutes(c, q)]
        assert got[0] == (first, 1) and (later, 2) in got, got
    finally:
        d.kill()


def test_minutes_past_history_hours_go_and_their_files_too(tmp_path):
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = frozen(d)
        assert c.execute_command("CONFIG", "GET", "history-hours") == [b"history-hours", b"72"]
        c.execute_command("CONFIG", "SET", "history-hours", "1")
        q = unique("pruned")
        old = to_next_minute(c, 5)
        c.execute_command("QPUSH", q, "old")
        to_next_minute(c, 5)
        folder = tmp_path / "data" / "history"
        files_then = set(os.listdir(folder))
        assert len(files_then) == 1
        advance(c, 2 * 3_600_000)                        # two hours on: the old minute is past the hour kept
        c.execute_command("QPUSH", q, "new")
        new = now(c) - now(c) % MINUTE
        to_next_minute(c, 5)
        got = [m["minute"] for m in minutes(c, q)]
        assert old not in got and new in got, got
        assert not files_then & set(os.listdir(folder))  # the old hour's file is deleted
        # history-hours 0: off, nothing counted, nothing kept
        c.execute_command("CONFIG", "SET", "history-hours", "0")
        c.execute_command("QPUSH", q, "uncounted")
        to_next_minute(c, 5)
        assert minutes(c, q) == []
        assert os.listdir(folder) == []
        c.execute_command("CONFIG", "SET", "history-hours", "72")
        for bad in ("-1", "a day", "9000"):
            assert "history-hours" in error_text(c, "CONFIG", "SET", "history-hours", bad), bad
        assert c.execute_command("CONFIG", "GET", "history-hours") == [b"history-hours", b"72"]
    finally:
        d.kill()


# -- GET /api/queues/<q>/history -------------------------------------------------------------------

@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    d = acl_daemon(tmp_path_factory.mktemp("secured-history"), **DEBUG_ENV)
    yield d
    d.kill()


def test_api_history_is_json_behind_the_page_auth(secured):
    import json
    d = secured
    c = d.client(protocol=2, password=PASSWORDS["LEASEQ_REQUIREPASS"])
    c.execute_command("DEBUG", "CLOCK", "FREEZE")
    q = unique("api")
    start = to_next_minute(c, 5)
    c.execute_command("QPUSHMANY", q, 3, b"a", b"b", b"c")
    to_next_minute(c, 5)
    user = ("viewer", "viewpass")
    status, _h, _body = request(d, f"/api/queues/{q}/history")
    assert status == 401
    status, _h, _body = request(d, f"/api/queues/{q}/history", user=("viewer", "wrong"))
    assert status == 401
    status, headers, body = request(d, f"/api/queues/{q}/history", user=user)
    assert status == 200 and headers["Content-Type"] == "application/json"
    got = json.loads(body)
    assert got["queue"] == q and got["fields"] == list(FIELDS)
    assert [(m["minute"], m["pushed"], m["ready"]) for m in got["minutes"]] == [(start, 3, 3)]
    assert got["minutes"][0] == {k: v for k, v in
                                 as_map(c.execute_command("QHISTORY", q)[0], str_keys=True).items()}
    status, _h, body = request(d, f"/api/queues/{q}/history?from={start + 1}", user=user)
    assert status == 200 and json.loads(body)["minutes"] == []
    status, _h, body = request(d, f"/api/queues/{q}/history?from=0&to={start}", user=user)
    assert [m["minute"] for m in json.loads(body)["minutes"]] == [start]
    for bad in ("from=soon", "to=-5", f"to={1 << 60}"):
        status, _h, body = request(d, f"/api/queues/{q}/history?{bad}", user=user)
        assert status == 400 and "must be a time in ms" in json.loads(body)["error"], bad
    status, _h, body = request(d, f"/api/queues/{unique('none')}/history", user=user)
    assert status == 404 and "no such queue" in json.loads(body)["error"]
    status, _h, _body = request(d, f"/api/queues/{q}/history", raw_body=b"x", user=user)
    assert status == 405


def test_api_history_without_a_password_needs_none(tmp_path):
    d = http_daemon(tmp_path / "data", env=DEBUG_ENV)
    try:
        c = frozen(d)
        q = unique("open")
        c.execute_command("QPUSH", q, "x")
        to_next_minute(c, 5)
        status, ctype, body = http_get(d, f"/api/queues/{q}/history")
        assert status == 200 and ctype == "application/json" and '"pushed":1' in body
    finally:
        d.kill()
