"""The npm package in node/ (docs/node.md) against the real daemon: its own
``node --test`` files (node/test/*.test.js, the shared worker scenarios
among them) run here with the module's daemon's port in LEASEQ_PORT; a
Node worker rides out a kill -9 and restart of the daemon and a LOADING
daemon; docs/node.md's example prints what the page says; and ``leaseq
bench workers`` runs.

The package's dependencies are installed with ``npm ci`` from the committed
node/package-lock.json into node/node_modules (ignored by git), once per
lock file: a fresh machine needs only ``node`` (18 or newer) and ``npm``."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from harness import CheckedThread, Daemon, qinfo, unique, wait_for
from leaseq.client import Queue, Worker
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

NODE = Path(__file__).resolve().parents[2] / "node"
TEST_FILES = sorted(p.name for p in (NODE / "test").glob("*.test.js"))
SCENARIOS = json.loads((NODE.parent / "tests" / "scenarios" / "worker.json").read_text(encoding="utf-8"))["scenarios"]


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """node/node_modules as node/package-lock.json says, installed by ``npm ci`` when it is not."""
    for tool in ("node", "npm"):
        assert shutil.which(tool), f"{tool} is needed for the Node package's tests (Node.js 18 or newer)"
    lock = (NODE / "package-lock.json").read_bytes()
    stamp = NODE / "node_modules" / ".leaseq-lock-sha256"
    want = hashlib.sha256(lock).hexdigest()
    with open(NODE / ".npm-ci.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)          # two test processes never install at once
        if not stamp.exists() or stamp.read_text() != want:
            done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE,
                                  capture_output=True, text=True, timeout=600, check=False)
            assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
            stamp.write_text(want)
    return NODE / "node_modules"


def _tests_in(name: str) -> int:
    return len(re.findall(r"^\s*test\(", (NODE / "test" / name).read_text(encoding="utf-8"), re.MULTILINE)) or len(SCENARIOS)


@pytest.mark.parametrize("name", TEST_FILES)
def test_node_tests_pass(daemon, node_modules, name):
    done = subprocess.run(["node", "--test", f"test/{name}"], cwd=NODE, capture_output=True, text=True,
                          env=dict(os.environ, LEASEQ_PORT=str(daemon.port)), timeout=300, check=False)
    failures = "\n".join(re.findall(r"^not ok .*$", done.stdout, re.MULTILINE))
    assert done.returncode == 0, f"{failures}\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    counts = dict(re.findall(r"^# (pass|fail|skipped|todo|cancelled) (\d+)$", done.stdout, re.MULTILINE))
    expected = len(SCENARIOS) if name == "scenarios.test.js" else _tests_in(name)
    assert counts == {"pass": str(expected), "fail": "0", "skipped": "0", "todo": "0", "cancelled": "0"}, \
        done.stdout[-2000:]


def test_the_docs_example_prints_what_docs_node_md_says(daemon, node_modules, tmp_path):
    """docs/node.md's example, as written, in a project of its own that
    imports "leaseq" (node_modules/leaseq linked to node/), against the
    module's daemon, where no other test uses the queue ``thumbnails``."""
    page = (NODE.parent / "docs" / "node.md").read_text(encoding="utf-8").split("## A worker\n", 1)[1]
    code = re.search(r"```js\n(.*?)```", page, re.DOTALL).group(1)
    printed = re.search(r"prints:\n\n```\n(.*?)```", page, re.DOTALL).group(1)
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "leaseq").symlink_to(NODE)
    (tmp_path / "example.mjs").write_text(code)
    done = subprocess.run(["node", "example.mjs"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, LEASEQ_URL=daemon.url), check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed
    assert done.stderr == "leaseq: job 3 of thumbnails failed: RangeError: corrupt header\n"


class NodeWorker:
    """A fixture worker of node/test/fixtures run as a process: ``lines``
    are what it printed so far; ``finish`` stops it with SIGTERM and
    returns the counts its run printed last; ``kill`` (in a finally) stops
    it by PID if it still runs."""

    def __init__(self, fixture: str, *args: str) -> None:
        self.proc = subprocess.Popen(["node", str(NODE / "test" / "fixtures" / fixture), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.reader = CheckedThread(target=lambda: self.lines.extend(line.strip() for line in self.proc.stdout))
        self.reader.start()

    def acked(self, *payloads: str) -> bool:
        return {f"acked {p}" for p in payloads} <= set(self.lines)

    def finish(self) -> tuple[dict, str]:
        """(the run's counts, what it wrote to stderr), once SIGTERM ended it cleanly."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(20)
        err = self.proc.stderr.read()
        assert code == 0, err
        self.reader.join(10)
        return json.loads(self.lines[-1]), err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def test_a_node_worker_rides_out_a_kill_and_restart(tmp_path, node_modules):
    """kill -9 of the daemon under a running Node worker: ioredis reconnects
    (the worker backing off meanwhile if a command fails), and jobs pushed
    after the restart are worked; SIGTERM then ends the worker cleanly."""
    d = Daemon(tmp_path / "data").start()
    worker = NodeWorker("counting-worker.js", str(d.port), "restart")
    try:
        client = d.client()
        client.execute_command("QPUSHMANY", "restart", 2, "before-1", "before-2")
        wait_for(lambda: worker.acked("before-1", "before-2"), 20, "the first jobs acked")
        wait_for(lambda: qinfo(client, "restart", str_keys=True)["acked"] == 2, 10, "both acks on the daemon")
        client.close()
        d.kill()
        d.restart()
        client = d.client()
        client.execute_command("QPUSHMANY", "restart", 2, "after-1", "after-2")
        wait_for(lambda: worker.acked("after-1", "after-2"), 30, "the jobs pushed after the restart")
        client.close()
        assert worker.finish()[0] == {"acked": 4, "failed": 0, "lost": 0, "abandoned": 0}
    finally:
        worker.kill()
        d.kill()


def test_a_node_worker_on_a_sentinel_url_rides_out_a_failover(tmp_path, node_modules):
    """A Node worker on ``sentinel://``: a leaseq primary and its replica
    under a real Sentinel, the primary killed with SIGKILL; ioredis asks the
    sentinel for the new primary, and the worker works the jobs pushed there."""
    from leaseq.bench.failover import SERVICE, Sentinel, monitor_conf
    primary = Daemon(tmp_path / "primary").start()
    replica = Daemon(tmp_path / "replica", "--replicaof", f"127.0.0.1 {primary.port}").start()
    sentinel = worker = None
    try:
        wait_for(lambda: replica.client().info("replication")["master_link_status"] == "up", 20, "the replica's link")
        sentinel = Sentinel(str(tmp_path / "sentinel"), monitor_conf(primary.port))
        wait_for(lambda: replica.port in sentinel.healthy_replicas(), 30, "Sentinel to see the replica")
        url = f"sentinel://127.0.0.1:{sentinel.port}/{SERVICE}"
        worker = NodeWorker("sentinel-worker.js", url, "fo")
        p = primary.client()
        p.execute_command("QPUSHMANY", "fo", 2, "before-1", "before-2")
        wait_for(lambda: worker.acked("before-1", "before-2"), 20, "the first jobs acked")
        wait_for(lambda: qinfo(replica.client(), "fo", str_keys=True)["acked"] == 2, 20, "both acks on the replica")
        primary.kill()
        wait_for(lambda: sentinel.primary() == ("127.0.0.1", replica.port), 60, "Sentinel to promote the replica")
        replica.client().execute_command("QPUSHMANY", "fo", 2, "after-1", "after-2")
        wait_for(lambda: worker.acked("after-1", "after-2"), 30, "the jobs pushed on the new primary")
        assert worker.finish()[0] == {"acked": 4, "failed": 0, "lost": 0, "abandoned": 0}
        assert qinfo(replica.client(), "fo", str_keys=True)["acked"] == 4
    finally:
        if worker is not None:
            worker.kill()
        if sentinel is not None:
            sentinel.stop()
        replica.kill()
        primary.kill()


def test_a_node_worker_waits_out_loading(tmp_path, node_modules):
    """A restart with 600,000 jobs to recover: the daemon answers -LOADING
    meanwhile.  With ioredis's own ready check off, the Worker's claims get
    -LOADING themselves: it says so, backs off, and works once the daemon is
    ready."""
    d = Daemon(tmp_path / "data").start()
    worker = NodeWorker("counting-worker.js", str(d.port), "work", "no-ready-check")
    try:
        client = d.client()
        for _ in range(60):
            client.execute_command("QPUSHMANY", "filler", 10_000, *[b"x" * 64] * 10_000)
        client.execute_command("QPUSH", "work", "before")
        wait_for(lambda: worker.acked("before"), 20, "the first job acked")
        wait_for(lambda: qinfo(client, "work", str_keys=True)["acked"] == 1, 10, "its ack on the daemon")
        client.close()
        d.kill()
        d.start(ready=False)
        d.wait_ready(60)
        client = d.client()
        client.execute_command("QPUSH", "work", "after")
        wait_for(lambda: worker.acked("after"), 30, "the job pushed after the restart")
        client.close()
        _stats, err = worker.finish()
        assert "cannot claim from work (leaseq is loading the dataset in memory); retrying in" in err, err
    finally:
        worker.kill()
        d.kill()


def test_bench_workers_reports_node_beside_python(node_modules, tmp_path):
    """``leaseq bench workers`` at its smallest: every setting's jobs/s and
    the ratio to the best Python one, printed and in JSON (figures never
    checked: a benchmark on a shared machine)."""
    out = tmp_path / "workers.json"
    done = subprocess.run([sys.executable, "-m", "leaseq.cli", "bench", "workers", "--jobs", "200", "--reps", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node at 50" in done.stdout and "python threads at 16" in done.stdout
    assert "/ the best Python setting" in done.stdout
    data = json.loads(out.read_text())
    assert set(data["settings"]) == {"python threads 1", "python threads 4", "python threads 16",
                                     "python threads 50", "python asyncio 50", "node 50"}
    assert data["node_vs_python_best"] > 0 and data["python_best"].startswith("python")


def test_bench_workers_says_when_the_node_package_is_not_installed(monkeypatch, tmp_path):
    from leaseq.bench import workers

    monkeypatch.setattr(workers, "NODE", tmp_path)
    with pytest.raises(RuntimeError, match=r"dependencies are not installed: run `npm ci` in"):
        workers.run(200, 1, 50, "memory", None)



# -- trace context across the two libraries (docs/client.md and docs/node.md, "Tracing") ----------

def _traced(daemon, name: str, mode: str, trace_parent: str = "link"):
    done = subprocess.run(["node", str(NODE / "test" / "fixtures" / "traced.js"), str(daemon.port), name, mode,
                           trace_parent], cwd=NODE, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("trace_parent", ["link", "child"])
def test_a_python_producers_span_reaches_a_node_workers_span(daemon, node_modules, trace_parent):
    name = unique()
    provider = TracerProvider()
    with Queue(daemon.url, name) as queue, provider.get_tracer("shop").start_as_current_span("checkout") as checkout:
        queue.push("order-7", meta={"tenant": "acme"})
    producer = checkout.get_span_context()
    (span,) = _traced(daemon, name, "work", trace_parent)
    assert (span["name"], span["kind"]) == (f"{name} process", "CONSUMER")
    assert span["attributes"]["messaging.system"] == "leaseq"
    ids = [f"{producer.trace_id:032x}", f"{producer.span_id:016x}"]
    if trace_parent == "link":
        assert span["links"] == [ids] and span["parentSpanId"] is None and span["traceId"] != ids[0]
    else:
        assert [span["traceId"], span["parentSpanId"]] == ids and span["links"] == []


def test_a_node_producers_span_reaches_a_python_workers_span(daemon, node_modules, spans):
    name = unique()
    producer = _traced(daemon, name, "push")
    seen = []
    with Queue(daemon.url, name) as queue:
        Worker(queue, lambda job: seen.append(job.meta), block_ms=100, tracer_provider=spans.provider).run(
            burst=True, stop_signals=())
    (span,) = spans.exporter.get_finished_spans()
    assert (span.name, span.kind) == (f"{name} process", SpanKind.CONSUMER)
    assert [(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") for link in span.links] == [
        (producer["traceId"], producer["spanId"])]
    assert seen[0]["tenant"] == "acme" and producer["spanId"] in seen[0]["traceparent"]
