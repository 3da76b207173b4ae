"""Jobs that wait for other jobs (docs/semantics.md §3.10): AFTER on QPUSH and
QPUSHMANY, across queues, success, failure, ONFAIL run, restarts between a
parent's ack and the child's claim, long chains and wide fan-ins, and bad
input, against the real daemon."""

from __future__ import annotations

import time

import pytest

from harness import DEBUG_ENV, Daemon, as_map, bgsave, claim, claim_one, error_text, now, qget, qinfo, unique

LEASE = 60_000


def done(c, q, job_id: int) -> None:
    """Claim ``job_id`` (it must be the next ready one) and ack it."""
    job = claim_one(c, q, "w", "LEASE", LEASE)
    assert job[b"id"] == job_id, job
    assert c.execute_command("QACK", q, job[b"lease"]) == 1


def test_a_child_waits_until_every_parent_is_acked(daemon):
    c = daemon.client(protocol=2)
    a, b, kids = unique("a"), unique("b"), unique("kids")
    pa = c.execute_command("QPUSH", a, "resize")
    pb = c.execute_command("QPUSH", b, "scan")
    child = c.execute_command("QPUSH", kids, "notify", "AFTER", 2, a, pa, b, pb)
    job = qget(c, kids, child)
    assert job[b"state"] == b"waiting" and job[b"waiting_for"] == [a.encode(), pa, b.encode(), pb]
    assert qinfo(c, kids)[b"waiting"] == 1 and c.execute_command("QLEN", kids) == 0
    done(c, a, pa)
    assert qget(c, kids, child)[b"waiting_for"] == [b.encode(), pb]
    assert claim(c, kids, "w") == []
    done(c, b, pb)
    assert qget(c, kids, child)[b"state"] == b"ready"
    assert claim_one(c, kids, "w")[b"payload"] == b"notify"


def test_a_parent_no_longer_held_counts_as_done(daemon):
    c = daemon.client(protocol=2)
    q = unique("gone")
    p = c.execute_command("QPUSH", q, "p")
    done(c, q, p)
    child = c.execute_command("QPUSH", q, "c", "AFTER", 2, q, p, unique("nosuchqueue"), 5)
    assert qget(c, q, child)[b"state"] == b"ready"
    waiting = c.execute_command("QPUSH", q, "c2", "AFTER", 1, q, c.execute_command("QPUSH", q, "p2"))
    assert qget(c, q, waiting)[b"state"] == b"waiting"
    assert c.execute_command("QDEL", q, waiting - 1) == 1            # the parent deleted: done too
    assert qget(c, q, waiting)[b"state"] == b"ready"


def test_delay_counts_from_the_release(f):
    q = unique("delay")
    t0 = now(f)
    p = f.execute_command("QPUSH", q, "p")
    child = f.execute_command("QPUSH", q, "c", "AFTER", 1, q, p, "DELAY", 1000)
    assert f.execute_command("DEBUG", "CLOCK", "ADVANCE", 5000) == b"OK"
    assert qget(f, q, child)[b"state"] == b"waiting"
    done(f, q, p)
    job = qget(f, q, child)
    assert (job[b"state"], job[b"visible_at"]) == (b"delayed", t0 + 6000)


def test_a_dead_parent_dead_letters_its_children_who_keep_their_own_provenance_and_name_it(daemon):
    c = daemon.client(protocol=2)
    q, dlq = unique("fail"), unique("fail-dlq")
    c.execute_command("QCREATE", q, "DEADLETTER", dlq)
    p = c.execute_command("QPUSH", q, "parent")
    child = c.execute_command("QPUSH", q, "child", "AFTER", 1, q, p)
    grandchild = c.execute_command("QPUSH", q, "grandchild", "AFTER", 1, q, child)
    runner = c.execute_command("QPUSH", q, "cleanup", "AFTER", 1, q, p, "ONFAIL", "run")
    job = claim_one(c, q, "w", "LEASE", LEASE)
    assert c.execute_command("QNACK", q, job[b"lease"], "DEAD") == 1
    assert qget(c, q, child) is None and qget(c, q, grandchild) is None
    copies = {j[b"payload"]: j for j in claim(c, dlq, "w", "COUNT", 10, "LEASE", LEASE)}
    assert set(copies) == {b"parent", b"child", b"grandchild"}
    assert (copies[b"child"][b"dead_letter_reason"], copies[b"child"][b"dead_letter_from"],
            copies[b"child"][b"dead_letter_src_id"], copies[b"child"][b"dead_letter_parent"]) == \
        (b"parent-failed", q.encode(), child, [q.encode(), p])
    assert (copies[b"grandchild"][b"dead_letter_src_id"], copies[b"grandchild"][b"dead_letter_parent"]) == \
        (grandchild, [q.encode(), child])
    assert b"dead_letter_parent" not in copies[b"parent"]
    assert qget(c, q, runner)[b"state"] == b"ready"                 # ONFAIL run: the dead parent counts as done


