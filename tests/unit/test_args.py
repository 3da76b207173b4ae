"""``commands.args.to_int``: Redis's grammar for an integer argument, a
signed 64-bit number written as an optional '-' and 1 to 19 ASCII digits."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from leaseq.commands import errors
from leaseq.commands.args import to_int
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
