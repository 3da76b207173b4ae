// OpenTelemetry as an application sets it up (what the SDK's register()
// does: the W3C propagator and an AsyncLocalStorage context manager, set
// globally), with a tracer provider whose finished spans stay in memory:
// for tracing.test.js and fixtures/traced.js.

import { context, propagation } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";

/** Set the global propagator and context manager; a new { exporter, provider } kept in memory. */
export function inMemoryTracing() {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { exporter, provider };
}
