"""QCLAIM ... COMPACT (docs/semantics.md §2.1): each job as the values of
the seven fields every claimed job has, in the map's order, then a map of
its other fields only when it has any; in RESP2 and RESP3, served at once,
from a blocked claim (alone and beside full-form claimers), in MULTI, with
SESSION and on a WINDOW queue.  The full reply stays the default."""

from __future__ import annotations

import pytest
from harness import (
    CheckedThread,
    as_map,
    claim_one,
    error_text,
    qget,
    unique,
    wait_blocked,
)

FIRST_SEVEN = [b"id", b"payload", b"lease", b"deadline", b"deliveries", b"priority", b"enqueued_at"]


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def c(daemon, request):
    client = daemon.client(protocol=request.param)
    yield client
    client.close()


def _compact(c, q, *options):
    return c.execute_command("QCLAIM", q, "w", "COMPACT", *options)


def test_a_plain_job_is_its_seven_values_in_the_maps_order(c, q):
    c.execute_command("QPUSH", q, "a", "PRIORITY", 7)
    [job] = _compact(c, q)
    assert len(job) == 7
    info = qget(c, q, job[0])
    full = dict(zip(FIRST_SEVEN, job))
    assert (full[b"id"], full[b"payload"], full[b"priority"], full[b"deliveries"]) == (1, b"a", 7, 1)
    assert full[b"deadline"] == info[b"deadline"] and full[b"enqueued_at"] == info[b"enqueued_at"]
    assert c.execute_command("QACK", q, job[2]) == 1            # the third value is the lease token


def test_rare_fields_follow_as_a_map_with_the_full_forms_names(c, q):
    c.execute_command("QPUSH", q, "keyed", "KEY", "k1", "GROUP", "g")
    full = claim_one(c, q)
    assert c.execute_command("QNACK", q, full[b"lease"], "DELAY", 0, "ERROR", "boom") == 1
    [job] = _compact(c, q)
    assert len(job) == 8
    rest = as_map(job[7])
    assert rest == {b"key": b"k1", b"group": b"g", b"last_error": b"boom"}
    assert job[:2] == [full[b"id"], b"keyed"] and job[4] == 2


def test_several_jobs_and_none(c, q):
    c.execute_command("QPUSHMANY", q, 3, "a", "b", "c")
    jobs = _compact(c, q, "COUNT", 5)
    assert [j[1] for j in jobs] == [b"a", b"b", b"c"] and all(len(j) == 7 for j in jobs)
    assert _compact(c, q) == []
    assert _compact(c, q, "BLOCK", 10) == []


def test_without_compact_the_reply_is_the_map(c, q):
    c.execute_command("QPUSH", q, "a")
    job = claim_one(c, q)
    assert list(job)[:7] == FIRST_SEVEN


def test_a_blocked_compact_claim_is_served_compact_beside_a_full_one(daemon, q):
    replies = {}

    def claim(form: str, *options):
        client = daemon.client(protocol=2)
        replies[form] = client.execute_command("QCLAIM", q, form, "BLOCK", 5000, *options)
        client.close()

    threads = [CheckedThread(target=claim, args=("compact", "COMPACT")), CheckedThread(target=claim, args=("full",))]
    threads[0].start()
    c = daemon.client(protocol=2)
    wait_blocked(c, q, 1)
    threads[1].start()
    wait_blocked(c, q, 2)
    c.execute_command("QPUSHMANY", q, 2, "x", "y")
    for t in threads:
        t.join(10)
        assert not t.is_alive() and t.failure is None
    [compact], [full] = replies["compact"], replies["full"]
    assert len(compact) == 7 and compact[1] in (b"x", b"y")
    assert as_map(full)[b"payload"] == ({b"x", b"y"} - {compact[1]}).pop()
    c.close()


def test_compact_in_multi_with_session_and_on_a_window_queue(daemon, c):
    q = unique()
    c.execute_command("QPUSHMANY", q, 2, "a", "b")
    pipe = c.pipeline(transaction=True)
    pipe.execute_command("QCLAIM", q, "w", "COMPACT", "BLOCK", 100)
    [[job]] = pipe.execute()
    assert job[1] == b"a" and len(job) == 7
    [job] = _compact(c, q, "SESSION")
    assert job[1] == b"b"
    windowed = unique()
    c.execute_command("QCREATE", windowed, "WINDOW", 20)
    c.execute_command("QPUSH", windowed, "w")
    [job] = _compact(c, windowed, "COUNT", 2)
    assert job[1] == b"w" and len(job) == 7


def test_compact_given_twice_is_a_syntax_error_and_claims_nothing(c, q):
    c.execute_command("QPUSH", q, "a")
    assert error_text(c, "QCLAIM", q, "w", "COMPACT", "COMPACT") == "syntax error"
    assert error_text(c, "QCLAIM", q, "w", "COMPACT", "5") == "syntax error"
    assert qget(c, q, 1)[b"state"] == b"ready"