def test_a_child_pushed_after_its_parent_died_dies_at_once(daemon):
    c = daemon.client(protocol=2)
    q = unique("late")
    p = c.execute_command("QPUSH", q, "parent")
    job = claim_one(c, q, "w", "LEASE", LEASE)
    c.execute_command("QNACK", q, job[b"lease"], "DEAD")                # dead in place (no DEADLETTER)
    child = c.execute_command("QPUSH", q, "child", "AFTER", 1, q, p)
    dead = qget(c, q, child)
    assert (dead[b"state"], dead[b"dead_reason"], dead[b"dead_letter_src_id"], dead[b"dead_letter_parent"]) == \
        (b"dead", b"parent-failed", child, [q.encode(), p])
    runs = c.execute_command("QPUSH", q, "child", "AFTER", 1, q, p, "ONFAIL", "run")
    assert qget(c, q, runs)[b"state"] == b"ready"


def test_qpushmany_children_share_their_parents(daemon):
    c = daemon.client(protocol=2)
    q = unique("many")
    p = c.execute_command("QPUSH", q, "p")
    kids = c.execute_command("QPUSHMANY", q, 3, "a", "b", "c", "AFTER", 1, q, p)
    assert [qget(c, q, k)[b"state"] for k in kids] == [b"waiting"] * 3
    done(c, q, p)
    assert sorted(j[b"payload"] for j in claim(c, q, "w", "COUNT", 5)) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_kill_9_between_the_parents_ack_and_the_childs_claim(tmp_path, snapshot):
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = d.client(protocol=2)
        p = c.execute_command("QPUSH", "jobs", "parent")
        child = c.execute_command("QPUSH", "steps", "child", "AFTER", 1, "jobs", p)
        other = c.execute_command("QPUSH", "steps", "other", "AFTER", 1, "jobs", c.execute_command("QPUSH", "jobs", "p2"))
        if snapshot:
            bgsave(c)
        done(c, "jobs", p)
        d.kill()
        d.restart()
        c = d.client(protocol=2)
        assert qget(c, "steps", child)[b"state"] == b"ready"
        assert qget(c, "steps", other)[b"state"] == b"waiting"     # its parent is still held
        assert claim_one(c, "steps", "w")[b"id"] == child
        done(c, "jobs", p + 1)
        assert qget(c, "steps", other)[b"state"] == b"ready"
    finally:
        d.kill()


def test_a_chain_of_10000_jobs_and_a_fan_in_of_10000_parents(daemon):
    """Each link waits for the one before; one job waits for 10,000 parents.
    Both finish with one ack per job (no work that grows with the whole)."""
    c = daemon.client(protocol=2)
    chain, fan = unique("chain"), unique("fan")
    n = 10_000
    t = time.perf_counter()
    pipe = c.pipeline(transaction=False)
    pipe.execute_command("QPUSH", chain, "link-1")
    for i in range(2, n + 1):
        pipe.execute_command("QPUSH", chain, f"link-{i}", "AFTER", 1, chain, i - 1)
    pipe.execute()
    assert qinfo(c, chain)[b"waiting"] == n - 1
    for i in range(1, n + 1):
        job = claim_one(c, chain, "w", "LEASE", LEASE)
        assert job[b"payload"] == f"link-{i}".encode()
        c.execute_command("QACK", chain, job[b"lease"])
    chain_s = time.perf_counter() - t
    parents = c.execute_command("QPUSHMANY", fan, n, *[b"p"] * n)
    t = time.perf_counter()
    args = []
    for pid in parents:
        args += [fan, pid]
    child = c.execute_command("QPUSH", fan, "sum", "AFTER", n, *args)
    while True:
        jobs = claim(c, fan, "w", "COUNT", 1000, "LEASE", LEASE)
        if not jobs:
            break
        c.execute_command("QACK", fan, *[j[b"lease"] for j in jobs])
    assert qget(c, fan, child) is None                  # acked with the last batch: it became ready in turn
    print(f"\nchain of {n}: {chain_s:.2f} s push+claim+ack; fan-in of {n}: {time.perf_counter() - t:.2f} s")


