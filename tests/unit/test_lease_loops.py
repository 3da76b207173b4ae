"""The per-job loops of claims and acks (storage/leasing.py: ``take_leases``,
``drop_leases``, ``jobs_for_tokens``; commands/jobs.py: ``job_replies``)
against what they are defined to do, in each flavour: the pure twins with
the pure ``Job`` and job table, and, when built, the compiled twins
(storage/_job.pyx) with the compiled ones."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leaseq.commands import claims as job_commands
from leaseq.commands.replies import Record
from leaseq.storage import job, jobtable, leasing
from leaseq.storage.job import IN_FLIGHT, READY


@dataclasses.dataclass
class Flavour:
    name: str
    job: type
    table: type
    take_leases: object
    drop_leases: object
    jobs_for_tokens: object
    job_replies: object


FLAVOURS = [Flavour("pure", job.PureJob, jobtable.PureJobTable, leasing._pure_take_leases,
                    leasing._pure_drop_leases, leasing._pure_jobs_for_tokens,
                    lambda jobs: [job_commands.job_reply(j) for j in jobs])]
if job.COMPILED:
    from leaseq.storage import _job
    FLAVOURS.append(Flavour("compiled", job.Job, jobtable.JobTable, _job.take_leases, _job.drop_leases,
                            _job.jobs_for_tokens, job_commands.job_replies))

flavours = pytest.mark.parametrize("f", FLAVOURS, ids=lambda f: f.name)


class Holder:
    """A SESSION or QWORK holder: hears when a lease it holds ends."""

    def __init__(self) -> None:
        self.ended: list[int] = []

    def lease_ended(self, j) -> None:
        self.ended.append(j.id)


def test_the_compiled_twins_are_the_ones_in_use():
    if job.COMPILED:
        assert leasing.take_leases is FLAVOURS[1].take_leases
        assert leasing.drop_leases is FLAVOURS[1].drop_leases
        assert leasing.jobs_for_tokens is FLAVOURS[1].jobs_for_tokens
    else:
        assert leasing.take_leases is leasing._pure_take_leases
        assert leasing.jobs_for_tokens is leasing._pure_jobs_for_tokens


@flavours
def test_take_leases_puts_jobs_in_flight_and_ends_the_lease_they_had(f):
    fresh = f.job(1, b"a", 0, 10, 10)
    expired = f.job(2, b"b", 0, 10, 10)               # an expired lease whose token still works
    expired.token, expired.deadline, expired.consumer, expired.deliveries = b"2.1.1", 50, b"old", 1
    held = f.job(3, b"c", 0, 10, 10)
    holder = Holder()
    held.token, held.deadline, held.deliveries, held.holder = b"3.1.2", 50, 1, holder
    ids = f.take_leases([fresh, expired, held], [b"1.1.5", b"2.1.6", b"3.1.7"], 9000, b"w")
    assert ids == [1, 2, 3]
    for j, token, deliveries in ((fresh, b"1.1.5", 1), (expired, b"2.1.6", 2), (held, b"3.1.7", 2)):
        assert (j.state, j.token, j.deadline, j.consumer, j.deliveries) == (IN_FLIGHT, token, 9000, b"w", deliveries)
    assert holder.ended == [3] and held.holder is None


@flavours
def test_drop_leases_takes_jobs_out_by_deadline(f):
    table = f.table()
    made = [f.job(i, b"p%d" % i, 0, 10, 10) for i in range(1, 7)]
    for j in made:
        table[j.id] = j
    holder = Holder()
    for j in made:
        j.state, j.token, j.consumer, j.deadline = IN_FLIGHT, b"%x.1.1" % j.id, b"w", 100 if j.id % 2 else 200
    made[3].key = b"dedupe"                          # a rare field
    made[3].holder = holder
    by_deadline, rare = f.drop_leases(made[:5], table)
    assert by_deadline == {100: [1, 3, 5], 200: [2, 4]}
    assert [j.id for j in rare] == [4]
    assert holder.ended == [4]
    assert sorted(table.keys()) == [6]
    for j in made[:5]:
        assert j.state is None and j.token is None
    assert made[5].state is IN_FLIGHT and made[5].token == b"6.1.1"


def in_flight(f, table, jid: int, token: bytes):
    j = f.job(jid, b"p", 0, 10, 10)
    j.state, j.token, j.deadline, j.consumer = IN_FLIGHT, token, 100, b"w"
    table[jid] = j
    return j


TOKEN_HEADS = st.one_of(st.sampled_from([b"1", b"a", b"ff", b"01", b"A", b"FF", b"", b"x", b" 1", b"1_0", b"0x1",
                                         b"ffffffffffffffff", b"1ffffffffffffffff", b"-1", b"+1"]),
                        st.binary(max_size=6))


@flavours
@settings(max_examples=150, deadline=None)
@given(tokens=st.lists(st.one_of(st.sampled_from([b"1.2.3", b"a.2.4", b"ff.2.5", b"1.2.9", b"ff.2.5"]),
                                 st.tuples(TOKEN_HEADS, st.sampled_from([b".2.3", b".2.5", b"", b".", b"2.3"]))
                                   .map(b"".join)), max_size=12))
def test_jobs_for_tokens_finds_the_jobs_whose_leases_the_tokens_hold(f, tokens):
    """Each job once, in token order; an unknown, stale or malformed token
    is skipped, whatever ``int(head, 16)`` would have made of its head."""
    table = f.table()
    held = {b"1.2.3": in_flight(f, table, 1, b"1.2.3"), b"a.2.4": in_flight(f, table, 10, b"a.2.4"),
            b"ff.2.5": in_flight(f, table, 255, b"ff.2.5")}
    ready = f.job(2, b"p", 0, 10, 10)
    ready.state = READY
    table[2] = ready
    expected, seen = [], set()
    for token in tokens:
        j = held.get(token)
        if j is not None and j.id not in seen:
            seen.add(j.id)
            expected.append(j)
    assert f.jobs_for_tokens(table, tokens) == expected


@flavours
def test_job_replies_are_job_reply_for_every_job(f):
    plain = f.job(1, b"payload", 4, 10, 10)
    keyed = f.job(2, b"other", 5, 11, 11, key=b"k")
    failed = f.job(3, b"third", 6, 12, 12)
    failed.last_error = b"boom"
    for j in (plain, keyed, failed):
        j.state, j.token, j.deadline, j.consumer, j.deliveries = IN_FLIGHT, b"%x.1.1" % j.id, 900, b"w", 1
    replies = f.job_replies([plain, keyed, failed])
    expected = [job_commands.job_reply(j) for j in (plain, keyed, failed)]
    assert [type(r) for r in replies] == [type(r) for r in expected]
    assert [(r.shape, tuple(r.values)) for r in replies] == [(r.shape, tuple(r.values)) for r in expected]
    assert isinstance(replies[0], Record) and replies[0].get(b"payload") == b"payload"
    assert replies[0].get(b"lease") == b"1.1.1" and replies[1].get(b"key") == b"k"
