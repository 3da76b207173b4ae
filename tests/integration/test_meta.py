"""Job metadata (docs/semantics.md §3.12): ``META field value ...`` on
QPUSH, QPUSHMANY and QSCHEDULE, shown by QGET, claims (map and COMPACT),
QPEEK and QSCAN in RESP2 and RESP3, kept by dead-letter copies and
QREDRIVE, through kill -9 (log replay, and a snapshot with the log after
it); every limit refused with nothing pushed.  Against the real daemon."""

from __future__ import annotations

import pytest

from harness import DEBUG_ENV, advance, as_map, bgsave, claim, claim_one, error_text, now, qget, qinfo, unique

TAGS = [b"tenant", b"acme", b"trace", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]
TAGGED = {b"tenant": b"acme", b"trace": TAGS[3]}


def meta_of(job: dict) -> dict | None:
    """A job map's ``meta``: a RESP3 map, or RESP2's flat list, as a dict."""
    m = job.get(b"meta")
    return None if m is None else as_map(m)


# -- shown by every command that shows a job ----------------------------------------------------------

@pytest.mark.parametrize("protocol", [2, 3])
def test_meta_is_shown_by_qget_qpeek_qscan_and_claims(daemon, protocol):
    c = daemon.client(protocol=protocol)
    q = unique("meta")
    jid = c.execute_command("QPUSH", q, "job", "META", *TAGS)
    plain = c.execute_command("QPUSH", q, "plain")
    raw = c.execute_command("QGET", q, jid)[b"meta"] if protocol == 3 else None
    if protocol == 3:
        assert raw == TAGGED                             # a map in RESP3 ...
    else:
        flat = as_map(c.execute_command("QGET", q, jid))[b"meta"]
        assert flat == TAGS                              # ... a flat list, in the order given, in RESP2
    assert meta_of(qget(c, q, jid)) == TAGGED
    assert b"meta" not in qget(c, q, plain)
    assert [meta_of(as_map(j)) for j in c.execute_command("QPEEK", q, "COUNT", 2)] == [TAGGED, None]
    _cursor, jobs = c.execute_command("QSCAN", q, 0, "COUNT", 10)
    assert [meta_of(as_map(j)) for j in jobs] == [TAGGED, None]
    claimed = claim(c, q, "w", "COUNT", 2)
    assert [(j[b"id"], meta_of(j)) for j in claimed] == [(jid, TAGGED), (plain, None)]
    c.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_compact_claim_puts_meta_in_the_map_of_rare_fields(daemon, protocol):
    c = daemon.client(protocol=protocol)
    q = unique("compact")
    jid = c.execute_command("QPUSH", q, "job", "META", "tenant", "acme")
    c.execute_command("QPUSH", q, "plain")
    tagged, plain = c.execute_command("QCLAIM", q, "w", "COUNT", 2, "COMPACT")
    assert tagged[0] == jid and len(tagged) == 8 and len(plain) == 7
    assert meta_of(as_map(tagged[7])) == {b"tenant": b"acme"}
    c.close()


def test_qpushmany_gives_every_job_the_same_meta_and_keeps_binary_values(daemon):
    c = daemon.client(protocol=2)
    q = unique("many")
    ids = c.execute_command("QPUSHMANY", q, 3, "a", "b", "c", "PRIORITY", 7, "META", "bin", b"\x00\xff\r\n", "empty", "")
    for jid in ids:
        job = qget(c, q, jid)
        assert meta_of(job) == {b"bin": b"\x00\xff\r\n", b"empty": b""} and job[b"priority"] == 7
    c.close()


def test_meta_runs_to_the_end_so_an_option_word_after_it_is_a_field(daemon):
    """META takes every argument after it: ``PRIORITY 3`` there is a field
    named PRIORITY, not the option (docs/semantics.md §3.12)."""
    c = daemon.client(protocol=2)
    q = unique("last")
    jid = c.execute_command("QPUSH", q, "job", "KEY", "k", "META", "a", "1", "PRIORITY", "3")
    job = qget(c, q, jid)
    assert meta_of(job) == {b"a": b"1", b"PRIORITY": b"3"} and job[b"priority"] == 5
    c.close()


def test_the_limits_themselves_are_accepted(daemon):
    c = daemon.client(protocol=2)
    q = unique("edge")
    fields = [x for i in range(32) for x in (b"f%02d" % i, b"v")]
    assert meta_of(qget(c, q, c.execute_command("QPUSH", q, "p", "META", *fields)))[b"f31"] == b"v"
    name = b"n" * 64
    jid = c.execute_command("QPUSH", q, "p", "META", name, b"x" * (8192 - 64))       # exactly 8 KiB in all
    assert meta_of(qget(c, q, jid)) == {name: b"x" * (8192 - 64)}
    c.close()


# -- bad META: a clear error, nothing pushed ------------------------------------------------------------

BAD = [
    ([], "META needs at least one field and its value"),
    (["a"], "META takes field value pairs to the end of the command: a field has no value"),
    (["a", "1", "b"], "META takes field value pairs to the end of the command: a field has no value"),
    ([x for i in range(33) for x in (f"f{i}", "v")], "META has 33 fields, more than 32"),
    (["n" * 65, "v"], "META field name of 65 bytes: a field name is 1 to 64 bytes"),
    (["", "v"], "META field name of 0 bytes: a field name is 1 to 64 bytes"),
    (["a", "1", "a", "2"], "META names field 'a' twice"),
    (["a", "x" * 8192], "META of 8193 bytes (field names and values together) is more than 8192"),
]


@pytest.mark.parametrize("fields, message", BAD, ids=["none", "odd", "odd-later", "too-many", "long-name",
                                                      "empty-name", "twice", "too-big"])
