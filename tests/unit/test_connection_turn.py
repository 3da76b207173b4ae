"""``Connection.run_pending`` and ``data_received`` write the same bytes and
close the same connections in both flavours.  One script of requests, in
chunks, over several connections of an in-process server (stand-in
transports, the clock frozen), is run in this process and, when this one
runs compiled, once more in a pure one: pipelined plain and other
commands, replies held for the log and for fsync, a claim that parks with
a command pipelined behind it and the push that wakes it, MULTI, RESP3,
unknown commands and bad arity, a protocol error, QUIT with a command
behind it, and a claim whose BLOCK runs out."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import re
import subprocess
import sys

import hiredis

from leaseq.bench.path import Transport as BenchTransport
from leaseq.daemon import config
from leaseq.daemon.connection import Connection
from leaseq.daemon.server import Server
from leaseq.storage.datadir import DataDir

PURE = os.environ.get("LEASEQ_PURE") == "1"

T0 = 1_700_000_000_000


class Transport(BenchTransport):
    """``leaseq bench path``'s stand-in, and what a protocol error and QUIT
    use of a transport: reading paused, and closed."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.closed = self.reading_paused = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        super().write(data)

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False

    def close(self) -> None:
        self.closed = True

    abort = close


def cmd(*args) -> bytes:
    return hiredis.pack_command(args)


def _token(out: bytes) -> bytes:
    return re.findall(rb"[0-9a-f]+\.[0-9a-f]+\.[0-9a-f]+", out)[-1]


# (connection, bytes or a function of what that connection was sent so far)
SCRIPT = [
    (0, cmd("QCREATE", "mem", "DURABILITY", "memory") + cmd("QCREATE", "disk", "DURABILITY", "fsync")
     + cmd("QCREATE", "idle", "DURABILITY", "memory")),
    (0, cmd("QPUSH", "mem", "a") + cmd("QPUSH", "disk", "b") + cmd("QLEN", "mem") + cmd("PING")
     + cmd("QPUSH", "mem", "c") + cmd("qpush", "DISK", "d") + cmd("QPUSH", "disk", "e")),
    (1, cmd("QCLAIM", "mem", "w", "COUNT", "2", "BLOCK", "5000") + cmd("QCLAIM", "disk", "w")),
    (1, lambda out: cmd("QACK", "mem", _token(out)) + cmd("QACK", "mem", "1.1.99", "zz")),
    (2, cmd("QCLAIM", "idle", "w2", "BLOCK", "5000") + cmd("PING", "behind")),
    (0, cmd("QPUSH", "idle", "wake") + cmd("QPUSH", "idle", "more")),
    (2, lambda out: cmd("QACK", "idle", _token(out), "RESULT", "done") + cmd("QCLAIM", "idle", "w2", "COUNT", "5")),
    (0, cmd("MULTI") + cmd("QPUSH", "mem", "m") + cmd("QLEN", "mem") + cmd("EXEC")),
    (0, cmd("NOSUCH", "x") + cmd("QPUSH", "mem") + cmd("QACK", "nosuchqueue", "1.1.1") + cmd("QPUSH", "new", "x")),
    (3, cmd("HELLO", "3") + cmd("QPUSH", "mem", "r3") + cmd("QCLAIM", "mem", "w3", "COUNT", "9")),
    (4, cmd("PING") + b"*1\r\n$4\r\nPI"),          # half a command: it waits for the rest
    (4, b"NG\r\n*x\r\n" + cmd("PING")),            # then a protocol error: answered, closed, nothing after
    (5, cmd("PING") + cmd("QUIT") + cmd("PING")),
    (6, cmd("QCLAIM", "idle", "w6", "BLOCK", "1") + cmd("ECHO", "after the timeout")),
    (1, cmd("QPUSH", "disk", "f") + cmd("QCLAIM", "disk", "w", "COUNT", "3") + cmd("INFO", "keyspace")),
    (2, cmd("QCLAIM", "idle", "w2", "BLOCK", "5000")),   # parks again on the memory queue, now empty
    (0, cmd("QPUSH", "idle", "late")),                     # wakes it with nothing for the log: no ticket
]


async def _settle(server, conns) -> None:
    """Let the loop turn until no reply waits for the log (bounded)."""
    for turn in range(2000):
        await asyncio.sleep(0 if turn < 5 else 0.002)
        if turn >= 5 and not any(c.outbox.held for c in conns) and not server.committer.syncing:
            return
    raise AssertionError("replies still held for the log after 2,000 turns of the loop")


@contextlib.asynccontextmanager
async def _served(data_dir: str, n: int):
    """An in-process server (the clock frozen) and ``n`` connections over
    stand-in transports: (server, transports, connections); all closed after."""
    server = Server(config.Settings(port=0, dir=data_dir))
    await server.listen()
    server.attach(DataDir.open(data_dir, T0))
    server.clock.freeze(T0)
    transports = [Transport(50_000 + i) for i in range(n)]
    conns = []
    for t in transports:
        c = Connection(server)
        c.connection_made(t)
        conns.append(c)
    try:
        yield server, transports, conns
    finally:
        for c in conns:
            if not c.closed:
                c.connection_lost(None)
        server.request_shutdown("test done")
        await server.wait_stopped()


