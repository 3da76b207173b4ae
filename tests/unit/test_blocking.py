"""``daemon.blocking`` on the command core: parked claims on a real store, on
an asyncio loop, with a clock the test sets.  The races here sit between two
readings of a running clock, which no test over a socket can place; the
integration tests (test_flow_control, test_groups) cover the same waits end
to end."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from leaseq.commands.claims import ClaimWait
from leaseq.daemon.blocking import Blocking, deal
from leaseq.daemon.dispatch import execute
from leaseq.daemon.resp import encode
from store_state import digest

from core import T0, Client, Core, call, plain


class Parked:
    """The connection side of a parked QCLAIM: what ``Blocking`` calls on it."""

    def __init__(self) -> None:
        self.closed = False
        self.waiting = None
        self.answers: list = []

    def unblock(self, reply, ticket=None) -> None:
        self.waiting = None
        self.answers.append(reply)


class Committer:
    def touch(self) -> None:
        pass


@pytest.fixture
def world():
    core = Core()
    core.committer = Committer()
    loop = asyncio.new_event_loop()
    blocking = Blocking(core, loop)
    yield core, Client(core), loop, blocking
    blocking.release_all()
    loop.close()


def park_claim(client: Client, blocking: Blocking, *args) -> Parked:
    reply, _ticket = execute(client, [b"QCLAIM", *(a if isinstance(a, bytes) else str(a).encode() for a in args)])
    assert isinstance(reply, ClaimWait)
    conn = Parked()
    blocking.park(conn, reply)
    return conn


def settle(loop) -> None:
    loop.run_until_complete(asyncio.sleep(0.05))


def test_a_claimer_that_parks_after_the_rate_window_slid_is_served(world):
    core, client, loop, blocking = world
    call(client, "QCREATE", "q", "RATE", 1, 100, now=T0)
    call(client, "QPUSHMANY", "q", 2, "a", "b")
    assert len(call(client, "QCLAIM", "q", "w1")) == 1
    reply, _ticket = execute(client, [b"QCLAIM", b"q", b"w2", b"BLOCK", b"20000"])
    assert isinstance(reply, ClaimWait)             # at T0 the window is full
    core.at(T0 + 100)                               # ... and slides before the claim parks
    conn = Parked()
    blocking.park(conn, reply)
    assert blocking.timers[core.store.queues[b"q"]][0] == T0 + 100
    settle(loop)
    assert [job[b"id"] for job in plain(conn.answers[0])] == [2]


def test_no_timer_spins_for_claimers_that_cannot_take(world):
    core, client, loop, blocking = world
    call(client, "QCREATE", "q", "RATE", 1, 100, now=T0)
    parked = park_claim(client, blocking, "q", "w", "BLOCK", 20000)
    q = core.store.queues[b"q"]
    assert q not in blocking.timers                 # no ready job: nothing to wait for
    call(client, "QPUSHMANY", "q", 1, "a")
    parked.closed = True                            # the claimer went away
    blocking._arm(q)
    assert q not in blocking.timers


def _timer_outlived_its_claimers(core, client, blocking):
    """A queue with a lease running (its timer armed for the deadline) whose
    one parked claimer was served: the timer, still set."""
    call(client, "QCREATE", "q", now=T0)
    call(client, "QPUSHMANY", "q", 1, "a")
    assert len(call(client, "QCLAIM", "q", "w0", "LEASE", 5000)) == 1
    parked = park_claim(client, blocking, "q", "w1", "BLOCK", 20000)
    q = core.store.queues[b"q"]
    due, handle = blocking.timers[q]
    assert due == T0 + 5000
    call(client, "QPUSHMANY", "q", 1, "b")
    blocking.serve(q)
    assert parked.answers and q not in blocking.by_queue       # served: nobody waits on q now
    assert blocking.timers[q] == (due, handle) and not handle.cancelled()
    return q, handle


def test_a_queues_timer_outlives_its_last_claimer_and_serves_the_next(world):
    """``_forget`` keeps the queue's timer: the next park finds it set and
    sets none (at one job per request that was a timer of the loop made and
    closed 0.16 times a job); it still runs at the deadline."""
    core, client, loop, blocking = world
    q, handle = _timer_outlived_its_claimers(core, client, blocking)
    again = park_claim(client, blocking, "q", "w2", "BLOCK", 20000)
    assert blocking.timers[q][1] is handle
    core.at(T0 + 5000)                                          # w0's lease runs out: its job is ready again
    loop.run_until_complete(asyncio.sleep(5.1))
    assert [job[b"payload"] for job in plain(again.answers[0])] == [b"a"]


def test_a_timer_kept_for_nobody_goes_with_its_queue_and_with_a_clock_jump(world):
    core, client, loop, blocking = world
    q, handle = _timer_outlived_its_claimers(core, client, blocking)
    blocking.queue_dropped(q)
    assert handle.cancelled() and q not in blocking.timers
    call(client, "QDROP", "q", "FORCE")
    q, handle = _timer_outlived_its_claimers(core, client, blocking)
    blocking.time_moved()                                       # set for the old time: gone, as the others'
    assert handle.cancelled() and blocking.timers == {}


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3000), st.lists(st.integers(1, 1000), min_size=1, max_size=12))
def test_deal_divides_in_proportion_never_above_a_count(available, counts):
    """docs/semantics.md §3.3: jobs arriving for several blocked claimers
    are divided in proportion to COUNT, the remainder one by one in waiting
    order; one claimer alone takes what it asked for, or what there is."""
    shares = deal(available, counts)
    total = sum(counts)
    assert sum(shares) == min(available, total)
    assert all(0 <= s <= c for s, c in zip(shares, counts))
    if available < total:
        for s, c in zip(shares, counts):
            assert available * c // total <= s <= available * c // total + 1


# -- Blocking.serve through the plain transitions' short way (storage/plain.py) and without it --------

SERVED_QUEUES = {b"mem": [b"DURABILITY", b"memory"], b"sync": [b"DURABILITY", b"fsync", b"LEASE", b"100"],
                 b"slots": [b"CONCURRENCY", b"1", b"DURABILITY", b"memory"]}
_park = st.tuples(st.just("park"), st.sampled_from(list(SERVED_QUEUES)), st.integers(1, 3), st.booleans())
_push = st.tuples(st.just("push"), st.sampled_from(list(SERVED_QUEUES)), st.integers(1, 4),
                  st.sampled_from([[], [], [b"PRIORITY", b"8"], [b"KEY", b"k"]]))
_turn = st.tuples(st.just("turn"))
_parks = st.tuples(st.just("parks"), st.sampled_from(list(SERVED_QUEUES)),       # several claimers on one queue
                   st.lists(st.integers(1, 3), min_size=2, max_size=4))
served_ops = st.one_of(     # (parks, pushes and turns weighed thrice: a park, then a push, then a turn is the case)
    _park, _park, _parks, _push, _push, _push, _turn, _turn, _turn,
    st.tuples(st.just("clock"), st.integers(1, 150)),
    st.tuples(st.just("close"), st.integers(0, 9)),
    st.tuples(st.just("ack"), st.integers(0, 9)),
)


class ServeSide:
    """A store, its blocking claims and their parked connections, served
    with the plain transitions' short way (``plain.SHORT``) or without it."""

    def __init__(self, short: bool) -> None:
        from leaseq.storage import plain as plain_module
        self.plain, self.short = plain_module, short
        self.core = Core()
        self.core.committer = Committer()
        self.loop = asyncio.new_event_loop()
        self.blocking = Blocking(self.core, self.loop)
        self.client = Client(self.core)
        self.parked: list = []              # every Parked, in order
        self.answers: list = []             # (who, encoded reply) in the order they came
        for name, options in SERVED_QUEUES.items():
            self.run([b"QCREATE", name] + options)

    def run(self, args):
        saved, self.plain.SHORT = self.plain.SHORT, self.short
        try:
            if args == "turn":
                self.blocking.serve_woken()
                return None
            return execute(self.client, args)[0]
        finally:
            self.plain.SHORT = saved

    def do(self, op) -> None:
        kind = op[0]
        if kind == "park":
            _, q, count, blocks = op
            reply = self.run([b"QCLAIM", q, b"w", b"COUNT", str(count).encode()] + ([b"BLOCK", b"20000"] if blocks else []))
            if isinstance(reply, ClaimWait):
                conn = _Recorded(self.answers, len(self.parked))
                self.parked.append(conn)
                self.blocking.park(conn, reply)
            else:
                self.answers.append(("direct", encode(reply, False)))
        elif kind == "parks":
            for count in op[2]:
                self.do(("park", op[1], count, True))
        elif kind == "push":
            _, q, n, options = op
            self.answers.append(("push", encode(self.run([b"QPUSHMANY", q, str(n).encode()] + [b"p"] * n + options), False)))
        elif kind == "turn":
            self.run("turn")
        elif kind == "clock":
            self.core.at(self.core.now_ms() + op[1])
        elif kind == "close" and self.parked:
            self.parked[op[1] % len(self.parked)].closed = True
        elif kind == "ack":
            tokens = [t for entry in self.answers for t in _lease_tokens(entry[1])]
            if tokens:
                token = tokens[op[1] % len(tokens)]
                held = [name for name in SERVED_QUEUES if self.core.store.queues[name].job_for_token(token)]
                q = held[0] if held else b"mem"         # (a stale token: acked where it came from or not)
                self.answers.append(("ack", encode(self.run([b"QACK", q, token]), False)))

    def summary(self) -> dict:
        log = self.core.store.journal.log
        log.flush()
        return {"answers": self.answers, "records": log.records(), "store": digest(self.core.store),
                "waiting": {q.name: len(ws) for q, ws in self.blocking.by_queue.items()},
                "timers": {q.name: due for q, (due, _handle) in self.blocking.timers.items()}}

    def close(self) -> None:
        self.blocking.release_all()
        self.loop.close()


