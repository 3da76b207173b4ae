"""``daemon.clock``: the daemon's time, in both flavours of its reading
(``Reading``, compiled in storage/_clock.pyx when built): whole ms since the
epoch plus the offset, or the frozen moment; DEBUG CLOCK's changes (whose
values commands bound to 2**53 ms) reach ``on_change`` and the next
reading."""

from __future__ import annotations

import time

import pytest

from leaseq.daemon import clock as daemon_clock
from leaseq.storage import clock

FLAVOURS = [clock.PureReading] + ([clock.Reading] if clock.COMPILED else [])


def test_the_compiled_reading_is_used_when_built():
    assert issubclass(daemon_clock.Clock, clock.Reading)
    assert clock.COMPILED is (clock.Reading is not clock.PureReading)


@pytest.mark.parametrize("reading", FLAVOURS)
@pytest.mark.parametrize("offset", [0, 5_000, -86_400_000, 10**12])
def test_a_running_clock_reads_real_time_plus_the_offset(reading, offset):
    c = reading(offset, False, 0)
    for _ in range(100):
        before = int(time.time() * 1000)
        now = c.now()
        after = int(time.time() * 1000)
        assert type(now) is int
        assert before + offset <= now <= after + offset


@pytest.mark.parametrize("reading", FLAVOURS)
@pytest.mark.parametrize("at", [0, 1_700_000_000_000, 2**62])
def test_a_frozen_clock_reads_its_moment(reading, at):
    c = reading(123, True, at)
    assert c.now() == at and c.now() == at
    assert (c.offset, c.frozen, c.frozen_at) == (123, True, at)


def test_debug_clock_changes_are_told_and_read():
    """(On the flavour in use; the LEASEQ_PURE=1 run of the unit tests reads the pure one.)"""
    changes: list = []
    c = daemon_clock.Clock(0, False, 0, lambda *state: changes.append(state))
    c.advance(60_000)
    assert changes[-1] == (60_000, False, 0) and c.now() >= int(time.time() * 1000) + 60_000 - 1
    c.freeze(2_000_000_000_000)
    assert c.now() == 2_000_000_000_000 and changes[-1] == (60_000, True, 2_000_000_000_000)
    c.advance(5)
    assert c.now() == 2_000_000_000_005
    before = time.time()
    c.resume()
    offset, frozen, _ = changes[-1]
    now = c.now()
    waited_ms = (time.time() - before) * 1000          # however long the machine stalled in between
    assert not frozen and c.offset == offset
    assert 2_000_000_000_005 <= now <= 2_000_000_000_005 + waited_ms + 1     # it runs on from where it stood


@pytest.mark.parametrize("reading", FLAVOURS)
def test_the_state_is_plain_numbers_and_a_bad_one_is_refused(reading):
    c = reading(1, False, 0)
    c.offset = 2
    c.frozen, c.frozen_at = True, 7
    assert (c.offset, c.frozen, c.frozen_at, c.now()) == (2, True, 7, 7)
    if reading is not clock.PureReading:
        with pytest.raises(TypeError):
            c.offset = "soon"
        with pytest.raises(OverflowError):
            c.frozen_at = 2**63


SECONDS = [time.perf_counter] + ([clock.seconds] if clock.COMPILED else [])


@pytest.mark.parametrize("seconds", SECONDS)
def test_seconds_reads_the_clock_perf_counter_reads(seconds):
    """``seconds()``, what a command's timing reads: ``time.perf_counter``'s
    clock (the compiled one reads it with one ``clock_gettime``)."""
    before = time.perf_counter()
    got = seconds()
    after = time.perf_counter()
    assert before <= got <= after and isinstance(got, float)
    assert clock.seconds is (time.perf_counter if not clock.COMPILED else clock._twin.seconds)
