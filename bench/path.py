"""``leaseq bench path``: the daemon's own work per job, in one process.

The real ``Server`` and ``Connection`` objects, fed requests through
``data_received`` with a stand-in transport that keeps what is written: no
socket, no load generator, no other process, so the figure is the daemon's
Python (and compiled) path alone.  Two loads, on a memory queue:

* ``batches``: ``QPUSHMANY`` of 100 jobs, ``QCLAIM ... COUNT 100``, then
  ``QACK`` of the 100 tokens (a job's life as W1 and W2 of
  ``leaseq bench queue`` live it);
* ``single``: a ``QCLAIM ... BLOCK`` that parks, a ``QPUSH`` that wakes it,
  the turn's end serving it, its ``QACK`` (one job of W3 at a fixed rate).

Each round also parses the claim reply and builds the ack (what a client
would do), the same in every flavour.  Printed: µs per job (best of three
runs).  ``--gap-us N`` sleeps N µs after each round, off the clock, so the
CPU goes idle between jobs as it does between the requests of a daemon
serving 5,000 single-job pushes a second: the work after an idle gap
costs more than back to back (docs/performance.md, "The plain
transitions").  With ``--instructions`` the loop runs twice under valgrind
(callgrind), ``--rounds`` and four times as many, and the difference of the
two instruction counts per job is printed: a figure that hardly moves with
the machine's load (timers run by wall time), for comparing two versions
of the code
(docs/performance.md, "Counting instructions").  ``--functions N`` adds
the N C functions that ran the most of those instructions per job (their
own, from ``callgrind_annotate`` of both runs, diffed): the interpreter
itself, and any builtin a Python line calls more often or more dearly than
it seems to.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import hiredis

BATCH = 100
JOBS_PER_ROUND = {"batches": BATCH, "single": 1}
MODES = tuple(JOBS_PER_ROUND)


def pack(*args) -> bytes:
    return hiredis.pack_command(args)


class Transport:
    """What ``Connection`` uses of a transport; keeps what is written."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.written: list[bytes] = []

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", self.port), "sockname": ("127.0.0.1", 6479)}.get(name, default)

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def take(self) -> bytes:
        data = b"".join(self.written)
        self.written.clear()
        return data

    def close(self) -> None:
        pass


async def _reply(conn, transport: Transport, reader) -> object:
    """The next reply on ``conn``, letting the loop turn until it is written
    (a reply held for the log waits for the log thread)."""
    for turn in range(1000):
        reader.feed(transport.take())
        reply = reader.gets()
        if reply is not False:
            return reply
        await asyncio.sleep(0 if turn < 3 else 0.001)
    raise RuntimeError("no reply within 1,000 turns of the loop")


async def _run(mode: str, rounds: int, repeats: int, gap: float = 0.0) -> list[float]:
    from leaseq.daemon import config
    from leaseq.daemon.connection import Connection
    from leaseq.daemon.process import tune_collector
    from leaseq.daemon.server import Server
    from leaseq.storage.datadir import DataDir

    work = tempfile.mkdtemp(prefix="leaseq-bench-path-")
    server = Server(config.Settings(port=0, dir=os.path.join(work, "data")))
    await server.listen()
    tune_collector()                               # as the daemon does once recovery is done
    server.attach(DataDir.open(os.path.join(work, "data"), int(time.time() * 1000)))
    try:
        def connect(port: int):
            conn, transport = Connection(server), Transport(port)
            conn.connection_made(transport)
            return conn, transport, hiredis.Reader()

        producer, p_out, p_reader = connect(50_001)
        worker, w_out, w_reader = connect(50_002)
        producer.data_received(pack("QCREATE", "q", "DURABILITY", "memory"))
        await _reply(producer, p_out, p_reader)
        push_many = pack("QPUSHMANY", "q", BATCH, *[b"x" * 128] * BATCH)
        claim = pack("QCLAIM", "q", "w", "COUNT", BATCH)
        block = pack("QCLAIM", "q", "w", "COUNT", BATCH, "BLOCK", 10_000)
        push = pack("QPUSH", "q", b"x" * 128)

        async def batch_round() -> None:
            producer.data_received(push_many)
            await _reply(producer, p_out, p_reader)
            worker.data_received(claim)
            jobs = await _reply(worker, w_out, w_reader)
            worker.data_received(pack("QACK", "q", *[job[5] for job in jobs]))
            await _reply(worker, w_out, w_reader)

        async def single_round() -> None:
            worker.data_received(block)           # parks: the queue is empty
            producer.data_received(push)          # wakes it; the turn's end serves it
            await _reply(producer, p_out, p_reader)
            jobs = await _reply(worker, w_out, w_reader)
            worker.data_received(pack("QACK", "q", jobs[0][5]))
            await _reply(worker, w_out, w_reader)

        one, per_round = (batch_round if mode == "batches" else single_round), JOBS_PER_ROUND[mode]
        for _ in range(20):                        # warm up
            await one()
        times = []
        for _ in range(repeats):
            idle = 0.0
            started = time.perf_counter()
            for _ in range(rounds):
                await one()
                if gap:                            # the CPU idles here: the loop is blocked, nothing runs
                    slept = time.perf_counter()
                    time.sleep(gap)
                    idle += time.perf_counter() - slept
            times.append((time.perf_counter() - started - idle) / rounds / per_round * 1e6)
        return times
    finally:
        server.request_shutdown("bench path done")
        await server.wait_stopped()
        shutil.rmtree(work, ignore_errors=True)


