"""RESP request parsing and reply encoding (leaseq.daemon.resp), without sockets.

Every parser test feeds its input three ways (STYLE.md, "Tests in layers"):
whole, byte by byte, and followed by the first bytes of another command that
must stay buffered.  ``parses_to`` and ``rejects`` do that.
"""

from __future__ import annotations

import os
import re
import shutil

import hiredis
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from leaseq.commands.replies import NULL_ARRAY, OK, PONG, Error, Ints, Map, Push, Record, Shape, Simple, Verbatim
from leaseq.daemon import dispatch, flavour, logthread, resp
from leaseq.daemon.resp import PureRequestParser, ProtocolError, RequestParser, encode, split_args, wire_size
from leaseq.storage.flavour import is_compiled

# Every parser test runs against the pure parser (the definition) and the one
# in use: the compiled daemon/_parser.pyx when built, else the pure one again
# (LEASEQ_PURE=1, the second unit-test run of .ci/run).
PARSERS = [PureRequestParser, RequestParser]
each_parser = pytest.mark.parametrize(
    "Parser", PARSERS, ids=["pure", "compiled" if RequestParser is not PureRequestParser else "pure-in-use"])

# Followers: the first bytes of a command that is not complete yet, and the
# rest of it.  One multibulk, one inline, so both buffering paths are checked.
FOLLOWERS = [
    (b"*2\r\n$4\r\nECHO\r\n$5\r\nhel", b"lo\r\n", [b"ECHO", b"hello"]),
    (b"QPU", b"SH q job\r\n", [b"QPUSH", b"q", b"job"]),
]


def parses_to(Parser, data: bytes, expected: list, **limits) -> None:
    """``data`` parses to ``expected`` fed whole, byte by byte, and with a
    partial command after it.  ``data`` must end where its last command ends."""
    # whole
    p = Parser(**limits)
    assert p.feed(data) == expected
    assert p.pending == 0

    # byte by byte: every command comes out at its own last byte, so nothing
    # of the last command before the last byte
    p = Parser(**limits)
    before_last = []
    for i in range(len(data) - 1):
        before_last += p.feed(data[i:i + 1])
    assert before_last == expected[:-1]
    assert p.feed(data[-1:]) == expected[-1:]
    assert p.pending == 0

    # with trailing bytes of a following command, which stay buffered
    for head, tail, follower in FOLLOWERS:
        p = Parser(**limits)
        assert p.feed(data + head) == expected
        assert p.pending == len(head)
        assert p.feed(tail) == [follower]
        assert p.pending == 0


def rejects(Parser, data: bytes, message: str, parsed_before: list | None = None, **limits) -> None:
    """``data`` raises ProtocolError(message) fed whole, byte by byte, and with
    trailing bytes; the commands before the error are never lost."""
    parsed_before = parsed_before or []

    with pytest.raises(ProtocolError) as e:
        Parser(**limits).feed(data)
    assert str(e.value) == message
    assert e.value.commands == parsed_before

    p = Parser(**limits)
    got = []
    with pytest.raises(ProtocolError) as e:
        for i in range(len(data)):
            got += p.feed(data[i:i + 1])
    assert str(e.value) == message
    assert got + e.value.commands == parsed_before

    for head, _tail, _follower in FOLLOWERS:
        with pytest.raises(ProtocolError) as e:
            Parser(**limits).feed(data + head)
        assert str(e.value) == message
        assert e.value.commands == parsed_before


# -- multibulk requests ---------------------------------------------------------------

@each_parser
def test_multibulk_command_parses_to_its_arguments(Parser):
    parses_to(Parser, hiredis.pack_command((b"QPUSH", b"q", b"job")), [[b"QPUSH", b"q", b"job"]])


@each_parser
def test_multibulk_arguments_are_binary_safe(Parser):
    payload = bytes(range(256)) + b"\r\n*1\r\n$4\r\nPING\r\n"
    parses_to(Parser, hiredis.pack_command((b"QPUSH", b"q", payload)), [[b"QPUSH", b"q", payload]])


@each_parser
def test_multibulk_empty_argument_is_kept(Parser):
    parses_to(Parser, hiredis.pack_command((b"ECHO", b"")), [[b"ECHO", b""]])


