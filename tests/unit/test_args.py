"""``commands.args.to_int``: Redis's grammar for an integer argument, a
signed 64-bit number written as an optional '-' and 1 to 19 ASCII digits.
``commands.args.queue_name``: 1 to 200 bytes, each a printable ASCII
character other than space (docs/semantics.md), whatever names it has seen.
``commands.args.remembered``: a parser of options answered from memory
gives what reading them again would, and refuses bad ones every time.
``commands.jobs._split_tokens``: where the tokens of QACK, QNACK and
QEXTEND end and their options begin."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from leaseq.commands import errors
from leaseq.commands import args
from leaseq.commands import jobs as job_commands
from leaseq.commands.args import queue_name, to_int
from leaseq.commands.replies import Error

GRAMMAR = re.compile(rb"-?[0-9]{1,19}")


def refused(value: bytes) -> bool:
    with pytest.raises(Error) as e:
        to_int(value)
    return e.value is errors.NOT_INTEGER or str(e.value) == str(errors.NOT_INTEGER)


@pytest.mark.parametrize("value, n", [(b"0", 0), (b"-0", 0), (b"42", 42), (b"007", 7), (b"-15", -15),
                                      (b"9223372036854775807", 2**63 - 1), (b"-9223372036854775808", -2**63)])
def test_integers_in_the_grammar_are_read(value, n):
    assert to_int(value) == n


@pytest.mark.parametrize("value", [b"", b"-", b"+1", b" 1", b"1 ", b"1_000", b"0x10", b"1.0", b"--1", b"1e3",
                                   "١".encode(), b"\xd9\xa1", b"9223372036854775808", b"-9223372036854775809",
                                   b"12345678901234567890", b"00000000000000000001"])
def test_anything_else_is_not_an_integer(value):
    assert refused(value)


@given(st.one_of(st.binary(max_size=22), st.from_regex(rb"\A-?[0-9]{1,21}\Z")))
@example(b"-00000000000000000001")
def test_the_grammar_and_the_range_decide(value):
    if GRAMMAR.fullmatch(value) and -2**63 <= int(value) < 2**63:
        assert to_int(value) == int(value)
    else:
        assert refused(value)


def a_queue_name(value: bytes) -> bool:
    try:
        return queue_name(value) is value
    except Error as e:
        assert str(e) == str(errors.bad_queue_name(value))
        return False


@given(st.one_of(st.binary(max_size=210), st.from_regex(rb"\A[!-~]{1,205}\Z"), st.sampled_from([b"q", b"q ", b"q\x7f"])))
def test_a_queue_name_is_200_printable_bytes_at_most_seen_before_or_not(value):
    rule = 1 <= len(value) <= 200 and all(0x21 <= b <= 0x7E for b in value)
    assert a_queue_name(value) is rule
    assert a_queue_name(value) is rule          # the second time from the names seen, if it passed


def test_the_names_seen_are_bounded():
    for n in range(args._NAMES_KEPT + 10):
        queue_name(b"q%d" % n)
    assert 0 < len(args._NAMES_SEEN) <= args._NAMES_KEPT
    assert a_queue_name(b"q1") and not a_queue_name(b"q 1")


def reading(parse_calls: list):
    @args.remembered
    def parse(words: list, start: int):
        parse_calls.append(tuple(words[start:]))
        if b"BAD" in words[start:]:
            raise errors.SYNTAX
        return len(words) - start
    return parse


def test_the_same_words_are_read_once():
    calls: list = []
    parse = reading(calls)
    assert parse([b"QCLAIM", b"q", b"w", b"COUNT", b"5"], 3) == 2
    assert parse([b"QCLAIM", b"other", b"x", b"COUNT", b"5"], 3) == 2     # what comes before start is not read
    assert parse([b"QCLAIM", b"q", b"w", b"COUNT", b"6"], 3) == 2
    assert calls == [(b"COUNT", b"5"), (b"COUNT", b"6")]


def test_bad_words_are_refused_every_time():
    calls: list = []
    parse = reading(calls)
    for _ in range(3):
        with pytest.raises(Error):
            parse([b"QCLAIM", b"q", b"w", b"BAD"], 3)
    assert len(calls) == 3


def test_the_words_remembered_are_bounded():
    calls: list = []
    parse = reading(calls)
    for n in range(args._OPTIONS_KEPT + 10):
        assert parse([b"X", b"%d" % n], 1) == 1
    assert parse([b"X", b"%d" % (args._OPTIONS_KEPT + 9)], 1) == 1       # still there: the memory started over
    assert len(calls) == args._OPTIONS_KEPT + 10
    assert parse([b"X", b"0"], 1) == 1                                    # forgotten when it started over: read again
    assert len(calls) == args._OPTIONS_KEPT + 11


CLAIM_WORDS = st.lists(st.sampled_from([b"COUNT", b"count", b"LEASE", b"BLOCK", b"SESSION", b"NOPE",
                                        b"0", b"1", b"100", b"-1", b"x", b"99999999999"]), max_size=6)


@given(CLAIM_WORDS)
def test_claim_options_remembered_are_claim_options_read(words):
    from leaseq.commands.jobs import _claim_options
    command = [b"QCLAIM", b"q", b"w", *words]

    def outcome(parse):
        try:
            return parse(command, 3)
        except Error as e:
            return str(e)

    fresh = outcome(_claim_options.__wrapped__)
    assert outcome(_claim_options) == fresh
    assert outcome(_claim_options) == fresh            # the second time, from memory when it was good


def test_a_push_without_options_gets_the_defaults_whatever_pushes_came_before():
    from leaseq.commands.jobs import parse_push_options
    fresh = parse_push_options([b"QPUSH", b"q", b"x", b"PRIORITY", b"1", b"DELAY", b"50", b"GROUP", b"g"], 3, 1,
                               many=False)
    assert (fresh.priority, fresh.delay, fresh.groups) == (1, 50, [b"g"])
    for _ in range(2):
        plain = parse_push_options([b"QPUSH", b"q", b"x"], 3, 1, many=False)
        assert (plain.priority, plain.delay, plain.at, plain.keys, plain.groups, plain.after) == (5, None, None, None,
                                                                                                None, None)
        assert plain.visible_at(T) == T


T = 1_700_000_000_000


# -- the tokens of QACK, QNACK and QEXTEND -----------------------------------------------

TOKEN_KEYWORDS = (job_commands.ACK_KEYWORDS, job_commands.NACK_KEYWORDS, job_commands.EXTEND_KEYWORDS)


def test_every_keyword_after_tokens_starts_with_a_letter():
    # _split_tokens upper-cases only arguments whose first byte may start a keyword
    for keywords in TOKEN_KEYWORDS:
        for kw in keywords:
            assert kw[:1].isalpha() and kw == kw.upper()


@given(st.lists(st.binary(max_size=8), min_size=1, max_size=6), st.sampled_from(TOKEN_KEYWORDS),
       st.integers(0, 1 << 16), st.booleans())
@example([b"lease"], (b"LEASE",), 0, False)          # a keyword where the first token goes (CI found it)
def test_split_tokens_finds_the_first_keyword_in_any_case(tokens, keywords, casing, with_keyword):
    kw = keywords[casing % len(keywords)]
    written = bytes(c ^ 0x20 if (casing >> i) & 1 else c for i, c in enumerate(kw))   # any mix of cases
    args_ = [b"QACK", b"q"] + tokens + ([written, b"v"] if with_keyword else [])
    expected = 2
    while expected < len(args_) and args_[expected].upper() not in keywords:
        expected += 1
    if expected == 2:                # a keyword first: no token at all, the arity error (test below)
        with pytest.raises(Error) as e:
            job_commands._split_tokens(args_, keywords)
        assert "wrong number of arguments" in str(e.value)
    else:
        assert job_commands._split_tokens(args_, keywords) == expected


def test_split_tokens_without_a_token_is_an_arity_error():
    with pytest.raises(Error) as e:
        job_commands._split_tokens([b"QACK", b"q", b"result", b"v"], job_commands.ACK_KEYWORDS)
    assert "wrong number of arguments" in str(e.value)
