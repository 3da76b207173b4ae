"""The slow log's rules (daemon/slowlog.py) through the dispatcher and the
in-memory core: what an entry keeps of a command (Redis's cuts, passwords
redacted), the newest first and no more than slowlog-max-len, the
threshold's three kinds of value, and SLOWLOG's replies and refusals."""

from __future__ import annotations

import pytest
from core import Client, Core, call

from leaseq.commands.replies import Error


def logged(**settings) -> tuple[Core, Client]:
    core = Core(slowlog_log_slower_than=0, **settings)        # every command goes to the log
    return core, Client(core)


def entries(c: Client, count: int = -1) -> list:
    return call(c, "SLOWLOG", "GET", count)


def test_each_command_is_kept_newest_first_with_its_client():
    core, c = logged()
    call(c, "CLIENT", "SETNAME", "worker-7")
    call(c, "QPUSH", "q", "hello")
    got = entries(c)
    assert [e[3] for e in got[:2]] == [[b"QPUSH", b"q", b"hello"], [b"CLIENT", b"SETNAME", b"worker-7"]]
    first = got[0]
    assert first[0] > got[1][0] and isinstance(first[1], int) and first[2] >= 0
    assert first[4:] == [b"127.0.0.1:0", b"worker-7"]


def test_arguments_are_cut_as_redis_cuts_them():
    _core, c = logged()
    call(c, "QPUSH", "q", b"x" * 200)
    call(c, "QPUSHMANY", "q", 40, *[f"j{i}" for i in range(40)])
    many, long = entries(c, 2)                     # (a SLOWLOG GET is kept once it ran)
    assert long[3][2] == b"x" * 128 + b"... (72 more bytes)"
    assert len(many[3]) == 32 and many[3][-1] == b"... (12 more arguments)"   # 43 arguments, 31 kept
    assert many[3][:4] == [b"QPUSHMANY", b"q", b"40", b"j0"]


def test_passwords_are_redacted():
    _core, c = logged(requirepass="pw")
    call(c, "AUTH", "pw")
    call(c, "AUTH", "default", "pw")
    call(c, "HELLO", "3", "AUTH", "default", "pw", "SETNAME", "n")
    call(c, "CONFIG", "SET", "masterauth", "secret", "timeout", "5")
    kept = [e[3] for e in entries(c, 4)]
    assert kept == [[b"CONFIG", b"SET", b"masterauth", b"(redacted)", b"timeout", b"5"],
                    [b"HELLO", b"3", b"AUTH", b"(redacted)", b"(redacted)", b"(redacted)", b"(redacted)"],
                    [b"AUTH", b"(redacted)", b"(redacted)"],
                    [b"AUTH", b"(redacted)"]]


def test_max_len_and_the_threshold_follow_config_set():
    core, c = logged(slowlog_max_len=3)
    for i in range(5):
        call(c, "QPUSH", "q", str(i))
    assert call(c, "SLOWLOG", "LEN") == 3
    assert [e[3][-1] for e in entries(c)] == [b"LEN", b"4", b"3"]      # (SLOWLOG LEN, kept once it ran)
    call(c, "CONFIG", "SET", "slowlog-max-len", "1")
    assert call(c, "SLOWLOG", "LEN") == 1
    call(c, "CONFIG", "SET", "slowlog-log-slower-than", "-1")          # negative: nothing is kept
    assert core.slow_after == float("inf")
    call(c, "SLOWLOG", "RESET")
    call(c, "QPUSH", "q", "x")
    assert call(c, "SLOWLOG", "LEN") == 0
    call(c, "CONFIG", "SET", "slowlog-log-slower-than", "5000")
    assert core.slow_after == 0.005
    call(c, "CONFIG", "SET", "slowlog-max-len", "0")
    call(c, "CONFIG", "SET", "slowlog-log-slower-than", "0")
    call(c, "QPUSH", "q", "y")
    assert call(c, "SLOWLOG", "LEN") == 0                              # max-len 0 keeps none


def test_get_counts_and_refusals_in_redis_words():
    _core, c = logged()
    for i in range(12):
        call(c, "PING")
    assert len(entries(c, 10)) == 10 and len(call(c, "SLOWLOG", "GET")) == 10   # 10 by default
    assert len(entries(c, 0)) == 0 and len(entries(c)) >= 12
    assert call(c, "SLOWLOG", "RESET") == "OK"
    assert call(c, "SLOWLOG", "HELP")[0].startswith(b"SLOWLOG <subcommand>")
    for args, text in ((("GET", "-2"), "count should be greater than or equal to -1"),
                       (("GET", "x"), "value is not an integer or out of range"),
                       (("LEN", "1"), "wrong number of arguments for 'slowlog|len' command"),
                       (("SOON",), "unknown subcommand 'SOON'. Try SLOWLOG HELP.")):
        with pytest.raises(Error) as caught:
            call(c, "SLOWLOG", *args)
        assert caught.value.message == text, args