async def _run_script(data_dir: str) -> list[tuple[bytes, bool]]:
    async with _served(data_dir, 7) as (server, transports, conns):
        sent: list[bytes] = [b""] * len(conns)
        for i, step in SCRIPT:
            data = step(b"".join(transports[i].written)) if callable(step) else step
            sent[i] += data
            conns[i].data_received(data)
            await _settle(server, conns)
        for _ in range(200):                       # the BLOCK 1 claim runs out on the loop's timer
            if conns[6].waiting is None:
                break
            await asyncio.sleep(0.005)
        await _settle(server, conns)
        return [(b"".join(t.written), t.closed) for t in transports]


def test_the_turn_writes_the_same_bytes_in_either_flavour(tmp_path):
    got = {}
    if not PURE:            # the pure flavour, the same .py files uncompiled, in a process of its own
        got["pure"] = _pure_run(tmp_path / "pure")
    first = asyncio.run(_run_script(str(tmp_path / "here")))
    for name, other in got.items():
        for i, (expected, written) in enumerate(zip(first, other)):
            assert written == expected, f"{name}: connection {i}"
    written = [w for w, _closed in first]
    # the script did what it says (so that the comparison compares something)
    assert written[2].startswith(b"*1\r\n*") and b"$6\r\nbehind" in written[2]     # woken, then the PING behind
    assert b"Protocol error" in written[4] and first[4][1]                         # answered, then closed
    assert written[5] == b"+PONG\r\n+OK\r\n" and first[5][1]                         # nothing after QUIT
    assert written[6].startswith(b"*0\r\n") and b"after the timeout" in written[6]  # the BLOCK ran out
    assert written[3].startswith(b"%")                                              # RESP3's HELLO map


def _pure_run(data_dir) -> list:
    """``_run_script`` with LEASEQ_PURE=1, in a child process."""
    code = ("import asyncio, sys; sys.path[:0] = sys.argv[1:3]; import test_connection_turn as t; "
            "print(repr(asyncio.run(t._run_script(sys.argv[3]))))")
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", code, here, os.path.dirname(here), str(data_dir)],
                          env=dict(os.environ, LEASEQ_PURE="1"), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return ast.literal_eval(done.stdout.decode().strip().splitlines()[-1])


class _CountingLoop:
    """The server's loop, counting the ends of turns the committer schedules."""

    def __init__(self, loop, ends: list) -> None:
        self.loop, self.ends = loop, ends

    def call_soon(self, callback, *args):
        if getattr(callback, "__name__", "") == "end_of_turn":
            return self.loop.call_soon(self._ended, callback, *args)
        return self.loop.call_soon(callback, *args)

    def _ended(self, callback, *args) -> None:
        self.ends.append(1)
        callback(*args)

    def __getattr__(self, name):
        return getattr(self.loop, name)


async def _serve_now_script(data_dir: str, ends: list) -> None:
    """Pushes that wake parked claims: on memory queues the claims are
    answered before ``data_received`` returns, with no end of the turn;
    a claim answered then, whose pipelined push wakes another, leaves that
    one to the end of the turn; on an fsync queue the serve waits for it."""
    async with _served(data_dir, 5) as (server, transports, conns):
        server.committer.loop = _CountingLoop(server.committer.loop, ends)
        conns[0].data_received(b"".join(cmd("QCREATE", q, "DURABILITY", d) for q, d in
                                        (("a", "memory"), ("b", "memory"), ("c", "memory"), ("disk", "fsync"))))
        # a queue's first push logs the block of ids it takes from: take them now, so that the pushes below log nothing
        conns[0].data_received(b"".join(cmd("QPUSH", q, "first") + cmd("QCLAIM", q, "w0") for q in "abc"))
        conns[1].data_received(cmd("QCLAIM", "a", "w1", "BLOCK", "5000"))
        conns[2].data_received(cmd("QCLAIM", "b", "w2", "BLOCK", "5000") + cmd("QPUSH", "c", "from w2"))
        conns[3].data_received(cmd("QCLAIM", "c", "w3", "BLOCK", "5000"))
        conns[4].data_received(cmd("QCLAIM", "disk", "w4", "BLOCK", "5000"))
        await _settle(server, conns)
        assert all(c.waiting is not None for c in conns[1:])
        ends.clear()

        conns[0].data_received(cmd("QPUSH", "a", "x"))
        assert b"$1\r\nx" in b"".join(transports[1].written) and conns[1].waiting is None
        assert not server.committer.scheduled and ends == []

        conns[0].data_received(cmd("QPUSH", "b", "y"))
        assert b"$1\r\ny" in b"".join(transports[2].written)                  # served now ...
        assert conns[3].waiting is not None and server.committer.scheduled    # ... its push's claimer at the turn's end
        await _settle(server, conns)
        assert b"from w2" in b"".join(transports[3].written) and ends
        ends.clear()

        conns[0].data_received(cmd("QPUSH", "disk", "z"))
        assert conns[4].waiting is not None and server.committer.scheduled    # the push's record goes first
        await _settle(server, conns)
        assert b"$1\r\nz" in b"".join(transports[4].written) and ends


def test_a_push_that_wakes_a_parked_claim_of_a_memory_queue_serves_it_at_once(tmp_path):
    """``Committer.serve_now``."""
    asyncio.run(_serve_now_script(str(tmp_path / "here"), []))
