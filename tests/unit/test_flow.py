"""storage/flow.py: the allowance a queue's RATE, CONCURRENCY and pause
give, and the sliding window, on a real Queue with no daemon."""

from __future__ import annotations

from leaseq.storage import flow
from leaseq.storage.config import QueueConfig
from leaseq.storage.flow import RateWindow
from leaseq.storage.job import Job
from leaseq.storage.queue import Queue

T0 = 1_700_000_000_000


def queue_with(ready: int, **options) -> Queue:
    q = Queue(1, b"q", QueueConfig(**options))
    q.add_many([Job(i, b"x", 5, T0, T0) for i in range(1, ready + 1)], T0)
    return q


def test_a_window_counts_each_hand_out_for_exactly_its_span():
    w = RateWindow()
    w.add(T0, 2, 1000)
    w.add(T0 + 500, 1, 1000)
    assert w.used(T0 + 999, 1000) == 3
    assert w.used(T0 + 1000, 1000) == 1          # the two of T0 leave at T0 + 1000
    assert w.used(T0 + 1500, 1000) == 0


def test_next_room_is_when_the_oldest_hand_out_over_the_limit_leaves():
    w = RateWindow()
    w.add(T0, 2, 1000)
    w.add(T0 + 300, 2, 1000)
    assert w.next_room(T0 + 400, 4, 1000) == T0 + 1000     # full: the first of T0 leaves then
    assert w.next_room(T0 + 400, 3, 1000) == T0 + 1000     # over by one: T0's two leave together
    assert w.next_room(T0 + 400, 2, 1000) == T0 + 1300     # over by two: one of T0 + 300 must leave too
    assert w.next_room(T0 + 400, 5, 1000) is None          # room now


def test_no_rule_no_allowance_and_nothing_recorded():
    q = queue_with(3)
    assert flow.allowance(q, T0) is None and flow.throttled(q, T0) == 0
    flow.handed_out(q, T0, 3)
    assert len(q.rate_window.times) == 0                   # a queue without RATE keeps no window
    assert flow.next_room(q, T0) is None


def test_the_smallest_rule_wins_and_a_pause_wins_over_all():
    q = queue_with(10, rate=(5, 1000), concurrency=3)
    assert flow.allowance(q, T0) == 3
    flow.handed_out(q, T0, 4)
    assert flow.allowance(q, T0) == 1 and flow.throttled(q, T0) == 9
    q.config = q.config.with_options(paused=True)
    assert flow.allowance(q, T0) == 0 and flow.throttled(q, T0) == 10
    assert flow.next_room(q, T0) is None                   # a pause ends by QRESUME, not by time


def test_next_room_only_when_a_full_window_holds_ready_jobs_back():
    q = queue_with(2, rate=(1, 1000))
    assert flow.next_room(q, T0) is None
    flow.handed_out(q, T0, 1)
    assert flow.next_room(q, T0 + 10) == T0 + 1000
    empty = queue_with(0, rate=(1, 1000))
    flow.handed_out(empty, T0, 1)
    assert flow.next_room(empty, T0 + 10) is None          # nothing ready: no timer needed


def test_options_round_trip_through_the_logs_json_and_old_logs_load():
    config = QueueConfig(rate=(7, 250), concurrency=4, paused=True)
    assert QueueConfig.from_json(config.to_json()) == config
    old = QueueConfig().to_json()
    for name in ("rate", "concurrency", "paused"):
        del old[name]
    assert QueueConfig.from_json(old) == QueueConfig()     # a log written before these options
    assert config.same_options(config.with_options(paused=False))
    assert not config.same_options(config.with_options(concurrency=5))


def test_each_rule_alone_limits_and_new_options_are_read_afresh():
    q = queue_with(4)
    assert not q.config.limited and flow.allowance(q, T0) is None
    for rule, allowed in [({"paused": True}, 0), ({"concurrency": 2}, 2), ({"rate": (3, 1000)}, 3)]:
        q.config = QueueConfig().with_options(**rule)
        assert q.config.limited and flow.allowance(q, T0) == allowed
        q.config = q.config.with_options(paused=False, concurrency=0, rate=(0, 0))
        assert not q.config.limited and flow.allowance(q, T0) is None
    assert "limited" not in QueueConfig(paused=True).to_json()      # worked out, never stored


def test_limited_names_exactly_the_options_the_rules_read():
    """Each option set alone, to a value other than its default: the queue
    is ``limited`` exactly when ``_rules`` finds a rule, so a rule added to
    one and not the other fails here."""
    from dataclasses import fields
    samples = {int: 7, bool: True, tuple: (3, 1000), str: "memory", frozenset: frozenset({b"g"})}
    for f in fields(QueueConfig):
        if not f.init:             # (``limited`` itself)
            continue
        default = getattr(QueueConfig(), f.name)
        value = samples.get(type(default), "dlq") if default is not None else "dlq"
        if f.name == "backoff":
            value = (5, 1.0, 0)
        q = queue_with(4)
        q.config = QueueConfig(**{f.name: value})
        assert q.config.limited is bool(flow._rules(q, T0)), f.name