@pytest.mark.parametrize("size", [9, 10, 99, 100, 999, 1000, 12345])
@each_parser
def test_multibulk_argument_lengths_across_digit_counts(Parser, size):
    arg = b"x" * size
    parses_to(Parser, hiredis.pack_command((b"ECHO", arg)) + hiredis.pack_command((b"PING",)), [[b"ECHO", arg], [b"PING"]])


@each_parser
def test_pipelined_multibulk_commands_come_out_in_order(Parser):
    cmds = [[b"QPUSH", b"q", b"%d" % i] for i in range(12)]
    parses_to(Parser, b"".join(hiredis.pack_command(tuple(c)) for c in cmds), cmds)


@each_parser
def test_multibulk_with_ten_or_more_arguments(Parser):
    args = [b"QPUSHMANY", b"q", b"10"] + [b"job%d" % i for i in range(10)]
    parses_to(Parser, hiredis.pack_command(tuple(args)), [args])


@each_parser
def test_empty_multibulk_yields_no_command_and_parsing_continues(Parser):
    parses_to(Parser, hiredis.pack_command(()) + hiredis.pack_command((b"PING",)), [[b"PING"]])


@each_parser
def test_null_multibulk_is_ignored_as_redis_does(Parser):
    parses_to(Parser, b"*-1\r\n" + hiredis.pack_command((b"PING",)) + b"*-1\r\n*0\r\n" + hiredis.pack_command((b"ECHO", b"x")),
              [[b"PING"], [b"ECHO", b"x"]])


@each_parser
@pytest.mark.parametrize("size", [1000, 70 * 1024, 300 * 1024])
@pytest.mark.parametrize("piece", [1, 1000, 64 * 1024])
def test_big_bulk_string_arriving_in_pieces(Parser, size, piece):
    # 70 KiB and 300 KiB are over the pure parser's TAIL_MAX: held inside hiredis
    if piece == 1 and size > 1000:
        piece = 7                   # byte by byte is the 1000-byte case; keep the test quick
    payload = bytes(range(256)) * (size // 256) + b"\r\n"
    data = hiredis.pack_command((b"QPUSH", b"q", payload)) + b"PING\r\n"
    p = Parser()
    got = []
    for i in range(0, len(data), piece):
        got += p.feed(data[i:i + piece])
        if len(got) == 0:
            assert p.pending == min(i + piece, len(data))
    assert got == [[b"QPUSH", b"q", payload], [b"PING"]]
    assert p.pending == 0


@each_parser
def test_bytearray_and_memoryview_are_parsed_like_bytes(Parser):
    p = Parser()
    assert p.feed(bytearray(b"*1\r\n$4\r\nPI")) == []
    assert p.feed(memoryview(b"NG\r\nPING\r\n")) == [[b"PING"], [b"PING"]]
    assert p.pending == 0


# -- inline requests -----------------------------------------------------------------------

@each_parser
def test_inline_command_splits_on_whitespace(Parser):
    parses_to(Parser, b"QPUSH  q\tjob\r\n", [[b"QPUSH", b"q", b"job"]])


@each_parser
def test_inline_command_accepts_bare_newline(Parser):
    parses_to(Parser, b"PING\n", [[b"PING"]])


@each_parser
def test_inline_command_with_quoted_arguments(Parser):
    parses_to(Parser, b'QPUSH q "hello world\\n" \'it\\\'s\'\r\n', [[b"QPUSH", b"q", b"hello world\n", b"it's"]])


@each_parser
def test_empty_inline_lines_yield_no_command(Parser):
    parses_to(Parser, b"\r\n\r\n   \r\nPING\r\n", [[b"PING"]])


@each_parser
def test_redis_cli_pipe_leading_crlf_then_multibulk(Parser):
    # redis-cli --pipe starts with a bare CRLF before its multibulk commands
    parses_to(Parser, b"\r\n" + hiredis.pack_command((b"ECHO", b"hi")), [[b"ECHO", b"hi"]])


@each_parser
def test_inline_and_multibulk_mixed_in_one_stream(Parser):
    data = (b"PING\r\n" + hiredis.pack_command((b"ECHO", b"a")) + b"ECHO b\r\n"
            + hiredis.pack_command((b"ECHO", b"c")) + hiredis.pack_command((b"ECHO", b"d")) + b"ECHO e\n")
    parses_to(Parser, data, [[b"PING"], [b"ECHO", b"a"], [b"ECHO", b"b"], [b"ECHO", b"c"],
                     [b"ECHO", b"d"], [b"ECHO", b"e"]])


@each_parser
def test_inline_command_after_a_multibulk_split_across_feeds(Parser):
    parses_to(Parser, hiredis.pack_command((b"PING",)) + b"ECHO x\r\n" + hiredis.pack_command((b"PING",)),
              [[b"PING"], [b"ECHO", b"x"], [b"PING"]])
    # and in the chunks where the multibulk offsets have to carry over
    p = Parser()
    assert p.feed(b"*1\r\n$4\r\nPI") == []
    assert p.feed(b"NG\r\nECHO x\r\n*1\r\n$4\r\nPI") == [[b"PING"], [b"ECHO", b"x"]]
    assert p.pending == 10
    assert p.feed(b"NG\r\n") == [[b"PING"]]


@each_parser
def test_inline_request_of_exactly_the_limit_is_accepted(Parser):
    line = b"a" * 10
    parses_to(Parser, line + b"\r\n", [[line]], max_inline=12)


# -- protocol errors ----------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"*x\r\n", b"*01\r\n", b"*-2\r\n", b"*1x\r\n", b"*+1\r\n", b"*-0\r\n", b"*\r\n",
                                  b"*-9223372036854775808\r\n", b"*99999999999999999999\r\n",
                                  b"*1\n$4\r\nPING\r\n", b"*" + b"1" * 23])
