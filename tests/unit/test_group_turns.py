"""Groups (storage/groups.py, docs/semantics.md §3.8) through the commands a
client sends (tests/unit/core.py: no socket, a real data directory), checked
against a naive reference that recomputes every claim from scratch: which
groups may hand out, whose turn it is, which job is each group's next.
After each run the store is crashed and reopened (log replay), and once more
after a snapshot, and the turns must be the same.
"""

from __future__ import annotations

import pytest
from core import T0, call, client_of, close, crash, datadir_of, open_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leaseq.storage import snapshot
from leaseq.storage.groups import Groups

GROUPS = [b"", b"a", b"b", b"c"]
LEASE = 10_000


class Ref:
    """Every live job as (id, group, priority, state, requeued), the groups'
    turns and rate windows; claims recomputed naively."""

    def __init__(self, gc: int, rate: tuple, paused: set) -> None:
        self.jobs: dict[int, dict] = {}
        self.turn: dict[bytes, int] = {}
        self.next_turn = 0
        self.gc, self.rate, self.paused = gc, rate, paused
        self.handed: dict[bytes, list[int]] = {}

    def _touch(self, g: bytes) -> None:
        if g not in self.turn:
            self.turn[g] = self.next_turn
            self.next_turn += 1

    def _tidy(self) -> None:
        for g in list(self.turn):
            if not any(j["group"] == g for j in self.jobs.values()):
                del self.turn[g]

    def push(self, jid: int, group: bytes, priority: int, visible: int, now: int) -> None:
        self._touch(group)
        self.jobs[jid] = dict(id=jid, group=group, priority=priority, state="delayed" if visible > now else "ready",
                              requeued=False, visible=visible)

    def held(self, g: bytes) -> int:
        return sum(1 for j in self.jobs.values() if j["group"] == g and
                   (j["state"] == "in_flight" or (j["state"] == "delayed" and j["requeued"])))

    def used(self, g: bytes, now: int) -> int:
        n, ms = self.rate
        return sum(1 for t in self.handed.get(g, []) if t > now - ms)

    def room(self, g: bytes, now: int) -> bool:
        if g in self.paused:
            return False
        if self.gc and self.held(g) >= self.gc:
            return False
        if self.rate[0] and self.used(g, now) >= self.rate[0]:
            return False
        return True

    @staticmethod
    def key(j: dict) -> tuple:
        return ((9 - j["priority"]) * 2 + (0 if j["requeued"] else 1), j["id"])

    def claim(self, count: int, now: int) -> list[int]:
        self.due(now)
        out = []
        for _ in range(count):
            best = None
            for g in self.turn:
                ready = [j for j in self.jobs.values() if j["group"] == g and j["state"] == "ready"]
                if not ready or not self.room(g, now):
                    continue
                head = min(ready, key=self.key)
                rank = (self.key(head)[0], self.turn[g])
                if best is None or rank < best[0]:
                    best = (rank, g, head)
            if best is None:
                break
            _, g, head = best
            head["state"] = "in_flight"
            self.turn[g] = self.next_turn
            self.next_turn += 1
            if self.rate[0]:
                self.handed.setdefault(g, []).append(now)
            out.append(head["id"])
        return out

    def ack(self, jid: int) -> None:
        del self.jobs[jid]
        self._tidy()

    def nack(self, jid: int, delay: int, now: int) -> None:
        j = self.jobs[jid]
        j["requeued"] = True
        j["state"] = "delayed" if delay else "ready"
        j["visible"] = now + delay

    def due(self, now: int) -> None:
        for j in self.jobs.values():
            if j["state"] == "delayed" and j["visible"] <= now:
                j["state"] = "ready"

    def order(self) -> list[bytes]:
        """The groups from the first turn to the last."""
        return sorted(self.turn, key=self.turn.get)


steps = st.lists(st.one_of(
    st.tuples(st.just("push"), st.lists(st.sampled_from(GROUPS), min_size=1, max_size=4), st.integers(4, 6),
              st.booleans()),
    st.tuples(st.just("claim"), st.integers(1, 5)),
    st.tuples(st.just("ack"), st.integers(0, 50)),
    st.tuples(st.just("nack"), st.integers(0, 50), st.sampled_from([0, 100])),
    st.tuples(st.just("wait"), st.sampled_from([50, 100, 1000])),
), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gc=st.sampled_from([0, 1, 2]), rate=st.sampled_from([(0, 0), (1, 100), (2, 1000)]),
       paused=st.sets(st.sampled_from(GROUPS), max_size=1), script=steps)
