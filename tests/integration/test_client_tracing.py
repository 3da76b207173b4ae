"""leaseq.client's tracing (docs/client.md, "Tracing"), against the real
daemon, read from the OpenTelemetry SDK's in-memory exporter: a push in a
span carries its W3C context in META beside the caller's own fields; the
thread and asyncio ``Worker``s run each job in a CONSUMER span linked to
(or the child of) the producer's, with the messaging attributes; a handler
that raises, a nack that dead-letters and a lost lease are ERROR; without
OpenTelemetry (its import blocked) everything works as before.

Each test has a tracer provider of its own (``spans``), handed to the
workers as ``tracer_provider``: nothing global is set.  The module shares
one daemon; each test uses queues of its own (``q``).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys
import threading

import pytest
from harness import qget, qinfo, unique
from leaseq.client import Queue, Worker, aio
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode


@pytest.fixture
def queue(daemon, q):
    with Queue(daemon.url, q, socket_timeout=10) as queue:
        yield queue


def traceparent_of(span) -> str:
    c = span.get_span_context()
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}"


def job_meta(r, name: str, job_id: int) -> dict[str, str]:
    meta = qget(r, name, job_id, str_keys=True)["meta"]
    return {k.decode(): v.decode() for k, v in zip(meta[::2], meta[1::2])}


def run_burst(queue, handler, spans, **options):
    return Worker(queue, handler, lease_ms=5_000, block_ms=100, tracer_provider=spans.provider,
                  **options).run(burst=True, stop_signals=())


def check_consumer(span, name: str, job_id: int, payload: bytes, daemon) -> None:
    assert span.kind is SpanKind.CONSUMER
    assert span.name == f"{name} process"
    assert span.instrumentation_scope.name == "leaseq.client"
    attributes = dict(span.attributes)
    assert attributes == {
        "messaging.system": "leaseq", "messaging.destination.name": name,
        "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.operation": "process", "messaging.client.id": attributes["messaging.client.id"],
        "server.address": "127.0.0.1", "server.port": daemon.port,
        "messaging.message.id": str(job_id), "messaging.message.body.size": len(payload),
        "messaging.leaseq.message.delivery_count": 1, "leaseq.job.outcome": attributes["leaseq.job.outcome"]}
    assert attributes["messaging.client.id"].endswith(f":{os.getpid()}")


# -- producing ---------------------------------------------------------------------------------

def test_a_push_in_a_span_carries_its_context_beside_the_callers_meta(queue, r, spans):
    with spans.tracer.start_as_current_span("produce") as producer:
        one = queue.push("a", meta={"tenant": "acme"})
        many = queue.push_many(["b", "c"], meta={b"batch": b"7"})
        bare = queue.push("d")
    want = traceparent_of(producer)
    assert job_meta(r, queue.name, one) == {"tenant": "acme", "traceparent": want}
    assert [job_meta(r, queue.name, i) for i in many] == [{"batch": "7", "traceparent": want}] * 2
    assert job_meta(r, queue.name, bare) == {"traceparent": want}


def test_a_push_without_a_span_carries_no_context(queue, r):
    plain = queue.push("a", meta={"tenant": "acme"})
    bare = queue.push("b")
    assert job_meta(r, queue.name, plain) == {"tenant": "acme"}
    assert qget(r, queue.name, bare, str_keys=True).get("meta") in (None, [])


def test_a_traceparent_the_caller_gives_wins(queue, r, spans):
    mine = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with spans.tracer.start_as_current_span("produce"):
        job_id = queue.push("a", meta={"traceparent": mine})
        raw_id = queue.push("b", meta={b"traceparent": mine.encode()})
    assert job_meta(r, queue.name, job_id) == {"traceparent": mine}
    assert job_meta(r, queue.name, raw_id) == {"traceparent": mine}


def test_tracestate_travels_too(queue, r, spans):
    state = trace.TraceState([("vendor", "x1")])
    parent = trace.NonRecordingSpan(trace.SpanContext(0x1234, 0x5678, is_remote=True,
                                                      trace_flags=trace.TraceFlags(1), trace_state=state))
    with trace.use_span(parent):
        job_id = queue.push("a")
    assert job_meta(r, queue.name, job_id) == {
        "traceparent": f"00-{0x1234:032x}-{0x5678:016x}-01", "tracestate": "vendor=x1"}


def test_a_schedule_made_in_a_span_carries_its_context(queue, spans):
    with spans.tracer.start_as_current_span("plan") as planner:
        queue.schedules.add("beat", "ping", every_ms=3_600_000, meta={"source": "cron"})
    (schedule,) = queue.schedules.list()
    assert schedule["meta"] == {"source": "cron", "traceparent": traceparent_of(planner)}


def test_a_bad_meta_is_still_refused_in_a_span(queue, spans):
    queue.create()
    with spans.tracer.start_as_current_span("produce"), pytest.raises(TypeError, match="meta is a mapping"):
        queue.push("a", meta=[("tenant", "acme")])
    assert queue.info()["pushed"] == 0


# -- the thread Worker ---------------------------------------------------------------------------

def test_the_workers_span_is_a_consumer_linked_to_the_producer(daemon, queue, spans):
    with spans.tracer.start_as_current_span("produce") as producer:
        job_id = queue.push("photo.jpg", meta={"tenant": "acme"})
    seen = []

    def handler(job):
        with spans.tracer.start_as_current_span("resize"):       # the handler's own span
            seen.append(job.meta)
    assert run_burst(queue, handler, spans).acked == 1
    span = spans.one(f"{queue.name} process")
    check_consumer(span, queue.name, job_id, b"photo.jpg", daemon)
    assert span.parent is None                                   # a trace of its own
    assert span.context.trace_id != producer.get_span_context().trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
        (producer.get_span_context().trace_id, producer.get_span_context().span_id)]
    assert span.status.status_code is StatusCode.UNSET
    assert span.attributes["leaseq.job.outcome"] == "acked"
    assert spans.one("resize").parent.span_id == span.context.span_id
    assert seen == [{"tenant": "acme", "traceparent": traceparent_of(producer)}]
    # the spans of one traced job, as the exporter has them (docs/client.md, "Tracing")
    print(spans.one("produce").to_json())
    print(span.to_json())


def test_with_trace_parent_child_the_span_is_the_producers_child(daemon, queue, spans):
    with spans.tracer.start_as_current_span("produce") as producer:
        job_id = queue.push("x")
    run_burst(queue, lambda job: None, spans, trace_parent="child")
    span = spans.one(f"{queue.name} process")
    check_consumer(span, queue.name, job_id, b"x", daemon)
    assert span.context.trace_id == producer.get_span_context().trace_id
    assert span.parent.span_id == producer.get_span_context().span_id
    assert span.links == ()


def test_a_job_pushed_without_a_span_gets_a_span_with_no_link(daemon, queue, spans):
    job_id = queue.push("x", meta={"tenant": "acme"})
    run_burst(queue, lambda job: None, spans, trace_parent="child")
    span = spans.one(f"{queue.name} process")
    check_consumer(span, queue.name, job_id, b"x", daemon)
    assert span.parent is None and span.links == ()


def test_a_handler_that_raises_makes_the_span_an_error_with_its_exception(queue, spans):
    queue.create(max_deliveries=2, backoff=(1, 1, 0))         # one retry, 1 ms later
    with spans.tracer.start_as_current_span("produce"):
        queue.push("x")

    def handler(job):
        raise ValueError("corrupt header")
    assert run_burst(queue, handler, spans).failed == 2
    first, second = spans.named(f"{queue.name} process")
    assert (first.attributes["messaging.leaseq.message.delivery_count"],
            second.attributes["messaging.leaseq.message.delivery_count"]) == (1, 2)
    span = first
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: corrupt header"
    assert span.attributes["leaseq.job.outcome"] == "failed"
    (event,) = span.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "ValueError"
    assert event.attributes["exception.message"] == "corrupt header"


def test_a_nack_that_dead_letters_is_an_error(queue, r, spans):
    queue.create(max_deliveries=1)
    with spans.tracer.start_as_current_span("produce"):
        job_id = queue.push("x")

    def handler(job):
        raise RuntimeError("no such customer")
    assert run_burst(queue, handler, spans).failed == 1
    assert qget(r, queue.name, job_id, str_keys=True)["state"] == b"dead"
    span = spans.one(f"{queue.name} process")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "RuntimeError: no such customer"
    assert [e.name for e in span.events] == ["exception"]


def test_a_lease_lost_before_the_ack_is_an_error(queue, spans):
    queue.push("x")

    def handler(job):
        queue.nack(job, dead=True)          # someone else ends the job: the worker's ack finds no lease
    assert run_burst(queue, handler, spans).lost == 1
    span = spans.one(f"{queue.name} process")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "lease lost: the job was not acked"
    assert span.attributes["leaseq.job.outcome"] == "lost"


def test_a_bad_trace_parent_is_refused(queue):
    with pytest.raises(ValueError, match="trace_parent must be 'link' or 'child', not 'parent'"):
        Worker(queue, lambda job: None, trace_parent="parent")
    with pytest.raises(ValueError, match="trace_parent must be"):
        aio.Worker(queue, lambda job: None, trace_parent=None)


# -- the asyncio Worker --------------------------------------------------------------------------

def run_aio(daemon, name, handler, spans, producer_name="produce", fail=False, **options):
    """Push one job in a producer span, then run an aio.Worker in burst."""
    async def main():
        async with aio.Queue(daemon.url, name, socket_timeout=10) as queue:
            with spans.tracer.start_as_current_span(producer_name):
                job_id = await queue.push("thumb.png")
            worker = aio.Worker(queue, handler, lease_ms=5_000, block_ms=100, tracer_provider=spans.provider,
                                **options)
            stats = await asyncio.wait_for(worker.run(burst=True, stop_signals=()), 20)
            return job_id, stats
    return asyncio.run(main())


@pytest.mark.parametrize("trace_parent", ["link", "child"])
def test_the_aio_workers_span_for_a_coroutine_handler(daemon, spans, trace_parent):
    name = unique()

    async def handler(job):
        with spans.tracer.start_as_current_span("resize"):
            await asyncio.sleep(0)
    job_id, stats = run_aio(daemon, name, handler, spans, trace_parent=trace_parent)
    assert stats.acked == 1
    producer = spans.one("produce").context
    span = spans.one(f"{name} process")
    check_consumer(span, name, job_id, b"thumb.png", daemon)
    if trace_parent == "link":
        assert span.parent is None
        assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
            (producer.trace_id, producer.span_id)]
    else:
        assert (span.context.trace_id, span.parent.span_id) == (producer.trace_id, producer.span_id)
    assert spans.one("resize").parent.span_id == span.context.span_id


def test_the_aio_workers_span_for_a_plain_handler_in_its_threads(daemon, spans):
    name = unique()
    threads = []

    def handler(job):
        threads.append(threading.current_thread().name)
        with spans.tracer.start_as_current_span("resize"):
            pass
    job_id, stats = run_aio(daemon, name, handler, spans)
    assert stats.acked == 1 and threads[0].startswith("leaseq-handler")
    span = spans.one(f"{name} process")
    check_consumer(span, name, job_id, b"thumb.png", daemon)
    assert spans.one("resize").parent.span_id == span.context.span_id     # current in the handler's thread


def test_an_aio_handler_that_raises_makes_the_span_an_error(daemon, r, spans):
    name = unique()
    r.execute_command("QCREATE", name, "MAXDELIVERIES", 1)

    async def handler(job):
        raise KeyError("sku-9")
    job_id, stats = run_aio(daemon, name, handler, spans)
    assert stats.failed == 1
    assert qget(r, name, job_id, str_keys=True)["state"] == b"dead"
    span = spans.one(f"{name} process")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "KeyError: 'sku-9'"
    assert [(e.name, e.attributes["exception.type"]) for e in span.events] == [("exception", "KeyError")]


# -- without OpenTelemetry -----------------------------------------------------------------------

WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None          # as if the extra otel were not installed
from leaseq.client import Queue, Worker, tracing
assert not tracing.ENABLED
queue = Queue(sys.argv[1], sys.argv[2])
queue.push("a", meta={"tenant": "acme"})
queue.push_many(["b", "c"])
seen = []
stats = Worker(queue, lambda job: seen.append(job.meta), block_ms=100, trace_parent="child").run(burst=True)
print(stats.acked, sorted(map(str, seen)))
try:
    Worker(queue, lambda job: None, trace_parent="sibling")
except ValueError as e:
    print(e)
"""


