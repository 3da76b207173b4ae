"""Protected mode with the real daemon (docs/operations.md, "Security"):
loopback clients are served whatever the bind address, and the start-up
log says what protected mode does when the port reaches other hosts.  A
client on another host cannot be made here (tests use 127.0.0.1 only): the
refusal itself is tested in tests/unit/test_protected_mode.py and, with
loopback clients served meanwhile, in test_listeners_in_process.py."""

from __future__ import annotations

import pytest

from harness import Daemon


@pytest.mark.parametrize("bind", ["127.0.0.1", "0.0.0.0"])
def test_loopback_clients_are_served_in_protected_mode(tmp_path, bind):
    d = Daemon(str(tmp_path / "data"), env={"LEASEQ_BIND": bind, "LEASEQ_PROTECTED_MODE": "yes"}).start()
    try:
        c = d.client()
        assert c.ping()
        assert c.execute_command("QPUSH", "q", "x") == 1
        assert c.config_get("protected-mode") == {"protected-mode": "yes"}
        assert c.info("server")["bind"] == bind
        assert c.info("stats")["rejected_connections"] == 0
        warned = "protected mode answers clients on other hosts -DENIED" in d.log()
        assert warned is (bind == "0.0.0.0")
    finally:
        d.stop()


def test_protected_mode_no_warns_that_every_host_is_served(tmp_path):
    d = Daemon(str(tmp_path / "data"), env={"LEASEQ_BIND": "0.0.0.0", "LEASEQ_PROTECTED_MODE": "no"}).start()
    try:
        assert d.client().ping()
        assert "without requirepass and with protected-mode no: any host that reaches this port" in d.log()
    finally:
        d.stop()


def test_protected_mode_can_be_changed_at_run_time_and_a_password_silences_the_warning(tmp_path):
    d = Daemon(str(tmp_path / "data"), env={"LEASEQ_BIND": "0.0.0.0", "LEASEQ_REQUIREPASS": "s3cret"}).start()
    try:
        c = d.client(password="s3cret")
        assert c.config_set("protected-mode", "no") and c.config_get("protected-mode") == {"protected-mode": "no"}
        assert c.ping()
        assert "without requirepass" not in d.log()
    finally:
        d.stop()
