// Trace context (src/tracing.js, docs/node.md "Tracing") against a real daemon
// (LEASEQ_PORT), read from the SDK's InMemorySpanExporter: a push in a span
// carries its W3C context in META beside the caller's own fields; the Worker
// runs each job in a CONSUMER span linked to (or the child of) the producer's,
// with the messaging attributes; a throw, a dead letter and a lost lease are
// ERROR; with @opentelemetry/api unimportable everything works as before.
//
// The test's provider is handed to the workers (tracerProvider); the W3C
// propagator and an AsyncLocalStorage context manager are set globally, as
// the SDK's register() does in an application.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";

import { SpanKind, SpanStatusCode } from "@opentelemetry/api";

import { Worker } from "../src/index.js";
import { daemonPort, freshQueues } from "./daemon.js";
import { inMemoryTracing } from "./otel.js";

const { exporter, provider } = inMemoryTracing();
const tracer = provider.getTracer("test");

const fresh = freshQueues("node-tracing");
const quiet = { logger: null, blockMs: 100, tracerProvider: provider };

/** Run `fn` in a new active span called `name`; [the span, what fn answered]. */
function inSpan(name, fn) {
  return tracer.startActiveSpan(name, async (span) => {
    try {
      return [span, await fn()];
    } finally {
      span.end();
    }
  });
}

const traceparentOf = (span) => {
  const c = span.spanContext();
  return `00-${c.traceId}-${c.spanId}-${c.traceFlags.toString(16).padStart(2, "0")}`;
};
const spansNamed = (name) => exporter.getFinishedSpans().filter((s) => s.name === name);
function oneSpan(name) {
  const found = spansNamed(name);
  assert.equal(found.length, 1, exporter.getFinishedSpans().map((s) => s.name).join(", "));
  return found[0];
}

function checkConsumer(span, queue, id, payloadBytes) {
  assert.equal(span.kind, SpanKind.CONSUMER);
  assert.equal(span.name, `${queue.name} process`);
  assert.equal(span.instrumentationScope.name, "leaseq");
  const a = span.attributes;
  assert.deepEqual({ ...a, "messaging.client.id": "-", "leaseq.job.outcome": "-" }, {
    "messaging.system": "leaseq", "messaging.destination.name": queue.name,
    "messaging.operation.type": "process", "messaging.operation.name": "process", "messaging.operation": "process",
    "messaging.client.id": "-", "server.address": "127.0.0.1", "server.port": daemonPort(),
    "messaging.message.id": String(id), "messaging.message.body.size": payloadBytes,
    "messaging.leaseq.message.delivery_count": 1, "leaseq.job.outcome": "-",
  });
  assert.match(a["messaging.client.id"], new RegExp(`:${process.pid}$`));
}

test("a push in a span carries its context beside the caller's meta; without a span, none", async () => {
  const q = fresh();
  const [producer, [one, many, bare]] = await inSpan("produce", async () => [
    await q.push("a", { meta: { tenant: "acme" } }),
    await q.pushMany(["b", "c"], { meta: new Map([[Buffer.from("batch"), "7"]]) }),
    await q.push("d"),
  ]);
  const want = traceparentOf(producer);
  assert.deepEqual((await q.get(one)).meta, { tenant: "acme", traceparent: want });
  for (const id of many) assert.deepEqual((await q.get(id)).meta, { batch: "7", traceparent: want });
  assert.deepEqual((await q.get(bare)).meta, { traceparent: want });
  const outside = await q.push("e", { meta: { tenant: "acme" } });
  assert.deepEqual((await q.get(outside)).meta, { tenant: "acme" });
  assert.equal((await q.get(await q.push("f"))).meta, undefined);
});

test("a traceparent the caller gives wins, as a string or a Buffer name", async () => {
  const q = fresh();
  const mine = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  const [, [a, b]] = await inSpan("produce", async () => [
    await q.push("a", { meta: { traceparent: mine } }),
    await q.push("b", { meta: new Map([[Buffer.from("traceparent"), mine]]) }),
  ]);
  assert.deepEqual((await q.get(a)).meta, { traceparent: mine });
  assert.deepEqual((await q.get(b)).meta, { traceparent: mine });
});

test("bad meta is still refused in a span, nothing pushed", async () => {
  const q = fresh();
  await inSpan("produce", () => assert.rejects(q.push("a", { meta: ["tenant", "acme"] }), { name: "TypeError", message: /meta is an object/ }));
  await assert.rejects(q.info(), { name: "LeaseqError", code: "NOQUEUE" });
});