@each_parser
def test_bad_multibulk_length_is_invalid_multibulk_length(Parser, data):
    rejects(Parser, data, "invalid multibulk length")


@pytest.mark.parametrize("data", [b"*1\r\n$x\r\n", b"*1\r\n$04\r\nPING\r\n", b"*1\r\n$-2\r\n", b"*1\r\n$\r\n",
                                  b"*1\r\n$+4\r\nPING\r\n", b"*1\r\n$9223372036854775808\r\n",
                                  b"*1\r\n$4\nPING\r\n"])
@each_parser
def test_bad_bulk_length_is_invalid_bulk_length(Parser, data):
    rejects(Parser, data, "invalid bulk length")


@each_parser
def test_null_bulk_argument_is_invalid_bulk_length(Parser):
    # Redis: a negative bulk length in a request is "invalid bulk length"
    rejects(Parser, b"*1\r\n$-1\r\n", "invalid bulk length")


@each_parser
def test_integer_where_bulk_expected_names_the_byte(Parser):
    rejects(Parser, b"*2\r\n$4\r\nECHO\r\n:1\r\n", "expected '$', got ':'")


@each_parser
def test_nested_array_where_bulk_expected_names_the_byte(Parser):
    rejects(Parser, b"*1\r\n*1\r\n$1\r\na\r\n", "expected '$', got '*'")


@pytest.mark.parametrize("element, byte", [
    (b"+OK\r\n", "+"),
    (b"-ERR x\r\n", "-"),
    (b",1.5\r\n", ","),
    (b"(123\r\n", "("),
    (b"=7\r\ntxt:abc\r\n", "="),
])
@each_parser
def test_non_bulk_element_in_request_is_rejected_naming_the_byte(Parser, element, byte):
    # Redis rejects any element of a request that is not a bulk string
    rejects(Parser, b"*1\r\n" + element, f"expected '$', got '{byte}'")


@each_parser
def test_simple_string_element_does_not_desynchronise_following_commands(Parser):
    # whatever the verdict on '+OK' (an error, or an argument), the PING after it
    # must never be misread, however the bytes arrive
    data = b"*1\r\n+OK\r\nPING\r\n"
    head, tail, follower = FOLLOWERS[1]
    ways = {
        "whole": ([data], [[b"OK"], [b"PING"]]),
        "byte by byte": ([data[i:i + 1] for i in range(len(data))], [[b"OK"], [b"PING"]]),
        "with trailing bytes": ([data + head, tail], [[b"OK"], [b"PING"], follower]),
    }
    for way, (chunks, accepted) in ways.items():
        p = Parser()
        got = []
        try:
            for chunk in chunks:
                got += p.feed(chunk)
        except ProtocolError as e:
            assert got + e.commands == [], way
        else:
            assert got == accepted, way


