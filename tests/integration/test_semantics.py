"""docs/semantics.md §4 (the semantics that tests check, §4.1-§4.10) and the
queue options of issue 3, against the real daemon subprocess.

Names map to the contract: ``test_rule<N>_...`` checks docs/semantics.md §4.N,
``test_option_...`` one option or command of §1 and §3,
``test_qinfo_counter_<name>`` one QINFO counter.

Daemons:

* ``daemon`` / ``r``: the module's shared daemon (DEBUG enabled, clock left
  running: the real-time tests -- blocked claimers, fairness, WINDOW, SESSION,
  QWORK -- run there);
* ``f``: a second module daemon whose clock is frozen at start, so time moves
  only by ``DEBUG CLOCK ADVANCE``: every test about leases, delays, backoff,
  EXPIRE and retention runs there and never sleeps;
* ``own(...)``: a daemon of the test's own, for kill -9 and restart.

Every test uses queue names of its own (``unique``), so moving the frozen
daemon's clock forward never touches another test's jobs.
"""

from __future__ import annotations

import random
import socket
import threading
import time

import hiredis
import pytest
import redis

from harness import (DEBUG_ENV, BlockedClaim, CheckedThread, RespSocket, advance, as_map, claim,
                     claim_one, error_text, no_retry_client, now, qget, qinfo, qscan_all, unique, wait_blocked,
                     wait_for)

# the module's shared daemon (conftest ``shared_daemon``) has DEBUG enabled; its clock keeps running
SHARED_DAEMON_ENV = DEBUG_ENV
HOUR = 3_600_000


# -- helpers -------------------------------------------------------------------------------------

def push(c, q, payload="x", *options) -> int:
    return c.execute_command("QPUSH", q, payload, *options)


def peek(c, q, count=10) -> list[dict]:
    return [as_map(j) for j in c.execute_command("QPEEK", q, "COUNT", count)]


def clock(c) -> dict:
    return as_map(c.execute_command("DEBUG", "CLOCK"))


def ids(jobs) -> list[int]:
    return [j[b"id"] for j in jobs]


def is_job_push(frame) -> bool:
    return isinstance(frame, list) and len(frame) == 3 and frame[0] == b"job"


# ===============================================================================================
# docs/semantics.md §4.1: an id QPUSH/QPUSHMANY returned on an fsync queue survives kill -9
# ===============================================================================================

def test_rule1_every_replied_id_survives_kill9_during_a_stream_of_pushes(own):
    d = own(env=DEBUG_ENV)
    c = no_retry_client(d, socket_timeout=10)
    q = unique("r1")
    assert c.execute_command("QCREATE", q, "DURABILITY", "fsync") == b"OK"
    replied: dict[int, bytes] = {}
    errors: list = []

    def producer() -> None:
        pc = no_retry_client(d, socket_timeout=10)
        try:
            for i in range(20_000):
                kind = i % 4
                if kind == 0:
                    p = b"one-%d\r\n" % i
                    replied[pc.execute_command("QPUSH", q, p, "PRIORITY", i % 10)] = p
                elif kind == 1:
                    payloads = [b"many-%d-%d\x00\xff" % (i, k) for k in range(5)]
                    got = pc.execute_command("QPUSHMANY", q, 5, *payloads)
                    replied.update(zip(got, payloads))
                else:                     # pipelined (2) or in a MULTI/EXEC transaction (3)
                    pipe = pc.pipeline(transaction=kind == 3)
                    payloads = [b"%s-%d-%d" % (b"pipe" if kind == 2 else b"multi", i, k) for k in range(4)]
                    for p in payloads:
                        pipe.execute_command("QPUSH", q, p)
                    replied.update(zip(pipe.execute(), payloads))
        except redis.ConnectionError as e:
            errors.append(e)
        finally:
            pc.close()

    t = CheckedThread(target=producer)
    t.start()
    wait_for(lambda: len(replied) >= 400, 20, "400 pushes replied")
    d.kill()                                   # while the producer is still pushing
    t.join(10)
    assert not t.is_alive() and errors, "the producer should have lost its connection"
    assert t.failure is None, t.failure
    snapshot = dict(replied)
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    missing = [jid for jid, p in snapshot.items()
               if (job := qget(c, q, jid)) is None or job[b"payload"] != p]
    assert missing == [], f"{len(missing)} of {len(snapshot)} replied ids lost after kill -9: {missing[:10]}"
    assert qinfo(c, q)[b"ready"] >= len(snapshot)
    # a QPUSHMANY or an EXEC is all or none, also when the crash comes before its reply
    batches: dict[bytes, int] = {}
    for job in qscan_all(c, q, count=1000):
        head = job[b"payload"].split(b"-")
        if head[0] in (b"many", b"multi"):
            batches[head[0] + head[1]] = batches.get(head[0] + head[1], 0) + 1
    assert {n for n in batches.values()} <= {4, 5}, "a QPUSHMANY or EXEC was half-applied"
    assert all(n == (5 if k.startswith(b"many") else 4) for k, n in batches.items())
    # ids are never reused across the crash
    assert push(c, q, "after") > max(snapshot)


def test_rule1_qpushmany_ids_survive_kill9_right_after_the_reply(own):
    d = own()
    c = no_retry_client(d, socket_timeout=10)
    q = unique("r1m")
    c.execute_command("QCREATE", q, "DURABILITY", "fsync")
    got = c.execute_command("QPUSHMANY", q, 3, "a", "b", "c", "PRIORITY", "7", "DELAY", HOUR)
    d.kill()
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    jobs = [qget(c, q, jid) for jid in got]
    assert [j[b"payload"] for j in jobs] == [b"a", b"b", b"c"]
    assert {(j[b"state"], j[b"priority"]) for j in jobs} == {(b"delayed", 7)}


# ===============================================================================================
# docs/semantics.md §4.2: a job acked on an fsync queue never comes back after kill -9
# ===============================================================================================

def test_rule2_acked_jobs_never_come_back_after_kill9_during_acks(own):
    d = own(env=DEBUG_ENV)
    c = no_retry_client(d, socket_timeout=10)
    q = unique("r2")
    c.execute_command("QCREATE", q, "DURABILITY", "fsync", "LEASE", HOUR)
    pushed = c.execute_command("QPUSHMANY", q, 200, *[f"job{i}" for i in range(200)])
    jobs = claim(c, q, "w", "COUNT", 200)
    assert len(jobs) == 200
    acked: list[int] = []

    def acker() -> None:
        ac = no_retry_client(d, socket_timeout=10)
        try:
            for j in jobs:
                if ac.execute_command("QACK", q, j[b"lease"]) == 1:
                    acked.append(j[b"id"])
        except redis.ConnectionError:
            pass
        finally:
            ac.close()

    t = CheckedThread(target=acker)
    t.start()
    wait_for(lambda: len(acked) >= 60, 20, "60 acks replied")
    d.kill()
    t.join(10)
    assert not t.is_alive()
    assert t.failure is None, t.failure
    acked_before_crash = set(acked)
    assert len(acked_before_crash) < 200, "the crash should come while acks are still being sent"
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    assert [jid for jid in acked_before_crash if qget(c, q, jid) is not None] == []
    advance(c, 2 * HOUR)                         # every surviving lease expires
    back = set()
    for _ in range(10):
        got = claim(c, q, "after", "COUNT", 1000)
        if not got:
            break
        back |= set(ids(got))
    assert back & acked_before_crash == set()
    assert back | acked_before_crash <= set(pushed)
    # at most one ack was in flight (sent, not answered) when the daemon died
    assert 200 - len(acked_before_crash) - 1 <= len(back) <= 200 - len(acked_before_crash)
    assert {j[b"id"] for j in qscan_all(c, q, count=100)} & acked_before_crash == set()


def test_rule2_ack_and_follow_up_push_in_one_exec_are_both_or_neither_after_kill9(own):
    d = own(env=DEBUG_ENV)
    c = no_retry_client(d, socket_timeout=10)
    q, nxt = unique("r2x"), unique("r2x-next")
    for name in (q, nxt):
        c.execute_command("QCREATE", name, "DURABILITY", "fsync", "LEASE", HOUR)
    c.execute_command("QPUSHMANY", q, 300, *[f"s{i}" for i in range(300)])
    jobs = claim(c, q, "w", "COUNT", 300)
    replied: dict[int, int] = {}            # job id -> id of its follow-up job
    ack_replies: dict[int, int] = {}        # job id -> its QACK's reply in the EXEC (checked below)

    def worker() -> None:
        wc = no_retry_client(d, socket_timeout=10)
        try:
            for j in jobs:
                pipe = wc.pipeline(transaction=True)
                pipe.execute_command("QACK", q, j[b"lease"])
                pipe.execute_command("QPUSH", nxt, b"follow-%d" % j[b"id"])
                acked, follow = pipe.execute()
                ack_replies[j[b"id"]] = acked
                replied[j[b"id"]] = follow
        except redis.ConnectionError:
            pass
        finally:
            wc.close()

    t = CheckedThread(target=worker)
    t.start()
    wait_for(lambda: len(replied) >= 60, 20, "60 EXECs replied")
    d.kill()
    t.join(10)
    assert not t.is_alive()
    assert t.failure is None, t.failure
    for jid, acked in ack_replies.items():
        assert acked == 1, f"job {jid}: the QACK in the EXEC replied {acked}"
    done = dict(replied)
    assert len(done) < 300
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    for jid, follow in done.items():
        assert qget(c, q, jid) is None, f"acked job {jid} came back"
        assert qget(c, nxt, follow)[b"payload"] == b"follow-%d" % jid
    follow_ups = {int(j[b"payload"].split(b"-")[1]) for j in qscan_all(c, nxt, count=1000)}
    for j in jobs:
        gone = qget(c, q, j[b"id"]) is None
        assert gone == (j[b"id"] in follow_ups), f"job {j[b'id']}: ack and follow-up push half-applied"


def test_rule2_retained_completed_job_stays_completed_after_kill9(own):
    d = own()
    c = no_retry_client(d, socket_timeout=10)
    q = unique("r2c")
    c.execute_command("QCREATE", q, "DURABILITY", "fsync", "RETAIN-COMPLETED", HOUR)
    jid = push(c, q, "done")
    assert c.execute_command("QACK", q, claim_one(c, q)[b"lease"]) == 1
    d.kill()
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    assert qget(c, q, jid)[b"state"] == b"completed"
    assert claim(c, q) == []


# ===============================================================================================
# docs/semantics.md §4.3: no job is leased to two consumers at once while both leases are unexpired
# ===============================================================================================

