"""For the tests of leaseq.client, the Python library: how many of a
worker's handlers run at once, a worker in a process of its own stopped by
SIGTERM, a worker's heartbeat held through several leases on the DEBUG
clock, and the client's spans kept in memory (the ``spans`` fixture of
tests/integration/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from harness import CheckedThread, Daemon, advance, now, qget, wait_for
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Peak:
    """How many handlers run at once (``with peak:`` around the work), and
    the most that ever did (``most``); for threads and asyncio tasks alike."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self.lock = threading.Lock()

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.now -= 1


def run_client_worker(d: Daemon, flavour: str, queue: str, seconds: float, concurrency: int,
                      in_flight) -> tuple[int, str, str]:
    """Run ``tests/integration/client_worker.py`` (a leaseq.client Worker of
    ``flavour`` "sync" or "aio" whose handler sleeps ``seconds``) on
    ``queue``; once ``in_flight()`` is true, SIGTERM it and wait for it to
    end.  Returns (exit status, stdout, stderr); the process is killed by
    its PID if it is still there after 30 s."""
    script = os.path.join(os.path.dirname(__file__), "integration", "client_worker.py")
    proc = subprocess.Popen([sys.executable, script, flavour, d.url, queue, str(seconds), str(concurrency)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: proc.poll() is not None or in_flight(), 20, "the worker's jobs in flight")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        return proc.returncode, out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def hold_through_leases(c, q, job_id: int, lease_ms: int, leases: int = 4) -> None:
    """Move a frozen DEBUG clock through ``leases`` lengths of ``lease_ms``,
    a half lease at a time, while a worker's heartbeat holds job ``job_id``
    of ``q``: each step waits until the heartbeat has extended the lease to a
    full length from the clock's moment, checks that another claimer gets
    nothing, then moves on.  The lease never gets near its end however late
    a beat comes (the clock stands still until the beat lands), so only the
    heartbeat's work is tested, not the machine's timing."""
    step = lease_ms // 2
    for _ in range(leases * 2):
        at = now(c)
        wait_for(lambda: qget(c, q, job_id)[b"deadline"] == at + lease_ms, 10,
                 f"a heartbeat extending job {job_id} at {at}")
        assert c.execute_command("QCLAIM", q, "thief", "LEASE", 60_000) == []
        advance(c, step)


def work_through_leases(c, q, job_id: int, lease_ms: int, run, started, finish):
    """Run ``run()`` (a worker's burst run, whose handler sets ``started``
    and then waits for ``finish``) in a thread; once the handler runs,
    ``hold_through_leases``, then let the handler end.  Returns what
    ``run()`` returned."""
    result = []
    t = CheckedThread(target=lambda: result.append(run()))
    t.start()
    try:
        assert started.wait(10)
        hold_through_leases(c, q, job_id, lease_ms)
    finally:
        finish.set()
        t.join(15)
    assert not t.is_alive() and t.failure is None, t.failure
    return result[0]


class Spans:
    """A tracer provider whose finished spans stay in memory (the ``spans``
    fixture of tests/integration/conftest.py)."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")

    def named(self, name: str) -> list:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def one(self, name: str):
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.exporter.get_finished_spans()]
        return found[0]