@pytest.mark.parametrize("data, message", [
    # hiredis parses these RESP3 elements whole and words its own errors ("Bad
    # integer value") or returns values that name another type byte; fed byte
    # by byte the same bytes got "expected '$', got ':'".  The first fault in
    # byte order is named, however the bytes arrive (resp.first_fault).
    (b"*1\r\n:abc\r\n", "expected '$', got ':'"),
    (b"*1\r\n~0\r\n", "expected '$', got '~'"),
    (b"*1\r\n>0\r\n", "expected '$', got '>'"),
    (b"*1\r\n_\r\n", "expected '$', got '_'"),
    (b"*1\r\n#x\r\n", "expected '$', got '#'"),
    (b"*1\r\n*x\r\n", "expected '$', got '*'"),
    (b"*1\r\n|1\r\n", "expected '$', got '|'"),
    (b"*1\r\n\x00", "expected '$', got '\x00'"),
    (b'*1\r\n"', "expected '$', got '\"'"),
    (b"*2\r\n+OK\r\n$-1\r\n", "expected '$', got '+'"),
    (b"*2\r\n$-1\r\n$1\r\na\r\n", "invalid bulk length"),
    (b"*2\r\n$3\r\nabc\r\n$5\r\n", "invalid bulk length"),
])
@each_parser
def test_the_first_fault_in_byte_order_is_named_however_the_bytes_arrive(Parser, data, message):
    rejects(Parser, data, message, max_bulk=4)


@each_parser
def test_a_header_fault_is_named_before_the_buffer_limit(Parser):
    with pytest.raises(ProtocolError) as e:
        Parser(max_buffer=10).feed(b"*3\r\n$3\r\nabc\r\n:1\r\n")
    assert str(e.value) == "expected '$', got ':'"


@each_parser
def test_unbalanced_quotes_in_inline_request(Parser):
    rejects(Parser, b'QPUSH q "job\r\n', "unbalanced quotes in request")


@each_parser
def test_closing_quote_followed_by_text_is_unbalanced_quotes(Parser):
    rejects(Parser, b'QPUSH q "job"x\r\n', "unbalanced quotes in request")


@each_parser
def test_inline_line_over_the_limit_without_newline_is_too_big(Parser):
    rejects(Parser, b"a" * 11, "too big inline request", max_inline=10)


@each_parser
def test_inline_line_over_the_limit_with_newline_is_too_big(Parser):
    rejects(Parser, b"a" * 11 + b"\r\n", "too big inline request", max_inline=10)


@each_parser
def test_too_many_arguments_is_invalid_multibulk_length(Parser):
    rejects(Parser, hiredis.pack_command((b"A", b"B", b"C")), "invalid multibulk length", max_args=2)


@each_parser
def test_too_many_inline_arguments_is_invalid_multibulk_length(Parser):
    rejects(Parser, b"A B C\r\n", "invalid multibulk length", max_args=2)


@each_parser
def test_argument_over_max_bulk_is_invalid_bulk_length(Parser):
    rejects(Parser, hiredis.pack_command((b"ECHO", b"12345")), "invalid bulk length", max_bulk=4)


@each_parser
def test_bulk_length_over_max_bulk_is_rejected_at_its_header(Parser):
    # Redis checks proto-max-bulk-len when it reads "$N", before the bytes arrive
    rejects(Parser, b"*2\r\n$4\r\nECHO\r\n$5\r\n", "invalid bulk length", max_bulk=4)


@each_parser
def test_error_keeps_commands_parsed_before_it(Parser):
    data = b"PING\r\n" + hiredis.pack_command((b"ECHO", b"a")) + b"*1\r\n$x\r\n"
    rejects(Parser, data, "invalid bulk length", [[b"PING"], [b"ECHO", b"a"]])


@each_parser
def test_error_after_inline_commands_keeps_them(Parser):
    rejects(Parser, b"PING\r\nECHO \"x\r\n", "unbalanced quotes in request", [[b"PING"]])


@each_parser
def test_partial_request_over_buffer_limit_is_rejected(Parser):
    rejects(Parser, b"*1\r\n$1000\r\n" + b"x" * 200, "too big request (client query buffer limit)", max_buffer=100)


# -- split_args -------------------------------------------------------------------------------

