"""redis-cli (a real client, as a subprocess) against the real daemon
(docs/semantics.md §2; §2.4, "redis-cli 7.0.15").

redis-cli prints raw replies when its stdout is not a terminal (as here);
``--no-raw`` gives the terminal formatting: ``(integer) 1``, ``(error) ...``,
``(nil)``, numbered arrays, and with ``-3`` RESP3 maps as ``1# "k" => v``.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness import HOST, Daemon, job_bytes

REDIS_CLI = shutil.which("redis-cli") or "redis-cli"


def cli(daemon: Daemon, *args: str, stdin: bytes | None = None, timeout: float = 20) -> subprocess.CompletedProcess:
    assert shutil.which("redis-cli"), "redis-cli is required (Debian package redis-tools)"
    return subprocess.run([REDIS_CLI, "-h", HOST, "-p", str(daemon.port), *args], input=stdin,
                          capture_output=True, timeout=timeout)


def test_noninteractive_qpush_prints_the_id(daemon, q):
    first = cli(daemon, "QPUSH", q, "hello")
    assert (first.returncode, first.stdout) == (0, b"1\n")
    second = cli(daemon, "QPUSH", q, "hello again", "PRIORITY", "9")
    assert (second.returncode, second.stdout) == (0, b"2\n")
    assert cli(daemon, "QLEN", q).stdout == b"2\n"


def test_noninteractive_no_raw_formats_integers(daemon, q):
    got = cli(daemon, "--no-raw", "QPUSH", q, "x")
    assert (got.returncode, got.stdout) == (0, b"(integer) 1\n")


def test_error_reply_prints_error_and_exits_0(daemon, q):
    got = cli(daemon, "--no-raw", "QPUSH", q)
    assert got.returncode == 0
    assert got.stdout == b"(error) ERR wrong number of arguments for 'qpush' command\n"
    got = cli(daemon, "--no-raw", "QACK", q, "1.1.1")
    assert (got.returncode, got.stdout) == (0, f"(error) NOQUEUE no such queue '{q}'\n".encode())


def test_error_reply_in_raw_mode_prints_the_error_text(daemon, q):
    got = cli(daemon, "QCLAIM", q, "w", "COUNT", "abc")
    assert got.returncode == 0
    assert got.stdout.strip() == b"ERR value is not an integer or out of range"


def test_no_raw_qinfo_prints_the_flat_map(daemon, q):
    cli(daemon, "QCREATE", q, "LEASE", "5000")
    got = cli(daemon, "--no-raw", "QINFO", q)
    assert got.returncode == 0
    lines = got.stdout.decode().splitlines()
    assert lines[0].split(None, 1) == ["1)", '"name"']
    assert lines[1].split(None, 1) == ["2)", f'"{q}"']
    assert lines[2].split(None, 1) == ["3)", '"lease"']
    assert lines[3].split(None, 1) == ["4)", "(integer) 5000"]
    assert lines[4].split(None, 1) == ["5)", '"maxdeliveries"']
    text = got.stdout.decode()
    assert '"deadletter"' in text and "(nil)" in text and '"consumers_blocked"' in text


def test_resp3_qclaim_prints_a_map(daemon, q):
    cli(daemon, "QPUSH", q, "hello world")
    got = cli(daemon, "-3", "--no-raw", "QCLAIM", q, "w1")
    assert got.returncode == 0
    assert b"HELLO 3 failed" not in got.stderr
    lines = [line.strip() for line in got.stdout.decode().splitlines()]
    assert lines[0] == '1) 1# "id" => (integer) 1'
    assert lines[1] == '2# "payload" => "hello world"'
    assert lines[2].startswith('3# "lease" => "')
    assert lines[3].startswith('4# "deadline" => (integer) ')
    assert lines[4:6] == ['5# "deliveries" => (integer) 1', '6# "priority" => (integer) 5']
    assert lines[6].startswith('7# "enqueued_at" => (integer) ')


def test_resp3_nil_and_empty_claim(daemon, q):
    cli(daemon, "QCREATE", q)
    assert cli(daemon, "-3", "--no-raw", "QGET", q, "99").stdout == b"(nil)\n"
    assert cli(daemon, "-3", "--no-raw", "QCLAIM", q, "w", "BLOCK", "10").stdout == b"(empty array)\n"
    info = cli(daemon, "-3", "--no-raw", "QINFO", q).stdout.decode()
    assert f'1# "name" => "{q}"' in info and '"deadletter" => (nil)' in info


def test_resp3_hello_prints_the_server_map(daemon):
    got = cli(daemon, "-3", "--no-raw", "HELLO", "3")
    text = got.stdout.decode()
    assert '"server" => "leaseq"' in text and '"proto" => (integer) 3' in text


def test_echo_and_ping(daemon):
    assert cli(daemon, "PING").stdout == b"PONG\n"
    assert cli(daemon, "ECHO", "two words").stdout == b"two words\n"


def test_pipe_mixing_inline_and_resp_commands(daemon, q):
    data = (f"QPUSH {q} inline-one\r\n"
            f"*3\r\n$5\r\nQPUSH\r\n${len(q)}\r\n{q}\r\n$14\r\nbinary\x00\xff\r\nmix\r\n"
            f"\r\n"
            f"qpush {q} \"quoted payload\" PRIORITY 9\r\n"
            f"*2\r\n$4\r\nQLEN\r\n${len(q)}\r\n{q}\r\n"
            f"PING\r\n").encode("latin-1")
    got = cli(daemon, "--pipe", stdin=data)
    assert got.returncode == 0, got
    assert b"errors: 0, replies: 5" in got.stdout
    assert cli(daemon, "QLEN", q).stdout == b"3\n"
    claimed = cli(daemon, "QCLAIM", q, "w", "COUNT", "3").stdout
    assert b"quoted payload" in claimed and b"inline-one" in claimed


def test_pipe_counts_errors_and_exits_1(daemon, q):
    data = f"QPUSH {q} ok\r\nQPUSH {q}\r\nNOSUCHCMD\r\nQLEN {q}\r\n".encode()
    got = cli(daemon, "--pipe", stdin=data)
    assert got.returncode == 1
    assert b"errors: 2, replies: 4" in got.stdout
    assert cli(daemon, "QLEN", q).stdout == b"1\n"


def test_pipe_of_many_pushes(daemon, q):
    data = b"".join(b"QPUSH %b job-%d\r\n" % (q.encode(), i) for i in range(2000))
    got = cli(daemon, "--pipe", stdin=data, timeout=60)
    assert got.returncode == 0 and b"errors: 0, replies: 2000" in got.stdout
    assert cli(daemon, "QLEN", q).stdout == b"2000\n"


def test_stdin_last_argument_with_x(daemon, q):
    got = cli(daemon, "-x", "QPUSH", q, stdin=b"payload from stdin")
    assert got.returncode == 0 and got.stdout == b"1\n"
    assert b"payload from stdin" in cli(daemon, "QGET", q, "1").stdout


def test_info_and_dbsize_and_time(daemon):
    info = cli(daemon, "INFO", "persistence").stdout
    assert b"# Persistence" in info and b"loading:0" in info
    assert cli(daemon, "DBSIZE").stdout.strip().isdigit()
    sec, usec = cli(daemon, "TIME").stdout.split()
    assert sec.isdigit() and usec.isdigit()


def test_select_other_db_fails_but_the_command_runs(daemon, q):
    got = cli(daemon, "-n", "1", "QPUSH", q, "x")
    assert b"SELECT 1 failed" in got.stderr or b"SELECT 1 failed" in got.stdout
    assert got.stdout.strip().endswith(b"1")


def test_password_with_requirepass(tmp_path):
    d = Daemon(tmp_path / "secured", env={"LEASEQ_REQUIREPASS": "secret"})
    d.start()
    try:
        denied = cli(d, "--no-raw", "QPUSH", "q", "x")
        assert denied.stdout == b"(error) NOAUTH Authentication required.\n"
        ok = cli(d, "-a", "secret", "--no-auth-warning", "QPUSH", "q", "x")
        assert (ok.returncode, ok.stdout) == (0, b"1\n")
        resp3 = cli(d, "-3", "-a", "secret", "--no-auth-warning", "--no-raw", "QPUSH", "q", "y")
        assert resp3.stdout == b"(integer) 2\n"
        wrong = cli(d, "-a", "nope", "--no-auth-warning", "--no-raw", "QPUSH", "q", "z")
        assert b"AUTH failed" in wrong.stderr + wrong.stdout
        assert b"NOAUTH" in wrong.stdout
    finally:
        d.kill()


# -- the tools that walk the keyspace, and redis-benchmark (docs/semantics.md §2.6) ------------------

@pytest.fixture
def walked(own):
    """A daemon of its own with three small queues and a big one."""
    d = own()
    c = d.client()
    for name in ("q:a", "q:b", "q:c"):
        c.execute_command("QPUSHMANY", name, 5, *(["x"] * 5))
    c.execute_command("QPUSH", "big", "p" * 10_000)
    return d


def test_scan_lists_every_queue(walked):
    got = cli(walked, "--scan")
    assert got.returncode == 0 and sorted(got.stdout.split()) == [b"big", b"q:a", b"q:b", b"q:c"]
    matched = cli(walked, "--scan", "--pattern", "q:*")
    assert sorted(matched.stdout.split()) == [b"q:a", b"q:b", b"q:c"]


def test_bigkeys_and_memkeys_see_queues(walked):
    big = cli(walked, "--bigkeys")
    assert big.returncode == 0, big.stderr
    assert b"Sampled 4 keys in the keyspace!" in big.stdout and b"4 queues with" in big.stdout
    mem = cli(walked, "--memkeys")
    assert mem.returncode == 0, mem.stderr
    size = 10_000 + job_bytes(walked.client()) + 4_096          # the payload, a job, a queue
    assert b"Biggest  queue found '\"big\"' has %d bytes" % size in mem.stdout


def test_hotkeys_ranks_busy_queues(walked):
    hot = cli(walked, "--hotkeys")
    assert hot.returncode == 0, hot.stderr
    assert b"hot key found with counter: 3\tkeyname: \"q:a\"" in hot.stdout


def test_stat_counts_queues_and_memory(walked):
    """--stat loops until stopped: run it line-buffered for a moment."""
    proc = subprocess.Popen(["stdbuf", "-oL", REDIS_CLI, "-h", HOST, "-p", str(walked.port), "--stat", "-i", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.kill()
        proc.wait(10)
    keys, mem = lines[2].split()[:2]
    assert lines[1].startswith(b"keys       mem") and keys == b"4" and mem.endswith(b"M")


def test_redis_benchmark_runs_a_custom_qpush_without_warnings(walked):
    got = subprocess.run(["redis-benchmark", "-h", HOST, "-p", str(walked.port), "-n", "2000", "-c", "20", "-P", "16",
                          "-q", "QPUSH", "bench", "__rand_int__"], capture_output=True, timeout=120)
    assert got.returncode == 0 and b"WARNING" not in got.stderr + got.stdout, got.stderr
    assert b"requests per second" in got.stdout
    assert walked.client().execute_command("QLEN", "bench") == 2000
