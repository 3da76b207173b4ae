"""The compiled job table (storage/_jobtable.pyx) against its definition,
the pure ``JobTable`` of storage/jobtable.py, and both against a plain dict:
the same jobs by id, the same orders, the same QSCAN steps, whatever the
pushes and removals."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leaseq.storage import jobtable
from leaseq.storage.job import Job
from leaseq.storage.jobtable import PureJobTable

TABLES = [PureJobTable] + ([jobtable.JobTable] if jobtable.COMPILED else [])


def jobs_from(first: int, n: int) -> list:
    return [Job(i, b"p%d" % i, 0, 10, 10) for i in range(first, first + n)]


def full_scan(table, count: int) -> list[int]:
    cursor, seen = 0, []
    for _ in range(100_000):
        cursor, jobs = table.scan(cursor, count)
        assert len(jobs) <= count
        seen += [job.id for job in jobs]
        if not cursor:
            return seen
    raise AssertionError("the scan did not end")


def check(table, reference: dict) -> None:
    ids = sorted(reference)
    assert len(table) == len(reference) and bool(table) == bool(reference)
    assert list(table) == ids == [jid for jid, _ in table.items()]
    assert [job.id for job in table.values()] == ids
    assert [job.id for job in table.newest()] == ids[::-1]
    for jid in ids:
        assert table[jid] is reference[jid] and table.get(jid) is reference[jid] and jid in table
    asked = ids[::-1] + [0, (ids[-1] if ids else 0) + 1, -1, 2**80] + ids[:3]
    assert table.present(asked) == [reference[jid] for jid in asked if jid in reference]
    for count in (1, 3, 32, 1000):
        assert full_scan(table, count) == ids


@pytest.mark.parametrize("cls", TABLES, ids=lambda c: c.__module__)
def test_an_id_not_there_is_not_found(cls):
    table = cls()
    table.extend(jobs_from(1, 40))
    for missing in (0, 41, 10**6, -5, 2**80):
        assert missing not in table and table.get(missing) is None and table.get(missing, "no") == "no"
        with pytest.raises(KeyError):
            table[missing]
    with pytest.raises(KeyError):
        del table[41]
    del table[7]
    with pytest.raises(KeyError):
        del table[7]
    assert len(table) == 39
    assert [job.id for job in table.present((9, 7, 41, 1, -5, 2**80, 9))] == [9, 1, 9]   # (a replayed record's ids)


@pytest.mark.parametrize("cls", TABLES, ids=lambda c: c.__module__)
def test_a_cursor_on_a_gone_job_or_an_emptied_block_goes_on_after_it(cls):
    table = cls()
    table.extend(jobs_from(1, 200))
    cursor, first = table.scan(0, 50)
    assert [j.id for j in first] == list(range(1, 51)) and cursor == 50
    for jid in range(40, 120):                   # the cursor's job and whole blocks around it go
        del table[jid]
    table.compact()
    cursor, rest = table.scan(cursor, 1000)
    assert cursor == 0 and [j.id for j in rest] == list(range(120, 201))


@pytest.mark.parametrize("cls", TABLES, ids=lambda c: c.__module__)
def test_clear_empties_the_table_and_it_fills_again(cls):
    table = cls()
    table.extend(jobs_from(1, 100))
    table.clear()
    check(table, {})
    again = jobs_from(101, 5)
    table.put_many([j.id for j in again], again)
    check(table, {j.id: j for j in again})


ops = st.lists(st.one_of(
    st.tuples(st.just("push"), st.integers(1, 80)),
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("delete_run"), st.integers(0, 10_000)),
    st.tuples(st.just("compact"), st.just(0)),
), max_size=40)


@pytest.mark.parametrize("cls", TABLES, ids=lambda c: c.__module__)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=ops)
def test_both_tables_hold_what_a_dict_holds(cls, steps):
    table, reference, next_id = cls(), {}, 1
    for op, n in steps:
        if op == "push":
            new = jobs_from(next_id, n)
            table.extend(new)
            reference.update((j.id, j) for j in new)
            next_id += n
        elif reference and op == "delete":
            jid = sorted(reference)[n % len(reference)]
            del table[jid], reference[jid]
        elif reference and op == "delete_run":       # ends in roughly arrival order: whole blocks go
            ids = sorted(reference)
            for jid in ids[n % len(ids):n % len(ids) + 40]:
                del table[jid], reference[jid]
        elif op == "compact":
            table.compact()
    check(table, reference)


@pytest.mark.parametrize("cls", TABLES, ids=lambda c: c.__module__)
def test_a_long_table_emptied_in_arrival_order_still_scans_right(cls):
    """Most jobs end in roughly the order they came: the compiled table
    frees whole blocks and, once they are most of its list, compacts it."""
    table = cls()
    table.extend(jobs_from(1, 10_000))
    for jid in range(1, 9_990):
        del table[jid]
        if jid % 1000 == 0:
            table.compact()
    table.compact()
    table.extend(jobs_from(10_001, 3))
    assert full_scan(table, 4) == list(range(9_990, 10_004))
    assert [j.id for j in table.newest()][:2] == [10_003, 10_002]


def test_the_compiled_table_holds_jobs_only():
    """(A None would read back as no job at all.)  Where the compiled table
    is not in use, the pure one is, a dict."""
    if not jobtable.COMPILED:
        assert jobtable.JobTable is PureJobTable and issubclass(PureJobTable, dict)
        return
    table = jobtable.JobTable()
    with pytest.raises(ValueError, match="holds jobs"):
        table[1] = None
    assert len(table) == 0 and 1 not in table


@pytest.mark.parametrize("cls", TABLES, ids=lambda c: c.__module__)
def test_the_table_holds_one_reference_per_job_and_lets_it_go(cls):
    """The compiled table counts references by hand (its blocks are C
    arrays): one per job held, none once the job or the table is gone."""
    import sys
    jobs = jobs_from(1, 70)
    before = [sys.getrefcount(jobs[k]) for k in range(70)]

    def held() -> list[int]:
        return sorted({sys.getrefcount(jobs[k]) - before[k] for k in range(70)})

    table = cls()
    table.extend(jobs)
    table[60] = jobs[59]                         # the same job again: still one reference
    for _ in range(3):
        table.get(5), table[6], list(table.values()), list(table.newest()), table.scan(0, 10)
    assert held() == [1]
    for k in range(35):
        del table[k + 1]
    assert sorted({sys.getrefcount(jobs[k]) - before[k] for k in range(35)}) == [0]
    del table
    assert held() == [0]