@pytest.mark.parametrize("line, args", [
    (b"", []),
    (b"   \t ", []),
    (b"a b  c", [b"a", b"b", b"c"]),
    (b'""', [b""]),
    (b"''", [b""]),
    (b'"a b" c', [b"a b", b"c"]),
    (b'"\\n\\r\\t\\b\\a"', [b"\n\r\t\b\a"]),
    (b'"\\x41\\x7a\\xff"', [b"Az\xff"]),
    (b'"\\xZZ"', [b"xZZ"]),
    (b'"\\"\\\\"', [b'"\\']),
    (b"'a\\'b'", [b"a'b"]),
    (b"'a\\nb'", [b"a\\nb"]),
    (b'ab"c d"', [b"abc d"]),
    (b"\xff\x00 x", [b"\xff\x00", b"x"]),
])
def test_split_args_follows_sdssplitargs(line, args):
    assert split_args(line) == args


@pytest.mark.parametrize("line", [b'"abc', b"'abc", b'"a"b', b"'a'b", b'"abc\\"'])
def test_split_args_rejects_unbalanced_quotes(line):
    with pytest.raises(ValueError):
        split_args(line)


# -- wire_size --------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    [],
    [b""],
    [b"PING"],
    [b"x" * 9, b"x" * 10, b"x" * 99, b"x" * 100, b"x" * 999, b"x" * 1000, b"x" * 10000],
    [b"a"] * 10,
    [b"a"] * 100,
])
def test_wire_size_is_the_canonical_encoding_length(args):
    assert wire_size(args) == len(hiredis.pack_command(tuple(args)))


# -- properties ---------------------------------------------------------------------------------

INLINE_SAFE = re.compile(rb"[A-Za-z0-9_.:-]+\Z")

arg_st = st.one_of(st.binary(max_size=20), st.binary(min_size=95, max_size=130),
                   st.sampled_from([b"", b"\r\n", b"a\r\nb", b"*1\r\n$4\r\nPING\r\n", b"\n", b"\r"]))
command_st = st.lists(arg_st, min_size=1, max_size=12)


def _stream(commands: list, data) -> bytes:
    """``commands`` as one request stream: multibulk, some inline, some blank lines."""
    parts = []
    for cmd in commands:
        inline_ok = all(INLINE_SAFE.match(a) for a in cmd)
        if inline_ok and data.draw(st.booleans(), label="inline"):
            parts.append(b" ".join(cmd) + data.draw(st.sampled_from([b"\r\n", b"\n"]), label="eol"))
        else:
            if data.draw(st.booleans(), label="blank line before"):
                parts.append(b"\r\n")
            parts.append(hiredis.pack_command(tuple(cmd)))
    return b"".join(parts)


def _chunks(stream: bytes, data) -> list:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10), label="cuts"))
    return [stream[a:b] for a, b in zip([0] + cuts, cuts + [len(stream)])]


def _outcome(Parser, chunks: list, **limits) -> list:
    """What a parser makes of ``chunks``: per feed, its commands and ``pending``;
    at a protocol error, its message and the commands before it."""
    p = Parser(**limits)
    seen = []
    for chunk in chunks:
        try:
            seen.append((p.feed(chunk), p.pending))
        except ProtocolError as e:
            seen.append(("error", str(e), e.commands))
            break
    return seen


def _total(outcome: list) -> tuple:
    """All commands of an outcome, and how it ended (the error, or ``pending``)."""
    commands = [c for step in outcome for c in step[-1 if step[0] == "error" else 0]]
    last = outcome[-1]
    return commands, (last[1] if last[0] == "error" else last[1])


@each_parser
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commands=st.lists(command_st, min_size=1, max_size=8), data=st.data())
def test_any_commands_parse_back_identically_whatever_the_chunking(Parser, commands, data):
    outcome = _outcome(Parser, _chunks(_stream(commands, data), data))
    assert _total(outcome) == (commands, 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commands=st.lists(command_st, min_size=1, max_size=8), data=st.data())
def test_both_parsers_give_the_same_commands_and_pending_after_every_feed(commands, data):
    stream = _stream(commands, data)
    stream = stream[:data.draw(st.integers(0, len(stream)), label="truncated at")]
    chunks = _chunks(stream, data)
    assert _outcome(RequestParser, chunks) == _outcome(PureRequestParser, chunks)


FRAGMENTS = [b"*", b"$", b":", b"+", b"-", b",", b"_", b"#", b"%", b"=", b"(", b"~", b">", b"!", b"|",
             b"\r\n", b"\n", b"\r", b"0", b"1", b"2", b"3", b"-1", b"-2", b"01", b"99999999999999999999",
             b"OK", b"PING", b" ", b'"', b"'", b"\\", b"*1\r\n", b"*2\r\n", b"*-1\r\n", b"*0\r\n",
             b"$1\r\n", b"$4\r\n", b"$-1\r\n", b"x", b"\x00", b"\xff",
             b"+OK\r\n", b"(1\r\n", b":x\r\n", b"=5\r\ntxt:a\r\n", b"*1\r\n$4\r\nPING\r\n", b"PING\r\n"]