@pytest.mark.parametrize("args, message", [
    (("AFTER",), "syntax error"),
    (("AFTER", 2, "q", 1), "syntax error"),
    (("AFTER", 0), "AFTER count must be between 1 and 100000"),
    (("AFTER", "x", "q", 1), "value is not an integer or out of range"),
    (("AFTER", 1, "q", -1), "AFTER id must be between 0 and 9223372036854775807"),
    (("AFTER", 1, "bad name", 1), "invalid queue name 'bad name'"),
    (("ONFAIL", "run"), "ONFAIL goes with AFTER"),
    (("AFTER", 1, "q", 1, "ONFAIL", "maybe"), "ONFAIL must be run or fail"),
])
def test_bad_after_is_refused_and_pushes_nothing(daemon, args, message):
    c = daemon.client(protocol=2)
    q = unique("badafter")
    c.execute_command("QCREATE", q)
    assert error_text(c, "QPUSH", q, "p", *args).startswith(message)
    assert qinfo(c, q)[b"pushed"] == 0


def test_qredrive_sends_a_parent_failed_child_home_not_to_its_parents_queue(daemon):
    """The child's provenance is its own: QREDRIVE of its dead-letter queue
    pushes it back into its queue, not into the parent's (docs/semantics.md
    §1.8; before 2026-11-27 it went to the parent's)."""
    c = daemon.client(protocol=2)
    fa, fb = unique("home-a"), unique("home-b")
    c.execute_command("QCREATE", fb, "DEADLETTER", f"{fb}.dlq")
    p = c.execute_command("QPUSH", fa, "parent")
    c1 = c.execute_command("QPUSH", fb, "c1", "AFTER", 1, fa, p)
    job = claim_one(c, fa, "w", "LEASE", LEASE)
    assert c.execute_command("QNACK", fa, job[b"lease"], "DEAD") == 1
    (copy,) = claim(c, f"{fb}.dlq", "w", "COUNT", 5, "LEASE", LEASE)
    assert (copy[b"dead_letter_from"], copy[b"dead_letter_src_id"], copy[b"dead_letter_parent"]) == \
        (fb.encode(), c1, [fa.encode(), p])
    c.execute_command("QNACK", f"{fb}.dlq", copy[b"lease"], "DELAY", 0)      # (ready again in the dlq)
    assert c.execute_command("QREDRIVE", f"{fb}.dlq") == 1
    assert (c.execute_command("QLEN", fb), c.execute_command("QLEN", fa)) == (1, 0)
    assert claim_one(c, fb, "w")[b"payload"] == b"c1"


@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_a_parent_failed_childs_provenance_survives_kill_9(tmp_path, snapshot):
    """A copy in a dead-letter queue and a child dead in its own queue (no
    DEADLETTER) keep their provenance and parent through the log's replay and
    through a snapshot (whose format before version 3 could not hold the
    reason of a job dead in place for a parent)."""
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = d.client(protocol=2)
        c.execute_command("QCREATE", "kids", "DEADLETTER", "kids.dlq")
        p = c.execute_command("QPUSH", "parents", "parent")
        moved = c.execute_command("QPUSH", "kids", "moved", "AFTER", 1, "parents", p)
        stays = c.execute_command("QPUSH", "strays", "stays", "AFTER", 1, "parents", p)
        job = claim_one(c, "parents", "w", "LEASE", LEASE)
        assert c.execute_command("QNACK", "parents", job[b"lease"], "DEAD") == 1
        (copy_id,) = [as_map(j)[b"id"] for j in c.execute_command("QPEEK", "kids.dlq", "COUNT", 5)]
        before = (qget(c, "kids.dlq", copy_id), qget(c, "strays", stays))
        if snapshot:
            bgsave(c)
        d.kill()
        d.restart()
        c = d.client(protocol=2)
        after = (qget(c, "kids.dlq", copy_id), qget(c, "strays", stays))
        assert after == before
        assert (after[0][b"dead_letter_src_id"], after[0][b"dead_letter_parent"]) == (moved, [b"parents", p])
        assert (after[1][b"state"], after[1][b"dead_reason"], after[1][b"dead_letter_parent"]) == \
            (b"dead", b"parent-failed", [b"parents", p])
    finally:
        d.kill()
