"""``TimeIndex`` (leaseq.storage.index): job ids ordered by a moment, with a
total order (moment, then id) for iteration and ``pop_due``; ``ReadyIndex``:
job ids in claim order.  Every behaviour is checked on both flavours, the
pure indexes and their compiled twins (storage/_index.pyx); the checks of
the pure ones' layout (sortedcontainers' invariants, ``_filled``) on the
pure ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leaseq.storage import index
from leaseq.storage.index import NEVER, PureReadyIndex, PureTimeIndex

TIME_INDEXES = [PureTimeIndex] + ([index.TimeIndex] if index.COMPILED else [])
READY_INDEXES = [PureReadyIndex] + ([index.ReadyIndex] if index.COMPILED else [])
each_time_index = pytest.mark.parametrize("TimeIndex", TIME_INDEXES, ids=lambda k: k.__module__)
each_ready_index = pytest.mark.parametrize("ReadyIndex", READY_INDEXES, ids=lambda k: k.__module__)


def check_layout(idx) -> None:
    """The pure ReadyIndex's own invariants: each band a valid SortedList,
    ``_filled`` naming exactly the bands that hold ids."""
    if type(idx) is PureReadyIndex:
        for band in idx._bands:
            band._check()
        assert idx._filled == sum(1 << b for b, band in enumerate(idx._bands) if len(band))


def filled(TimeIndex, *entries):
    idx = TimeIndex()
    for when, jid in entries:
        idx.add(when, jid)
    return idx


# -- empty ---------------------------------------------------------------------------------------

@each_time_index
def test_new_index_is_empty(TimeIndex):
    idx = TimeIndex()
    assert len(idx) == 0
    assert not idx
    assert idx.first() is None
    assert list(idx) == []
    assert idx.pop_due(10 ** 15) == []


# -- add, len, first, iteration ----------------------------------------------------------------------

@each_time_index
def test_add_counts_each_entry_and_first_is_the_earliest_moment(TimeIndex):
    idx = TimeIndex()
    idx.add(300, 1)
    assert (len(idx), bool(idx), idx.first()) == (1, True, 300)
    idx.add(100, 2)
    assert (len(idx), idx.first()) == (2, 100)
    idx.add(200, 3)
    idx.add(100, 4)                     # a second id at an existing moment
    assert (len(idx), idx.first()) == (4, 100)


@each_time_index
def test_iteration_is_by_moment_then_by_id_whatever_the_insertion_order(TimeIndex):
    idx = filled(TimeIndex, (50, 9), (10, 7), (50, 2), (10, 8), (30, 1), (10, 3), (50, 5))
    assert list(idx) == [(10, 3), (10, 7), (10, 8), (30, 1), (50, 2), (50, 5), (50, 9)]


@each_time_index
def test_the_same_id_at_two_moments_is_two_entries(TimeIndex):
    idx = filled(TimeIndex, (20, 1), (10, 1))
    assert list(idx) == [(10, 1), (20, 1)]
    assert len(idx) == 2


@each_time_index
def test_iteration_does_not_change_the_index(TimeIndex):
    idx = filled(TimeIndex, (2, 1), (1, 2))
    assert list(idx) == list(idx) == [(1, 2), (2, 1)]
    assert len(idx) == 2


# -- add_many --------------------------------------------------------------------------------------------

@each_time_index
def test_add_many_at_a_new_moment(TimeIndex):
    idx = TimeIndex()
    idx.add_many(100, [5, 3, 4])
    assert len(idx) == 3
    assert idx.first() == 100
    assert list(idx) == [(100, 3), (100, 4), (100, 5)]


@each_time_index
def test_add_many_joins_the_ids_already_at_that_moment(TimeIndex):
    idx = filled(TimeIndex, (100, 1), (50, 9))
    idx.add_many(100, [2, 3])
    assert len(idx) == 4
    assert list(idx) == [(50, 9), (100, 1), (100, 2), (100, 3)]


@each_time_index
def test_add_many_counts_ids_already_present_only_once(TimeIndex):
    idx = filled(TimeIndex, (100, 1), (100, 2))
    idx.add_many(100, [2, 3, 1, 4])
    assert len(idx) == 4
    assert list(idx) == [(100, 1), (100, 2), (100, 3), (100, 4)]
    idx.add_many(100, [1, 2])            # nothing new
    assert len(idx) == 4


@each_time_index
def test_add_many_counts_an_id_repeated_in_its_argument_once(TimeIndex):
    idx = TimeIndex()
    idx.add_many(7, [1, 1, 2, 2, 2])
    assert len(idx) == 2
    assert list(idx) == [(7, 1), (7, 2)]


@each_time_index
def test_add_many_accepts_any_iterable(TimeIndex):
    idx = TimeIndex()
    idx.add_many(7, (i for i in (3, 1, 2)))
    assert list(idx) == [(7, 1), (7, 2), (7, 3)]
    assert len(idx) == 3


@each_time_index
def test_add_many_of_no_ids_leaves_an_empty_index_empty(TimeIndex):
    # len, bool, first and iteration must agree: an index with no entries has
    # no earliest moment (Indexes.next_due reads first() without checking len)
    idx = TimeIndex()
    idx.add_many(100, [])
    assert len(idx) == 0 and not idx and list(idx) == []
    assert idx.first() is None


@each_time_index
def test_add_many_of_no_ids_does_not_change_the_earliest_moment(TimeIndex):
    idx = filled(TimeIndex, (200, 1))
    idx.add_many(100, [])
    assert len(idx) == 1 and list(idx) == [(200, 1)]
    assert idx.first() == 200


# -- remove ----------------------------------------------------------------------------------------------------

@each_time_index
def test_remove_takes_out_exactly_that_entry(TimeIndex):
    idx = filled(TimeIndex, (10, 1), (10, 2), (20, 1))
    idx.remove(10, 1)
    assert list(idx) == [(10, 2), (20, 1)]
    assert len(idx) == 2
    assert idx.first() == 10


@each_time_index
def test_removing_the_last_id_of_a_moment_moves_first_to_the_next_moment(TimeIndex):
    idx = filled(TimeIndex, (10, 1), (20, 2))
    idx.remove(10, 1)
    assert idx.first() == 20
    idx.remove(20, 2)
    assert idx.first() is None
    assert len(idx) == 0 and not idx and list(idx) == []


@each_time_index
def test_remove_of_a_missing_moment_raises_key_error_and_changes_nothing(TimeIndex):
    idx = filled(TimeIndex, (10, 1))
    with pytest.raises(KeyError):
        idx.remove(11, 1)
    assert list(idx) == [(10, 1)] and len(idx) == 1


@each_time_index
def test_remove_of_a_missing_id_at_an_existing_moment_raises_key_error_and_changes_nothing(TimeIndex):
    idx = filled(TimeIndex, (10, 1), (10, 2))
    with pytest.raises(KeyError):
        idx.remove(10, 3)
    assert list(idx) == [(10, 1), (10, 2)] and len(idx) == 2 and idx.first() == 10


@each_time_index
def test_remove_twice_raises_key_error_the_second_time(TimeIndex):
    idx = filled(TimeIndex, (10, 1), (10, 2))
    idx.remove(10, 1)
    with pytest.raises(KeyError):
        idx.remove(10, 1)
    assert list(idx) == [(10, 2)] and len(idx) == 1


@each_time_index
def test_remove_from_an_empty_index_raises_key_error(TimeIndex):
    idx = TimeIndex()
    with pytest.raises(KeyError):
        idx.remove(0, 0)
    assert len(idx) == 0 and idx.first() is None


# -- pop_due -------------------------------------------------------------------------------------------------------

@each_time_index
def test_pop_due_returns_due_ids_by_moment_then_id_and_keeps_the_rest(TimeIndex):
    idx = filled(TimeIndex, (30, 1), (10, 5), (20, 4), (10, 2), (20, 3), (40, 0))
    assert idx.pop_due(30) == [2, 5, 3, 4, 1]
    assert list(idx) == [(40, 0)]
    assert len(idx) == 1 and idx.first() == 40


@each_time_index
def test_pop_due_includes_the_moment_equal_to_now(TimeIndex):
    idx = filled(TimeIndex, (100, 1), (101, 2))
    assert idx.pop_due(99) == []
    assert len(idx) == 2
    assert idx.pop_due(100) == [1]
    assert idx.pop_due(100) == []
    assert idx.pop_due(101) == [2]
    assert len(idx) == 0 and idx.first() is None and not idx


@each_time_index
def test_pop_due_of_everything_empties_the_index(TimeIndex):
    idx = filled(TimeIndex, (1, 3), (2, 2), (3, 1))
    idx.add_many(2, [9, 8])
    assert idx.pop_due(10 ** 15) == [3, 2, 8, 9, 1]
    assert len(idx) == 0 and list(idx) == [] and idx.first() is None


@each_time_index
def test_entries_added_after_pop_due_are_counted_again(TimeIndex):
    idx = filled(TimeIndex, (5, 1))
    assert idx.pop_due(5) == [1]
    idx.add(5, 1)
    idx.add_many(6, [2, 3])
    assert len(idx) == 3
    assert list(idx) == [(5, 1), (6, 2), (6, 3)]


@each_time_index
def test_clear_empties_the_index(TimeIndex):
    idx = filled(TimeIndex, (1, 1), (2, 2))
    idx.clear()
    assert len(idx) == 0 and not idx and idx.first() is None and list(idx) == []
    idx.add(3, 3)
    assert len(idx) == 1 and list(idx) == [(3, 3)]


# -- last ----------------------------------------------------------------------------------------------------------

@each_time_index
def test_last_gives_the_latest_entries_latest_first_across_moments(TimeIndex):
    idx = filled(TimeIndex, (10, 1), (30, 4), (30, 2), (20, 3), (40, 5))
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


@each_time_index
@settings(max_examples=200, deadline=None)
@given(ops=ops)
def test_index_agrees_with_a_sorted_set_of_pairs(TimeIndex, ops):
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

@each_ready_index
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 3000), min_size=1, max_size=8), st.integers(0, 5), st.booleans())
def test_append_new_keeps_the_sorted_lists_invariants(ReadyIndex, batch_sizes, removed_each_time, load_small):
    """Batches of ascending new ids (larger than a sublist, and after claims
    from the front) leave each band exactly as adding them one by one would."""
    bulk, single = ReadyIndex(), ReadyIndex()
    if load_small and ReadyIndex is PureReadyIndex:     # many sublists and splits with few ids
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
        check_layout(bulk)
        assert list(bulk) == list(single) and len(bulk) == len(single)
        assert bulk.first(7) == single.first(7)


@each_ready_index
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 400)), min_size=1, max_size=6),
       st.lists(st.integers(0, 900), min_size=1, max_size=8), st.booleans())
def test_taking_the_front_of_ready_keeps_order_and_the_sorted_lists_invariants(ReadyIndex, batches, takes, load_small):
    """``pop_first`` removes the head of the claim order, across sublists
    and bands at once, and leaves every band a valid SortedList."""
    idx, model, next_id = ReadyIndex(), [], 1
    if load_small and ReadyIndex is PureReadyIndex:     # many short sublists: merges and splits
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
        check_layout(idx)
        assert list(idx) == [jid for _, jid in sorted(model)] and len(idx) == len(model)
        idx.add(1, next_id)                         # the index still takes single ids after it
        model.append((1, next_id))
        next_id += 1


# -- ReadyIndex._filled: the bands that hold ids, through every change ---------------------------

@each_ready_index
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "append_new", "update", "remove", "first", "pop_first", "clear"]),
                          st.integers(0, PureReadyIndex.BANDS - 1), st.integers(0, 30)), max_size=40))
def test_claims_see_exactly_the_filled_bands(ReadyIndex, steps):
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
        check_layout(idx)
        assert list(idx) == [jid for _, jid in sorted(model)] and len(idx) == len(model)


# -- TimeIndex.earliest: the first moment, kept as an attribute through every change ------------

@each_time_index
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "add_many", "remove", "remove_many", "pop_due", "clear"]),
                          st.integers(0, 40), st.lists(st.integers(1, 30), max_size=4)), max_size=40))
def test_earliest_is_always_the_first_moment_held(TimeIndex, steps):
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


# -- many entries: past one chunk of the compiled indexes (512 keys), splits and merges ---------

@each_ready_index
@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["insert", "remove", "pop_first"]), st.integers(0, 3),
                          st.integers(1, 1500), st.randoms(use_true_random=False)), min_size=1, max_size=12))
def test_ready_index_of_thousands_agrees_with_a_sorted_model(ReadyIndex, steps):
    """Thousands of ids added out of order (split chunks), removed at random
    (emptied and merged chunks) and taken from the front: claim order and
    counts stay the model's."""
    idx, model, used = ReadyIndex(), set(), set()
    for op, band, n, rnd in steps:
        if op == "insert":                       # ids are never used twice, as the queue's are not
            ids = [jid for jid in rnd.sample(range(1, 20_000), n) if jid not in used]
            used.update(ids)
            idx.update(band, ids)
            model.update((band, jid) for jid in ids)
        elif op == "remove" and model:
            for b, jid in rnd.sample(sorted(model), min(n, len(model))):
                idx.remove(b, jid)
                model.discard((b, jid))
        elif op == "pop_first":
            head = sorted(model)[:n]
            assert idx.first(n) == [jid for _, jid in head]
            idx.pop_first(len(head))
            model.difference_update(head)
        check_layout(idx)
        assert list(idx) == [jid for _, jid in sorted(model)] and len(idx) == len(model)
        assert idx.items() == sorted(model)
        assert idx.oldest() == (min(jid for _, jid in model) if model else None)
    with pytest.raises(ValueError):
        idx.remove(0, 30_000)                    # never added