garbage_st = st.lists(st.one_of(st.binary(max_size=8), st.lists(st.sampled_from(FRAGMENTS), max_size=12).map(b"".join)),
                      min_size=1, max_size=6).map(b"".join)


@st.composite
def damaged_st(draw):
    """A valid stream with garbage put in, bytes cut out or changed, or garbage alone."""
    if draw(st.booleans()):
        return draw(garbage_st)
    stream = _stream(draw(st.lists(command_st, min_size=1, max_size=4)), draw(st.data()))
    at = draw(st.integers(0, len(stream)))
    how = draw(st.sampled_from(["insert", "cut", "change"]))
    if how == "insert":
        return stream[:at] + draw(garbage_st) + stream[at:]
    if how == "cut":
        return stream[:at] + stream[at + draw(st.integers(1, 8)):]
    return stream[:at] + bytes([draw(st.integers(0, 255))]) + stream[at + 1:]


LIMITS = st.fixed_dictionaries({}, optional={
    "max_inline": st.integers(0, 40), "max_args": st.integers(0, 6),
    "max_bulk": st.integers(0, 140), "max_buffer": st.integers(0, 300)})


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=damaged_st(), limits=LIMITS, data=st.data())
@example(stream=b"*1\r\n+OK\r\nX", limits={}, data=None)
@example(stream=b"*1\r\n$4\r\nPING\r\n*1\r\n+OK\r\nX", limits={}, data=None)
@example(stream=b"*2\r\n$-1\r\n", limits={}, data=None)     # hiredis alone reads $-1 as a nil
def test_both_parsers_reject_bad_bytes_alike(stream, limits, data):
    """Same error, same commands before it, same pending otherwise, after
    every feed, whatever the chunks and the limits."""
    chunks = _chunks(stream, data) if data is not None else [stream]
    outcome = _outcome(RequestParser, chunks, **limits)
    assert outcome == _outcome(PureRequestParser, chunks, **limits)
    for step in outcome:
        for cmd in step[-1] if step[0] == "error" else step[0]:
            assert type(cmd) is list and cmd and all(type(a) is bytes for a in cmd)


@each_parser
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=damaged_st(), data=st.data())
def test_bad_bytes_get_the_same_verdict_however_they_are_split(Parser, stream, data):
    """The commands run and the error named depend on the bytes, not on how
    the network cut them (with the default limits, which these never reach)."""
    assert _total(_outcome(Parser, _chunks(stream, data))) == _total(_outcome(Parser, [stream]))


# -- encoding replies ------------------------------------------------------------------------------

