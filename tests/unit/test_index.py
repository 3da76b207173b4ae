"""``TimeIndex`` (leaseq.storage.index): job ids ordered by a moment, with a
total order (moment, then id) for iteration and ``pop_due``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leaseq.storage.index import NEVER, ReadyIndex, TimeIndex


def filled(*entries):
    idx = TimeIndex()
    for when, jid in entries:
        idx.add(when, jid)
    return idx


# -- empty ---------------------------------------------------------------------------------------

def test_new_index_is_empty():
    idx = TimeIndex()
    assert len(idx) == 0
    assert not idx
    assert idx.first() is None
    assert list(idx) == []
    assert idx.pop_due(10 ** 15) == []


# -- add, len, first, iteration ----------------------------------------------------------------------

def test_add_counts_each_entry_and_first_is_the_earliest_moment():
    idx = TimeIndex()
    idx.add(300, 1)
    assert (len(idx), bool(idx), idx.first()) == (1, True, 300)
    idx.add(100, 2)
    assert (len(idx), idx.first()) == (2, 100)
    idx.add(200, 3)
    idx.add(100, 4)                     # a second id at an existing moment
    assert (len(idx), idx.first()) == (4, 100)


def test_iteration_is_by_moment_then_by_id_whatever_the_insertion_order():
    idx = filled((50, 9), (10, 7), (50, 2), (10, 8), (30, 1), (10, 3), (50, 5))
    assert list(idx) == [(10, 3), (10, 7), (10, 8), (30, 1), (50, 2), (50, 5), (50, 9)]


def test_the_same_id_at_two_moments_is_two_entries():
    idx = filled((20, 1), (10, 1))
    assert list(idx) == [(10, 1), (20, 1)]
    assert len(idx) == 2


def test_iteration_does_not_change_the_index():
    idx = filled((2, 1), (1, 2))
    assert list(idx) == list(idx) == [(1, 2), (2, 1)]
    assert len(idx) == 2


# -- add_many --------------------------------------------------------------------------------------------

def test_add_many_at_a_new_moment():
    idx = TimeIndex()
    idx.add_many(100, [5, 3, 4])
    assert len(idx) == 3
    assert idx.first() == 100
    assert list(idx) == [(100, 3), (100, 4), (100, 5)]


def test_add_many_joins_the_ids_already_at_that_moment():
    idx = filled((100, 1), (50, 9))
    idx.add_many(100, [2, 3])
    assert len(idx) == 4
    assert list(idx) == [(50, 9), (100, 1), (100, 2), (100, 3)]


def test_add_many_counts_ids_already_present_only_once():
    idx = filled((100, 1), (100, 2))
    idx.add_many(100, [2, 3, 1, 4])
    assert len(idx) == 4
    assert list(idx) == [(100, 1), (100, 2), (100, 3), (100, 4)]
    idx.add_many(100, [1, 2])            # nothing new
    assert len(idx) == 4


def test_add_many_counts_an_id_repeated_in_its_argument_once():
    idx = TimeIndex()
    idx.add_many(7, [1, 1, 2, 2, 2])
    assert len(idx) == 2
    assert list(idx) == [(7, 1), (7, 2)]


def test_add_many_accepts_any_iterable():
    idx = TimeIndex()
    idx.add_many(7, (i for i in (3, 1, 2)))
    assert list(idx) == [(7, 1), (7, 2), (7, 3)]
    assert len(idx) == 3


def test_add_many_of_no_ids_leaves_an_empty_index_empty():
    # len, bool, first and iteration must agree: an index with no entries has
    # no earliest moment (Indexes.next_due reads first() without checking len)
    idx = TimeIndex()
    idx.add_many(100, [])
    assert len(idx) == 0 and not idx and list(idx) == []
    assert idx.first() is None


def test_add_many_of_no_ids_does_not_change_the_earliest_moment():
    idx = filled((200, 1))
    idx.add_many(100, [])
    assert len(idx) == 1 and list(idx) == [(200, 1)]
    assert idx.first() == 200


# -- remove ----------------------------------------------------------------------------------------------------

def test_remove_takes_out_exactly_that_entry():
    idx = filled((10, 1), (10, 2), (20, 1))
    idx.remove(10, 1)
    assert list(idx) == [(10, 2), (20, 1)]
    assert len(idx) == 2
    assert idx.first() == 10


def test_removing_the_last_id_of_a_moment_moves_first_to_the_next_moment():
    idx = filled((10, 1), (20, 2))
    idx.remove(10, 1)
    assert idx.first() == 20
    idx.remove(20, 2)
    assert idx.first() is None
    assert len(idx) == 0 and not idx and list(idx) == []


def test_remove_of_a_missing_moment_raises_key_error_and_changes_nothing():
    idx = filled((10, 1))
    with pytest.raises(KeyError):
        idx.remove(11, 1)
    assert list(idx) == [(10, 1)] and len(idx) == 1


def test_remove_of_a_missing_id_at_an_existing_moment_raises_key_error_and_changes_nothing():
    idx = filled((10, 1), (10, 2))
    with pytest.raises(KeyError):
        idx.remove(10, 3)
    assert list(idx) == [(10, 1), (10, 2)] and len(idx) == 2 and idx.first() == 10


def test_remove_twice_raises_key_error_the_second_time():
    idx = filled((10, 1), (10, 2))
    idx.remove(10, 1)
    with pytest.raises(KeyError):
        idx.remove(10, 1)
    assert list(idx) == [(10, 2)] and len(idx) == 1


def test_remove_from_an_empty_index_raises_key_error():
    idx = TimeIndex()
    with pytest.raises(KeyError):
        idx.remove(0, 0)
    assert len(idx) == 0 and idx.first() is None


# -- pop_due -------------------------------------------------------------------------------------------------------

def test_pop_due_returns_due_ids_by_moment_then_id_and_keeps_the_rest():
    idx = filled((30, 1), (10, 5), (20, 4), (10, 2), (20, 3), (40, 0))
    assert idx.pop_due(30) == [2, 5, 3, 4, 1]
    assert list(idx) == [(40, 0)]
    assert len(idx) == 1 and idx.first() == 40


def test_pop_due_includes_the_moment_equal_to_now():
    idx = filled((100, 1), (101, 2))
    assert idx.pop_due(99) == []
    assert len(idx) == 2
    assert idx.pop_due(100) == [1]
    assert idx.pop_due(100) == []
    assert idx.pop_due(101) == [2]
    assert len(idx) == 0 and idx.first() is None and not idx


def test_pop_due_of_everything_empties_the_index():
    idx = filled((1, 3), (2, 2), (3, 1))
    idx.add_many(2, [9, 8])
    assert idx.pop_due(10 ** 15) == [3, 2, 8, 9, 1]
    assert len(idx) == 0 and list(idx) == [] and idx.first() is None


def test_entries_added_after_pop_due_are_counted_again():
    idx = filled((5, 1))
    assert idx.pop_due(5) == [1]
    idx.add(5, 1)
    idx.add_many(6, [2, 3])
    assert len(idx) == 3
    assert list(idx) == [(5, 1), (6, 2), (6, 3)]


def test_clear_empties_the_index():
    idx = filled((1, 1), (2, 2))
    idx.clear()
    assert len(idx) == 0 and not idx and idx.first() is None and list(idx) == []
    idx.add(3, 3)
    assert len(idx) == 1 and list(idx) == [(3, 3)]


# -- last ----------------------------------------------------------------------------------------------------------

def test_last_gives_the_latest_entries_latest_first_across_moments():
    idx = filled((10, 1), (30, 4), (30, 2), (20, 3), (40, 5))
    assert idx.last(3) == [5, 4, 2]
    assert idx.last(10) == [5, 4, 2, 3, 1]
    assert TimeIndex().last(5) == []
    assert len(idx) == 5                # a look, not a removal


# -- property: the index behaves as a sorted set of (moment, id) --------------------------------------------------

moments = st.integers(0, 20)
job_ids = st.integers(1, 30)
ops = st.lists(st.one_of(
    st.tuples(st.just("add"), moments, job_ids),
    st.tuples(st.just("add_many"), moments, st.lists(job_ids, min_size=1, max_size=6)),
    st.tuples(st.just("remove"), moments, job_ids),
    st.tuples(st.just("pop_due"), moments),
), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops=ops)
def test_index_agrees_with_a_sorted_set_of_pairs(ops):
    idx = TimeIndex()
    model: set[tuple[int, int]] = set()
    for op in ops:
        kind = op[0]
        if kind == "add":
            if (op[1], op[2]) in model:      # add is for entries that are absent
                continue
            idx.add(op[1], op[2])
            model.add((op[1], op[2]))
        elif kind == "add_many":
            idx.add_many(op[1], op[2])
            model.update((op[1], jid) for jid in op[2])
        elif kind == "remove":
            if (op[1], op[2]) in model:
                idx.remove(op[1], op[2])
                model.discard((op[1], op[2]))
            else:
                with pytest.raises(KeyError):
                    idx.remove(op[1], op[2])
        else:
            due = sorted(p for p in model if p[0] <= op[1])
            assert idx.pop_due(op[1]) == [jid for _, jid in due]
            model.difference_update(due)
        assert list(idx) == sorted(model)
        assert len(idx) == len(model)
        assert bool(idx) == bool(model)
        assert idx.first() == (min(model)[0] if model else None)


# -- ReadyIndex.append_new: new ids appended into a band's SortedList in bulk --------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 3000), min_size=1, max_size=8), st.integers(0, 5), st.booleans())
def test_append_new_keeps_the_sorted_lists_invariants(batch_sizes, removed_each_time, load_small):
    """Batches of ascending new ids (larger than a sublist, and after claims
    from the front) leave each band exactly as adding them one by one would."""
    bulk, single = ReadyIndex(), ReadyIndex()
    if load_small:                                  # many sublists and splits with few ids
        for band in bulk._bands + single._bands:
            band._reset(4)
    next_id = 1
    for size in batch_sizes:
        ids = list(range(next_id, next_id + size))
        next_id += size
        bulk.append_new(3, ids)
        for jid in ids:
            single.add(3, jid)
        n = min(removed_each_time, len(bulk))
        bulk.pop_first(n)
        single.pop_first(n)
        bulk._bands[3]._check()
        assert list(bulk) == list(single) and len(bulk) == len(single)
        assert bulk.first(7) == single.first(7)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 400)), min_size=1, max_size=6),
       st.lists(st.integers(0, 900), min_size=1, max_size=8), st.booleans())
def test_taking_the_front_of_ready_keeps_order_and_the_sorted_lists_invariants(batches, takes, load_small):
    """``pop_first`` removes the head of the claim order, across sublists
    and bands at once, and leaves every band a valid SortedList."""
    idx, model, next_id = ReadyIndex(), [], 1
    if load_small:                                  # many short sublists: merges and splits
        for band in idx._bands:
            band._reset(4)
    for b, size in batches:
        ids = list(range(next_id, next_id + size))
        next_id += size
        idx.append_new(b, ids)
        model += [(b, jid) for jid in ids]
    for take in takes:
        model.sort()
        n = min(take, len(model))
        assert idx.first(n) == [jid for _, jid in model[:n]]
        idx.pop_first(n)
        del model[:n]
        for band in idx._bands:
            band._check()
        assert list(idx) == [jid for _, jid in sorted(model)] and len(idx) == len(model)
        idx.add(1, next_id)                         # the index still takes single ids after it
        model.append((1, next_id))
        next_id += 1


# -- ReadyIndex._filled: the bands that hold ids, through every change ---------------------------

def filled_bands(idx: ReadyIndex) -> int:
    return sum(1 << b for b, band in enumerate(idx._bands) if len(band))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "append_new", "update", "remove", "first", "pop_first", "clear"]),
                          st.integers(0, ReadyIndex.BANDS - 1), st.integers(0, 30)), max_size=40))
def test_claims_see_exactly_the_filled_bands(steps):
    """``first`` and ``pop_first`` walk only the bands ``_filled`` names; it
    must name exactly those holding ids after every change, or a claim
    would miss jobs (or look into an empty band)."""
    idx, model, next_id = ReadyIndex(), set(), 1         # model: (band, id)
    for op, b, n in steps:
        if op == "add":
            idx.add(b, next_id)
            model.add((b, next_id))
            next_id += 1
        elif op in ("append_new", "update") and n:
            ids = list(range(next_id, next_id + n))
            next_id += n
            getattr(idx, op)(b, ids)
            model.update((b, jid) for jid in ids)
        elif op == "update":
            idx.update(b, [])                               # nothing to add fills nothing
        elif op == "remove" and model:
            band, jid = sorted(model)[n % len(model)]
            idx.remove(band, jid)
            model.discard((band, jid))
        elif op == "first":
            assert idx.first(n) == [jid for _, jid in sorted(model)][:n]
        elif op == "pop_first":
            k = min(n, len(model))
            head = sorted(model)[:k]
            assert idx.first(k) == [jid for _, jid in head]
            idx.pop_first(k)
            model.difference_update(head)
        elif op == "clear":
            idx.clear()
            model.clear()
        assert idx._filled == filled_bands(idx)
        assert list(idx) == [jid for _, jid in sorted(model)] and len(idx) == len(model)


# -- TimeIndex.earliest: the first moment, kept as an attribute through every change ------------

@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "add_many", "remove", "remove_many", "pop_due", "clear"]),
                          st.integers(0, 40), st.lists(st.integers(1, 30), max_size=4)), max_size=40))
def test_earliest_is_always_the_first_moment_held(steps):
    """``earliest`` (what lazy expiry compares with now) is the smallest
    moment with an id, or NEVER when there is none, after any sequence of
    adds, removes, pops and clears; ``first()`` says the same or None."""
    idx, model = TimeIndex(), {}                      # model: moment -> set of ids
    for op, when, jids in steps:
        if op == "add" and jids:
            idx.add(when, jids[0])
            model.setdefault(when, set()).add(jids[0])
        elif op == "add_many":
            idx.add_many(when, jids)
            if jids:
                model.setdefault(when, set()).update(jids)
        elif op in ("remove", "remove_many") and model:
            moment = sorted(model)[when % len(model)]
            held = sorted(model[moment])
            gone = held[:1] if op == "remove" else held[:max(1, len(jids))]
            if op == "remove":
                idx.remove(moment, gone[0])
            else:
                idx.remove_many(moment, gone)
            model[moment] -= set(gone)
            if not model[moment]:
                del model[moment]
        elif op == "pop_due":
            due = idx.pop_due(when)
            assert due == [jid for m in sorted(model) if m <= when for jid in sorted(model[m])]
            model = {m: ids for m, ids in model.items() if m > when}
        elif op == "clear":
            idx.clear()
            model = {}
        assert idx.earliest == (min(model) if model else NEVER)
        assert idx.first() == (min(model) if model else None)
        assert len(idx) == sum(len(ids) for ids in model.values())
