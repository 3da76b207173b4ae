"""Every setting as a ``leaseq serve --name value`` flag (docs/operations.md,
"Settings"): the daemon started with settings as flags serves with them,
flags win over LEASEQ_* variables, and a bad value or an unknown option
stops it before it starts, naming the option."""

from __future__ import annotations

import subprocess

from harness import LEASEQ, Daemon, as_map, free_port
from harness_http import http_get


def test_settings_given_as_flags_are_the_daemons_settings(tmp_path):
    http = free_port()
    d = Daemon(str(tmp_path / "data"), "--http-port", str(http), "--fsync-interval", "200",
               "--maxmemory", "1gb", "--protected-mode", "no",
               env={"LEASEQ_FSYNC_INTERVAL": "500", "LEASEQ_MAX_PAYLOAD": "2kb"}).start()
    try:
        d.http = http
        got = as_map(d.client().execute_command("CONFIG", "GET", "*"))
        assert got[b"http-port"] == str(http).encode()
        assert got[b"fsync-interval"] == b"200"                   # the flag wins over LEASEQ_FSYNC_INTERVAL
        assert got[b"maxmemory"] == str(1024 ** 3).encode()
        assert got[b"protected-mode"] == b"no"
        assert got[b"max-payload"] == b"2048"                     # no flag: the variable holds
        assert http_get(d, "/healthz")[::2] == (200, "ok\n")
    finally:
        assert d.stop() == 0


def serve(tmp_path, *args):
    return subprocess.run(LEASEQ + ["serve", "--port", str(free_port()), "--dir", str(tmp_path / "data"), *args],
                          capture_output=True, text=True, timeout=60)


def test_a_bad_flag_value_stops_the_start_and_names_the_option(tmp_path):
    run = serve(tmp_path, "--http-port", "nine")
    assert run.returncode == 1
    assert "Error: option --http-port: 'http-port' must be an integer, not 'nine'" in run.stderr
    run = serve(tmp_path, "--protected-mode", "maybe")
    assert run.returncode == 1
    assert "option --protected-mode: 'protected-mode' must be yes or no, not 'maybe'" in run.stderr
    run = serve(tmp_path, "--maxmemory", "lots")
    assert run.returncode == 1
    assert "option --maxmemory: 'maxmemory' must be a size such as 64mb, not 'lots'" in run.stderr
    assert not (tmp_path / "data").exists()                       # refused before anything started


def test_an_unknown_option_is_a_usage_error(tmp_path):
    run = serve(tmp_path, "--fsync-intervall", "200")
    assert run.returncode == 2
    assert "No such option" in run.stderr and "--fsync-intervall" in run.stderr