def test_rule3_concurrent_claimers_draining_a_queue_never_get_the_same_job(daemon, r, q):
    r.execute_command("QCREATE", q, "LEASE", 600_000)
    first = r.execute_command("QPUSHMANY", q, 300, *[f"p{i}" for i in range(300)])
    got: dict[int, list] = {i: [] for i in range(8)}
    barrier = threading.Barrier(9)

    def claimer(i: int) -> None:
        c = daemon.client(protocol=2)
        c.ping()
        rnd = random.Random(i)
        barrier.wait(10)
        for k in range(2000):
            if k % 10 == 0 and i == 0:
                c.execute_command("QPUSHMANY", q, 2, "late-a", "late-b")   # pushes race the claims
            jobs = claim(c, q, f"c{i}", "COUNT", rnd.randint(1, 4))
            if not jobs and (i != 0 or k > 500):
                break
            got[i] += [(j[b"id"], j[b"lease"]) for j in jobs]
        c.close()

    threads = [CheckedThread(target=claimer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    barrier.wait(10)
    for t in threads:
        t.join(30)
        assert not t.is_alive()
        assert t.failure is None, t.failure
    all_ids = [jid for lst in got.values() for jid, _ in lst]
    tokens = [tok for lst in got.values() for _, tok in lst]
    assert len(all_ids) == len(set(all_ids)), "a job was leased to two consumers at once"
    assert len(tokens) == len(set(tokens))
    assert set(first) <= set(all_ids)
    info = qinfo(r, q)
    assert info[b"in_flight"] == len(all_ids) and info[b"ready"] == 0


def test_rule3_no_two_leases_overlap_under_claim_and_nack_churn(daemon, r, q):
    """Each lease is known to be held from its claim's reply to the moment its
    nack is sent; two such spans on one job must never overlap."""
    r.execute_command("QCREATE", q, "LEASE", 600_000)
    r.execute_command("QPUSHMANY", q, 12, *[f"j{i}" for i in range(12)])
    spans: list[tuple] = []          # (job id, token, held from, held until)
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def worker(i: int) -> None:
        c = daemon.client(protocol=2)
        c.ping()
        barrier.wait(10)
        for _ in range(80):
            jobs = claim(c, q, f"w{i}", "COUNT", 2)
            t_got = time.monotonic()
            if not jobs:
                continue
            t_release = time.monotonic()
            c.execute_command("QNACK", q, *[j[b"lease"] for j in jobs], "DELAY", 0)
            with lock:
                spans.extend((j[b"id"], j[b"lease"], t_got, t_release) for j in jobs)
        c.close()

    threads = [CheckedThread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
        assert t.failure is None, t.failure
    assert len(spans) > 100
    assert len({s[1] for s in spans}) == len(spans), "a token was handed out twice"
    by_job: dict[int, list] = {}
    for s in spans:
        by_job.setdefault(s[0], []).append(s)
    for jid, held in by_job.items():
        held.sort(key=lambda s: s[2])
        for a, b in zip(held, held[1:]):
            assert b[2] >= a[3], f"job {jid}: lease {b[1]} granted while {a[1]} was still held"
    assert qinfo(r, q)[b"in_flight"] == 0


def test_rule3_a_leased_job_goes_to_nobody_else_until_its_deadline(f):
    q = unique("r3")
    jid = push(f, q, "one")
    a = claim_one(f, q, "a", "LEASE", 1000)
    advance(f, 999)
    assert claim(f, q, "b") == []
    assert qget(f, q, jid)[b"state"] == b"in_flight"
    advance(f, 1)                                   # now == deadline: the lease is over
    b = claim_one(f, q, "b", "LEASE", 1000)
    assert b[b"id"] == jid and b[b"lease"] != a[b"lease"]
    assert qget(f, q, jid)[b"consumer"] == b"b"
    assert claim(f, q, "c") == []
    assert f.execute_command("QACK", q, a[b"lease"]) == 0
    assert f.execute_command("QACK", q, b[b"lease"]) == 1


# ===============================================================================================
# docs/semantics.md §4.4: an expired lease is claimable by a blocked claimer within 50 ms of its deadline
# ===============================================================================================

def test_rule4_blocked_claimer_gets_an_expired_lease_at_its_deadline_on_the_daemon_clock(frozen_daemon, f, q):
    """The moment is exact on the daemon's clock: one ms before the deadline
    the claimer still waits, at the deadline it has the job (its claim is
    stamped with the deadline itself).  Time moves only by DEBUG CLOCK, so a
    stalled machine cannot make this fail."""
    jid = push(f, q)
    slow = claim_one(f, q, "slow", "LEASE", 200)
    waiter = BlockedClaim(frozen_daemon, q, "fast", "LEASE", 1000, "BLOCK", 20_000)
    wait_blocked(f, q, 1)
    advance(f, 199)
    assert qinfo(f, q)[b"consumers_blocked"] == 1, "handed out before its deadline"
    advance(f, 1)
    [job] = waiter.result()
    assert job[b"id"] == jid and job[b"lease"] != slow[b"lease"] and job[b"deliveries"] == 2
    assert job[b"deadline"] - 1000 == slow[b"deadline"]          # claimed at the deadline, on the dot
    assert f.execute_command("QACK", q, job[b"lease"]) == 1
    assert f.execute_command("QACK", q, slow[b"lease"]) == 0


def test_rule4_blocked_claimer_on_several_leases_gets_each_at_its_deadline(frozen_daemon, f, q):
    push(f, q, "a")
    a = claim_one(f, q, "x", "LEASE", 150)
    push(f, q, "b")
    b = claim_one(f, q, "x", "LEASE", 300)
    for held in (a, b):
        waiter = BlockedClaim(frozen_daemon, q, "y", "LEASE", 1000, "BLOCK", 20_000)
        wait_blocked(f, q, 1)
        advance(f, held[b"deadline"] - now(f))
        [job] = waiter.result()
        assert job[b"id"] == held[b"id"]
        assert job[b"deadline"] - 1000 == held[b"deadline"]


def test_rule4_the_daemons_own_timer_wakes_a_blocked_claimer_within_50ms_of_the_deadline(daemon, r, q):
    """On the running clock nothing moves time but the daemon's timer, armed
    for the deadline.  Lateness is read off the daemon's own clock (the new
    lease's deadline minus its length is the moment of the claim), so a
    stalled test process does not count; the 50 ms bound is checked on the
    median of five rounds, so one round that the machine stalled (it would be
    late by the stall, whatever the daemon does) cannot fail it, while a
    daemon that polled, or slept until the BLOCK timeout, would."""
    assert clock(r)[b"frozen"] == 0
    lateness = []
    for round_ in range(5):
        jid = push(r, q, f"slow-{round_}")
        slow = claim_one(r, q, "slow", "LEASE", 200)
        waiter = BlockedClaim(daemon, q, "fast", "LEASE", 1000, "BLOCK", 20_000)
        [job] = waiter.result(timeout=30)
        assert job[b"id"] == jid and job[b"lease"] != slow[b"lease"] and job[b"deliveries"] == 2
        late_ms = job[b"deadline"] - 1000 - slow[b"deadline"]
        assert late_ms >= 0, f"the job was handed out {-late_ms} ms before its deadline"
        lateness.append(late_ms)
        assert r.execute_command("QACK", q, job[b"lease"]) == 1
    print(f"\nrule 4: blocked claimer lateness after the deadline, daemon clock (ms): {lateness}")
    assert sorted(lateness)[2] <= 50, f"blocked claimers got expired jobs late: {lateness} ms"
    assert qinfo(r, q)[b"lease_expired"] == 5


# ===============================================================================================
# docs/semantics.md §4.5: deliveries == number of distinct tokens handed out
# ===============================================================================================

def test_rule5_deliveries_equal_distinct_tokens_through_every_kind_of_lease(own):
    d = own(env={**DEBUG_ENV, "LEASEQ_LEASE_DURABILITY": "fsync"})
    c = no_retry_client(d, socket_timeout=10)
    c.execute_command("DEBUG", "CLOCK", "FREEZE")
    q = unique("r5")
    jid = push(c, q, "tracked")
    tokens: list[bytes] = []

    def handed_out(job: dict) -> None:
        assert job[b"id"] == jid
        tokens.append(job[b"lease"])
        assert job[b"deliveries"] == len(set(tokens)), (job, tokens)
        check()

    def check() -> None:
        assert qget(c, q, jid)[b"deliveries"] == len(set(tokens))

    j = claim_one(c, q, "a", "LEASE", 1000)                # 1: plain claim
    handed_out(j)
    assert c.execute_command("QEXTEND", q, j[b"lease"], "LEASE", 5000)[0] is not None
    check()                                                 # extend: no new token, no bump
    assert c.execute_command("QNACK", q, j[b"lease"], "DELAY", 0) == 1
    check()                                                 # nack: no bump until the next claim
    j = claim_one(c, q, "b", "LEASE", 1000)                # 2: after a nack
    handed_out(j)
    advance(c, 1000)
    assert qget(c, q, jid)[b"state"] == b"ready"
    check()                                                 # expiry: no bump until the next claim
    j = claim_one(c, q, "c", "LEASE", 1000)                # 3: after an expired lease
    handed_out(j)
    c.execute_command("QNACK", q, j[b"lease"], "DELAY", 0)
    s = no_retry_client(d, socket_timeout=10)
    handed_out(claim_one(s, q, "session", "SESSION"))       # 4: a SESSION claim, then its connection closes
    s.close()
    wait_for(lambda: qget(c, q, jid)[b"state"] == b"ready", 5, "session lease released")
    check()
    w = d.client(protocol=3)
    conn = w.connection_pool.get_connection()
    conn.send_command("QWORK", q, "stream", "MAX", 1)       # 5: a QWORK push
    frames = [conn.read_response(push_request=True) for _ in range(2)]
    [pushed] = [fr for fr in frames if is_job_push(fr)]
    handed_out(pushed[2])
    conn.disconnect()
    wait_for(lambda: qget(c, q, jid)[b"state"] == b"ready", 5, "QWORK lease released")
    check()
    j = claim_one(c, q, "d", "COUNT", 5, "LEASE", 60_000)  # 6: last lease before the crash
    handed_out(j)
    d.kill()
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    check()                                                 # derived from the log
    advance(c, 60_000)
    j = claim_one(c, q, "e")                                # 7: tokens stay unique across restarts
    assert j[b"lease"] not in tokens
    handed_out(j)
    assert len(set(tokens)) == len(tokens) == 7


# ===============================================================================================
# docs/semantics.md §4.6: dead-lettering exactly on the (MAXDELIVERIES+1)-th attempt, provenance, QREDRIVE
# ===============================================================================================

def test_rule6_dead_lettered_on_the_fourth_attempt_with_maxdeliveries_3_and_redriven(f):
    q, dlq = unique("r6"), unique("r6-dlq")
    f.execute_command("QCREATE", q, "MAXDELIVERIES", 3, "DEADLETTER", dlq)
    jid = push(f, q, "payload-6", "PRIORITY", 7)
    for n in (1, 2, 3):
        j = claim_one(f, q)
        assert (j[b"id"], j[b"deliveries"]) == (jid, n)
        assert f.execute_command("QNACK", q, j[b"lease"], "DELAY", 0, "ERROR", f"fail {n}") == 1
        assert qget(f, q, jid)[b"state"] == b"ready"
        assert qinfo(f, q)[b"dead_lettered"] == 0, f"dead-lettered before attempt {n + 1}"
    assert claim(f, q) == [], "the 4th delivery attempt must not deliver"
    assert qget(f, q, jid) is None
    info = qinfo(f, q)
    assert (info[b"dead_lettered"], info[b"ready"], info[b"dead"]) == (1, 0, 0)
    [dead] = qscan_all(f, dlq)
    assert dead[b"state"] == b"ready" and dead[b"payload"] == b"payload-6" and dead[b"priority"] == 7
    assert dead[b"dead_letter_from"] == q.encode()
    assert dead[b"dead_letter_src_id"] == jid
    assert dead[b"dead_letter_deliveries"] == 3
    assert dead[b"dead_letter_reason"] == b"max-deliveries"
    assert dead[b"last_error"] == b"fail 3"
    # a claim on the dead-letter queue carries the provenance too (docs/semantics.md §3.3)
    seen = claim_one(f, dlq, "inspector")
    for field in (b"dead_letter_from", b"dead_letter_src_id", b"dead_letter_deliveries",
                  b"dead_letter_reason", b"last_error"):
        assert seen[field] == dead[field]
    f.execute_command("QNACK", dlq, seen[b"lease"], "DELAY", 0)
    # QREDRIVE on the dead-letter queue restores it in its source
    assert f.execute_command("QREDRIVE", dlq) == 1
    assert qinfo(f, dlq)[b"ready"] == 0
    [back] = peek(f, q)
    assert back[b"payload"] == b"payload-6" and back[b"state"] == b"ready" and back[b"deliveries"] == 0
    again = claim_one(f, q)
    assert again[b"id"] == back[b"id"] and again[b"deliveries"] == 1


def test_rule6_dead_in_place_on_the_third_attempt_by_lease_expiry_and_qredrive_restores(f):
    q = unique("r6e")
    f.execute_command("QCREATE", q, "MAXDELIVERIES", 2, "LEASE", 1000)
    jid = push(f, q, "expiring")
    assert claim_one(f, q)[b"deliveries"] == 1
    advance(f, 1000)
    assert claim_one(f, q)[b"deliveries"] == 2
    advance(f, 1000)
    assert claim(f, q) == []
    job = qget(f, q, jid)
    assert (job[b"state"], job[b"dead_reason"], job[b"deliveries"]) == (b"dead", b"max-deliveries", 2)
    assert f.execute_command("QREDRIVE", q) == 1
    job = qget(f, q, jid)
    assert (job[b"state"], job[b"deliveries"]) == (b"ready", 0)
    for n in (1, 2):                                  # a full MAXDELIVERIES again
        j = claim_one(f, q)
        assert (j[b"id"], j[b"deliveries"]) == (jid, n)
        f.execute_command("QNACK", q, j[b"lease"], "DELAY", 0)
    assert claim(f, q) == []
    assert qget(f, q, jid)[b"state"] == b"dead"


def test_rule6_a_job_past_its_limit_is_skipped_and_the_next_one_delivered(f):
    q = unique("r6s")
    f.execute_command("QCREATE", q, "MAXDELIVERIES", 1)
    a = push(f, q, "a")
    b = push(f, q, "b")
    ja = claim_one(f, q)
    assert ja[b"id"] == a
    f.execute_command("QNACK", q, ja[b"lease"], "DELAY", 0)      # a is first in claim order again
    assert ids(claim(f, q, "w", "COUNT", 1)) == [b]
    assert qget(f, q, a)[b"state"] == b"dead"


# ===============================================================================================
# docs/semantics.md §4.7 and the DELAY / AT options: never claimable before visible_at, whatever the priority
# ===============================================================================================

def test_rule7_option_delay_and_at_never_let_a_job_out_early_whatever_its_priority(f):
    q = unique("r7")
    t0 = now(f)
    low = push(f, q, "low", "PRIORITY", 0)
    high = push(f, q, "high", "PRIORITY", 9, "DELAY", 1000)
    at = push(f, q, "at", "PRIORITY", 9, "AT", t0 + 500)
    assert qget(f, q, high)[b"visible_at"] == t0 + 1000
    assert qget(f, q, at)[b"visible_at"] == t0 + 500
    assert ids(claim(f, q)) == [low]
    for step, expect in ((499, []), (1, [at]), (499, []), (1, [high])):
        advance(f, step)
        if not expect:
            assert claim(f, q, "w", "COUNT", 10) == []
            assert peek(f, q) == [] and f.execute_command("QLEN", q) == 0
        else:
            assert ids(claim(f, q, "w", "COUNT", 10)) == expect


def test_rule7_a_nacked_job_with_delay_is_not_claimable_before_visible_at(f):
    q = unique("r7n")
    jid = push(f, q, "n", "PRIORITY", 9)
    push(f, q, "filler", "PRIORITY", 0)
    j = claim_one(f, q)
    t = now(f)
    f.execute_command("QNACK", q, j[b"lease"], "DELAY", 300)
    assert qget(f, q, jid)[b"visible_at"] == t + 300
    assert ids(claim(f, q, "w", "COUNT", 10)) != [jid]
    advance(f, 299)
    assert claim(f, q, "w", "COUNT", 10) == []
    advance(f, 1)
    assert ids(claim(f, q)) == [jid]


def test_rule7_blocked_claimer_gets_a_delayed_job_at_visible_at_never_before(frozen_daemon, f, q):
    """Exact on the daemon's clock: one ms before visible_at the claimer
    still waits, at visible_at it has the job."""
    jid = push(f, q, "soon", "PRIORITY", 9, "DELAY", 300)
    visible_at = qget(f, q, jid)[b"visible_at"]
    waiter = BlockedClaim(frozen_daemon, q, "w", "LEASE", 1000, "BLOCK", 20_000)
    wait_blocked(f, q, 1)
    advance(f, visible_at - 1 - now(f))
    assert qinfo(f, q)[b"consumers_blocked"] == 1, "delivered before visible_at"
    advance(f, 1)
    [job] = waiter.result()
    assert job[b"id"] == jid
    assert job[b"deadline"] - 1000 == visible_at          # claimed at visible_at, on the dot


# ===============================================================================================
# docs/semantics.md §4.8: stale tokens are skipped by QACK / QNACK / QEXTEND, never applied
# ===============================================================================================

def test_rule8_stale_tokens_of_every_kind_are_skipped_by_qack_qnack_qextend(f):
    q = unique("r8")
    f.execute_command("QCREATE", q, "LEASE", 1000)
    a, b, c_, d = (push(f, q, n) for n in ("acked", "nacked", "reclaimed", "deleted"))
    ta = claim_one(f, q)[b"lease"]
    tb = claim_one(f, q)[b"lease"]
    tc_old = claim_one(f, q, "first")[b"lease"]
    td = claim_one(f, q)[b"lease"]
    assert f.execute_command("QACK", q, ta) == 1
    assert f.execute_command("QNACK", q, tb, "DELAY", 0) == 1
    assert f.execute_command("QDEL", q, d) == 1
    advance(f, 1000)
    # b was nacked (ready again) and c's lease expired: claim both, c now held by "second"
    held = {j[b"id"]: j for j in claim(f, q, "second", "COUNT", 2, "LEASE", 5000)}
    assert set(held) == {b, c_}
    tc_new = held[c_][b"lease"]
    stale = [ta, tb, tc_old, td, b"nonsense", b"%x.1.1" % c_, b"ffffffff.9.9"]
    before_c = qget(f, q, c_)
    before_b = qget(f, q, b)
    before_info = qinfo(f, q)
    for tok in stale:
        assert f.execute_command("QACK", q, tok) == 0, tok
        assert f.execute_command("QNACK", q, tok) == 0, tok
        assert f.execute_command("QNACK", q, tok, "DELAY", 0, "ERROR", "late") == 0, tok
        assert f.execute_command("QNACK", q, tok, "DEAD") == 0, tok
        assert f.execute_command("QEXTEND", q, tok, "LEASE", 60_000) == [None], tok
    assert qget(f, q, c_) == before_c            # same deadline, consumer, deliveries, no last_error
    assert qget(f, q, b) == before_b
    info = qinfo(f, q)
    for k in (b"acked", b"nacked", b"dead_lettered", b"in_flight", b"ready", b"dead"):
        assert info[k] == before_info[k], k
    # in a mixed list only the live token is applied
    assert f.execute_command("QEXTEND", q, tc_old, tc_new, "LEASE", 7000)[0] is None
    assert f.execute_command("QACK", q, tc_old, ta, tc_new, tc_new) == 1
    assert qget(f, q, c_) is None


def test_rule8_an_expired_token_works_until_the_job_is_claimed_again(f):
    q = unique("r8e")
    jid = push(f, q, "slow")
    tok = claim_one(f, q, "slow", "LEASE", 1000)[b"lease"]
    advance(f, 5000)
    assert qget(f, q, jid)[b"state"] == b"ready"
    assert f.execute_command("QACK", q, tok) == 1          # nobody claimed it again: still valid
    assert qget(f, q, jid) is None
    jid = push(f, q, "slow2")
    tok = claim_one(f, q, "slow", "LEASE", 1000)[b"lease"]
    advance(f, 5000)
    deadline = f.execute_command("QEXTEND", q, tok, "LEASE", 2000)[0]
    assert deadline == now(f) + 2000
    assert claim(f, q, "other") == []                      # held again: nobody else gets it
    assert qget(f, q, jid)[b"state"] == b"in_flight"
    assert f.execute_command("QACK", q, tok) == 1


# ===============================================================================================
# docs/semantics.md §4.9: after kill -9, live QINFO counters equal those before
# ===============================================================================================

def _build_live_state(c) -> tuple[str, str, str]:
    q, src, dlq = unique("r9"), unique("r9-src"), unique("r9-dlq")
    c.execute_command("QCREATE", q, "DURABILITY", "fsync", "LEASE", HOUR, "RETAIN-COMPLETED", HOUR)
    c.execute_command("QPUSHMANY", q, 12, *[f"j{i}" for i in range(12)])
    c.execute_command("QPUSHMANY", q, 3, "d1", "d2", "d3", "DELAY", HOUR)
    jobs = claim(c, q, "w", "COUNT", 6)
    c.execute_command("QACK", q, jobs[0][b"lease"])                           # completed
    c.execute_command("QNACK", q, jobs[1][b"lease"], "DEAD", "ERROR", "bad")  # dead
    c.execute_command("QNACK", q, jobs[2][b"lease"], "DELAY", HOUR)           # delayed
    # jobs 3, 4, 5 stay in flight
    c.execute_command("QCREATE", src, "DURABILITY", "fsync", "DEADLETTER", dlq)
    push(c, src, "to-dlq")
    c.execute_command("QNACK", src, claim_one(c, src)[b"lease"], "DEAD")
    return q, src, dlq


LIVE = (b"ready", b"delayed", b"in_flight", b"dead", b"completed")


def test_rule9_live_counters_are_equal_after_kill9_with_fsynced_leases(own):
    d = own(env={**DEBUG_ENV, "LEASEQ_LEASE_DURABILITY": "fsync"})
    c = no_retry_client(d, socket_timeout=10)
    c.execute_command("DEBUG", "CLOCK", "FREEZE")
    queues = _build_live_state(c)
    before = {q: {k: qinfo(c, q)[k] for k in LIVE} for q in queues}
    assert before[queues[0]] == {b"ready": 6, b"delayed": 4, b"in_flight": 3, b"dead": 1, b"completed": 1}
    assert before[queues[2]][b"ready"] == 1
    d.kill()
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    after = {q: {k: qinfo(c, q)[k] for k in LIVE} for q in queues}
    assert after == before


def test_rule9_live_counters_after_kill9_with_async_leases_only_in_flight_may_turn_ready(own):
    d = own(env={**DEBUG_ENV, "LEASEQ_LEASE_DURABILITY": "async"})
    c = no_retry_client(d, socket_timeout=10)
    c.execute_command("DEBUG", "CLOCK", "FREEZE")
    queues = _build_live_state(c)
    before = {q: {k: qinfo(c, q)[k] for k in LIVE} for q in queues}
    d.kill()
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    for q in queues:
        b, a = before[q], {k: qinfo(c, q)[k] for k in LIVE}
        assert (a[b"delayed"], a[b"dead"], a[b"completed"]) == (b[b"delayed"], b[b"dead"], b[b"completed"]), q
        lost = b[b"in_flight"] - a[b"in_flight"]
        assert lost >= 0 and a[b"ready"] == b[b"ready"] + lost, (q, b, a)


# ===============================================================================================
# docs/semantics.md §4.10: bad input gets an error reply, never crashes the daemon or corrupts the log
# ===============================================================================================

BAD_COMMANDS = [
    ("NOSUCHCOMMAND", "x"),
    ("QPUSH", "{q}"),
    ("QPUSH", "{q}", "x", "PRIORITY", "10"),
    ("QPUSH", "{q}", "x", "PRIORITY", "-1"),
    ("QPUSH", "{q}", "x", "PRIORITY", "high"),
    ("QPUSH", "{q}", "x", "DELAY", "-5"),
    ("QPUSH", "{q}", "x", "DELAY", "1.5"),
    ("QPUSH", "{q}", "x", "DELAY", "1", "AT", "5"),
    ("QPUSH", "{q}", "x", "DELAY", "99999999999999999999999"),
    ("QPUSH", "{q}", "x", "BOGUS", "1"),
    ("QPUSH", "{q}", "x", "KEY"),
    ("QPUSH", "{q}", "x", "WHILE", "queued"),
    ("QPUSH", "{q}", "x", "KEY", "k", "WHILE", "forever"),
    ("QPUSH", "{q}", "x", "PRIORITY", "1", "PRIORITY", "2"),
    ("QPUSH", "{q}", "x", "MAXDELIVERIES", "-1"),
    ("QPUSH", "{q}", "x", "EXPIRE", "soon"),
    ("QPUSH", "bad name", "x"),
    ("QPUSH", "", "x"),
    ("QPUSH", "n" * 201, "x"),
    ("QPUSH", b"\x00\xff", "x"),
    ("QPUSHMANY", "{q}", "3", "a", "b"),
    ("QPUSHMANY", "{q}", "0"),
    ("QPUSHMANY", "{q}", "-1", "a"),
    ("QPUSHMANY", "{q}", "99999999999999999999", "a"),
    ("QPUSHMANY", "{q}", "2", "a", "b", "KEYS", "k1"),
    ("QPUSHMANY", "{q}", "2", "a", "b", "KEY", "k1"),
    ("QCLAIM", "{q}"),
    ("QCLAIM", "{q}", "w", "COUNT", "0"),
    ("QCLAIM", "{q}", "w", "COUNT", "1001"),
    ("QCLAIM", "{q}", "w", "BLOCK", "-1"),
    ("QCLAIM", "{q}", "w", "LEASE", "-1"),
    ("QCLAIM", "{q}", "w", "COUNT", "1", "COUNT", "2"),
    ("QCLAIM", "{q}", "w", "FOREVER"),
    ("QACK", "{q}"),
    ("QNACK", "{q}", "tok", "DELAY", "x"),
    ("QNACK", "{q}", "tok", "DELAY", "5", "DEAD"),
    ("QNACK", "{q}", "tok", "ERROR"),
    ("QEXTEND", "{q}", "tok", "LEASE"),
    ("QEXTEND", "{q}", "tok", "LEASE", "-3"),
    ("QGET", "{q}", "abc"),
    ("QGET", "{q}", "-1"),
    ("QSCAN", "{q}", "-1"),
    ("QSCAN", "{q}", "0", "STATE", "sleeping"),
    ("QSCAN", "{q}", "0", "COUNT", "0"),
    ("QPEEK", "{q}", "COUNT", "-1"),
    ("QPURGE", "{q}", "SOME"),
    ("QDEL", "{q}", "x"),
    ("QDEL", "{q}"),
    ("QREDRIVE", "{q}", "COUNT", "0"),
    ("QCREATE", "{q}", "LEASE", "12345"),
    ("QCREATE", "{q}", "DEADLETTER", "{q}"),
    ("QALTER", "{q}", "DURABILITY", "memory"),
    ("QALTER", "{q}", "BACKOFF", "1", "nan", "1"),
    ("QALTER", "{q}", "BACKOFF", "1", "2"),
    ("QALTER", "{q}", "WINDOW", "60001"),
    ("QINFO", "no-such-queue"),
    ("QACK", "no-such-queue", "tok"),
    ("QWORK", "{q}", "w", "MAX", "0"),
    ("QWORK", "{q}", "w", "SPEED", "9"),
    ("DEBUG", "CLOCK", "ADVANCE", "-1"),
    ("DEBUG", "CLOCK", "FREEZE", "1"),
    ("DEBUG", "NOPE"),
    ("SELECT", "1"),
]

# raw byte sequences: each must get an error reply (protocol errors then close the connection;
# a bulk longer than announced is read as Redis reads it: the extra bytes are the next command)
BAD_BYTES = [
    b"*abc\r\n",
    b"*1\r\n$-7\r\n",
    b"*2\r\n$4\r\nPING\r\n:5\r\n",
    b"*1\r\n*1\r\n$4\r\nPING\r\n",
    b"*99999999999\r\n",
    b"*1\r\n$99999999999\r\n",
    b"*2\r\n$4\r\nPING\r\n$2\r\nabcdef\r\n",
    b"\x00\xff\xfe\x80 garbage\r\n",
    b'QPUSH x "unbalanced\r\n',
]


def test_rule10_bad_input_gets_errors_and_the_daemon_keeps_serving_and_its_log_replays(own):
    d = own(env=DEBUG_ENV)
    c = no_retry_client(d, socket_timeout=10)
    q = unique("r10")
    c.execute_command("QCREATE", q, "LEASE", HOUR)
    jobs = c.execute_command("QPUSHMANY", q, 3, "a", "b\x00", "c")
    held = claim_one(c, q, "w")
    before = qinfo(c, q)
    queues_before = c.execute_command("DBSIZE")
    for cmd in BAD_COMMANDS:
        args = [a.replace("{q}", q) if isinstance(a, str) else a for a in cmd]
        with pytest.raises(redis.ResponseError) as e:
            c.execute_command(*args)
        assert str(e.value).strip(), cmd
        assert c.ping() is True, f"connection unusable after {cmd}"
    for data in BAD_BYTES:
        raw = RespSocket(d.port)
        raw.send_raw(data)
        reply = raw.read_until(lambda fr: isinstance(fr, hiredis.ReplyError), limit=3)[-1]
        assert str(reply).startswith("ERR"), (data, reply)
        if "Protocol error" in str(reply):           # malformed RESP: error, then the server closes
            assert raw.closed_by_server(), data
        raw.close()
        assert c.ping() is True, f"daemon not serving after {data!r}"
    # half-sent commands, then the client goes away
    for data in (b"*3\r\n$5\r\nQPUSH\r\n$" + str(len(q)).encode() + b"\r\n" + q.encode() + b"\r\n$100\r\nabc",
                 b"*2\r\n$4\r\nQACK", b"QPUSH " + q.encode()):
        raw = RespSocket(d.port)
        raw.send_raw(data)
        raw.close()
    assert c.ping() is True
    after = qinfo(c, q)
    assert {k: after[k] for k in LIVE + (b"pushed", b"acked", b"nacked")} == \
        {k: before[k] for k in LIVE + (b"pushed", b"acked", b"nacked")}
    assert c.execute_command("DBSIZE") == queues_before, "bad input created a queue"
    assert d.proc.poll() is None
    # the log is intact: a crash and restart recovers the same state
    d.kill()
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    again = qinfo(c, q)
    assert {k: again[k] for k in LIVE} == {k: before[k] for k in LIVE}
    assert [qget(c, q, j)[b"payload"] for j in jobs] == [b"a", b"b\x00", b"c"]
    assert c.execute_command("QACK", q, held[b"lease"]) == 1


# ===============================================================================================
# Ordering (docs/semantics.md §1.6): priority, then ready-again before never-delivered, then ascending id
# ===============================================================================================

def test_option_order_priority_0_to_9_higher_first_then_ascending_id(f):
    q = unique("ord")
    prios = [3, 9, 0, 5, 9, 7, 1, 5, 2, 8, 4, 6]
    pushed = [(push(f, q, f"p{p}", "PRIORITY", p), p) for p in prios]
    expected = [jid for jid, p in sorted(pushed, key=lambda x: (-x[1], x[0]))]
    assert ids(peek(f, q, 20)) == expected
    got = [claim_one(f, q)[b"id"] for _ in prios]
    assert got == expected


def test_option_order_ready_again_jobs_before_never_delivered_then_ascending_id(f):
    q = unique("ord2")
    f.execute_command("QCREATE", q, "LEASE", 1000)
    z = push(f, q, "z-delayed-fresh", "DELAY", 100)        # smallest id, never delivered
    a, b, c_, d, e = (push(f, q, n) for n in "abcde")
    toks = {j[b"id"]: j[b"lease"] for j in claim(f, q, "w", "COUNT", 5)}
    assert set(toks) == {a, b, c_, d, e}
    f.execute_command("QACK", q, toks[a], toks[c_])
    f.execute_command("QNACK", q, toks[e], "DELAY", 500)  # ready again when the nack delay elapses
    f.execute_command("QNACK", q, toks[d], "DELAY", 0)    # ready again at once
    # b's lease expires
    late = push(f, q, "fresh-late")
    top = push(f, q, "fresh-higher-priority", "PRIORITY", 6)
    advance(f, 1000)
    expected = [top, b, d, e, z, late]
    assert ids(peek(f, q, 10)) == expected
    assert [claim_one(f, q)[b"id"] for _ in expected] == expected


def test_option_order_single_consumer_sees_fifo_within_a_priority(f):
    q = unique("fifo")
    pushed = f.execute_command("QPUSHMANY", q, 20, *[str(i) for i in range(20)])
    got = []
    for _ in range(20):
        j = claim_one(f, q)
        got.append(j[b"id"])
        f.execute_command("QACK", q, j[b"lease"])
    assert got == pushed


# ===============================================================================================
# BACKOFF: base x deliveries^exponent + random(0, jitter), capped at 86400000, when QNACK has no DELAY
# ===============================================================================================

def test_option_backoff_formula_without_jitter(f):
    q = unique("bo")
    f.execute_command("QCREATE", q, "BACKOFF", 100, 2, 0)
    jid = push(f, q, "b")
    for n in (1, 2, 3, 4):
        j = claim_one(f, q)
        assert j[b"deliveries"] == n
        t = now(f)
        assert f.execute_command("QNACK", q, j[b"lease"]) == 1
        job = qget(f, q, jid)
        assert job[b"state"] == b"delayed"
        assert job[b"visible_at"] - t == 100 * n ** 2, n
        advance(f, 100 * n ** 2 - 1)
        assert claim(f, q) == []
        advance(f, 1)


def test_option_backoff_fractional_exponent_and_jitter_stay_in_range(f):
    q = unique("boj")
    f.execute_command("QCREATE", q, "BACKOFF", 100, "1.5", 50)
    jid = push(f, q, "j")
    for n in (1, 2, 3, 4):
        j = claim_one(f, q)
        t = now(f)
        f.execute_command("QNACK", q, j[b"lease"])
        delay = qget(f, q, jid)[b"visible_at"] - t
        base = 100 * n ** 1.5
        assert int(base) <= delay <= int(base) + 50 + 1, (n, delay)
        advance(f, delay)
    # jitter is random(0, jitter): spread over many first nacks
    many = unique("boj2")
    f.execute_command("QCREATE", many, "BACKOFF", 100, 1, 50)
    f.execute_command("QPUSHMANY", many, 40, *["x"] * 40)
    t = now(f)
    jobs = claim(f, many, "w", "COUNT", 40)
    for j in jobs:
        f.execute_command("QNACK", many, j[b"lease"])
    delays = [qget(f, many, j[b"id"])[b"visible_at"] - t for j in jobs]
    assert min(delays) >= 100 and max(delays) <= 150, delays
    assert len(set(delays)) > 1, "jitter never varied"


def test_option_backoff_is_capped_at_one_day_jitter_included(f):
    q = unique("bocap")
    f.execute_command("QCREATE", q, "BACKOFF", 86_400_000, 2, 1000)
    jid = push(f, q, "c")
    j = claim_one(f, q)
    t = now(f)
    f.execute_command("QNACK", q, j[b"lease"])
    assert qget(f, q, jid)[b"visible_at"] - t == 86_400_000
    q2 = unique("bocap2")
    f.execute_command("QCREATE", q2, "BACKOFF", 50_000_000, 1, 0)
    jid2 = push(f, q2, "c")
    f.execute_command("QNACK", q2, claim_one(f, q2)[b"lease"], "DELAY", 0)
    j = claim_one(f, q2)                                   # deliveries 2: 100,000,000 ms uncapped
    t = now(f)
    f.execute_command("QNACK", q2, j[b"lease"])
    assert qget(f, q2, jid2)[b"visible_at"] - t == 86_400_000


def test_option_backoff_default_is_1s_plus_jitter_and_qnack_delay_overrides_it(f):
    q = unique("bodef")
    jid = push(f, q, "d")
    j = claim_one(f, q)
    t = now(f)
    f.execute_command("QNACK", q, j[b"lease"])
    assert 1000 <= qget(f, q, jid)[b"visible_at"] - t <= 2000
    advance(f, 2000)
    j = claim_one(f, q)
    t = now(f)
    f.execute_command("QNACK", q, j[b"lease"], "DELAY", 250)
    assert qget(f, q, jid)[b"visible_at"] - t == 250
    advance(f, 250)
    j = claim_one(f, q)
    f.execute_command("QNACK", q, j[b"lease"], "DELAY", 0)
    assert qget(f, q, jid)[b"state"] == b"ready"


# ===============================================================================================
# MAXDELIVERIES per queue and per job; QNACK DEAD
# ===============================================================================================

def test_option_maxdeliveries_per_queue_and_per_job(f):
    q = unique("md")
    f.execute_command("QCREATE", q, "MAXDELIVERIES", 2)
    a = push(f, q, "queue-limit")
    b = push(f, q, "job-limit-4", "MAXDELIVERIES", 4)
    c_ = push(f, q, "job-limit-1", "MAXDELIVERIES", 1)
    assert qget(f, q, b)[b"maxdeliveries"] == 4
    delivered = {a: 0, b: 0, c_: 0}
    for _ in range(10):
        jobs = claim(f, q, "w", "COUNT", 3)
        if not jobs:
            break
        for j in jobs:
            delivered[j[b"id"]] += 1
            assert j[b"deliveries"] == delivered[j[b"id"]]
        f.execute_command("QNACK", q, *[j[b"lease"] for j in jobs], "DELAY", 0)
    assert delivered == {a: 2, b: 4, c_: 1}
    for jid in (a, b, c_):
        job = qget(f, q, jid)
        assert (job[b"state"], job[b"dead_reason"]) == (b"dead", b"max-deliveries")
    assert qinfo(f, q)[b"dead"] == 3


def test_option_qpushmany_maxdeliveries_applies_to_every_job(f):
    q = unique("mdm")
    got = f.execute_command("QPUSHMANY", q, 2, "x", "y", "MAXDELIVERIES", 1)
    jobs = claim(f, q, "w", "COUNT", 2)
    f.execute_command("QNACK", q, *[j[b"lease"] for j in jobs], "DELAY", 0)
    assert claim(f, q, "w", "COUNT", 2) == []
    assert [qget(f, q, j)[b"state"] for j in got] == [b"dead", b"dead"]


def test_option_qnack_dead_dead_letters_now_with_reason_nack_and_error_as_last_error(f):
    q, dlq = unique("nd"), unique("nd-dlq")
    f.execute_command("QCREATE", q, "DEADLETTER", dlq)
    jid = push(f, q, "poison")
    j = claim_one(f, q)
    assert f.execute_command("QNACK", q, j[b"lease"], "DEAD", "ERROR", "bad input") == 1
    assert qget(f, q, jid) is None
    [dead] = qscan_all(f, dlq)
    assert dead[b"dead_letter_reason"] == b"nack"
    assert dead[b"last_error"] == b"bad input"
    assert (dead[b"dead_letter_from"], dead[b"dead_letter_src_id"], dead[b"dead_letter_deliveries"]) == \
        (q.encode(), jid, 1)
    assert f.execute_command("QACK", q, j[b"lease"]) == 0
    # without DEADLETTER it stays dead in its own queue
    own_q = unique("nd2")
    jid = push(f, own_q, "poison")
    f.execute_command("QNACK", own_q, claim_one(f, own_q)[b"lease"], "ERROR", "boom", "DEAD")
    job = qget(f, own_q, jid)
    assert (job[b"state"], job[b"dead_reason"], job[b"last_error"]) == (b"dead", b"nack", b"boom")
    assert "DELAY and DEAD" in error_text(f, "QNACK", own_q, "1.1.1", "DELAY", 5, "DEAD")


# ===============================================================================================
# EXPIRE per queue and per job
# ===============================================================================================

def test_option_expire_per_queue_checked_at_delivery_not_interrupting_a_job_in_flight(f):
    q, dlq = unique("ex"), unique("ex-dlq")
    f.execute_command("QCREATE", q, "EXPIRE", 1000, "DEADLETTER", dlq)
    a = push(f, q, "a")
    b = push(f, q, "b")
    advance(f, 1000)                                 # age == EXPIRE: not older yet
    ja = claim_one(f, q)
    assert ja[b"id"] == a
    advance(f, 1)
    assert claim(f, q) == []                         # b is older than EXPIRE: dead-lettered
    assert qget(f, q, b) is None
    [dead] = qscan_all(f, dlq)
    assert (dead[b"dead_letter_src_id"], dead[b"dead_letter_reason"]) == (b, b"expired")
    advance(f, 10_000)
    assert qget(f, q, a)[b"state"] == b"in_flight"   # in flight: not interrupted
    assert f.execute_command("QEXTEND", q, ja[b"lease"])[0] is not None
    assert f.execute_command("QACK", q, ja[b"lease"]) == 1
    assert qinfo(f, q)[b"dead_lettered"] == 1


def test_option_expire_per_job_overrides_the_queues(f):
    q = unique("exj")
    f.execute_command("QCREATE", q, "EXPIRE", 1000)
    long_ = push(f, q, "long", "EXPIRE", 5000)
    short = push(f, q, "short", "EXPIRE", 200)
    plain = push(f, q, "plain")
    assert qget(f, q, short)[b"expire"] == 200
    advance(f, 201)
    jobs = claim(f, q, "w", "COUNT", 3)
    assert ids(jobs) == [long_, plain]
    assert (qget(f, q, short)[b"state"], qget(f, q, short)[b"dead_reason"]) == (b"dead", b"expired")
    f.execute_command("QNACK", q, *[j[b"lease"] for j in jobs], "DELAY", 0)
    advance(f, 800)                                  # age 1001
    jobs = claim(f, q, "w", "COUNT", 3)
    assert ids(jobs) == [long_]
    assert qget(f, q, plain)[b"dead_reason"] == b"expired"
    f.execute_command("QNACK", q, jobs[0][b"lease"], "DELAY", 0)
    advance(f, 4000)                                 # age 5001
    assert claim(f, q) == []
    assert qget(f, q, long_)[b"state"] == b"dead"


def test_option_expire_on_a_queue_without_expire(f):
    q = unique("exn")
    jid = push(f, q, "e", "EXPIRE", 100)
    keep = push(f, q, "keep")
    advance(f, 101)
    assert ids(claim(f, q, "w", "COUNT", 5)) == [keep]
    assert qget(f, q, jid)[b"state"] == b"dead"


# ===============================================================================================
# DEADLETTER, RETAIN-DEAD, QREDRIVE, RETAIN-COMPLETED
# ===============================================================================================

def test_option_deadletter_queue_is_created_on_demand_with_defaults(f):
    q, dlq = unique("dl"), unique("dl-target")
    f.execute_command("QCREATE", q, "DEADLETTER", dlq, "MAXDELIVERIES", 1, "LEASE", 5000)
    assert "NOQUEUE" in error_text(f, "QINFO", dlq)
    push(f, q, "x")
    f.execute_command("QNACK", q, claim_one(f, q)[b"lease"], "DELAY", 0)
    assert claim(f, q) == []
    info = qinfo(f, dlq)
    assert info[b"ready"] == 1
    assert (info[b"lease"], info[b"maxdeliveries"], info[b"deadletter"]) == (30000, 0, None)


def test_option_without_deadletter_dead_job_stays_for_retain_dead_then_disappears(f):
    q = unique("rd")
    f.execute_command("QCREATE", q, "RETAIN-DEAD", 1000)
    jid = push(f, q, "x")
    f.execute_command("QNACK", q, claim_one(f, q)[b"lease"], "DEAD")
    assert qget(f, q, jid)[b"state"] == b"dead"
    assert qinfo(f, q)[b"dead"] == 1
    advance(f, 999)
    assert qget(f, q, jid)[b"state"] == b"dead"
    advance(f, 2)
    assert qget(f, q, jid) is None
    assert qinfo(f, q)[b"dead"] == 0


def test_option_retain_dead_default_is_seven_days(f):
    q = unique("rd7")
    jid = push(f, q, "x")
    f.execute_command("QNACK", q, claim_one(f, q)[b"lease"], "DEAD")
    advance(f, 604_800_000 - 1000)
    assert qget(f, q, jid)[b"state"] == b"dead"
    advance(f, 2000)
    assert qget(f, q, jid) is None


def test_option_qredrive_on_the_source_dead_to_ready_with_deliveries_0_and_count(f):
    q = unique("red")
    f.execute_command("QCREATE", q, "MAXDELIVERIES", 1)
    jids = f.execute_command("QPUSHMANY", q, 3, "a", "b", "c")
    jobs = claim(f, q, "w", "COUNT", 3)
    f.execute_command("QNACK", q, *[j[b"lease"] for j in jobs], "DELAY", 0, "ERROR", "e")
    assert claim(f, q) == []
    assert qinfo(f, q)[b"dead"] == 3
    assert f.execute_command("QREDRIVE", q, "COUNT", 2) == 2
    info = qinfo(f, q)
    assert (info[b"dead"], info[b"ready"]) == (1, 2)
    assert f.execute_command("QREDRIVE", q) == 1
    for jid in jids:
        job = qget(f, q, jid)
        assert (job[b"state"], job[b"deliveries"]) == (b"ready", 0)
    assert sorted(ids(claim(f, q, "w", "COUNT", 3))) == sorted(jids)
    assert f.execute_command("QREDRIVE", q) == 0


def test_option_qredrive_on_a_deadletter_queue_moves_ready_jobs_back_to_their_sources(f):
    s1, s2, dlq = unique("src1"), unique("src2"), unique("shared-dlq")
    for s in (s1, s2):
        f.execute_command("QCREATE", s, "DEADLETTER", dlq)
    for s, payload in ((s1, "one"), (s1, "two"), (s2, "three")):
        push(f, s, payload)
        f.execute_command("QNACK", s, claim_one(f, s)[b"lease"], "DEAD", "ERROR", f"err-{payload}")
    assert qinfo(f, dlq)[b"ready"] == 3
    busy = claim_one(f, dlq, "inspector")                   # "one", in flight: not moved
    assert busy[b"payload"] == b"one"
    assert f.execute_command("QREDRIVE", dlq) == 2
    info = qinfo(f, dlq)
    assert (info[b"ready"], info[b"in_flight"]) == (0, 1)
    [two] = peek(f, s1)
    [three] = peek(f, s2)
    assert (two[b"payload"], two[b"state"], two[b"deliveries"], two[b"last_error"]) == \
        (b"two", b"ready", 0, b"err-two")
    assert (three[b"payload"], three[b"state"]) == (b"three", b"ready")
    assert claim_one(f, s2)[b"payload"] == b"three"


def test_option_qredrive_gives_an_expired_job_a_new_chance_in_place_as_via_a_deadletter_queue(f):
    """QREDRIVE restores a dead job (docs/semantics.md §4.6).  Via a dead-letter queue an
    expired job comes back deliverable; redriven in place it must be too."""
    via, dlq, in_place = unique("rx-via"), unique("rx-dlq"), unique("rx-in")
    f.execute_command("QCREATE", via, "EXPIRE", 1000, "DEADLETTER", dlq)
    f.execute_command("QCREATE", in_place, "EXPIRE", 1000)
    push(f, via, "via")
    jid = push(f, in_place, "in-place")
    advance(f, 1001)
    assert claim(f, via) == [] and claim(f, in_place) == []
    assert qget(f, in_place, jid)[b"dead_reason"] == b"expired"
    assert f.execute_command("QREDRIVE", dlq) == 1
    assert claim_one(f, via)[b"payload"] == b"via"
    assert f.execute_command("QREDRIVE", in_place) == 1
    assert qget(f, in_place, jid)[b"state"] == b"ready"
    got = claim(f, in_place)
    assert ids(got) == [jid], (f"QREDRIVE answered 1 and QGET shows it ready, but the next QCLAIM "
                               f"dead-letters it again: {qget(f, in_place, jid)}")


def test_option_retain_completed_keeps_acked_jobs_until_the_retention_passes(f):
    q = unique("rc")
    f.execute_command("QCREATE", q, "RETAIN-COMPLETED", 1000)
    jid = push(f, q, "done")
    assert f.execute_command("QACK", q, claim_one(f, q)[b"lease"]) == 1
    job = qget(f, q, jid)
    assert job[b"state"] == b"completed" and job[b"payload"] == b"done"
    info = qinfo(f, q)
    assert (info[b"completed"], info[b"acked"], info[b"ready"]) == (1, 1, 0)
    assert claim(f, q) == []
    advance(f, 999)
    assert qget(f, q, jid)[b"state"] == b"completed"
    advance(f, 2)
    assert qget(f, q, jid) is None
    assert qinfo(f, q)[b"completed"] == 0
    plain = unique("rc0")                                    # default 0: gone at once
    jid = push(f, plain, "done")
    f.execute_command("QACK", plain, claim_one(f, plain)[b"lease"])
    assert qget(f, plain, jid) is None


# ===============================================================================================
# Dedupe: KEY ... WHILE queued|active|exists, QPUSHMANY KEYS, duplicates, restart
# ===============================================================================================

def test_option_dedupe_while_queued_covers_ready_and_delayed_only(f):
    q = unique("dq")
    first = push(f, q, "a", "KEY", "k")
    assert push(f, q, "again", "KEY", "k") == first
    assert push(f, q, "again", "KEY", "k", "WHILE", "queued") == first
    delayed = push(f, q, "d", "KEY", "kd", "DELAY", 5000)
    assert push(f, q, "d2", "KEY", "kd") == delayed
    assert qinfo(f, q)[b"duplicates"] == 3
    assert qinfo(f, q)[b"pushed"] == 2
    got = claim_one(f, q)
    assert (got[b"id"], got[b"key"]) == (first, b"k")          # in flight: outside 'queued'
    second = push(f, q, "b", "KEY", "k")
    assert second != first
    assert qinfo(f, q)[b"duplicates"] == 3
    assert qget(f, q, first)[b"key"] == b"k"


def test_option_dedupe_while_active_covers_in_flight(f):
    q = unique("da")
    first = push(f, q, "a", "KEY", "k", "WHILE", "active")
    tok = claim_one(f, q)[b"lease"]
    assert push(f, q, "again", "KEY", "k", "WHILE", "active") == first
    assert qinfo(f, q)[b"duplicates"] == 1
    f.execute_command("QACK", q, tok)
    assert push(f, q, "after", "KEY", "k", "WHILE", "active") != first


def test_option_dedupe_while_exists_covers_retained_completed_and_dead(f):
    q = unique("de")
    f.execute_command("QCREATE", q, "RETAIN-COMPLETED", 1000, "RETAIN-DEAD", 1000)
    done = push(f, q, "a", "KEY", "done", "WHILE", "exists")
    f.execute_command("QACK", q, claim_one(f, q)[b"lease"])
    assert qget(f, q, done)[b"state"] == b"completed"
    assert push(f, q, "x", "KEY", "done", "WHILE", "exists") == done
    assert push(f, q, "x", "KEY", "done", "WHILE", "active") != done   # scopes differ
    f.execute_command("QPURGE", q, "ALL")
    dead = push(f, q, "b", "KEY", "dead")
    f.execute_command("QNACK", q, claim_one(f, q)[b"lease"], "DEAD")
    assert push(f, q, "x", "KEY", "dead", "WHILE", "exists") == dead
    assert qinfo(f, q)[b"duplicates"] == 2
    advance(f, 1001)                                         # retention over: the key is free
    assert push(f, q, "x", "KEY", "dead", "WHILE", "exists") != dead


def test_option_dedupe_qpushmany_keys_returns_existing_ids_and_counts_duplicates(f):
    q = unique("dm")
    first = f.execute_command("QPUSHMANY", q, 3, "a", "b", "c", "KEYS", "k1", "k2", "k3")
    assert len(set(first)) == 3
    again = f.execute_command("QPUSHMANY", q, 3, "x", "y", "z", "KEYS", "k2", "k4", "k4")
    assert again[0] == first[1]
    assert again[1] not in first and again[2] == again[1]
    info = qinfo(f, q)
    assert info[b"pushed"] == 4 and info[b"duplicates"] == 2
    assert qget(f, q, again[1])[b"payload"] == b"y"
    # WHILE after KEYS
    claim_one(f, q)                                          # k1 in flight
    third = f.execute_command("QPUSHMANY", q, 2, "p", "q", "KEYS", "k1", "k5", "WHILE", "active")
    assert third[0] == first[0] and third[1] not in first + again


def test_option_dedupe_keys_are_per_queue(f):
    q1, q2 = unique("dk1"), unique("dk2")
    a = push(f, q1, "a", "KEY", "same")
    push(f, q2, "b", "KEY", "same")
    assert qinfo(f, q2)[b"duplicates"] == 0
    assert push(f, q1, "c", "KEY", "same") == a


def test_option_dedupe_older_job_still_in_flight_holds_its_key_while_active(f):
    """Two jobs may share a key (the first went in flight, so WHILE queued let a
    second in); when the second is acked, the first still holds the key in the
    active scope."""
    q = unique("dold")
    first = push(f, q, "first", "KEY", "k")
    first_tok = claim_one(f, q)[b"lease"]
    second = push(f, q, "second", "KEY", "k")            # first is in flight: outside 'queued'
    assert second != first
    f.execute_command("QACK", q, claim_one(f, q)[b"lease"])
    assert qget(f, q, first)[b"state"] == b"in_flight"
    got = push(f, q, "third", "KEY", "k", "WHILE", "active")
    assert got == first, f"job {first} is in flight with key 'k' but QPUSH WHILE active created job {got}"
    f.execute_command("QACK", q, first_tok)


def test_option_dedupe_keys_survive_a_restart(own):
    d = own(env=DEBUG_ENV)
    c = no_retry_client(d, socket_timeout=10)
    q = unique("dr")
    c.execute_command("QCREATE", q, "DURABILITY", "fsync", "RETAIN-COMPLETED", HOUR)
    k1 = push(c, q, "a", "KEY", "k1")
    many = c.execute_command("QPUSHMANY", q, 2, "b", "c", "KEYS", "k2", "k3")
    done = push(c, q, "d", "KEY", "k4", "WHILE", "exists", "PRIORITY", 9)
    c.execute_command("QACK", q, claim_one(c, q)[b"lease"])
    assert qget(c, q, done)[b"state"] == b"completed"
    d.kill()
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    base = qinfo(c, q)[b"duplicates"]
    assert push(c, q, "a2", "KEY", "k1") == k1
    assert c.execute_command("QPUSHMANY", q, 2, "x", "y", "KEYS", "k3", "k2") == many[::-1]
    assert push(c, q, "d2", "KEY", "k4", "WHILE", "exists") == done
    assert qinfo(c, q)[b"duplicates"] == base + 4


# ===============================================================================================
# Claim fairness (docs/semantics.md §3.3): blocked claimers share arriving jobs in proportion to COUNT
# ===============================================================================================

def _block_in_order(daemon, r, q, counts) -> list[BlockedClaim]:
    claimers = []
    for i, n in enumerate(counts):
        claimers.append(BlockedClaim(daemon, q, f"c{i}", "COUNT", n, "BLOCK", 10_000))
        wait_blocked(r, q, i + 1)                     # a known waiting order
    return claimers


def test_option_fairness_ten_blocked_claimers_share_a_qpushmany_of_50(daemon, r, q):
    r.execute_command("QCREATE", q)
    claimers = _block_in_order(daemon, r, q, [10] * 10)
    pushed = r.execute_command("QPUSHMANY", q, 50, *[f"j{i}" for i in range(50)])
    split = [len(c.result()) for c in claimers]
    print(f"\nfairness: 10 claimers COUNT 10, QPUSHMANY 50 -> {split}")
    got = [jid for c in claimers for jid in ids(c.reply)]
    assert sorted(got) == sorted(pushed)
    assert all(4 <= n <= 6 for n in split), f"not about 5 each: {split}"


def test_option_fairness_is_proportional_to_count(daemon, r, q):
    r.execute_command("QCREATE", q)
    counts = [20, 20, 10, 10, 5, 5]
    claimers = _block_in_order(daemon, r, q, counts)
    r.execute_command("QPUSHMANY", q, 35, *["x"] * 35)
    split = [len(c.result()) for c in claimers]
    print(f"\nfairness: COUNT {counts}, QPUSHMANY 35 -> {split}")
    assert sum(split) == 35
    for n, c in zip(split, counts):
        assert abs(n - 35 * c / 70) <= 1.5, f"not proportional to COUNT: {split}"


def test_option_fairness_holds_whatever_the_window(daemon, r, q):
    r.execute_command("QCREATE", q, "WINDOW", 200)
    claimers = _block_in_order(daemon, r, q, [10] * 4)
    r.execute_command("QPUSHMANY", q, 20, *["x"] * 20)
    split = [len(c.result()) for c in claimers]
    assert split == [5, 5, 5, 5], split


# ===============================================================================================
# WINDOW: claims that find jobs waiting gather into a cohort divided evenly
# ===============================================================================================

def _concurrent_claims(daemon, q, n, *options) -> list[list[dict]]:
    barrier = threading.Barrier(n)
    out: list = [None] * n

    def run(i: int) -> None:
        c = daemon.client(protocol=2)
        c.ping()
        barrier.wait(10)
        out[i] = claim(c, q, f"c{i}", *options)
        c.close()

    threads = [CheckedThread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
        assert not t.is_alive()
        assert t.failure is None, t.failure
    return out


def test_option_window_divides_waiting_jobs_evenly_among_a_cohort(daemon, r, q):
    r.execute_command("QCREATE", q, "WINDOW", 500)
    pushed = r.execute_command("QPUSHMANY", q, 30, *[f"j{i}" for i in range(30)])
    replies = _concurrent_claims(daemon, q, 3, "COUNT", 30)
    split = sorted(len(x) for x in replies)
    assert split == [10, 10, 10], split
    assert sorted(jid for x in replies for jid in ids(x)) == sorted(pushed)


def test_option_window_0_is_greedy_first_claim_takes_all(daemon, r, q):
    r.execute_command("QCREATE", q)
    r.execute_command("QPUSHMANY", q, 30, *["x"] * 30)
    replies = _concurrent_claims(daemon, q, 3, "COUNT", 30)
    assert sorted(len(x) for x in replies) == [0, 0, 30]


def test_option_window_cohort_member_that_gets_nothing_answers_an_empty_array(daemon, r, q):
    r.execute_command("QCREATE", q, "WINDOW", 500)
    r.execute_command("QPUSHMANY", q, 2, "a", "b")
    replies = _concurrent_claims(daemon, q, 3, "COUNT", 5)
    assert sorted(len(x) for x in replies) == [0, 1, 1]


def test_option_window_cohort_claim_with_a_short_block_still_gets_its_share(daemon, r, q):
    """A claim that finds jobs waiting waits for the window, then gets its
    share; a BLOCK shorter than the window must not turn that into nothing."""
    r.execute_command("QCREATE", q, "WINDOW", 400)
    pushed = r.execute_command("QPUSHMANY", q, 4, "a", "b", "c", "d")
    waiter = BlockedClaim(daemon, q, "w", "COUNT", 4, "BLOCK", 100)
    got = waiter.result()
    assert sorted(ids(got)) == sorted(pushed), \
        f"4 jobs were waiting but QCLAIM COUNT 4 BLOCK 100 answered {got} after " \
        f"{(waiter.t_reply - waiter.t_sent) * 1000:.0f} ms"


# ===============================================================================================
# SESSION
# ===============================================================================================

def test_option_session_leases_go_back_to_ready_when_the_connection_closes_and_only_them(daemon, r, q):
    r.execute_command("QCREATE", q, "LEASE", HOUR)
    r.execute_command("QPUSHMANY", q, 4, "a", "b", "c", "d")
    s = daemon.client(protocol=2)
    session = claim(s, q, "s", "COUNT", 2, "SESSION")
    plain = claim_one(s, q, "s")
    acked = claim_one(s, q, "s", "SESSION")
    assert s.execute_command("QACK", q, acked[b"lease"]) == 1
    s.close()
    wait_for(lambda: qinfo(r, q)[b"in_flight"] == 1, 5, "session leases released")
    for j in session:
        job = qget(r, q, j[b"id"])
        assert (job[b"state"], job[b"deliveries"]) == (b"ready", 1)
    assert qget(r, q, plain[b"id"])[b"state"] == b"in_flight"
    info = qinfo(r, q)
    assert (info[b"ready"], info[b"nacked"], info[b"acked"]) == (2, 0, 1)
    assert r.execute_command("QACK", q, *[j[b"lease"] for j in session]) == 0    # stale now
    again = claim(r, q, "next", "COUNT", 2)
    assert sorted(ids(again)) == sorted(ids(session))
    assert {j[b"deliveries"] for j in again} == {2}


def test_option_session_on_a_blocked_claim(daemon, r, q):
    waiter = BlockedClaim(daemon, q, "s", "BLOCK", 5000, "SESSION", close=False)
    wait_blocked(r, q, 1)
    jid = push(r, q, "x")
    [job] = waiter.result()
    assert job[b"id"] == jid
    assert qget(r, q, jid)[b"state"] == b"in_flight"
    waiter.client.close()
    wait_for(lambda: qget(r, q, jid)[b"state"] == b"ready", 5, "blocked SESSION lease released")


def test_option_session_close_leaves_alone_a_lease_someone_else_took_after_expiry(frozen_daemon, f):
    q = unique("sx")
    jid = push(f, q, "x")
    s = frozen_daemon.client(protocol=2)
    old = claim_one(s, q, "s", "SESSION", "LEASE", 1000)
    advance(f, 1000)
    new = claim_one(f, q, "other", "LEASE", 60_000)
    assert new[b"id"] == jid
    s.close()
    # the close is seen by the daemon at once; the other holder keeps its lease
    wait_for(lambda: f.execute_command("CLIENT", "LIST").count(b"\n") == 1, 5, "session connection gone")
    job = qget(f, q, jid)
    assert (job[b"state"], job[b"consumer"], job[b"deliveries"]) == (b"in_flight", b"other", 2)
    assert f.execute_command("QACK", q, old[b"lease"]) == 0
    assert f.execute_command("QACK", q, new[b"lease"]) == 1


# ===============================================================================================
# QWORK push mode
# ===============================================================================================

def _read_frames_until(conn, predicate, limit=50) -> list:
    frames = []
    for _ in range(limit):
        frames.append(conn.read_response(push_request=True))
        if predicate(frames[-1]):
            return frames
    raise AssertionError(f"no matching frame: {frames}")


def test_option_qwork_resp3_push_frames_max_acks_here_and_elsewhere_and_release_on_close(daemon, r, q):
    r.execute_command("QCREATE", q, "LEASE", HOUR)
    pushed = r.execute_command("QPUSHMANY", q, 6, *[f"j{i}" for i in range(6)])
    w = daemon.client(protocol=3)
    conn = w.connection_pool.get_connection()
    conn.send_command("QWORK", q, "stream", "MAX", 2)
    frames = _read_frames_until(conn, lambda fr: fr == b"OK")
    conn.send_command("PING")                              # barrier: every push so far came before PONG
    frames += _read_frames_until(conn, lambda fr: fr == b"PONG")
    jobs = [fr for fr in frames if is_job_push(fr)]
    assert len(jobs) == 2, frames
    for fr in jobs:
        assert isinstance(fr, hiredis.PushNotification), type(fr)     # a RESP3 '>' frame
        assert fr[1] == q.encode() and isinstance(fr[2], dict)
    assert [fr[2][b"id"] for fr in jobs] == pushed[:2]
    info = qinfo(r, q)
    assert (info[b"in_flight"], info[b"ready"]) == (2, 4)
    # ack on the same connection: an ordinary reply, then a replacement push
    conn.send_command("QACK", q, jobs[0][2][b"lease"])
    frames = _read_frames_until(conn, lambda fr: fr == 1)
    conn.send_command("PING")
    frames += _read_frames_until(conn, lambda fr: fr == b"PONG")
    more = [fr for fr in frames if is_job_push(fr)]
    assert [fr[2][b"id"] for fr in more] == [pushed[2]]
    # ack on another connection makes room too
    assert r.execute_command("QACK", q, jobs[1][2][b"lease"]) == 1
    [fr] = [x for x in _read_frames_until(conn, is_job_push)]
    assert fr[2][b"id"] == pushed[3]
    assert qinfo(r, q)[b"in_flight"] == 2
    # closing the stream releases every lease it holds
    conn.disconnect()
    wait_for(lambda: qinfo(r, q)[b"in_flight"] == 0, 5, "QWORK leases released on close")
    assert qinfo(r, q)[b"ready"] == 4
    for jid in pushed[2:4]:
        job = qget(r, q, jid)
        assert (job[b"state"], job[b"deliveries"]) == (b"ready", 1)
    w.close()


def test_option_qwork_resp2_arrays_on_a_raw_socket_and_max_n(daemon, r, q):
    r.execute_command("QCREATE", q, "LEASE", HOUR)
    pushed = r.execute_command("QPUSHMANY", q, 5, *[f"j{i}" for i in range(5)])
    raw = RespSocket(daemon.port)
    raw.send("QWORK", q, "w2", "MAX", 3)
    frames = raw.read_until(lambda fr: fr == b"OK")
    for _ in range(3 - len([fr for fr in frames if is_job_push(fr)])):
        frames += raw.read_until(is_job_push)
    raw.send("PING")                  # sent after the pushes were made: nothing more may come before PONG
    frames += raw.read_until(lambda fr: fr == b"PONG")
    jobs = [fr for fr in frames if is_job_push(fr)]
    assert len(jobs) == 3, frames
    for fr in jobs:
        assert type(fr) is list and fr[1] == q.encode()          # a plain RESP2 array
        assert isinstance(fr[2], list)
    maps = [as_map(fr[2]) for fr in jobs]
    assert [m[b"id"] for m in maps] == pushed[:3]
    # MAX 3: a new job is not pushed while 3 are held
    extra = push(r, q, "extra")
    raw.send("PING")
    assert [fr for fr in raw.read_until(lambda fr: fr == b"PONG") if is_job_push(fr)] == []
    assert qinfo(r, q)[b"in_flight"] == 3
    # QNACK on the same connection: ordinary reply, then a replacement
    raw.send("QNACK", q, maps[0][b"lease"], "DELAY", 0)
    frames = raw.read_until(lambda fr: fr == 1)
    if not any(is_job_push(x) for x in frames):
        frames += raw.read_until(is_job_push)
    [fr] = [x for x in frames if is_job_push(x)]
    assert as_map(fr[2])[b"id"] == pushed[0]                      # nacked: ready again, first in order
    raw.close()
    wait_for(lambda: qinfo(r, q)[b"in_flight"] == 0, 5, "QWORK leases released on close")
    assert qinfo(r, q)[b"ready"] == 6
    assert qget(r, q, extra)[b"deliveries"] == 0


def test_option_qwork_an_expired_lease_no_longer_takes_a_slot(frozen_daemon, f):
    """The server keeps up to MAX jobs *leased* to the stream: when a lease
    expires the job is claimable again and the stream has room again."""
    q = unique("wx")
    f.execute_command("QCREATE", q, "LEASE", 1000)
    a = push(f, q, "a")
    push(f, q, "b")
    raw = RespSocket(frozen_daemon.port, timeout=3)
    raw.send("QWORK", q, "w", "MAX", 1)
    frames = raw.read_until(lambda fr: fr == b"OK")
    if not any(is_job_push(fr) for fr in frames):
        frames += raw.read_until(is_job_push)
    [first] = [as_map(fr[2]) for fr in frames if is_job_push(fr)]
    assert first[b"id"] == a
    advance(f, 1000)                                  # a's lease is over
    try:
        [fr] = raw.read_until(is_job_push, limit=1)
    except socket.timeout:
        pytest.fail(f"lease of job {a} expired but the MAX 1 stream was pushed nothing within 3 s "
                    f"(QINFO in_flight {qinfo(f, q)[b'in_flight']}, ready {qinfo(f, q)[b'ready']})")
    nxt = as_map(fr[2])
    assert nxt[b"lease"] != first[b"lease"]
    assert (nxt[b"id"], nxt[b"deliveries"]) == (a, 2)          # ready again: first in claim order
    assert qinfo(f, q)[b"in_flight"] == 1
    raw.close()


# ===============================================================================================
# QPEEK, QSCAN, QDEL, QPURGE
# ===============================================================================================

def test_option_qpeek_shows_claim_order_without_leasing(f):
    q = unique("pk")
    a = push(f, q, "a", "PRIORITY", 5)
    b = push(f, q, "b", "PRIORITY", 9)
    push(f, q, "c", "PRIORITY", 9, "DELAY", 100)
    d = push(f, q, "d", "PRIORITY", 0)
    assert ids(peek(f, q)) == [b, a, d]
    assert ids([as_map(j) for j in f.execute_command("QPEEK", q)]) == [b]          # COUNT default 1
    assert ids(peek(f, q, 2)) == [b, a]
    info = qinfo(f, q)
    assert (info[b"in_flight"], info[b"ready"]) == (0, 3)
    assert qget(f, q, b)[b"deliveries"] == 0
    assert ids(claim(f, q, "w", "COUNT", 3)) == [b, a, d]


def _mixed_states(f, q) -> dict[bytes, list[int]]:
    """Two jobs in each state."""
    f.execute_command("QCREATE", q, "RETAIN-COMPLETED", HOUR, "LEASE", HOUR)
    jids = f.execute_command("QPUSHMANY", q, 8, *[f"j{i}" for i in range(8)])
    delayed = f.execute_command("QPUSHMANY", q, 2, "d1", "d2", "DELAY", HOUR)
    jobs = claim(f, q, "w", "COUNT", 6)
    f.execute_command("QACK", q, jobs[0][b"lease"], jobs[1][b"lease"])
    f.execute_command("QNACK", q, jobs[2][b"lease"], jobs[3][b"lease"], "DEAD")
    return {b"completed": jids[:2], b"dead": jids[2:4], b"in_flight": jids[4:6], b"ready": jids[6:8],
            b"delayed": delayed, b"tokens": [jobs[4][b"lease"], jobs[5][b"lease"]]}


def test_option_qscan_cursor_0_starts_and_ends_and_state_filter_and_count(f):
    q = unique("sc")
    states = _mixed_states(f, q)
    every = sorted(j for k, v in states.items() if k != b"tokens" for j in v)
    cursor, seen, calls = b"0", [], 0
    for _ in range(100):
        cursor, jobs = f.execute_command("QSCAN", q, cursor, "COUNT", 3)
        calls += 1
        assert len(jobs) <= 3
        seen += [as_map(j) for j in jobs]
        if cursor == b"0":
            break
    assert cursor == b"0" and calls >= 4
    assert sorted(ids(seen)) == every
    for j in seen:
        assert j[b"id"] in states[j[b"state"]]
    for state in (b"ready", b"delayed", b"in_flight", b"dead", b"completed"):
        got = qscan_all(f, q, "STATE", state, count=4)
        assert sorted(ids(got)) == sorted(states[state]), state
        assert {j[b"state"] for j in got} == {state}


def test_option_qscan_returns_every_job_present_for_the_whole_scan_exactly_once_under_churn(f):
    q = unique("scc")
    f.execute_command("QCREATE", q, "LEASE", HOUR)
    start = f.execute_command("QPUSHMANY", q, 150, *[f"s{i}" for i in range(150)])
    rnd = random.Random(7)
    doomed = set(rnd.sample(start, 40))            # deleted during the scan, ahead of and behind the cursor
    stays = set(start) - doomed
    doomed_left = sorted(doomed)
    rnd.shuffle(doomed_left)
    returned: list[int] = []
    cursor = b"0"
    for step in range(1000):
        cursor, jobs = f.execute_command("QSCAN", q, cursor, "COUNT", 7)
        returned += ids(as_map(j) for j in jobs)
        if cursor == b"0":
            break
        f.execute_command("QPUSHMANY", q, 3, "n1", "n2", "n3")     # new jobs arrive
        if doomed_left:
            f.execute_command("QDEL", q, doomed_left.pop(), doomed_left.pop() if doomed_left else 0)
        got = claim(f, q, "w", "COUNT", 2)                         # jobs change state meanwhile
        if got and step % 2:
            f.execute_command("QNACK", q, got[0][b"lease"], "DELAY", 0)
    assert cursor == b"0"
    assert len(returned) == len(set(returned)), "a job was returned twice"
    missing = stays - set(returned)
    assert not missing, f"jobs present for the whole scan were not returned: {sorted(missing)[:10]}"


def test_option_qdel_removes_jobs_in_any_state_and_their_leases_become_stale(f):
    q = unique("del")
    states = _mixed_states(f, q)
    victims = [states[s][0] for s in (b"ready", b"delayed", b"in_flight", b"dead", b"completed")]
    assert f.execute_command("QDEL", q, *victims, victims[0], 987654321) == 5
    assert [qget(f, q, j) for j in victims] == [None] * 5
    info = qinfo(f, q)
    assert [info[k] for k in LIVE] == [1, 1, 1, 1, 1]
    tok = states[b"tokens"][0]
    assert f.execute_command("QACK", q, tok) == 0
    assert f.execute_command("QEXTEND", q, tok) == [None]
    assert f.execute_command("QNACK", q, tok) == 0
    assert f.execute_command("QDEL", q, *victims) == 0


def test_option_qpurge_by_state_and_in_flight_only_with_all(f):
    q = unique("pg")
    states = _mixed_states(f, q)
    assert f.execute_command("QPURGE", q, "READY") == 2
    assert f.execute_command("QPURGE", q, "DELAYED") == 2
    assert f.execute_command("QPURGE", q, "DEAD") == 2
    assert f.execute_command("QPURGE", q, "COMPLETED") == 2
    assert f.execute_command("QPURGE", q, "READY", "DELAYED", "DEAD", "COMPLETED") == 0
    info = qinfo(f, q)
    assert [info[k] for k in LIVE] == [0, 0, 2, 0, 0]
    assert f.execute_command("QPURGE", q, "ALL") == 2
    assert qinfo(f, q)[b"in_flight"] == 0
    assert f.execute_command("QACK", q, *states[b"tokens"]) == 0
    assert f.execute_command("QEXTEND", q, states[b"tokens"][0]) == [None]
    # no state named: READY and DELAYED
    q2 = unique("pg2")
    states = _mixed_states(f, q2)
    assert f.execute_command("QPURGE", q2) == 4
    info = qinfo(f, q2)
    assert [info[k] for k in LIVE] == [0, 0, 2, 2, 2]


# ===============================================================================================
# QALTER: every option takes effect
# ===============================================================================================

def test_option_qalter_lease_applies_to_the_next_claims(f):
    q = unique("al")
    push(f, q, "x")
    f.execute_command("QALTER", q, "LEASE", 5000)
    t = now(f)
    assert claim_one(f, q)[b"deadline"] == t + 5000


def test_option_qalter_maxdeliveries_applies_to_existing_jobs(f):
    q = unique("amd")
    jid = push(f, q, "x")
    for _ in range(2):
        f.execute_command("QNACK", q, claim_one(f, q)[b"lease"], "DELAY", 0)
    f.execute_command("QALTER", q, "MAXDELIVERIES", 2)
    assert claim(f, q) == []
    assert qget(f, q, jid)[b"dead_reason"] == b"max-deliveries"


def test_option_qalter_deadletter_sends_later_dead_jobs_there(f):
    q, dlq = unique("adl"), unique("adl-target")
    push(f, q, "x")
    f.execute_command("QALTER", q, "DEADLETTER", dlq)
    f.execute_command("QNACK", q, claim_one(f, q)[b"lease"], "DEAD")
    assert qinfo(f, q)[b"dead"] == 0
    assert qinfo(f, dlq)[b"ready"] == 1


def test_option_qalter_backoff_applies_to_the_next_nack(f):
    q = unique("abo")
    jid = push(f, q, "x")
    f.execute_command("QALTER", q, "BACKOFF", 300, 1, 0)
    t = now(f)
    f.execute_command("QNACK", q, claim_one(f, q)[b"lease"])
    assert qget(f, q, jid)[b"visible_at"] == t + 300


def test_option_qalter_maxlen_refuses_pushes_beyond_it(f):
    q = unique("aml")
    push(f, q, "a")
    push(f, q, "b")
    f.execute_command("QALTER", q, "MAXLEN", 2)
    assert error_text(f, "QPUSH", q, "c").startswith("FULL")
    f.execute_command("QALTER", q, "MAXLEN", 0)
    assert push(f, q, "c") > 0


def test_option_qalter_expire_applies_to_existing_jobs(f):
    q = unique("aex")
    jid = push(f, q, "x")
    advance(f, 1000)
    f.execute_command("QALTER", q, "EXPIRE", 500)
    assert claim(f, q) == []
    assert qget(f, q, jid)[b"dead_reason"] == b"expired"


def test_option_qalter_retain_completed_keeps_the_next_acked_job(f):
    q = unique("arc")
    jid = push(f, q, "x")
    f.execute_command("QALTER", q, "RETAIN-COMPLETED", 1000)
    f.execute_command("QACK", q, claim_one(f, q)[b"lease"])
    assert qget(f, q, jid)[b"state"] == b"completed"
    advance(f, 1001)
    assert qget(f, q, jid) is None


def test_option_qalter_retain_dead_applies_to_the_next_dead_job(f):
    q = unique("ard")
    jid = push(f, q, "x")
    f.execute_command("QALTER", q, "RETAIN-DEAD", 1000)
    f.execute_command("QNACK", q, claim_one(f, q)[b"lease"], "DEAD")
    advance(f, 999)
    assert qget(f, q, jid)[b"state"] == b"dead"
    advance(f, 2)
    assert qget(f, q, jid) is None


def test_option_qalter_window_makes_claims_gather_a_cohort(daemon, r, q):
    r.execute_command("QCREATE", q)
    r.execute_command("QPUSHMANY", q, 10, *["x"] * 10)
    r.execute_command("QALTER", q, "WINDOW", 500)
    replies = _concurrent_claims(daemon, q, 2, "COUNT", 10)
    assert sorted(len(x) for x in replies) == [5, 5]


def test_option_qalter_durability_between_fsync_and_async_but_not_memory(f):
    q = unique("adu")
    f.execute_command("QCREATE", q)
    assert f.execute_command("QALTER", q, "DURABILITY", "async") == b"OK"
    assert qinfo(f, q)[b"durability"] == b"async"
    assert error_text(f, "QALTER", q, "DURABILITY", "memory")
    assert qinfo(f, q)[b"durability"] == b"async"


def test_option_qalter_durability_async_takes_effect_across_a_restart(own):
    d = own()
    c = no_retry_client(d, socket_timeout=10)
    q = unique("adr")
    c.execute_command("QCREATE", q, "DURABILITY", "fsync")
    c.execute_command("QALTER", q, "DURABILITY", "async")
    jid = push(c, q, "kept")
    d.stop()                                          # graceful: async data is fsynced at shutdown
    d.restart()
    c = no_retry_client(d, socket_timeout=10)
    assert qinfo(c, q)[b"durability"] == b"async"
    assert qget(c, q, jid)[b"payload"] == b"kept"


# ===============================================================================================
# QINFO counters: each one changes
# ===============================================================================================

def test_qinfo_counter_ready(f):
    q = unique("ci")
    f.execute_command("QCREATE", q)
    assert qinfo(f, q)[b"ready"] == 0
    push(f, q)
    assert qinfo(f, q)[b"ready"] == 1


def test_qinfo_counter_delayed(f):
    q = unique("ci")
    push(f, q, "x", "DELAY", 100)
    assert qinfo(f, q)[b"delayed"] == 1
    advance(f, 100)
    info = qinfo(f, q)
    assert (info[b"delayed"], info[b"ready"]) == (0, 1)


def test_qinfo_counter_in_flight(f):
    q = unique("ci")
    push(f, q)
    tok = claim_one(f, q)[b"lease"]
    assert qinfo(f, q)[b"in_flight"] == 1
    f.execute_command("QACK", q, tok)
    assert qinfo(f, q)[b"in_flight"] == 0


def test_qinfo_counter_dead(f):
    q = unique("ci")
    push(f, q)
    f.execute_command("QNACK", q, claim_one(f, q)[b"lease"], "DEAD")
    assert qinfo(f, q)[b"dead"] == 1


def test_qinfo_counter_completed(f):
    q = unique("ci")
    f.execute_command("QCREATE", q, "RETAIN-COMPLETED", 1000)
    push(f, q)
    f.execute_command("QACK", q, claim_one(f, q)[b"lease"])
    assert qinfo(f, q)[b"completed"] == 1


def test_qinfo_counter_pushed(f):
    q = unique("ci")
    push(f, q)
    f.execute_command("QPUSHMANY", q, 3, "a", "b", "c")
    assert qinfo(f, q)[b"pushed"] == 4


def test_qinfo_counter_acked(f):
    q = unique("ci")
    f.execute_command("QPUSHMANY", q, 2, "a", "b")
    f.execute_command("QACK", q, *[j[b"lease"] for j in claim(f, q, "w", "COUNT", 2)])
    assert qinfo(f, q)[b"acked"] == 2


def test_qinfo_counter_nacked(f):
    q = unique("ci")
    push(f, q)
    f.execute_command("QNACK", q, claim_one(f, q)[b"lease"], "DELAY", 0)
    assert qinfo(f, q)[b"nacked"] == 1


def test_qinfo_counter_lease_expired(f):
    q = unique("ci")
    push(f, q)
    claim_one(f, q, "w", "LEASE", 100)
    assert qinfo(f, q)[b"lease_expired"] == 0
    advance(f, 100)
    assert qinfo(f, q)[b"lease_expired"] == 1


def test_qinfo_counter_dead_lettered(f):
    q = unique("ci")
    f.execute_command("QCREATE", q, "DEADLETTER", unique("ci-dlq"))
    push(f, q)
    push(f, q)
    f.execute_command("QNACK", q, claim_one(f, q)[b"lease"], "DEAD")
    assert qinfo(f, q)[b"dead_lettered"] == 1
    q2 = unique("ci")                                  # dead in place counts too
    push(f, q2)
    f.execute_command("QNACK", q2, claim_one(f, q2)[b"lease"], "DEAD")
    assert qinfo(f, q2)[b"dead_lettered"] == 1


def test_qinfo_counter_duplicates(f):
    q = unique("ci")
    push(f, q, "a", "KEY", "k")
    push(f, q, "a", "KEY", "k")
    assert qinfo(f, q)[b"duplicates"] == 1


def test_qinfo_counter_oldest_ready_age_ms(f):
    q = unique("ci")
    f.execute_command("QCREATE", q)
    assert qinfo(f, q)[b"oldest_ready_age_ms"] == 0
    push(f, q, "old", "PRIORITY", 0)
    advance(f, 500)
    push(f, q, "young", "PRIORITY", 9)
    advance(f, 734)
    assert qinfo(f, q)[b"oldest_ready_age_ms"] == 1234
    f.execute_command("QACK", q, *[j[b"lease"] for j in claim(f, q, "w", "COUNT", 2)])
    assert qinfo(f, q)[b"oldest_ready_age_ms"] == 0


def test_qinfo_counter_consumers_blocked(daemon, r, q):
    r.execute_command("QCREATE", q)
    assert qinfo(r, q)[b"consumers_blocked"] == 0
    waiters = [BlockedClaim(daemon, q, f"b{i}", "BLOCK", 5000) for i in range(2)]
    wait_blocked(r, q, 2)
    push(r, q)
    push(r, q)
    for w in waiters:
        assert len(w.result()) == 1
    assert qinfo(r, q)[b"consumers_blocked"] == 0


# ===============================================================================================
# DEBUG is refused without enable-debug-command
# ===============================================================================================

def test_debug_is_refused_without_enable_debug_command(own):
    d = own(env={"LEASEQ_ENABLE_DEBUG_COMMAND": "no"})
    c = d.client(protocol=2)
    for args in (("DEBUG", "CLOCK"), ("DEBUG", "CLOCK", "ADVANCE", 1000), ("DEBUG", "CLOCK", "FREEZE")):
        assert "DEBUG command not allowed" in error_text(c, *args)
    assert c.ping() is True
    q = unique("nodebug")
    jid = push(c, q, "x", "DELAY", 60_000)
    assert qget(c, q, jid)[b"state"] == b"delayed"          # the clock did not move


def test_debug_clock_freeze_without_a_moment_never_refuses(own):
    # it read the clock twice; a millisecond between the reads made it answer
    # "the clock only moves forward" (about 1 in 300 tries)
    d = own(env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"})
    c = d.client(protocol=2)
    for _ in range(1000):
        assert c.execute_command("DEBUG", "CLOCK", "FREEZE") == b"OK"
        assert c.execute_command("DEBUG", "CLOCK", "RESUME") == b"OK"
