"""KEY ... REPLACE and debounce (docs/semantics.md §3.2): a push whose dedupe
key is held by a ready or delayed job gives that job its payload, priority
and (with DELAY or AT) ready time; against the real daemon, on the frozen
DEBUG clock of ``f``."""

from __future__ import annotations

import pytest

from harness import DEBUG_ENV, Daemon, advance, bgsave, claim, error_text, now, qget, qinfo, unique


def test_replace_gives_a_ready_holder_the_new_payload_and_priority(f):
    q = unique("rep")
    first = f.execute_command("QPUSH", q, "v1", "KEY", "doc-7", "PRIORITY", 2)
    assert f.execute_command("QPUSH", q, "v2", "KEY", "doc-7", "REPLACE", "PRIORITY", 8) == first
    job = qget(f, q, first)
    assert (job[b"payload"], job[b"priority"], job[b"state"]) == (b"v2", 8, b"ready")
    assert f.execute_command("QLEN", q) == 1 and qinfo(f, q)[b"duplicates"] == 1
    assert f.execute_command("QPUSH", q, "v3", "KEY", "doc-7") == first        # without REPLACE: kept
    assert qget(f, q, first)[b"payload"] == b"v2"


def test_replace_with_delay_debounces(f):
    """Every push within the delay moves the ready time out again; the job
    comes out once, DELAY after the last push, with the last payload."""
    q = unique("debounce")
    t0 = now(f)
    jid = f.execute_command("QPUSH", q, "edit-1", "KEY", "doc", "REPLACE", "DELAY", 1000)
    advance(f, 500)
    assert f.execute_command("QPUSH", q, "edit-2", "KEY", "doc", "REPLACE", "DELAY", 1000) == jid
    advance(f, 500)
    assert f.execute_command("QPUSH", q, "edit-3", "KEY", "doc", "REPLACE", "DELAY", 1000) == jid
    assert qget(f, q, jid)[b"visible_at"] == t0 + 2000
    advance(f, 999)
    assert claim(f, q, "w") == []
    advance(f, 1)
    assert [j[b"payload"] for j in claim(f, q, "w", "COUNT", 5)] == [b"edit-3"]


def test_replace_without_delay_keeps_the_ready_time_and_delay_0_makes_it_ready(f):
    q = unique("keep")
    t0 = now(f)
    jid = f.execute_command("QPUSH", q, "a", "KEY", "k", "DELAY", 5000)
    f.execute_command("QPUSH", q, "b", "KEY", "k", "REPLACE")
    assert (qget(f, q, jid)[b"visible_at"], qget(f, q, jid)[b"payload"]) == (t0 + 5000, b"b")
    f.execute_command("QPUSH", q, "c", "KEY", "k", "REPLACE", "DELAY", 0)
    assert qget(f, q, jid)[b"state"] == b"ready"


def test_a_holder_in_flight_is_not_replaced(f):
    q = unique("flight")
    jid = f.execute_command("QPUSH", q, "old", "KEY", "k")
    claim(f, q, "w", "LEASE", 60_000)
    # WHILE active: the holder in flight answers, unchanged
    assert f.execute_command("QPUSH", q, "new", "KEY", "k", "WHILE", "active", "REPLACE") == jid
    assert qget(f, q, jid)[b"payload"] == b"old"
    # WHILE queued (the default): a job in flight does not hold the key, so a new job is pushed
    other = f.execute_command("QPUSH", q, "new", "KEY", "k", "REPLACE")
    assert other != jid and qget(f, q, other)[b"payload"] == b"new"


def test_qpushmany_keys_replace_mixes_new_and_replaced_and_the_last_payload_wins(f):
    q = unique("many")
    held = f.execute_command("QPUSH", q, "x0", "KEY", "a")
    ids = f.execute_command("QPUSHMANY", q, 4, "a1", "b1", "b2", "c1", "KEYS", "a", "b", "b", "c", "REPLACE")
    assert ids[0] == held and ids[1] == ids[2] and len(set(ids)) == 3
    assert [qget(f, q, i)[b"payload"] for i in (ids[0], ids[1], ids[3])] == [b"a1", b"b2", b"c1"]


@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_replacements_last_across_kill_9(tmp_path, snapshot):
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = d.client(protocol=2)
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        t0 = now(c)
        jid = c.execute_command("QPUSH", "q", "v1", "KEY", "k", "DELAY", 1000)
        c.execute_command("QPUSH", "q", "v2", "KEY", "k", "REPLACE", "DELAY", 3000, "PRIORITY", 9)
        if snapshot:
            bgsave(c)
        d.kill()
        d.restart()
        c = d.client(protocol=2)
        job = qget(c, "q", jid)
        assert (job[b"payload"], job[b"priority"], job[b"visible_at"], job[b"state"]) == (
            b"v2", 9, t0 + 3000, b"delayed")
    finally:
        d.kill()


@pytest.mark.parametrize("args, message", [
    (("QPUSH", "{q}", "p", "REPLACE"), "REPLACE goes with KEY or KEYS"),
    (("QPUSH", "{q}", "p", "REPLACE", "DELAY", 10), "REPLACE goes with KEY or KEYS"),
    (("QPUSHMANY", "{q}", 1, "p", "REPLACE"), "REPLACE goes with KEY or KEYS"),
    (("QPUSH", "{q}", "p", "KEY", "k", "REPLACE", "REPLACE"), "syntax error"),
])
def test_replace_without_a_key_is_refused_and_changes_nothing(f, args, message):
    q = unique("badr")
    f.execute_command("QPUSH", q, "kept", "KEY", "k")
    assert error_text(f, *[a.format(q=q) if isinstance(a, str) else a for a in args]) == message
    assert f.execute_command("QLEN", q) == 1 and qget(f, q, 1)[b"payload"] == b"kept"
