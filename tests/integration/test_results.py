"""Results and cancellation (docs/semantics.md §3.4, §3.11): QACK ... RESULT
keeps a result for RESULT-TTL, QRESULT answers it (nil while unfinished,
BLOCK woken by the ack, -DEAD for a job that died or was cancelled, -NOJOB
for one unknown, expired or acked without a result); QCANCEL ends ready,
delayed, waiting and in-flight jobs at once; both last across kill -9."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from harness import DEBUG_ENV, Daemon, as_map, bgsave, claim_one, error_text, qget, qinfo, unique, wait_for


def test_an_ack_with_a_result_is_kept_for_result_ttl(f):
    q = unique("res")
    f.execute_command("QCREATE", q, "RESULT-TTL", 10_000)
    assert qinfo(f, q)[b"result_ttl"] == 10_000
    jid = f.execute_command("QPUSH", q, "render")
    assert f.execute_command("QRESULT", q, jid) is None                  # ready: nil
    job = claim_one(f, q)
    assert f.execute_command("QRESULT", q, jid) is None                  # in flight: nil
    assert f.execute_command("QACK", q, job[b"lease"], "RESULT", b"\x00{\"pages\": 3}") == 1
    assert f.execute_command("QRESULT", q, jid) == b"\x00{\"pages\": 3}"
    shown = qget(f, q, jid)
    assert (shown[b"state"], shown[b"result"]) == (b"completed", b"\x00{\"pages\": 3}")
    assert shown[b"result_until"] > 0
    f.execute_command("DEBUG", "CLOCK", "ADVANCE", 10_001)
    assert error_text(f, "QRESULT", q, jid) == f"NOJOB job {jid} of queue '{q}' is unknown or its result expired"
    assert f.execute_command("QGET", q, jid) is None


def test_result_ttl_0_keeps_none_and_an_ack_without_result_keeps_none(f):
    q = unique("nores")
    f.execute_command("QCREATE", q, "RESULT-TTL", 0, "RETAIN-COMPLETED", 60_000)
    a, b = f.execute_command("QPUSHMANY", q, 2, "a", "b")
    ja, jb = claim_one(f, q), claim_one(f, q)
    assert f.execute_command("QACK", q, ja[b"lease"], "RESULT", "x") == 1
    assert f.execute_command("QACK", q, jb[b"lease"]) == 1
    for jid in (a, b):       # both retained as completed, neither with a result
        assert b"result" not in qget(f, q, jid)
        assert error_text(f, "QRESULT", q, jid) == f"NOJOB job {jid} of queue '{q}' was acked without a result"
    assert error_text(f, "QRESULT", q, 999) == f"NOJOB job 999 of queue '{q}' is unknown or its result expired"


def test_bad_input_is_refused_and_changes_nothing(f):
    q = unique("bad")
    f.execute_command("QPUSHMANY", q, 2, "a", "b")
    one, two = claim_one(f, q), claim_one(f, q)
    assert error_text(f, "QACK", q, one[b"lease"], two[b"lease"], "RESULT", "x") == \
        "RESULT goes with exactly one token"
    assert error_text(f, "QACK", q, one[b"lease"], "RESULT") == "syntax error"
    assert error_text(f, "QACK", q, one[b"lease"], "RESULT", "x", "y") == "syntax error"
    assert qinfo(f, q)[b"in_flight"] == 2                     # nothing was acked
    assert error_text(f, "QRESULT", q, "x") == "value is not an integer or out of range"
    assert error_text(f, "QRESULT", q, 1, "BLOCK", -1).startswith("BLOCK must be between")
    assert error_text(f, "QRESULT", q, 1, "WAIT", 1) == "syntax error"
    assert error_text(f, "QRESULT", unique("nosuch"), 1).startswith("NOQUEUE")
    assert error_text(f, "QCANCEL", q, "x") == "value is not an integer or out of range"
    assert error_text(f, "QCANCEL", q) == "wrong number of arguments for 'qcancel' command"
    assert error_text(f, "QCREATE", unique("r"), "RESULT-TTL", -5).startswith("RESULT-TTL must be between")
    assert qinfo(f, q)[b"in_flight"] == 2


def test_a_result_too_big_is_refused(own):
    d = own(env={"LEASEQ_MAX_PAYLOAD": "1024"})
    c = d.client(protocol=2)
    c.execute_command("QPUSH", "q", "p")
    job = claim_one(c, "q")
    assert error_text(c, "QACK", "q", job[b"lease"], "RESULT", b"x" * 1025) == \
        "TOOBIG payload of 1025 bytes exceeds max-payload (1024 bytes)"
    assert qinfo(c, "q")[b"in_flight"] == 1


@pytest.mark.parametrize("with_result", [True, False], ids=["with RESULT", "plain"])
def test_qresult_block_is_woken_by_the_ack(daemon, with_result):
    """The ack wakes a blocked QRESULT at once: with the result, or, for a
    plain QACK on a plain queue (the compiled plain path,
    docs/performance.md), with -NOJOB, as the job ended without one."""
    c = daemon.client(protocol=2)
    q = unique("blk")
    c.execute_command("QCREATE", q, "DURABILITY", "memory")
    jid = c.execute_command("QPUSH", q, "p")
    job = claim_one(c, q)
    got = {}

    def wait():
        w = daemon.client(protocol=2)
        try:
            got["reply"] = w.execute_command("QRESULT", q, jid, "BLOCK", 10_000)
        except redis.ResponseError as e:
            got["reply"] = str(e)
        got["at"] = time.monotonic()
        w.close()

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    wait_for(lambda: c.info("clients")["blocked_clients"] == 1, 5, "QRESULT blocked")
    acked = time.monotonic()
    assert c.execute_command("QACK", q, job[b"lease"], *(["RESULT", "done"] if with_result else [])) == 1
    t.join(10)
    assert not t.is_alive()
    if with_result:
        assert got["reply"] == b"done"
    else:
        assert got["reply"] == f"NOJOB job {jid} of queue '{q}' is unknown or its result expired"
    assert got["at"] - acked < 5        # woken by the ack, not by the 10 s timeout


def test_qresult_block_times_out_with_nil_and_is_woken_by_a_death_or_a_drop(daemon):
    c = daemon.client(protocol=2)
    q = unique("blk2")
    jid = c.execute_command("QPUSH", q, "p")
    assert c.execute_command("QRESULT", q, jid, "BLOCK", 50) is None
    replies = []

    def wait(client, *args):
        try:
            replies.append(client.execute_command("QRESULT", *args))
        except Exception as e:
            replies.append(str(e))

    w = daemon.client(protocol=2)
    t = threading.Thread(target=wait, args=(w, q, jid, "BLOCK", 0), daemon=True)
    t.start()
    wait_for(lambda: c.info("clients")["blocked_clients"] == 1, 5, "QRESULT blocked")
    job = claim_one(c, q)
    c.execute_command("QNACK", q, job[b"lease"], "DEAD")
    t.join(10)
    assert replies == ["DEAD nack"]                          # -DEAD nack
    other = c.execute_command("QPUSH", q, "p2")
    t = threading.Thread(target=wait, args=(w, q, other, "BLOCK", 0), daemon=True)
    t.start()
    wait_for(lambda: c.info("clients")["blocked_clients"] == 1, 5, "QRESULT blocked")
    c.execute_command("QDROP", q, "FORCE")
    t.join(10)
    assert replies[1] == f"CLOSED queue '{q}' was dropped while waiting"


def test_qcancel_ends_ready_delayed_waiting_and_in_flight_jobs(f):
    q = unique("can")
    ready, delayed, flying, done = f.execute_command("QPUSHMANY", q, 4, "r", "d", "f", "x")
    f.execute_command("QDEL", q, delayed)
    delayed = f.execute_command("QPUSH", q, "d", "DELAY", 60_000)
    waiting = f.execute_command("QPUSH", q, "w", "AFTER", 1, q, ready)
    leased = claim_one(f, q, "w", "COUNT", 1)          # takes the first ready job by id
    assert leased[b"id"] == ready
    f.execute_command("QACK", q, leased[b"lease"])     # ready is done: waiting becomes ready
    flying_job = claim_one(f, q)
    assert flying_job[b"id"] == flying
    assert f.execute_command("QCANCEL", q, delayed, flying, waiting, 999, ready, delayed) == 3
    assert qget(f, q, flying)[b"state"] == b"cancelled"
    assert f.execute_command("QEXTEND", q, flying_job[b"lease"]) == [None]     # the token is stale
    assert f.execute_command("QACK", q, flying_job[b"lease"]) == 0
    assert f.execute_command("QPROGRESS", q, flying_job[b"lease"], "x") == 0
    for jid in (delayed, waiting, flying):
        assert error_text(f, "QRESULT", q, jid) == "DEAD cancelled"
    info = qinfo(f, q)
    assert (info[b"in_flight"], info[b"delayed"], info[b"ready"]) == (0, 0, 1)
    scanned = f.execute_command("QSCAN", q, 0, "STATE", "cancelled", "COUNT", 100)[1]
    assert sorted(as_map(j)[b"id"] for j in scanned) == sorted([delayed, waiting, flying])
    assert f.execute_command("QCANCEL", q, flying) == 0                     # already ended
    assert f.info("queues")[q]["cancelled"] == 3
    assert f.execute_command("QPURGE", q, "CANCELLED") == 3


def test_cancelled_jobs_are_kept_for_retain_dead_and_their_children_die(f):
    q = unique("canc")
    f.execute_command("QCREATE", q, "RETAIN-DEAD", 5000)
    parent = f.execute_command("QPUSH", q, "parent")
    child = f.execute_command("QPUSH", q, "child", "AFTER", 1, q, parent)
    runs = f.execute_command("QPUSH", q, "runs", "AFTER", 1, q, parent, "ONFAIL", "run")
    assert f.execute_command("QCANCEL", q, parent) == 1
    assert (qget(f, q, child)[b"state"], qget(f, q, child)[b"dead_reason"]) == (b"dead", b"parent-failed")
    assert qget(f, q, runs)[b"state"] == b"ready"
    assert error_text(f, "QRESULT", q, child) == "DEAD parent-failed"
    f.execute_command("DEBUG", "CLOCK", "ADVANCE", 5001)
    assert f.execute_command("QGET", q, parent) is None      # its retention is over ...
    assert error_text(f, "QRESULT", q, parent) == "DEAD cancelled"    # ... QRESULT still says how it ended


def test_a_dead_lettered_job_answers_dead_from_its_own_queue(f):
    q, dlq = unique("src"), unique("dlq")
    f.execute_command("QCREATE", q, "MAXDELIVERIES", 1, "DEADLETTER", dlq)
    jid = f.execute_command("QPUSH", q, "p")
    job = claim_one(f, q)
    f.execute_command("QNACK", q, job[b"lease"], "DELAY", 0)
    assert f.execute_command("QCLAIM", q, "w") == []              # the second delivery dead-letters it
    assert error_text(f, "QRESULT", q, jid) == "DEAD max-deliveries"


@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_results_and_cancellations_last_across_kill_9(tmp_path, snapshot):
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = d.client(protocol=2)
        a, b, cc = c.execute_command("QPUSHMANY", "q", 3, "a", "b", "c")
        job = claim_one(c, "q")
        c.execute_command("QACK", "q", job[b"lease"], "RESULT", b"answer \xff")
        flying = claim_one(c, "q")
        assert c.execute_command("QCANCEL", "q", b, cc) == 2
        if snapshot:
            bgsave(c)
        d.kill()
        d.restart()
        c = d.client(protocol=2)
        assert c.execute_command("QRESULT", "q", a) == b"answer \xff"
        assert error_text(c, "QRESULT", "q", b) == "DEAD cancelled"
        assert qget(c, "q", cc)[b"state"] == b"cancelled"
        assert c.execute_command("QACK", "q", flying[b"lease"]) == 0
        assert qinfo(c, "q")[b"in_flight"] == 0
    finally:
        d.kill()


def test_results_count_in_memory_usage(f):
    q = unique("mem")
    f.execute_command("QCREATE", q, "RESULT-TTL", 60_000)
    f.execute_command("QPUSH", q, "p")
    before = f.execute_command("MEMORY", "USAGE", q)
    job = claim_one(f, q)
    f.execute_command("QACK", q, job[b"lease"], "RESULT", b"r" * 10_000)
    assert f.execute_command("MEMORY", "USAGE", q) >= before + 10_000 - 1      # the job left, its result stays
    f.execute_command("DEBUG", "CLOCK", "ADVANCE", 60_001)
    f.execute_command("QLEN", q)                                                 # looks: the result expires
    assert f.execute_command("MEMORY", "USAGE", q) < before


def test_qredrive_id_moves_only_that_dead_letter(f):
    q = unique("rid")
    a, b, c = f.execute_command("QPUSHMANY", q, 3, "a", "b", "c")
    for _ in range(2):
        job = claim_one(f, q)
        f.execute_command("QNACK", q, job[b"lease"], "DEAD")
    assert f.execute_command("QREDRIVE", q, "ID", b) == 1
    assert (qget(f, q, a)[b"state"], qget(f, q, b)[b"state"]) == (b"dead", b"ready")
    assert f.execute_command("QREDRIVE", q, "ID", c) == 0           # ready, not a dead letter
    assert f.execute_command("QREDRIVE", q, "ID", 999) == 0
    assert error_text(f, "QREDRIVE", q, "ID", "x") == "value is not an integer or out of range"
    assert error_text(f, "QREDRIVE", q, "COUNT", 1, "ID", a) == "syntax error"
    assert qget(f, q, a)[b"state"] == b"dead"