def test_without_opentelemetry_everything_works_as_before(daemon, q):
    done = subprocess.run([sys.executable, "-c", WITHOUT_OTEL, daemon.url, q], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["3 ['None', 'None', \"{'tenant': 'acme'}\"]",
                                        "trace_parent must be 'link' or 'child', not 'sibling'"]


def test_the_spans_export_as_json(queue, spans):
    """The exporter's JSON of a consumer span names the link (what a
    collector receives)."""
    with spans.tracer.start_as_current_span("produce") as producer:
        queue.push("x")
    run_burst(queue, lambda job: None, spans)
    exported = json.loads(spans.one(f"{queue.name} process").to_json())
    assert exported["kind"] == "SpanKind.CONSUMER"
    assert exported["links"][0]["context"]["span_id"] == f"0x{producer.get_span_context().span_id:016x}"
    assert qinfo(queue.client, queue.name, str_keys=True)["acked"] == 1


# -- docs/client.md's example ----------------------------------------------------------------------

def test_the_docs_tracing_example_prints_what_the_page_says(daemon):
    """docs/client.md's "Tracing" example as written, in a process of its
    own (it sets the global tracer provider), against the module's daemon,
    where no other test uses the queue ``receipts``."""
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "client.md").read_text(encoding="utf-8")
    section = page.split("## Tracing (OpenTelemetry)\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    printed = re.search(r"prints:\n\n```\n(.*?)```", section, re.DOTALL).group(1)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                          env=dict(os.environ, LEASEQ_URL=daemon.url))
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed
