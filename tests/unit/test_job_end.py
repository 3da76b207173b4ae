"""A job's end is one step (``Store.ended``, docs/architecture.md "A job's
end"): every way a job ends (an ack, with or without RESULT and by the
plain short way, a death by QNACK DEAD, by MAXDELIVERIES or by EXPIRE on
the way to a claim, a QCANCEL, a QDEL, a QPURGE, the drop of its queue)
reaches the same participants (results, dependants, waiters, flow slots),
and replay of the log reaches them the same way.  Through the real store
and the real command handlers (tests/unit/core.py); a waiter is the store's
own ``EndWatch`` told through the callback the daemon would give it."""

from __future__ import annotations

import pytest
from core import T0, Client, Core, call
from leaseq.commands.replies import Error
from leaseq.storage.job import DEAD, READY, WAITING
from leaseq.storage.recovery import Replayer
from leaseq.storage.store import Store

LEASE = 1_000
TTL = 60_000


def watch(store: Store, q, jid: int) -> list:
    """A waiter on job ``jid`` of ``q``: the list the store's ``EndWatch`` tells."""
    told: list = []
    store.endings.watched.add((q.qid, jid))
    store.endings.tell = lambda tq, tjid: told.append((tq.name, tjid))
    return told


class World:
    """Queue ``w`` (CONCURRENCY 1, RESULT-TTL) holding parent ``P``, and a
    child in queue ``kids`` waiting for ``P`` (AFTER): every participant of
    the end's step has something to do when ``P`` ends."""

    def __init__(self, *options, child: bool = True) -> None:
        self.core = Core()
        self.store = self.core.store
        self.client = Client(self.core)
        self.call("QCREATE", "w", "CONCURRENCY", 1, "RESULT-TTL", TTL, "LEASE", LEASE, "DURABILITY", "fsync", *options)
        self.call("QCREATE", "kids", "DURABILITY", "fsync")
        self.q = self.store.queues[b"w"]
        self.pid = self.call("QPUSH", "w", "parent")
        self.cid = self.call("QPUSH", "kids", "child", "AFTER", 1, "w", self.pid) if child else None
        self.kids = self.store.queues[b"kids"]

    def call(self, *args, now: int = T0):
        return call(self.client, *args, now=now)

    def token(self, now: int = T0) -> bytes:
        got = self.call("QCLAIM", "w", "c", "LEASE", LEASE, now=now)
        assert [j[b"id"] for j in got] == [self.pid]
        return self.q.jobs[self.pid].token

    def child_state(self):
        return self.kids.jobs[self.cid].state

    def result(self, now: int = T0):
        try:
            return self.call("QRESULT", "w", self.pid, now=now)
        except Error as e:             # -DEAD reason, -NOJOB: the error reply ``call`` raises
            return str(e)


def end_by_ack(w: World) -> int:
    return w.call("QACK", "w", w.token())


def end_by_ack_with_result(w: World) -> int:
    return w.call("QACK", "w", w.token(), "RESULT", "forty-two")


def end_by_nack_dead(w: World) -> int:
    return w.call("QNACK", "w", w.token(), "DEAD")


def end_by_max_deliveries(w: World) -> int:
    w.call("QALTER", "w", "MAXDELIVERIES", 1)
    w.call("QNACK", "w", w.token(), "DELAY", 0)
    assert w.call("QCLAIM", "w", "c", "LEASE", LEASE) == []      # dead-lettered on the way
    return 1


def end_by_expire(w: World) -> int:
    w.call("QALTER", "w", "EXPIRE", 10)
    assert w.call("QCLAIM", "w", "c", now=T0 + 20) == []          # older than EXPIRE: dead on the way
    return 1


def end_by_cancel(w: World) -> int:
    return w.call("QCANCEL", "w", w.pid)


def end_by_delete(w: World) -> int:
    return w.call("QDEL", "w", w.pid)


def end_by_purge(w: World) -> int:
    return w.call("QPURGE", "w", "READY")


# path -> (what QRESULT says after, whether the child is released (else it dies))
PATHS = {
    end_by_ack: (None, True),
    end_by_ack_with_result: (b"forty-two", True),
    end_by_nack_dead: ("DEAD nack", False),
    end_by_max_deliveries: ("DEAD max-deliveries", False),
    end_by_expire: ("DEAD expired", False),
    end_by_cancel: ("DEAD cancelled", False),
    end_by_delete: (None, True),
    end_by_purge: (None, True),
}


