"""QPROGRESS (docs/semantics.md §3.4): the lease holder reports a job's
progress; QGET, QPEEK and QSCAN show it; it does not extend the lease; a
stale token counts 0; it lasts across kill -9 (from the log and from a
snapshot); a value over 64 KiB is refused."""

from __future__ import annotations

import pytest

from harness import Daemon, as_map, bgsave, claim_one, error_text, qget, unique

DEBUG_ENV = {"LEASEQ_ENABLE_DEBUG_COMMAND": "yes", "LEASEQ_LEASE_DURABILITY": "fsync"}


def test_progress_is_shown_and_does_not_extend_the_lease(f):
    q = unique("prog")
    jid = f.execute_command("QPUSH", q, "resize")
    job = claim_one(f, q, "w", "LEASE", 5000)
    assert f.execute_command("QPROGRESS", q, job[b"lease"], "40%") == 1
    assert f.execute_command("QPROGRESS", q, job[b"lease"], b"\x00binary 80%") == 1     # the latest wins
    shown = qget(f, q, jid)
    assert (shown[b"progress"], shown[b"deadline"]) == (b"\x00binary 80%", job[b"deadline"])
    scanned = [as_map(j) for j in f.execute_command("QSCAN", q, 0, "COUNT", 10)[1]]
    assert scanned[0][b"progress"] == b"\x00binary 80%"
    assert f.execute_command("DEBUG", "CLOCK", "ADVANCE", 5000) == b"OK"
    assert f.execute_command("QPEEK", q) and as_map(f.execute_command("QPEEK", q)[0])[b"progress"] == b"\x00binary 80%"
    again = claim_one(f, q, "w2", "LEASE", 5000)          # the lease ran out: another holder
    assert f.execute_command("QPROGRESS", q, job[b"lease"], "stale") == 0
    assert f.execute_command("QPROGRESS", q, again[b"lease"], "10%") == 1
    assert f.execute_command("QPROGRESS", q, b"ffff.1.1", "x") == 0
    assert qget(f, q, jid)[b"progress"] == b"10%"


def test_a_value_over_64_kib_is_refused_and_changes_nothing(f):
    q = unique("big")
    jid = f.execute_command("QPUSH", q, "p")
    job = claim_one(f, q, "w", "LEASE", 60_000)
    f.execute_command("QPROGRESS", q, job[b"lease"], "kept")
    assert error_text(f, "QPROGRESS", q, job[b"lease"], b"x" * 65537) == "progress of 65537 bytes is more than 65536"
    assert f.execute_command("QPROGRESS", q, job[b"lease"], b"x" * 65536) == 1
    assert len(qget(f, q, jid)[b"progress"]) == 65536
    assert error_text(f, "QPROGRESS", q, job[b"lease"]) == "wrong number of arguments for 'qprogress' command"
    assert error_text(f, "QPROGRESS", unique("nosuch"), job[b"lease"], "x").startswith("NOQUEUE")


@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_progress_lasts_across_kill_9(tmp_path, snapshot):
    d = Daemon(tmp_path / "data", env=DEBUG_ENV).start()
    try:
        c = d.client(protocol=2)
        jid = c.execute_command("QPUSH", "q", "p")
        job = claim_one(c, "q", "w", "LEASE", 600_000)
        c.execute_command("QPROGRESS", "q", job[b"lease"], "step 3 of 7")
        if snapshot:
            bgsave(c)
        d.kill()
        d.restart()
        c = d.client(protocol=2)
        assert qget(c, "q", jid)[b"progress"] == b"step 3 of 7"
    finally:
        d.kill()
