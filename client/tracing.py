"""Trace context through jobs (OpenTelemetry), the same for threads and asyncio.

With ``opentelemetry-api`` importable (the extra ``otel``):

- ``with_trace_context(meta)``: a push's META plus the fields the configured
  propagator writes for the current context (W3C ``traceparent`` and
  ``tracestate`` by default), through ``opentelemetry.propagate.inject``;
  a field the caller gave keeps the caller's value;
- ``JobSpans.process(job)``: the CONSUMER span ``"<queue> process"`` a
  ``Worker`` runs one job in, linked to the producer's context read back
  from the job's META (or, with ``trace_parent="child"``, its child), with
  the attributes of OpenTelemetry's messaging semantic conventions; how
  the job ended sets its status.

Without it the import below fails once, at load: ``with_trace_context``
returns META as given, and ``JobSpans`` one shared do-nothing span.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, SpanKind, StatusCode
except ImportError:          # the extra ``otel`` is not installed: no tracing
    trace = None

ENABLED = trace is not None
TRACE_PARENTS = ("link", "child")
TRACER_NAME = "leaseq.client"


def with_trace_context(meta: Mapping | None) -> Mapping | None:
    """``meta`` with the current trace context added; as given when there
    is no active span (the propagator then writes nothing)."""
    if not ENABLED:
        return meta
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier or (meta is not None and not isinstance(meta, Mapping)):
        return meta          # (a wrong meta is left for meta_args to refuse)
    if not meta:
        return carrier
    given = {_text(name) for name in meta}
    return {**meta, **{name: value for name, value in carrier.items() if name not in given}}


def _text(name: Any) -> Any:
    return name.decode("utf-8", "replace") if isinstance(name, (bytes, bytearray)) else name


class JobSpans:
    """The spans one worker runs its jobs in.  ``trace_parent``: ``"link"``
    (a trace of its own per job, linked to the producer's span) or
    ``"child"`` (the producer's trace, the span its child).
    ``tracer_provider``: OpenTelemetry's global one when None.
    ``describe``: a handler's exception as the span's status says it (the
    worker's nack text)."""

    def __init__(self, queue: str, consumer: str, client: Any, describe: Callable[[BaseException], str], *,
                 trace_parent: str = "link", tracer_provider: Any = None) -> None:
        if trace_parent not in TRACE_PARENTS:
            raise ValueError(f"trace_parent must be 'link' or 'child', not {trace_parent!r}")
        self.child = trace_parent == "child"
        self.describe = describe
        self.name = f"{queue} process"
        self.attributes = {
            "messaging.system": "leaseq",
            "messaging.destination.name": queue,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.operation": "process",           # the conventions' name before 1.26
            "messaging.client.id": consumer,
            **_server_attributes(client),
        }
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider) if ENABLED else None

    def process(self, job: Any) -> contextlib.AbstractContextManager[_JobSpan]:
        """The span to run ``job`` in, current while the block runs (so the
        handler's own spans are its children)."""
        return self._span(job) if ENABLED else _NO_SPAN

    @contextlib.contextmanager
    def _span(self, job: Any) -> Iterator[_JobSpan]:
        producer = trace.get_current_span(propagate.extract(job.meta)).get_span_context() if job.meta else None
        if producer is not None and producer.is_valid and self.child:
            parent, links = trace.set_span_in_context(trace.NonRecordingSpan(producer)), None
        else:
            # a root: the worker's own context (a pool thread's, or the task that ran run()) is no parent
            parent, links = otel_context.Context(), [Link(producer)] if producer is not None and producer.is_valid \
                else None
        attributes = {**self.attributes, "messaging.message.id": str(job.id),
                      "messaging.message.body.size": len(job.payload),
                      "messaging.leaseq.message.delivery_count": job.deliveries}
        with self._tracer.start_as_current_span(self.name, context=parent, kind=SpanKind.CONSUMER, links=links,
                                                attributes=attributes, record_exception=True,
                                                set_status_on_exception=True) as span:
            yield _JobSpan(span, self.describe)


class _JobSpan:
    """One job's span: ``ended`` sets its status from how the job ended."""

    def __init__(self, span: Any, describe: Callable[[BaseException], str]) -> None:
        self.span = span
        self.describe = describe

    def ended(self, outcome: Any, failure: Exception | None) -> Any:
        """``outcome``: a ``work.Outcome``; ``failure``: what the handler
        raised (recorded as the span's exception event).  An ack leaves the
        status unset, as the conventions ask; a nack (a retry or a dead
        letter) and a lease lost are ERROR."""
        self.span.set_attribute("leaseq.job.outcome", outcome.value)
        if failure is not None:
            self.span.record_exception(failure)
            self.span.set_status(StatusCode.ERROR, self.describe(failure))
        elif outcome.value != "acked":
            self.span.set_status(StatusCode.ERROR, "lease lost: the job was not acked")
        return outcome


class _NoSpan:
    """What ``JobSpans.process`` gives without OpenTelemetry: nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def ended(self, outcome: Any, failure: Exception | None) -> Any:
        return outcome


_NO_SPAN = _NoSpan()


def _server_attributes(client: Any) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of a redis-py client connected
    by host and port (none for a Unix socket or a Sentinel's primary, which
    changes)."""
    settings = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None) or {}
    host, port = settings.get("host"), settings.get("port")
    if not isinstance(host, str) or "path" in settings:
        return {}
    return {"server.address": host, **({"server.port": int(port)} if port is not None else {})}