@each_time_index
@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add_many", "remove_many", "pop_due"]), st.integers(0, 50),
                          st.integers(1, 1500), st.randoms(use_true_random=False)), min_size=1, max_size=12))
def test_time_index_of_thousands_agrees_with_a_sorted_model(TimeIndex, steps):
    idx, model = TimeIndex(), set()
    for op, when, n, rnd in steps:
        if op == "add_many":
            ids = rnd.sample(range(1, 20_000), n)
            idx.add_many(when, ids)
            model.update((when, jid) for jid in ids)
        elif op == "remove_many" and model:
            moment = sorted(model)[rnd.randrange(len(model))][0]
            held = sorted(jid for m, jid in model if m == moment)
            gone = rnd.sample(held, min(n, len(held)))
            idx.remove_many(moment, gone)
            model.difference_update((moment, jid) for jid in gone)
        elif op == "pop_due":
            due = sorted(p for p in model if p[0] <= when)
            assert idx.pop_due(when) == [jid for _, jid in due]
            model.difference_update(due)
        assert list(idx) == sorted(model) and len(idx) == len(model)
        assert idx.earliest == (min(model)[0] if model else NEVER)
        assert idx.last(5) == [jid for _, jid in sorted(model, reverse=True)[:5]]


@each_time_index
def test_moments_and_ids_of_any_size_keep_their_order(TimeIndex):
    """Moments as the daemon gives them (ms since the epoch), a negative
    one, the largest ids: the order is still (moment, id)."""
    now = 1_795_000_000_000
    entries = [(now + 5, 2 ** 62), (now, 7), (-3, 1), (now, 2 ** 40), (NEVER - 1, 1), (now + 5, 3)]
    idx = filled(TimeIndex, *entries)
    assert list(idx) == sorted(entries) and idx.earliest == -3
    assert idx.pop_due(now) == [1, 7, 2 ** 40]
    assert idx.last(2) == [1, 2 ** 62] and idx.earliest == now + 5
    idx.remove(now + 5, 2 ** 62)
    assert list(idx) == [(now + 5, 3), (NEVER - 1, 1)]


@each_ready_index
def test_ready_ids_of_any_size_keep_claim_order(ReadyIndex):
    idx = ReadyIndex()
    idx.add(19, 2 ** 50)
    idx.add(19, 5)
    idx.add(0, 2 ** 40)
    assert idx.items() == [(0, 2 ** 40), (19, 5), (19, 2 ** 50)] and idx.oldest() == 5
    assert idx.first(2) == [2 ** 40, 5]


@each_ready_index
def test_iterating_a_large_ready_index_can_stop_early(ReadyIndex):
    """A claim that passes over jobs it may not deliver walks the claim
    order and stops once it has enough (``Queue.claim_head``)."""
    idx = ReadyIndex()
    idx.append_new(19, list(range(1, 5001)))
    idx.add(0, 9000)
    walk = iter(idx)
    assert [next(walk) for _ in range(3)] == [9000, 1, 2]
    assert sum(1 for _ in walk) == 4998                 # the rest, once each
    assert len(idx) == 5001