class _Recorded(Parked):
    """A parked connection whose answers, and the tickets they wait on, go in
    the side's common record."""

    def __init__(self, common: list, who: int) -> None:
        super().__init__()
        self.common, self.who = common, who

    def unblock(self, reply, ticket=None) -> None:
        super().unblock(reply, ticket)
        self.common.append((self.who, encode(reply, False), ticket))


def _lease_tokens(data: bytes) -> list[bytes]:
    parts = data.split(b"\r\n")
    return [parts[i + 2] for i, part in enumerate(parts[:-2]) if part == b"lease"]


@settings(max_examples=300, deadline=None)
@given(st.lists(served_ops, min_size=1, max_size=40))
@example([("park", b"sync", 2, True), ("push", b"sync", 3, []), ("turn",), ("clock", 120), ("park", b"sync", 3, True),
          ("turn",), ("ack", 0), ("park", b"mem", 1, True), ("close", 2), ("push", b"mem", 1, []), ("turn",)])
@example([("park", b"mem", 1, True), ("close", 0), ("push", b"mem", 1, []), ("turn",), ("park", b"sync", 2, True),
          ("turn",), ("push", b"sync", 1, []), ("turn",), ("clock", 40)])
@example([("park", b"slots", 1, True), ("push", b"slots", 2, [b"KEY", b"k"]), ("turn",), ("park", b"slots", 1, True),
          ("turn",), ("ack", 0), ("turn",)])
