"""QSCAN's filters (docs/commands.md, QSCAN): MATCH on the payload, META
field glob, ERROR on last_error, with STATE, all at once and in any order;
COUNT bounds the jobs looked at, so a walk returns every match exactly once
whatever the calls return; bad syntax is Redis's syntax error.  And QREDRIVE
ID with several ids, which the status page's bulk retry sends."""

from __future__ import annotations

import pytest
import redis

from harness import as_map, claim_one, qget, qscan_all, qscan_pages


def matches(c, q, *options) -> list[int]:
    """The ids of every job a whole QSCAN walk (COUNT 3) returns, in order."""
    return [job[b"id"] for job in qscan_all(c, q, *options, count=3)]


def fill(c, q) -> dict[str, list[int]]:
    """Jobs of two customers, some with META, two of them dead with errors."""
    ids = {}
    ids["a"] = c.execute_command("QPUSHMANY", q, 4, "order:a:1", "order:a:2", "order:a:3", "invoice:a",
                                 "META", "customer", "acme", "region", "eu")
    ids["b"] = c.execute_command("QPUSHMANY", q, 3, "order:b:1", "order:b:2", "other",
                                 "META", "customer", "globex")
    ids["plain"] = c.execute_command("QPUSHMANY", q, 2, "order:c:1", "order:c:2")
    for error in ("timeout after 30s", "PIL: cannot identify image"):
        job = claim_one(c, q, "w", "LEASE", 600_000)
        c.execute_command("QNACK", q, job[b"lease"], "ERROR", error, "DEAD")
    return ids


def test_each_filter_alone_and_together(r, q):
    ids = fill(r, q)
    a, b, plain = ids["a"], ids["b"], ids["plain"]
    assert matches(r, q, "MATCH", "order:*") == a[:3] + b[:2] + plain
    assert matches(r, q, "MATCH", "order:?:1") == [a[0], b[0], plain[0]]
    assert matches(r, q, "MATCH", "order:[ab]:2") == [a[1], b[1]]
    assert matches(r, q, "META", "customer", "acme") == a
    assert matches(r, q, "META", "customer", "*") == a + b          # a job without the field does not match
    assert matches(r, q, "META", "region", "e?") == a
    assert matches(r, q, "META", "nosuchfield", "*") == []
    assert matches(r, q, "ERROR", "*") == a[:2]                      # the two nacked first
    assert matches(r, q, "ERROR", "timeout*") == [a[0]]
    assert matches(r, q, "STATE", "dead", "ERROR", "PIL:*") == [a[1]]
    # several filters: all of them hold; the order of the options does not matter
    both = matches(r, q, "MATCH", "order:*", "META", "customer", "acme", "STATE", "ready")
    assert both == [a[2]]
    assert matches(r, q, "STATE", "ready", "META", "customer", "acme", "MATCH", "order:*") == both
    _, jobs = r.execute_command("QSCAN", q, 0, "COUNT", 100, "MATCH", "*:b:*")
    assert [as_map(j)[b"id"] for j in jobs] == b[:2]
    assert matches(r, q, "MATCH", "order:*", "ERROR", "timeout*", "META", "region", "eu") == [a[0]]
    # the jobs come back whole, with their META
    _, jobs = r.execute_command("QSCAN", q, 0, "META", "customer", "globex", "MATCH", "other", "COUNT", 100)
    job = as_map(jobs[0])
    assert (job[b"id"], job[b"payload"], job[b"state"]) == (b[2], b"other", b"ready")


