"""The worker scenarios of tests/scenarios/worker.json (what they mean is
written there), run with leaseq.client's ``Worker`` in both flavours
(threads, and asyncio with the same plain handler run in its pool) against
the module's daemon.  node/test/scenarios.test.js runs the same ones with
the npm package's Worker (tests/integration/test_node_package.py)."""

from __future__ import annotations

import asyncio
import json
import pathlib
import threading

import pytest
from harness import CheckedThread, qget
from leaseq.client import Queue, Worker, aio

SCENARIOS = json.loads((pathlib.Path(__file__).resolve().parents[1] / "scenarios" / "worker.json")
                       .read_text(encoding="utf-8"))["scenarios"]
RUN_TIMEOUT_S = 30


def _error(name: str, message: str) -> Exception:
    """An exception whose class is called ``name``, as the scenario says."""
    return type(name, (Exception,), {})(message)


class Driver:
    """Pushes a scenario's jobs, plays its handler, and looks at the result."""

    def __init__(self, daemon, scenario: dict, name: str) -> None:
        self.scenario = scenario
        self.name = name
        self.helper = Queue(daemon.url, name)          # the driver's own commands (and progress, for both flavours)
        self.started: set[str] = set()
        self.all_started = threading.Event()
        self.running = self.peak = 0
        self.lock = threading.Lock()
        self.ids: dict[str, int] = {}

    def setup(self) -> None:
        c = self.helper.client
        c.execute_command("QCREATE", self.name, "RETAIN-COMPLETED", 60000, *self.scenario.get("create", []))
        for job in self.scenario["push"]:
            self.ids[job["payload"]] = c.execute_command("QPUSH", self.name, job["payload"], *job.get("options", []))

    def handler(self, job):
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            return self._play(job)
        finally:
            with self.lock:
                self.running -= 1

    def _play(self, job):
        payload = job.payload.decode()
        with self.lock:
            first = payload not in self.started
            self.started.add(payload)
            if len(self.started) == len({j["payload"] for j in self.scenario["push"]}):
                self.all_started.set()
        if first:
            if payload in self.scenario.get("cancel", []):
                self.helper.cancel(self.ids[payload])
            if payload in self.scenario.get("release", []):
                self.helper.nack(job.lease, delay_ms=0)
        steps = self.scenario["handler"].get(payload, self.scenario["handler"].get("*"))
        for step in steps:
            if step.get("when_delivery", job.deliveries) != job.deliveries:
                continue
            if "return" in step:
                return step["return"]
            if step.get("return_nothing"):
                return None
            if "throw" in step:
                raise _error(*step["throw"])
            if "progress" in step:
                self.helper.progress(job.lease, step["progress"])
            if "sleep_ms" in step:
                threading.Event().wait(step["sleep_ms"] / 1000)
            if "wait_for_cancel_ms" in step:
                job.cancelled.wait(step["wait_for_cancel_ms"] / 1000)
        return None

    def check(self, stats) -> None:
        expect = self.scenario["expect"]
        for payload, expected in expect["jobs"].items():
            info = qget(self.helper.client, self.name, self.ids[payload], str_keys=True)
            assert info, f"QGET of {payload} is nil"
            seen = {"state": info["state"].decode(), "deliveries": info.get("deliveries"),
                    "result": _text(info.get("result")), "last_error": _text(info.get("last_error")),
                    "progress": _text(info.get("progress"))}
            for field, value in expected.items():
                assert seen[field] == value, f"{payload}'s {field}: {seen[field]!r}, expected {value!r}"
        assert {"acked": stats.acked, "failed": stats.failed, "lost": stats.lost} == expect["stats"]
        if "peak" in expect:
            assert self.peak == expect["peak"], "the most handlers at once"


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _worker_options(scenario: dict) -> dict:
    settings = scenario.get("worker", {})
    return {"concurrency": settings.get("concurrency", 1), "lease_ms": settings.get("lease_ms", 30_000),
            "heartbeat_ms": settings.get("heartbeat_ms")}


def run_threads(daemon, driver: Driver):
    queue = Queue(daemon.url, driver.name)
    worker = Worker(queue, driver.handler, **_worker_options(driver.scenario))
    out = {}
    burst = driver.scenario.get("run", "burst") == "burst"
    t = CheckedThread(target=lambda: out.update(stats=worker.run(burst=burst, stop_signals=())))
    t.start()
    if not burst:
        assert driver.all_started.wait(RUN_TIMEOUT_S), "not every job started"
        worker.stop()
    t.join(RUN_TIMEOUT_S)
    assert not t.is_alive(), "the worker did not finish"
    queue.close()
    return out["stats"]


def run_asyncio(daemon, driver: Driver):
    async def main():
        async with aio.Queue(daemon.url, driver.name) as queue:
            worker = aio.Worker(queue, driver.handler, **_worker_options(driver.scenario))
            if driver.scenario.get("run", "burst") == "burst":
                return await worker.run(burst=True, stop_signals=())
            run = asyncio.ensure_future(worker.run(stop_signals=()))
            started = await asyncio.to_thread(driver.all_started.wait, RUN_TIMEOUT_S)
            assert started, "not every job started"
            worker.stop()
            return await run

    return asyncio.run(asyncio.wait_for(main(), RUN_TIMEOUT_S))


@pytest.mark.parametrize("flavour", [run_threads, run_asyncio], ids=["threads", "asyncio"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_worker_scenario(daemon, q, scenario, flavour):
    driver = Driver(daemon, scenario, q)
    try:
        driver.setup()
        stats = flavour(daemon, driver)
        driver.check(stats)
    finally:
        driver.helper.close()


def test_every_scenario_names_what_the_drivers_know():
    """A typo in the data (a step or field neither driver knows) fails here
    rather than passing silently in both."""
    steps = {"return", "return_nothing", "throw", "progress", "sleep_ms", "wait_for_cancel_ms", "when_delivery"}
    fields = {"state", "deliveries", "result", "last_error", "progress"}
    keys = {"name", "create", "push", "worker", "handler", "run", "cancel", "release", "expect"}
    for s in SCENARIOS:
        assert set(s) <= keys, s["name"]
        assert s.get("run", "burst") in ("burst", "close"), s["name"]
        assert set(s.get("worker", {})) <= {"concurrency", "lease_ms", "heartbeat_ms"}, s["name"]
        assert all(set(step) <= steps for plays in s["handler"].values() for step in plays), s["name"]
        assert all(set(job) <= fields for job in s["expect"]["jobs"].values()), s["name"]
        assert set(s["expect"]) <= {"jobs", "stats", "peak"} and set(s["expect"]["stats"]) == {"acked", "failed",
                                                                                                "lost"}, s["name"]
        pushed = {job["payload"] for job in s["push"]}
        assert set(s["expect"]["jobs"]) <= pushed and set(s.get("cancel", []) + s.get("release", [])) <= pushed
