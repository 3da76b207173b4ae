"""The rules of a pause (daemon/pause.py), with no socket and no loop: a
stand-in for the server (its replicas, its ``paused`` flag) and for the
timer, and the dispatcher's ``Route`` of each command."""

from __future__ import annotations

import time

from leaseq.commands.context import ALL, WRITE
from leaseq.daemon.dispatch import ROUTES
from leaseq.daemon.pause import Pause


class Replicas:
    def __init__(self) -> None:
        self.links: set = set()

    def is_peer(self, conn) -> bool:
        return conn in self.links


class Replication:
    def __init__(self) -> None:
        self.replicas = Replicas()


class Server:
    def __init__(self) -> None:
        self.paused = False
        self.replication = Replication()


class Conn:
    """A connection: what it kept runs when ``run_pending`` is called."""

    def __init__(self, multi=None) -> None:
        self.closed = False
        self.multi = multi
        self.runs = 0

    def run_pending(self) -> None:
        self.runs += 1


def pause_with_timer():
    server, armed = Server(), []
    return Pause(server, armed.append), server, armed


def test_nothing_is_held_without_a_pause():
    pause, server, _ = pause_with_timer()
    assert pause.mode == 0 and not server.paused
    assert not pause.holds(Conn(), ROUTES[b"qpush"])


def test_a_write_pause_holds_what_a_replica_refuses_and_nothing_else():
    pause, server, _ = pause_with_timer()
    pause.start("shutdown", WRITE)
    assert server.paused
    c = Conn()
    for name in ("QPUSH", "QCLAIM", "QACK", "QCREATE", "QDROP"):
        assert pause.holds(c, ROUTES[name.lower().encode()]), name
    for name in ("QLEN", "QGET", "INFO", "PING", "CLIENT", "REPLCONF", "SUBSCRIBE", "PUBLISH", "MULTI"):
        assert not pause.holds(c, ROUTES[name.lower().encode()]), name


def test_exec_is_held_when_its_transaction_writes():
    pause, _, _ = pause_with_timer()
    pause.start("shutdown", WRITE)
    reads = Conn(multi=[(ROUTES[b"qlen"], [b"QLEN", b"q"])])
    writes = Conn(multi=[(ROUTES[b"qlen"], [b"QLEN", b"q"]), (ROUTES[b"qpush"], [b"QPUSH", b"q", b"x"])])
    assert not pause.holds(reads, ROUTES[b"exec"])
    assert pause.holds(writes, ROUTES[b"exec"])


def test_all_holds_every_command_but_a_replicas_link():
    pause, server, _ = pause_with_timer()
    pause.by_client(ALL, 10_000)
    link, client = Conn(), Conn()
    server.replication.replicas.links.add(link)
    assert pause.holds(client, ROUTES[b"ping"]) and pause.holds(client, ROUTES[b"client"])
    assert not pause.holds(link, ROUTES[b"replconf"]) and not pause.holds(link, ROUTES[b"qpush"])


def test_the_stricter_purpose_is_in_force_and_ending_one_leaves_the_other():
    pause, server, _ = pause_with_timer()
    pause.start("shutdown", WRITE)
    pause.by_client(ALL, 10_000)
    assert pause.mode == ALL
    pause.end("client")
    assert pause.mode == WRITE and server.paused
    pause.end("shutdown")
    assert pause.mode == 0 and not server.paused


def test_a_second_client_pause_only_lengthens_and_strengthens():
    pause, _, armed = pause_with_timer()
    pause.by_client(WRITE, 10_000)
    pause.by_client(ALL, 10)
    assert pause.mode == ALL
    assert armed[-1] > 9.0                     # the later deadline stays
    pause.by_client(WRITE, 20_000)
    assert pause.mode == ALL and armed[-1] > 19.0


def test_held_connections_run_again_when_the_pause_weakens_not_before():
    pause, _, _ = pause_with_timer()
    pause.by_client(ALL, 10_000)
    pause.start("shutdown", WRITE)
    held, gone = Conn(), Conn()
    pause.hold(held)
    pause.hold(held)                           # (held once)
    pause.hold(gone)
    gone.closed = True
    assert pause.count() == 1
    pause.start("shutdown", WRITE)             # no weaker: nothing runs
    assert held.runs == 0
    pause.end("client")                        # ALL -> WRITE: they try again (a write is held again by them)
    assert held.runs == 1 and gone.runs == 0
    assert pause.held == []


def test_the_timer_ends_a_client_pause_at_its_deadline_only():
    pause, server, armed = pause_with_timer()
    pause.by_client(WRITE, 50)
    assert 0 <= armed[-1] <= 0.05
    pause.expire()                             # early (a timer that rang before the deadline): re-armed
    assert server.paused and armed[-1] is not None
    time.sleep(0.06)
    held = Conn()
    pause.hold(held)
    pause.expire()
    assert not server.paused and armed[-1] is None and held.runs == 1
