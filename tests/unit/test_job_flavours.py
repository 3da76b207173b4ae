"""The compiled ``Job`` (storage/_job.pyx) against its definition, the pure
``Job`` of storage/job.py: the same attributes, defaults, rare fields and
refusals, so that every other test, run in both flavours by .ci/run, means
the same thing whichever class the daemon uses."""

from __future__ import annotations

import gc
import struct
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


# -- a PUSH record's jobs, read in C (job.push_jobs) and in Python -------------------------

def _push_fields(j):
    return (type(j), j.id, j.payload, j.priority, j.enqueued_at, j.visible_at, j.key, j.flags, j.max_deliveries,
            j.expire_ms, j.group, j.after_delay, j.onfail_run, j.waiting_for, j.meta)


_push_job = st.fixed_dictionaries({
    "id": st.integers(1, 2**64 - 1), "payload": st.binary(max_size=300), "priority": st.integers(0, 9),
    "delay": st.sampled_from([0, 0, 0, 1, 2**63]), "key": st.sampled_from([None, None, b"k", b"\xff" * 40]),
    "flags": st.sampled_from([0, 0, 1, 2]), "max_deliveries": st.sampled_from([0, 0, 5]),
    "expire_ms": st.sampled_from([0, 0, 60_000]), "group": st.sampled_from([b"", b"", b"g"]),
    "meta": st.sampled_from([None, None, ((b"a", b"1"),)])})


def _made(spec, ts):
    j = job.Job(spec["id"], spec["payload"], spec["priority"], ts, ts + spec["delay"], spec["key"],
                spec["flags"] if spec["key"] is not None else 0, spec["max_deliveries"], spec["expire_ms"])
    if spec["group"]:
        j.group = spec["group"]
    if spec["meta"] is not None:
        j.meta = spec["meta"]
    return j


@settings(max_examples=200, deadline=None)
@given(specs=st.lists(_push_job, max_size=12), ts=st.integers(0, 2**62))
def test_a_push_records_jobs_read_the_same_in_both_flavours(specs, ts):
    """Plain jobs (no key, flags, max deliveries or expiry) are made in C by
    the compiled flavour; the others go to the pure reader (``records._job_at``),
    whichever flavour: the jobs and where the reading ends are the same."""
    from leaseq.storage import records
    body = records.push(1, ts, [_made(s, ts) for s in specs])
    pure_jobs, pure_end = job._pure_push_jobs(body, records._PUSH.size, len(specs), ts, records._job_at)
    jobs, end = job.push_jobs(body, records._PUSH.size, len(specs), ts, records._job_at)
    assert end == pure_end == len(body)
    assert [_push_fields(j) for j in jobs] == [_push_fields(j) for j in pure_jobs]
    ready = [j for j, s in zip(jobs, specs) if not s["delay"]]
    assert all(j.visible_at is j.enqueued_at for j in ready)     # a job ready at once shares the record's ts
    for cut in range(records._PUSH.size, len(body)):            # a body cut short: an error in both, never a job
        with pytest.raises(records.FormatError):
            records.decode(records.PUSH, body[:cut])


def test_push_jobs_refuses_a_job_past_the_record_in_both_flavours():
    from leaseq.storage import records
    body = records.push(1, 5, [job.Job(7, b"abc", 0, 5, 5)])
    for read in {job.push_jobs, job._pure_push_jobs}:
        with pytest.raises(struct.error):
            read(body, records._PUSH.size, 2, 5, records._job_at)              # a second job that is not there
    with pytest.raises(records.FormatError, match="PUSH record"):
        records.decode(records.PUSH, body[:-1])                                  # the payload cut short