@pytest.mark.parametrize("value, resp2, resp3", [
    (b"hello", b"$5\r\nhello\r\n", b"$5\r\nhello\r\n"),
    (b"", b"$0\r\n\r\n", b"$0\r\n\r\n"),
    (b"a\r\nb", b"$4\r\na\r\nb\r\n", b"$4\r\na\r\nb\r\n"),
    (bytearray(b"ab"), b"$2\r\nab\r\n", b"$2\r\nab\r\n"),
    (memoryview(b"ab"), b"$2\r\nab\r\n", b"$2\r\nab\r\n"),
    (0, b":0\r\n", b":0\r\n"),
    (-42, b":-42\r\n", b":-42\r\n"),
    (2 ** 63 - 1, b":9223372036854775807\r\n", b":9223372036854775807\r\n"),
    ([], b"*0\r\n", b"*0\r\n"),
    ([b"a", 1], b"*2\r\n$1\r\na\r\n:1\r\n", b"*2\r\n$1\r\na\r\n:1\r\n"),
    ((b"a", None), b"*2\r\n$1\r\na\r\n$-1\r\n", b"*2\r\n$1\r\na\r\n_\r\n"),
    ([[1], []], b"*2\r\n*1\r\n:1\r\n*0\r\n", b"*2\r\n*1\r\n:1\r\n*0\r\n"),
    (None, b"$-1\r\n", b"_\r\n"),
    (NULL_ARRAY, b"*-1\r\n", b"_\r\n"),
    (OK, b"+OK\r\n", b"+OK\r\n"),
    (PONG, b"+PONG\r\n", b"+PONG\r\n"),
    (Simple(""), b"+\r\n", b"+\r\n"),
    (Error("ERR", "syntax error"), b"-ERR syntax error\r\n", b"-ERR syntax error\r\n"),
    (Error("ERR", "a\r\nb"), b"-ERR a  b\r\n", b"-ERR a  b\r\n"),
    (Map([(b"id", 1), (b"payload", b"x")]),
     b"*4\r\n$2\r\nid\r\n:1\r\n$7\r\npayload\r\n$1\r\nx\r\n",
     b"%2\r\n$2\r\nid\r\n:1\r\n$7\r\npayload\r\n$1\r\nx\r\n"),
    (Map({b"k": None}), b"*2\r\n$1\r\nk\r\n$-1\r\n", b"%1\r\n$1\r\nk\r\n_\r\n"),
    (Map([]), b"*0\r\n", b"%0\r\n"),
    (Verbatim(b"hello"), b"$5\r\nhello\r\n", b"=9\r\ntxt:hello\r\n"),
    (Verbatim(b""), b"$0\r\n\r\n", b"=4\r\ntxt:\r\n"),
    (Push([b"message", b"q", 3]), b"*3\r\n$7\r\nmessage\r\n$1\r\nq\r\n:3\r\n",
     b">3\r\n$7\r\nmessage\r\n$1\r\nq\r\n:3\r\n"),
    ([Map([(b"a", [None, NULL_ARRAY])])],
     b"*1\r\n*2\r\n$1\r\na\r\n*2\r\n$-1\r\n*-1\r\n",
     b"*1\r\n%1\r\n$1\r\na\r\n*2\r\n_\r\n_\r\n"),
])
def test_encode_gives_exact_bytes_in_resp2_and_resp3(value, resp2, resp3):
    assert encode(value, resp3=False) == resp2
    assert encode(value, resp3=True) == resp3


@pytest.mark.parametrize("value", ["OK", True, False, 1.5, {b"a": 1}, object(), [b"ok", "nested str"],
                                   Map([(b"k", True)])])
@pytest.mark.parametrize("resp3", [False, True])
def test_encode_refuses_values_that_are_not_reply_types(value, resp3):
    with pytest.raises(TypeError):
        encode(value, resp3)


# -- Record: a map with a pre-encoded Shape ------------------------------------------------------

JOB_SHAPE = Shape([(b"id", "int"), (b"payload", "bulk"), (b"lease", "bulk"), (b"deliveries", "int")])


def test_record_encodes_as_flat_array_in_resp2_and_map_in_resp3():
    rec = Record(JOB_SHAPE, (7, b"hello", b"7.1.1", 2))
    body = b"$2\r\nid\r\n:7\r\n$7\r\npayload\r\n$5\r\nhello\r\n$5\r\nlease\r\n$5\r\n7.1.1\r\n$10\r\ndeliveries\r\n:2\r\n"
    assert encode(rec, resp3=False) == b"*8\r\n" + body
    assert encode(rec, resp3=True) == b"%4\r\n" + body


def test_records_inside_an_array_encode_like_maps():
    recs = [Record(JOB_SHAPE, (i, b"p%d" % i, b"t", 1)) for i in range(3)]
    maps = [Map(r.items) for r in recs]
    for resp3 in (False, True):
        assert encode(recs, resp3) == encode(maps, resp3)
        assert encode(tuple(recs), resp3) == encode(maps, resp3)
        assert encode([[recs[0]]], resp3) == encode([[maps[0]]], resp3)


def test_record_with_percent_signs_in_keys_and_values():
    shape = Shape([(b"100%", "int"), (b"%d%s%%", "bulk")])
    rec = Record(shape, (5, b"%d%b%%"))
    for resp3 in (False, True):
        assert encode(rec, resp3) == encode(Map(rec.items), resp3)
    assert encode(rec, resp3=True) == b"%2\r\n$4\r\n100%\r\n:5\r\n$6\r\n%d%s%%\r\n$6\r\n%d%b%%\r\n"


field_st = st.tuples(st.binary(max_size=12), st.sampled_from(["int", "bulk"]))