def nojob(answer) -> bool:
    return isinstance(answer, str) and answer.startswith("NOJOB")


@pytest.mark.parametrize("end", list(PATHS), ids=lambda f: f.__name__)
@pytest.mark.parametrize("deadletter", [False, True], ids=["in-place", "deadletter"])
def test_every_way_a_job_ends_reaches_each_participant_once(end, deadletter):
    w = World(*(["DEADLETTER", "w-dead"] if deadletter else []))
    told = watch(w.store, w.q, w.pid)
    w.store.take_woken()
    assert end(w) == 1
    result, released = PATHS[end]
    assert told == [(b"w", w.pid)]                                   # waiters
    assert w.q in w.store.take_woken()                               # a flow slot (CONCURRENCY)
    if result is None:                                               # results
        assert nojob(w.result())
    else:
        assert w.result() == result
    child = w.kids.jobs[w.cid]                                       # dependants
    if released:
        assert child.state is READY
    else:                                                            # (kids has no DEADLETTER: dead in place)
        assert child.state is DEAD and child.dead_reason == b"parent-failed"
    assert not w.store.deps.children
    # retention over is no second end: the waiter heard once, and never again
    w.call("QLEN", "w", now=T0 + 10 * TTL)
    w.store.fold(w.q, T0 + 10 * TTL)
    assert told == [(b"w", w.pid)]


@pytest.mark.parametrize("end", list(PATHS), ids=lambda f: f.__name__)
def test_replay_takes_the_same_step_so_a_replica_reacts_alike(end):
    """Records of each end replayed into a fresh store (what recovery and a
    replica do) tell its waiters, keep its results and settle its children
    as the live store did."""
    w = World("DEADLETTER", "w-dead")
    end(w)
    w.store.journal.log.flush()
    written = w.store.journal.log.records()
    replica = Store()                   # (its journal writes nothing, as in replay)
    told = watch(replica, w.q, w.pid)   # (the replica's queues keep the primary's numbers)
    replayer = Replayer(replica)
    for rtype, body in written:
        replayer.apply(rtype, body)
    assert told == [(b"w", w.pid)]
    rq, rkids = replica.queues[b"w"], replica.queues[b"kids"]
    assert (rq.results.get(w.pid) is None) == (w.q.results.get(w.pid) is None)
    live_child = w.kids.jobs.get(w.cid)
    replayed_child = rkids.jobs.get(w.cid)
    assert (live_child is None) == (replayed_child is None)
    if live_child is not None:
        assert replayed_child.state is live_child.state


def test_a_plain_ack_takes_the_step_too():
    """QACK of a job nobody depends on, on a queue with no retention or
    groups, goes the plain transitions' short way (storage/plain.py): the step
    still tells its waiter and frees its CONCURRENCY slot."""
    w = World(child=False)                      # nobody waits for P: the short way
    assert not w.store.deps.children
    told = watch(w.store, w.q, w.pid)
    token = w.token()
    w.store.take_woken()
    assert w.call("QACK", "w", token) == 1
    assert told == [(b"w", w.pid)]
    assert w.q in w.store.take_woken()


def test_an_ack_on_a_queue_without_slots_wakes_nobody():
    """The flow-slot participant has nothing to do without CONCURRENCY: the
    queue is not woken by the ack (nor told to waiters nobody registered)."""
    core = Core()
    client = Client(core)
    call(client, "QCREATE", "plain")
    jid = call(client, "QPUSH", "plain", "x")
    call(client, "QCLAIM", "plain", "c")
    token = core.store.queues[b"plain"].jobs[jid].token
    core.store.take_woken()
    assert call(client, "QACK", "plain", token) == 1
    assert core.store.take_woken() == set()
    assert jid not in core.store.queues[b"plain"].jobs


def test_dropping_the_queue_releases_its_dependants_but_tells_no_waiter_through_the_step():
    """A drop takes part only as far as its dependants (its waiters are
    answered -CLOSED by the daemon, its slots are gone with it)."""
    w = World()
    told = watch(w.store, w.q, w.pid)
    assert w.child_state() is WAITING
    w.call("QDROP", "w", "FORCE")
    assert w.child_state() is READY
    assert told == []
    assert w.q not in w.store.take_woken()
