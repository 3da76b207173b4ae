"""The compiled ``Job`` (storage/_job.pyx) against its definition, the pure
``Job`` of storage/job.py: the same attributes, defaults, rare fields and
refusals, so that every other test, run in both flavours by .ci/run, means
the same thing whichever class the daemon uses."""

from __future__ import annotations

import gc
import os
import shutil
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leaseq.storage import job, leasing
from leaseq.storage.job import READY, JobExtra, PureJob

FLAVOURS = [PureJob] + ([job.Job] if job.COMPILED else [])


def test_the_compiled_job_is_in_use_unless_told_otherwise():
    if os.environ.get("LEASEQ_PURE") == "1":
        assert job.Job is PureJob and not job.COMPILED
    elif shutil.which("cc") or shutil.which("gcc"):
        assert job.COMPILED and job.Job is not PureJob and job.Job.__module__ == "leaseq.storage._job"
        # C numbers, no cyclic collector's header, the lease fields apart: 48 bytes less
        compiled, pure = job.Job(1, b"p", 0, 10, 10), PureJob(1, b"p", 0, 10, 10)
        assert sys.getsizeof(compiled) + 48 <= sys.getsizeof(pure)
        assert not gc.is_tracked(compiled) and gc.is_tracked(pure)
    else:
        assert job.Job is PureJob


def public_attributes(cls) -> set[str]:
    made = cls(1, b"p", 3, 10, 20)
    return {name for name in dir(made) if not name.startswith("_")}


def test_both_flavours_offer_the_same_attributes():
    assert public_attributes(job.Job) == public_attributes(PureJob) == \
        set(PureJob.__slots__) | set(JobExtra.__slots__) | {"payload_len"}


@pytest.mark.parametrize("cls", FLAVOURS, ids=lambda c: c.__module__)
def test_the_payload_reads_back_as_bytes_and_its_size_follows_it(cls):
    given = bytearray(b"x" * 300)
    j = cls(1, bytes(given), 0, 10, 10)
    assert j.payload == bytes(given) and type(j.payload) is bytes and j.payload_len == 300
    j.payload = b""
    assert (j.payload, j.payload_len) == (b"", 0)
    j.payload = b"\x00\r\n" * 5                  # any bytes, NULs and all
    assert (j.payload, j.payload_len) == (b"\x00\r\n" * 5, 15)
    assert job.payload_sizes([j, cls(2, b"abc", 0, 10, 10)]) == 18


def test_the_compiled_job_copies_its_payload_and_refuses_what_is_not_a_state():
    """Where the compiled Job is not in use (LEASEQ_PURE=1, no compiler), the
    pure one is, which stores what it is given."""
    if not job.COMPILED:
        assert job.Job is PureJob
        return
    given = bytearray(b"abc")
    j = job.Job(1, given, 0, 10, 10)                # a bytes-like payload is copied, not kept
    given[0] = ord("X")
    assert j.payload == b"abc" and j.payload is not j.payload
    for state in job.STATES + (None,):
        j.state = state[:1] + state[1:] if state is not None else None    # an equal object: the state itself reads back
        assert j.state is state
    with pytest.raises(ValueError, match="not a job state"):
        j.state = b"sleeping"
    assert j.state is None                       # a refused state leaves the job as it was


@pytest.mark.parametrize("cls", FLAVOURS, ids=lambda c: c.__module__)
def test_a_new_job_has_the_defaults_and_no_rare_fields(cls):
    j = cls(7, b"payload", 3, 10, 20)
    assert (j.id, j.payload, j.priority, j.enqueued_at, j.visible_at) == (7, b"payload", 3, 10, 20)
    assert (j.deliveries, j.state, j.token, j.deadline, j.consumer, j.requeued, j.extra) == \
        (0, None, None, 0, None, False, None)
    assert (j.key, j.flags, j.max_deliveries, j.expire_ms, j.group, j.retain_until) == (None, 0, 0, 0, b"", 0)
    assert j.extra is None                       # reading a rare field makes no JobExtra