@settings(max_examples=150, deadline=None)
@given(fields=st.lists(field_st, max_size=8), data=st.data())
def test_record_encodes_exactly_like_the_map_of_its_items(fields, data):
    values = tuple(data.draw(st.integers(-2 ** 63, 2 ** 63 - 1) if kind == "int" else st.binary(max_size=40))
                   for _k, kind in fields)
    rec = Record(Shape(fields), values)
    for resp3 in (False, True):
        assert encode(rec, resp3) == encode(Map(list(zip([k for k, _ in fields], values))), resp3)


# A Record trusts its shape for ints (see its docstring: one format operation per
# job, no per-field checks), so only str, which %d and %b both refuse, is tested.
@pytest.mark.parametrize("values", [(1, "text"), ("1", b"x")],
                         ids=["str-in-bulk-field", "str-in-int-field"])
@pytest.mark.parametrize("resp3", [False, True])
def test_record_refuses_values_that_are_not_reply_types(values, resp3):
    rec = Record(Shape([(b"id", "int"), (b"payload", "bulk")]), values)
    with pytest.raises(TypeError):
        encode(rec, resp3)


# -- the compiled encoder (daemon/_resp.pyx) against the pure one -----------------------------------

SHAPE_A = Shape([(b"id", "int"), (b"payload", "bulk"), (b"deadline", "int")])
LEAVES = st.one_of(
    st.binary(max_size=40),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.sampled_from([None, NULL_ARRAY, OK, Simple(""), Error("ERR", "no\r\nway"), Verbatim(b"v")]),
    st.builds(lambda i, p, d: Record(SHAPE_A, (i, p, d)), st.integers(-5, 1 << 63), st.binary(max_size=9),
              st.integers(0, 1 << 62)),
    st.builds(Ints, st.lists(st.integers(-(1 << 66), 1 << 66), max_size=5)),
    st.text(max_size=12).filter(lambda t: "\r" not in t and "\n" not in t).map(Simple),
)
REPLIES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.builds(Map, st.lists(st.tuples(st.binary(max_size=5), inner), max_size=3)),
    st.builds(Push, st.lists(inner, max_size=3))), max_leaves=25)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(value=REPLIES, resp3=st.booleans())
def test_the_encoder_in_use_gives_the_pure_encoders_bytes(value, resp3):
    assert encode(value, resp3) == resp.encode_pure(value, resp3)


def test_the_buffer_kept_between_replies_carries_nothing_over():
    """The compiled encoder writes each reply into a buffer it keeps for the
    next one (not one a big reply grew): a reply after one that failed half
    way, or after a big one, is exactly its own bytes."""
    small = [b"x", 7, Record(SHAPE_A, (1, b"p", 2))]
    for resp3 in (False, True):
        with pytest.raises(TypeError):
            encode([b"written first", 5, object()], resp3)
        assert encode(small, resp3) == resp.encode_pure(small, resp3)
        big = [b"y" * 50_000, b"z" * 50_000]
        assert encode(big, resp3) == resp.encode_pure(big, resp3)
        assert encode(small, resp3) == resp.encode_pure(small, resp3)


def test_the_compiled_modules_are_in_use_unless_told_otherwise():
    """bin/setup builds daemon/_resp.pyx, daemon/_parser.pyx,
    storage/_job.pyx, storage/_jobtable.pyx, storage/_index.pyx,
    storage/_clock.pyx and daemon/_logthread.pyx, and the modules compiled
    from their own .py, when Cython and a C compiler are there;
    LEASEQ_PURE=1 (the second unit-test run of .ci/run) picks the pure
    encoder, parser, Job, job table, indexes, clock and log thread, and the
    .py files."""
    if os.environ.get("LEASEQ_PURE") == "1":
        assert flavour.FLAVOUR == "pure" and flavour.COMPILED == [] and not is_compiled(dispatch)
        assert resp.encode is resp.encode_pure and resp.RequestParser is resp.PureRequestParser
        assert logthread.LogThread is logthread.PureLogThread
    elif shutil.which("cc") or shutil.which("gcc"):
        assert flavour.FLAVOUR == "compiled"
        assert flavour.COMPILED == list(flavour.DAEMON_COMPILED)
        assert resp.encode is not resp.encode_pure and resp.RequestParser is not resp.PureRequestParser
        assert logthread.LogThread is not logthread.PureLogThread
    else:                       # no compiler at install time: the pure modules, said so
        assert flavour.FLAVOUR == "pure" and resp.encode is resp.encode_pure