def loop(mode: str, rounds: int, repeats: int, gap: float = 0.0) -> list[float]:
    import uvloop
    return uvloop.run(_run(mode, rounds, repeats, gap))


def _instructions(mode: str, rounds: int, out_file: str = "/dev/null") -> int:
    """Instructions executed by a child running ``rounds`` rounds (one
    repeat); callgrind's profile goes to ``out_file``.  The child hashes
    strings with one fixed seed: with a seed of its own each run, where
    the interpreter's dicts collide and resize moves the count by
    hundreds of thousands of instructions a process, more than a short
    run's difference (a run of 5 and 20 rounds once came out negative)."""
    out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
                          sys.executable, "-m", "leaseq.bench.path", "--mode", mode, "--rounds", str(rounds),
                          "--repeats", "1"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise RuntimeError(f"valgrind failed (exit {out.returncode}): {out.stderr[-2000:]}")
    return int(found.group(1))


# a line of callgrind_annotate's table: "1,234 (5.6%)  /path/file.c:function [/path/object.so]"
_FUNCTION_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S.*?)(?:\s+\[[^\]]*\])?\s*$")


def _by_function(profile: str) -> dict[str, int]:
    """Instructions per C function (its own, not its callees') in a callgrind
    profile: ``file.c:function`` (directories and recursion marks dropped)."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", profile],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"callgrind_annotate failed (exit {out.returncode}): {out.stderr[-2000:]}")
    found: dict[str, int] = {}
    for line in out.stdout.splitlines():
        m = _FUNCTION_LINE.match(line)
        if m is None or "PROGRAM TOTALS" in line:
            continue
        where = m.group(2)
        file, _, function = where.rpartition(":")
        function = function.split("'")[0]              # "f'2": f called within itself
        name = f"{os.path.basename(file)}:{function}" if file else where
        found[name] = found.get(name, 0) + int(m.group(1).replace(",", ""))
    return found


def run(modes: tuple, rounds: int | None, instructions: bool, functions: int = 0, gap_us: int = 0) -> dict:
    from leaseq.daemon.flavour import FLAVOUR
    figures = {}
    for mode in modes:
        batches = mode == "batches"
        if instructions:
            if shutil.which("valgrind") is None:
                raise RuntimeError("--instructions needs valgrind (Debian package valgrind)")
            n = rounds or (100 if batches else 500)
            jobs = 3 * n * JOBS_PER_ROUND[mode]
            with tempfile.TemporaryDirectory(prefix="leaseq-bench-path-") as work:
                profiles = [os.path.join(work, f"callgrind.{k}") if functions else "/dev/null" for k in ("few", "many")]
                few, many = _instructions(mode, n, profiles[0]), _instructions(mode, 4 * n, profiles[1])
                figures[mode] = {"instructions_per_job": (many - few) / jobs}
                print(f"{mode}: {figures[mode]['instructions_per_job']:,.0f} instructions per job "
                      f"({FLAVOUR} flavour; {n:,} and {4 * n:,} rounds under callgrind, diffed)")
                if functions:
                    before, after = _by_function(profiles[0]), _by_function(profiles[1])
                    per_job = {k: (after.get(k, 0) - before.get(k, 0)) / jobs for k in set(before) | set(after)}
                    top = sorted(per_job.items(), key=lambda kv: -kv[1])[:functions]
                    figures[mode]["functions"] = [[name, round(ir)] for name, ir in top]
                    total = figures[mode]["instructions_per_job"]
                    for name, ir in top:
                        print(f"  {ir:>10,.0f} {100 * ir / total:5.1f} %  {name}")
        else:
            n = rounds or (2000 if batches else 20000)
            times = loop(mode, n, 3, gap_us / 1e6)
            figures[mode] = {"us_per_job": min(times), "runs": times, "gap_us": gap_us}
            gap = f", {gap_us:,} us idle after each round, not counted" if gap_us else ""
            print(f"{mode}: {min(times):.2f} us per job, best of {', '.join(f'{t:.2f}' for t in times)} "
                  f"({FLAVOUR} flavour, {n:,} rounds each{gap})")
    return figures


def main() -> None:
    """The child under valgrind: ``python -m leaseq.bench.path --mode single --rounds N``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=1)
    a = parser.parse_args()
    loop(a.mode, a.rounds, a.repeats)


if __name__ == "__main__":
    main()