test("the worker's span is a CONSUMER linked to the producer's; the handler's spans are its children", async () => {
  const q = fresh();
  const [producer, id] = await inSpan("produce", () => q.push("photo.jpg"));
  const stats = await new Worker(q, async () => {
    await tracer.startActiveSpan("resize", async (s) => { await new Promise((r) => setTimeout(r, 5)); s.end(); });
  }, quiet).run({ burst: true });
  assert.equal(stats.acked, 1);
  const span = oneSpan(`${q.name} process`);
  checkConsumer(span, q, id, 9);
  assert.equal(span.parentSpanContext, undefined);                    // a trace of its own
  assert.notEqual(span.spanContext().traceId, producer.spanContext().traceId);
  assert.deepEqual(span.links.map((l) => [l.context.traceId, l.context.spanId]),
    [[producer.spanContext().traceId, producer.spanContext().spanId]]);
  assert.equal(span.status.code, SpanStatusCode.UNSET);
  assert.equal(span.attributes["leaseq.job.outcome"], "acked");
  const resize = spansNamed("resize").find((s) => s.spanContext().traceId === span.spanContext().traceId);
  assert.equal(resize.parentSpanContext.spanId, span.spanContext().spanId);
});

test("with traceParent child the span is the producer's child", async () => {
  const q = fresh();
  const [producer, id] = await inSpan("produce", () => q.push("x"));
  await new Worker(q, () => {}, { ...quiet, traceParent: "child" }).run({ burst: true });
  const span = oneSpan(`${q.name} process`);
  checkConsumer(span, q, id, 1);
  assert.equal(span.spanContext().traceId, producer.spanContext().traceId);
  assert.equal(span.parentSpanContext.spanId, producer.spanContext().spanId);
  assert.deepEqual(span.links, []);
});

test("a job pushed outside a span gets a span with no link and no parent", async () => {
  const q = fresh();
  const id = await q.push("x", { meta: { tenant: "acme" } });
  await new Worker(q, () => {}, { ...quiet, traceParent: "child" }).run({ burst: true });
  const span = oneSpan(`${q.name} process`);
  checkConsumer(span, q, id, 1);
  assert.equal(span.parentSpanContext, undefined);
  assert.deepEqual(span.links, []);
});

test("a handler that throws makes the span ERROR with its exception; a dead letter too", async () => {
  const q = fresh();
  await q.client.call("QCREATE", q.name, "MAXDELIVERIES", 1);
  const [, id] = await inSpan("produce", () => q.push("x"));
  const stats = await new Worker(q, () => { throw new RangeError("no such customer"); }, quiet).run({ burst: true });
  assert.equal(stats.failed, 1);
  assert.equal((await q.get(id)).state, "dead");
  const span = oneSpan(`${q.name} process`);
  assert.deepEqual(span.status, { code: SpanStatusCode.ERROR, message: "RangeError: no such customer" });
  assert.equal(span.attributes["leaseq.job.outcome"], "failed");
  assert.deepEqual(span.events.map((e) => [e.name, e.attributes["exception.type"], e.attributes["exception.message"]]),
    [["exception", "RangeError", "no such customer"]]);
});

test("a lease lost before the ack is ERROR", async () => {
  const q = fresh();
  await q.push("x");
  const stats = await new Worker(q, async (job) => { await q.nack(job, { dead: true }); }, quiet).run({ burst: true });
  assert.equal(stats.lost, 1);
  const span = oneSpan(`${q.name} process`);
  assert.deepEqual(span.status, { code: SpanStatusCode.ERROR, message: "lease lost: the job was not acked" });
  assert.equal(span.attributes["leaseq.job.outcome"], "lost");
});

test("a bad traceParent is refused at construction", () => {
  const q = fresh();
  assert.throws(() => new Worker(q, () => {}, { traceParent: "parent" }),
    { name: "RangeError", message: 'traceParent must be "link" or "child", not "parent"' });
});

test("without @opentelemetry/api (its import refused) pushes and workers work as before", async () => {
  const q = fresh();
  const script = fileURLToPath(new URL("./fixtures/no-otel-worker.js", import.meta.url));
  const hook = fileURLToPath(new URL("./fixtures/no-otel-hook.js", import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, ["--import", hook, script, String(daemonPort()), q.name],
    { timeout: 60_000 });
  assert.deepEqual(stdout.trim().split("\n"), [
    "tracing enabled: false",
    '{"acked":3,"failed":0,"lost":0,"abandoned":0}',
    '[{"tenant":"acme"},null,null]',
    'traceParent must be "link" or "child", not "sibling"',
  ]);
});

// the exported spans of one traced job, as a collector would get them (with `node --test`'s output)
test("the spans of a traced job print", async () => {
  const q = fresh();
  await inSpan("produce", () => q.push("photo.jpg", { meta: { tenant: "acme" } }));
  await new Worker(q, () => {}, quiet).run({ burst: true });
  const consumer = oneSpan(`${q.name} process`);
  const show = (s) => ({
    name: s.name, kind: SpanKind[s.kind], traceId: s.spanContext().traceId, spanId: s.spanContext().spanId,
    parentSpanId: s.parentSpanContext?.spanId, links: s.links.map((l) => l.context), attributes: s.attributes,
    status: s.status,
  });
  const producer = spansNamed("produce").find((s) => s.spanContext().spanId === consumer.links[0].context.spanId);
  console.log(JSON.stringify([show(producer), show(consumer)], null, 2));
  assert.ok(producer);
});
