"""SLOWLOG on the real daemon (daemon/slowlog.py; docs/operations.md, "The
slow log"): a command that ran past slowlog-log-slower-than is kept with
its client, a quick one is not, a claim that waits counts only its own
work, and redis-cli shows the entries as it shows Redis's."""

from __future__ import annotations

import subprocess

from harness import DEBUG_ENV, Daemon


def test_a_slow_command_is_kept_with_its_client_and_a_wait_is_not_counted(tmp_path):
    with Daemon(tmp_path / "d", env=DEBUG_ENV) as d:
        c = d.client()
        c.execute_command("CLIENT", "SETNAME", "reporter")
        addr = c.client_info()["addr"]
        assert c.execute_command("SLOWLOG", "LEN") == 0
        c.execute_command("DEBUG", "SLEEP", "0.03")                 # 30 ms on the loop: past the 10 ms default
        c.execute_command("QPUSH", "q", "quick")
        assert c.execute_command("QCLAIM", "empty", "w", "BLOCK", 300) in (None, [])   # waits, works little
        got = c.execute_command("SLOWLOG", "GET")
        assert len(got) == 1, got
        entry_id, when, micros, args, client_addr, name = got[0]
        assert args == [b"DEBUG", b"SLEEP", b"0.03"] and micros >= 30_000
        assert (client_addr.decode(), name) == (addr, b"reporter") and when > 1_700_000_000
        shown = subprocess.run(["redis-cli", "-p", str(d.port), "SLOWLOG", "GET"], capture_output=True, text=True,
                               timeout=30).stdout
        assert "DEBUG" in shown and "SLEEP" in shown and "reporter" in shown
        assert c.config_set("slowlog-log-slower-than", 0)
        c.execute_command("PING")
        assert c.execute_command("SLOWLOG", "LEN") == 3             # (the CONFIG SET, the PING too)
        assert c.execute_command("SLOWLOG", "RESET") == b"OK" and c.execute_command("SLOWLOG", "LEN") == 1
