"""``Indexes`` (leaseq.storage.indexes): the table that says which index
holds a job in each state and under which key, and the ``add`` / ``remove``
/ ``move`` / ``restore`` / ``clear`` / ``counts`` read from it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from leaseq.storage import bands
from leaseq.storage import job as job_module
from leaseq.storage.index import ReadyIndex, TimeIndex
from leaseq.storage.indexes import PLACES, Bulk, Indexes, band
from leaseq.storage.job import CANCELLED, COMPLETED, DEAD, DELAYED, IN_FLIGHT, READY, STATES, WAITING, Job

KEY_FIELDS = {DELAYED: "visible_at", IN_FLIGHT: "deadline", DEAD: "retain_until", COMPLETED: "retain_until",
              WAITING: "enqueued_at", CANCELLED: "retain_until"}


def entries(index) -> list[tuple[int, int]]:
    """(key, id) pairs of an index: (moment, id), or (band, id) for ``ready``."""
    if isinstance(index, TimeIndex):
        return list(index)
    return index.items()


def holders(indexes: Indexes, jid: int) -> list[bytes]:
    """The states whose index holds ``jid``."""
    return [s for s in STATES if any(i == jid for _, i in entries(indexes.index_of(s)))]


def a_job(jid: int, state: bytes, priority: int = 0, key: int = 5) -> Job:
    job = Job(jid, b"p", priority, 0, 0)
    job.state = state
    if state in KEY_FIELDS:
        setattr(job, KEY_FIELDS[state], key)
    return job


# -- the table -------------------------------------------------------------------------------------

def test_the_table_covers_every_state_constant_and_nothing_else():
    constants = {v for k, v in vars(job_module).items() if k.isupper() and isinstance(v, bytes)}
    assert constants == set(STATES) == set(PLACES)
    assert len(STATES) == len(set(STATES))


def test_every_state_has_an_index_of_its_own():
    indexes = Indexes()
    names = [name for name, _, _ in PLACES.values()]
    assert len(set(names)) == len(names) == len(STATES)
    held = [indexes.index_of(s) for s in STATES]
    assert len({id(i) for i in held}) == len(STATES)
    for state, (name, kind, _) in PLACES.items():
        assert getattr(indexes, name) is indexes.index_of(state)
        assert type(indexes.index_of(state)) is kind
    assert isinstance(indexes.ready, ReadyIndex) and indexes.index_of(READY) is indexes.ready
    assert indexes.index_of(IN_FLIGHT) is indexes.leases


def test_add_files_a_job_under_the_key_its_state_names():
    for n, state in enumerate(STATES, start=1):
        indexes = Indexes()
        job = a_job(n, state, priority=3, key=1234)
        indexes.add(job)
        key = band(job) if state is READY else 1234
        assert entries(indexes.index_of(state)) == [(key, n)]
        assert holders(indexes, n) == [state]


def test_bands_order_ready_jobs_as_claims_take_them():
    """storage/bands.py: higher priority first, and within a priority the
    jobs ready again first; BANDS bands, 0 claimed first.  A job's key in
    the ready index is its band."""
    of = {(p, r): bands.band(p, r) for p in range(10) for r in (False, True)}
    assert sorted(of.values()) == list(range(bands.BANDS))
    assert sorted(of, key=of.get) == [(p, r) for p in range(9, -1, -1) for r in (True, False)]
    for (priority, requeued), expected in of.items():
        job = a_job(1, READY, priority)
        job.requeued = requeued
        assert band(job) == expected


def test_remove_takes_the_job_out_and_leaves_a_job_without_state_alone():
    indexes = Indexes()
    job = a_job(1, DEAD, key=9)
    indexes.add(job)
    indexes.remove(job)
    assert holders(indexes, 1) == [] and sum(indexes.counts().values()) == 0
    job.state = None
    indexes.remove(job)                  # in no index: nothing to do
    assert sum(indexes.counts().values()) == 0


def test_counts_name_every_state_in_the_order_info_shows_them():
    indexes = Indexes()
    for n, state in enumerate(STATES, start=1):
        for i in range(n):
            indexes.add(a_job(10 * n + i, state, key=i))
    assert list(indexes.counts()) == ["ready", "delayed", "in_flight", "dead", "completed", "waiting",
                                     "cancelled"]
    assert indexes.counts() == {s.decode(): n for n, s in enumerate(STATES, start=1)}


def test_restore_builds_what_adding_one_by_one_builds():
    jobs = [a_job(n, STATES[n % len(STATES)], priority=n % 10, key=n // 3) for n in range(1, 60)]
    for job in jobs[::4]:
        job.requeued = True
    one_by_one, restored = Indexes(), Indexes()
    for job in jobs:
        one_by_one.add(job)
    restored.restore(jobs)
    for state in STATES:
        assert entries(restored.index_of(state)) == entries(one_by_one.index_of(state))
    restored.clear()
    assert sum(restored.counts().values()) == 0 and all(not restored.index_of(s) for s in STATES)


def test_restore_of_jobs_sorted_in_bulk_builds_what_adding_one_by_one_builds():
    jobs = [a_job(n, STATES[n % len(STATES)], priority=n % 10, key=n // 3) for n in range(1, 80)]
    for job in jobs[::3]:
        job.requeued = True
    one_by_one, restored = Indexes(), Indexes()
    for job in jobs:
        one_by_one.add(job)
    bulk = Bulk()                   # the plain ready and delayed jobs of every other id go in bulk
    for job in jobs:
        if job.id % 2 and job.state is READY:
            bulk.ready.setdefault(band(job), []).append(job.id)
        elif job.id % 2 and job.state is DELAYED:
            bulk.delayed.setdefault(job.visible_at, []).append(job.id)
        else:
            bulk.single.append(job)
    assert bulk.ready and bulk.delayed and bulk.single
    restored.restore(jobs, bulk)
    for state in STATES:
        assert entries(restored.index_of(state)) == entries(one_by_one.index_of(state))
    assert restored.counts() == one_by_one.counts()


def test_next_due_is_the_earlier_of_delayed_and_leases():
    indexes = Indexes()
    assert indexes.next_due() is None
    indexes.add(a_job(1, DELAYED, key=500))
    assert indexes.next_due() == 500
    indexes.add(a_job(2, IN_FLIGHT, key=300))
    assert indexes.next_due() == 300
    indexes.add(a_job(3, DEAD, key=100))         # retention is not "claimable by time"
    assert indexes.next_due() == 300


# -- property: move keeps every job in exactly one index, the one its state names ----------------

moves = st.lists(st.tuples(st.integers(0, 4),                       # which job
                           st.sampled_from(STATES),                 # to which state
                           st.integers(0, 50),                      # its new key
                           st.integers(0, 9),                       # its new priority
                           st.booleans()),                          # ready again or not
                 max_size=40)


@settings(max_examples=200, deadline=None)
@given(moves=moves)
def test_move_keeps_every_job_in_exactly_one_index(moves):
    indexes = Indexes()
    jobs = [a_job(n, READY) for n in range(1, 6)]
    for job in jobs:
        indexes.add(job)
    for which, state, key, priority, requeued in moves:
        job = jobs[which]
        fields = {"state": state, "priority": priority, "requeued": requeued}
        if state in KEY_FIELDS:
            fields[KEY_FIELDS[state]] = key
        indexes.move(job, **fields)
        for j in jobs:
            assert holders(indexes, j.id) == [j.state]
            expected = band(j) if j.state is READY else getattr(j, KEY_FIELDS[j.state])
            assert (expected, j.id) in entries(indexes.index_of(j.state))
        assert sum(indexes.counts().values()) == len(jobs)