def test_bad_meta_is_refused_and_nothing_is_pushed(daemon, fields, message):
    c = daemon.client(protocol=2)
    q = unique("bad")
    c.execute_command("QCREATE", q)
    assert error_text(c, "QPUSH", q, "p", "META", *fields) == message
    assert error_text(c, "QPUSHMANY", q, 2, "p1", "p2", "META", *fields) == message
    assert error_text(c, "QSCHEDULE", q, "s", "p", "EVERY", 1000, "META", *fields) == message
    info = qinfo(c, q)
    assert (info[b"pushed"], info[b"ready"], c.execute_command("QSCHEDULES", q)) == (0, 0, [])
    c.close()


# -- schedules ------------------------------------------------------------------------------------------

def test_every_job_a_schedule_pushes_carries_its_meta(own):
    d = own(env=DEBUG_ENV)
    c = d.client(protocol=2)
    assert c.execute_command("DEBUG", "CLOCK", "FREEZE") == b"OK"
    q = unique("sched")
    t0 = now(c)
    c.execute_command("QSCHEDULE", q, "beat", "ping", "EVERY", 1000, "META", "source", "cron")
    assert meta_of(as_map(c.execute_command("QSCHEDULES", q)[0])) == {b"source": b"cron"}
    advance(c, 2000)
    jobs = claim(c, q, "w", "COUNT", 10)
    assert [(j[b"tick"], meta_of(j)) for j in jobs] == [(t0 + 1000, {b"source": b"cron"}),
                                                         (t0 + 2000, {b"source": b"cron"})]
    # the same definition with other META is another definition: it replaces the schedule
    c.execute_command("QSCHEDULE", q, "beat", "ping", "EVERY", 1000, "META", "source", "cron2")
    d.kill()
    d.restart()                                          # the schedule (SCHEDULE record) and its FIRE replayed
    c = d.client(protocol=2)
    assert meta_of(as_map(c.execute_command("QSCHEDULES", q)[0])) == {b"source": b"cron2"}
    assert [meta_of(qget(c, q, j[b"id"])) for j in jobs] == [{b"source": b"cron"}] * 2
    advance(c, 1000)
    assert meta_of(claim_one(c, q)) == {b"source": b"cron2"}
    bgsave(c)                                            # the schedule from a snapshot (SNAP_SCHEDULES)
    d.kill()
    d.restart()
    c = d.client(protocol=2)
    assert meta_of(as_map(c.execute_command("QSCHEDULES", q)[0])) == {b"source": b"cron2"}
    advance(c, 1000)
    assert meta_of(claim_one(c, q)) == {b"source": b"cron2"}
    c.close()


# -- dead letters and redrives --------------------------------------------------------------------------

def test_a_dead_letter_copy_keeps_meta_and_qredrive_brings_it_back(daemon):
    c = daemon.client(protocol=2)
    q, dlq = unique("src"), unique("dlq")
    c.execute_command("QCREATE", q, "DEADLETTER", dlq)
    jid = c.execute_command("QPUSH", q, "job", "META", *TAGS)
    token = claim_one(c, q)[b"lease"]
    assert c.execute_command("QNACK", q, token, "DEAD", "ERROR", "boom") == 1
    copy = claim_one(c, dlq, "w", "LEASE", 100)            # seen in the dead-letter queue ...
    assert (copy[b"dead_letter_src_id"], meta_of(copy)) == (jid, TAGGED)
    c.execute_command("QNACK", dlq, copy[b"lease"], "DELAY", 0)
    assert c.execute_command("QREDRIVE", dlq) == 1         # ... and back in its own queue
    back = claim_one(c, q)
    assert (back[b"payload"], meta_of(back)) == (b"job", TAGGED)
    c.close()


def test_a_job_dead_in_its_own_queue_keeps_meta_through_qredrive(daemon):
    c = daemon.client(protocol=2)
    q = unique("inplace")
    jid = c.execute_command("QPUSH", q, "job", "META", "a", "1")
    c.execute_command("QNACK", q, claim_one(c, q)[b"lease"], "DEAD")
    assert qget(c, q, jid)[b"state"] == b"dead" and meta_of(qget(c, q, jid)) == {b"a": b"1"}
    assert c.execute_command("QREDRIVE", q) == 1
    assert meta_of(claim_one(c, q)) == {b"a": b"1"}
    c.close()


# -- kill -9 ---------------------------------------------------------------------------------------------

def test_meta_survives_kill_9_from_the_log_and_from_a_snapshot(own):
    d = own()
    c = d.client(protocol=2)
    q, dlq = unique("crash"), unique("crashdl")
    c.execute_command("QCREATE", q, "DEADLETTER", dlq)
    before = c.execute_command("QPUSHMANY", q, 2, "a", "b", "META", *TAGS)
    c.execute_command("QNACK", q, claim_one(c, q)[b"lease"], "DEAD")        # a copy in dlq, from the log
    d.kill()
    d.restart()
    c = d.client(protocol=2)
    assert meta_of(qget(c, q, before[1])) == TAGGED
    (copy,) = [as_map(j) for j in c.execute_command("QSCAN", dlq, 0)[1]]
    assert meta_of(copy) == TAGGED
    bgsave(c)                                              # these in the snapshot ...
    after = c.execute_command("QPUSH", q, "c", "META", "late", "yes")        # ... this one after it
    d.kill()
    d.restart()
    c = d.client(protocol=2)
    assert meta_of(qget(c, q, before[1])) == TAGGED
    assert meta_of(qget(c, q, after)) == {b"late": b"yes"}
    assert meta_of(as_map(c.execute_command("QSCAN", dlq, 0)[1][0])) == TAGGED
    assert [meta_of(j) for j in claim(c, q, "w", "COUNT", 5)] == [TAGGED, {b"late": b"yes"}]
    c.close()