def test_claims_follow_the_naive_reference_and_turns_survive_replay_and_snapshots(tmp_path_factory, gc, rate,
                                                                                      paused, script):
    directory = tmp_path_factory.mktemp("groups")
    store = open_store(directory, T0)
    c = client_of(store)
    options = ["DURABILITY", "async"]             # written at the end of each command: a crash keeps it
    if gc:
        options += ["GROUP-CONCURRENCY", gc]
    if rate[0]:
        options += ["GROUP-RATE", *rate]
    call(c, "QCREATE", "q", *options, now=T0)
    for g in paused:
        call(c, "QPAUSE", "q", "GROUP", g, now=T0)
    ref = Ref(gc, rate, set(paused))
    now = T0
    leases: dict[int, bytes] = {}
    for step in script:
        kind = step[0]
        if kind == "push":
            _, groups, priority, delayed = step
            options = ["GROUPS", *groups, "PRIORITY", priority] + (["DELAY", 100] if delayed else [])
            ids = call(c, "QPUSHMANY", "q", len(groups), *[b"p"] * len(groups), *options, now=now)
            for jid, g in zip(ids, groups):
                ref.push(jid, g, priority, now + 100 if delayed else now, now)
        elif kind == "claim":
            got = call(c, "QCLAIM", "q", "w", "COUNT", step[1], "LEASE", LEASE, now=now)
            assert [j[b"id"] for j in got] == ref.claim(step[1], now)
            for j in got:
                leases[j[b"id"]] = j[b"lease"]
        elif kind in ("ack", "nack") and leases:
            jid = sorted(leases)[step[1] % len(leases)]
            token = leases.pop(jid)
            if kind == "ack":
                assert call(c, "QACK", "q", token, now=now) == 1
                ref.ack(jid)
            else:
                assert call(c, "QNACK", "q", token, "DELAY", step[2], now=now) == 1
                ref.nack(jid, step[2], now)
        elif kind == "wait":
            now += step[1]
    q = store.queues[b"q"]
    call(c, "QLEN", "q", now=now)                   # fold, as a claim would
    if q.indexes.groups is None:                    # no group rule, and every job in "": no group state
        assert set(ref.turn) <= {b""}
        close(store)
        return
    turns = q.indexes.groups.turn_table()
    # the same order of turns (the numbers may differ: a queue whose jobs were all in "" kept no
    # turns until its first other group came)
    assert sorted(turns, key=turns.get) == ref.order()
    crash(store)
    store = open_store(directory, now)
    assert store.queues[b"q"].indexes.groups.turn_table() == turns       # replayed from the log
    snap = snapshot.write(store, str(directory), datadir_of(store).wal.segment_number, now)
    loaded, _info = snapshot.load(snap.path)
    assert loaded.queues[b"q"].indexes.groups.turn_table() == turns      # kept by the snapshot
    close(store)


def test_a_queue_without_groups_keeps_no_group_state(tmp_path):
    store = open_store(tmp_path / "d", T0)
    c = client_of(store)
    call(c, "QPUSHMANY", "plain", 3, "a", "b", "c", now=T0)
    assert store.queues[b"plain"].indexes.groups is None
    call(c, "QPUSH", "plain", "d", "GROUP", "", now=T0)             # the group "" is no group
    assert store.queues[b"plain"].indexes.groups is None
    call(c, "QPUSH", "plain", "e", "GROUP", "g", now=T0)
    groups = store.queues[b"plain"].indexes.groups
    assert isinstance(groups, Groups) and set(groups.members) == {b"", b"g"}
    got = call(c, "QCLAIM", "plain", "w", "COUNT", 2, now=T0)
    assert [j[b"payload"] for j in got] == [b"a", b"e"]             # "" joined first: its jobs were there
    close(store)



def _doomed_in_two_groups(c, *options) -> None:
    """Queue q (MAXDELIVERIES 1, DEADLETTER dlq, ``options``): a1 a2 in group
    a, whose turn comes first, and b1 in b, each delivered once and nacked,
    so that the next claim to reach one dead-letters it."""
    call(c, "QCREATE", "dlq", now=T0)
    call(c, "QCREATE", "q", "MAXDELIVERIES", 1, "DEADLETTER", "dlq", *options, now=T0)
    call(c, "QPUSHMANY", "q", 2, "a1", "a2", "GROUP", "a", now=T0)
    got = call(c, "QCLAIM", "q", "w", "COUNT", 2, now=T0)
    call(c, "QPUSH", "q", "b1", "GROUP", "b", now=T0)
    got += call(c, "QCLAIM", "q", "w", "COUNT", 1, now=T0)        # turns now: a, then b
    assert [j[b"payload"] for j in got] == [b"a1", b"a2", b"b1"]
    call(c, "QNACK", "q", *[j[b"lease"] for j in got], "DELAY", 0, now=T0)


def _dead_letters(c) -> list:
    return [j[b"payload"] for j in call(c, "QPEEK", "dlq", "COUNT", 10, now=T0)]


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_a_job_dead_lettered_on_the_way_takes_no_turn_whatever_the_count(tmp_path, count):
    """docs/semantics.md §3.8: a job dead-lettered by a claim is not handed
    out, so its group keeps its turn and gives its next job.  A batch claim
    used to pass the turn to b after a1 (a1, b1, a2), unlike the same claim
    made one job at a time (a1, a2, b1)."""
    store = open_store(tmp_path / "d", T0)
    c = client_of(store)
    _doomed_in_two_groups(c)
    assert call(c, "QCLAIM", "q", "w", "COUNT", count, now=T0) == []
    assert _dead_letters(c) == [b"a1", b"a2", b"b1"]
    close(store)


def test_a_job_dead_lettered_on_the_way_takes_no_group_slot_and_replay_keeps_the_turns(tmp_path):
    """With GROUP-CONCURRENCY 1 a group whose old jobs die on the way still
    hands out its next one in the same claim (the claim used to count a1 as
    a's one job, dead-letter a1 and b1, then a2: a1, b1, a2); a restart
    rebuilds the turns the claims left."""
    directory = tmp_path / "d"
    store = open_store(directory, T0)
    c = client_of(store)
    _doomed_in_two_groups(c, "DURABILITY", "async")
    call(c, "QPUSH", "q", "a3", "GROUP", "a", now=T0)
    call(c, "QPUSH", "q", "b2", "GROUP", "b", now=T0)
    call(c, "QALTER", "q", "GROUP-CONCURRENCY", 1, now=T0)
    got = call(c, "QCLAIM", "q", "w", "COUNT", 5, now=T0)
    assert [j[b"payload"] for j in got] == [b"a3", b"b2"]
    assert _dead_letters(c) == [b"a1", b"a2", b"b1"]
    turns = store.queues[b"q"].indexes.groups.turn_table()
    assert sorted(turns, key=turns.get) == [b"a", b"b"]
    crash(store)
    store = open_store(directory, T0)
    assert store.queues[b"q"].indexes.groups.turn_table() == turns
    close(store)