@pytest.mark.parametrize("cls", FLAVOURS, ids=lambda c: c.__module__)
def test_rare_fields_live_in_one_extra_made_when_first_set(cls):
    j = cls(1, b"p", 0, 10, 10, b"k", 2, 5, 1000)
    assert isinstance(j.extra, JobExtra) and (j.key, j.flags, j.max_deliveries, j.expire_ms) == (b"k", 2, 5, 1000)
    plain = cls(2, b"p", 0, 10, 10)
    plain.group = b""                            # the default: still no extra
    assert plain.extra is None
    plain.group = b"g"
    assert plain.extra.group == b"g" and plain.group == b"g"


@pytest.mark.parametrize("cls", FLAVOURS, ids=lambda c: c.__module__)
def test_fields_are_set_and_read_back_as_given(cls):
    j = cls(1, b"p", 9, 10, 10)
    j.state, j.token, j.deadline, j.consumer, j.deliveries = READY, b"1.2", 5000, b"w", 3
    j.requeued = True
    j.priority = 0
    assert (j.state, j.token, j.deadline, j.consumer, j.deliveries, j.requeued, j.priority) == \
        (READY, b"1.2", 5000, b"w", 3, True, 0)
    assert j.state is READY and j.requeued is True
    j.requeued = False
    assert j.requeued is False


@pytest.mark.parametrize("cls", FLAVOURS, ids=lambda c: c.__module__)
def test_lease_fields_go_back_to_their_defaults_one_by_one(cls):
    """A claim sets all three; an ack or a release ends the token, a release
    keeps the consumer (the compiled job lets its lease fields go only once
    all three are at their defaults)."""
    j = cls(1, b"p", 0, 10, 10)
    j.token, j.deadline, j.consumer = b"1.0.1", 5000, b"w"
    j.token = None
    j.deadline = 0
    assert (j.token, j.deadline, j.consumer) == (None, 0, b"w")
    j.consumer = None
    assert (j.token, j.deadline, j.consumer) == (None, 0, None)
    j.deadline = 7                               # any one of them alone
    assert (j.token, j.deadline, j.consumer) == (None, 7, None)
    j.token, j.deadline = None, 0
    assert (j.token, j.deadline, j.consumer) == (None, 0, None)


@pytest.mark.parametrize("cls", FLAVOURS, ids=lambda c: c.__module__)
def test_a_job_takes_no_attribute_it_does_not_have(cls):
    j = cls(1, b"p", 0, 10, 10)
    with pytest.raises(AttributeError):
        j.colour = b"red"


def test_dropped_holdings_let_go_of_their_jobs():
    """A disk fault drops every connection's holdings (daemon/faults.py):
    their tables of held jobs are emptied, so no holder and its jobs keep
    each other alive (jobs are outside the cyclic collector: _job.pyx)."""
    from leaseq.commands.jobs import WorkRequest
    from leaseq.daemon.holdings import Worker
    from leaseq.daemon.holdings import Holdings

    holdings = Holdings(conn=None)
    session = holdings.session()
    worker = Worker(None, WorkRequest(queue=None, consumer=b"w", max_jobs=1, lease_ms=1000))
    holdings.workers.append(worker)
    for holder, jid in ((session, 1), (worker, 2)):
        held = job.Job(jid, b"p", 0, 10, 10)
        holder.hold(None, held)
        assert held.holder is holder and holder.held == {held: None}
    holdings.drop()
    assert session.held == {} and worker.held == {} and holdings.workers == []


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(1, 2**62), max_size=5), epoch=st.integers(0, 2**40), first=st.integers(1, 2**62))
def test_lease_tokens_are_the_same_bytes_in_both_flavours(ids, epoch, first):
    jobs = [job.Job(jid, b"p", 0, 10, 10) for jid in ids]
    assert leasing.lease_tokens(jobs, epoch, first) == leasing._pure_lease_tokens(jobs, epoch, first) == \
        [b"%x.%x.%x" % (jid, epoch, first + i) for i, jid in enumerate(ids)]