def test_count_bounds_the_work_so_calls_may_return_nothing_but_the_walk_returns_each_match_once(r, q):
    pushed = r.execute_command("QPUSHMANY", q, 100, *[f"job-{i}" for i in range(100)])
    # one match in a hundred, at the end: the first calls look at 7 jobs each and return none
    cursor, jobs = r.execute_command("QSCAN", q, 0, "MATCH", "job-99", "COUNT", 7)
    assert jobs == [] and cursor != b"0"
    calls = list(qscan_pages(r, q, "MATCH", "job-99", count=7))
    assert [j[b"id"] for jobs in calls for j in jobs] == [pushed[99]] and len(calls) == 15
    # a walk with matches spread over many calls returns each exactly once, in id order
    calls = list(qscan_pages(r, q, "MATCH", "job-*7", count=6))
    assert [j[b"id"] for jobs in calls for j in jobs] == [pushed[i] for i in range(100) if str(i).endswith("7")]
    assert len(calls) == 17
    # jobs pushed during the walk do not disturb it; ones present throughout come back once
    cursor, seen = b"0", []
    for step in range(200):
        cursor, jobs = r.execute_command("QSCAN", q, cursor, "MATCH", "job-1*", "COUNT", 9)
        seen += [as_map(j)[b"id"] for j in jobs]
        if step % 3 == 0:
            r.execute_command("QPUSH", q, "not-a-match")
        if cursor == b"0":
            break
    assert seen == [pushed[i] for i in range(100) if str(i).startswith("1")]


def test_bad_syntax_and_bad_values_are_errors(r, q):
    r.execute_command("QPUSH", q, "x")
    for args in (("MATCH",), ("META", "customer"), ("META",), ("ERROR",), ("MATCH", "a", "MATCH", "b"),
                 ("FILTER", "x"), ("COUNT", 5, "MATCH")):
        with pytest.raises(redis.ResponseError, match="^syntax error$"):
            r.execute_command("QSCAN", q, 0, *args)
    with pytest.raises(redis.ResponseError, match="^STATE must be delayed"):
        r.execute_command("QSCAN", q, 0, "MATCH", "*", "STATE", "gone")
    with pytest.raises(redis.ResponseError, match="^a MATCH, META or ERROR pattern is at most 1024 bytes$"):
        r.execute_command("QSCAN", q, 0, "MATCH", "*" * 1025)
    with pytest.raises(redis.ResponseError, match="^a MATCH, META or ERROR pattern is at most 1024 bytes$"):
        r.execute_command("QSCAN", q, 0, "META", "f", "x" * 1025)
    with pytest.raises(redis.ResponseError, match="^a MATCH, META or ERROR pattern is at most 1024 bytes$"):
        r.execute_command("QSCAN", q, 0, "ERROR", "x" * 1025)
    with pytest.raises(redis.ResponseError, match="^invalid cursor$"):
        r.execute_command("QSCAN", q, -1, "MATCH", "*")
    with pytest.raises(redis.ResponseError, match="^COUNT"):
        r.execute_command("QSCAN", q, 0, "MATCH", "*", "COUNT", 0)
    # a glob of exactly 1024 bytes is fine; nothing changed by the refusals
    assert r.execute_command("QSCAN", q, 0, "MATCH", "x" * 1024)[1] == []
    assert r.execute_command("QLEN", q) == 1


def test_qredrive_id_takes_several_ids(r, q):
    ids = r.execute_command("QPUSHMANY", q, 4, "a", "b", "c", "d")
    for _ in range(3):
        job = claim_one(r, q, "w", "LEASE", 600_000)
        r.execute_command("QNACK", q, job[b"lease"], "DEAD")
    # two dead ones, one ready one (not a dead letter: counts nothing), one unknown id, a repeat
    assert r.execute_command("QREDRIVE", q, "ID", ids[0], ids[1], ids[3], 999_999, ids[0]) == 2
    assert [qget(r, q, i)[b"state"] for i in ids] == [b"ready", b"ready", b"dead", b"ready"]
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("QREDRIVE", q, "ID")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("QREDRIVE", q, "COUNT", 1, "ID", ids[2])
    with pytest.raises(redis.ResponseError):
        r.execute_command("QREDRIVE", q, "ID", ids[2], "x")
    assert qget(r, q, ids[2])[b"state"] == b"dead"
