"""``daemon.blocking`` on the command core: parked claims on a real store, on
an asyncio loop, with a clock the test sets.  The races here sit between two
readings of a running clock, which no test over a socket can place; the
integration tests (test_flow_control, test_groups) cover the same waits end
to end."""

from __future__ import annotations

import asyncio

import pytest

from leaseq.commands.jobs import ClaimWait
from leaseq.daemon.blocking import Blocking
from leaseq.daemon.dispatch import execute

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