@example([("park", b"mem", 2, True), ("park", b"mem", 3, True), ("park", b"mem", 1, True), ("push", b"mem", 4, []),
          ("turn",), ("push", b"mem", 3, []), ("turn",)])
@example([("park", b"mem", 1, True), ("park", b"mem", 1, True), ("push", b"mem", 1, [b"KEY", b"k"]),
          ("push", b"mem", 1, []), ("turn",)])
@example([("push", b"sync", 2, []), ("parks", b"mem", [1, 1]), ("push", b"mem", 1, []),     # two queues served in
          ("parks", b"sync", [1, 1, 1]), ("clock", 100), ("park", b"sync", 1, False), ("turn",)])  # one turn: by qid
@example([("parks", b"slots", [1, 2]), ("push", b"slots", 2, []), ("turn",), ("ack", 0), ("turn",)])
@example([("park", b"sync", 1, True), ("park", b"sync", 2, True), ("push", b"sync", 2, []), ("turn",),
          ("clock", 120), ("park", b"sync", 1, True), ("park", b"sync", 1, True), ("turn",)])
def test_serve_does_the_same_with_the_short_way_and_without(sequence):
    """Generated parks, pushes, turns, clock steps, closed claimers and acks
    on a plain memory queue, a plain fsync queue whose leases run out, and
    a queue with CONCURRENCY (not plain): the same answers in the same
    order, the same records, store, waiters and timers whether the plain
    transitions take their short way or the store's."""
    sides = [ServeSide(short=True), ServeSide(short=False)]
    try:
        for op in sequence:
            for side in sides:
                side.do(op)
        assert sides[0].summary() == sides[1].summary()
    finally:
        for side in sides:
            side.close()
