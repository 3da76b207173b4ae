// Worker against a real daemon (LEASEQ_PORT), beyond the shared scenarios
// (scenarios.test.js): its settings, what JavaScript can return or throw,
// the heartbeat's cost, close()'s timeout, and SIGTERM in a process of its own.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { Worker, WorkerClosed } from "../src/index.js";
import { daemonPort, freshQueues } from "./daemon.js";

const fresh = freshQueues("node-worker");
const quiet = { logger: null };

test("settings that cannot work are refused at construction", () => {
  const q = fresh();
  assert.throws(() => new Worker(q, "not a function"), { name: "TypeError", message: /needs a handler function/ });
  assert.throws(() => new Worker(q, () => {}, { concurrency: 0 }), { name: "RangeError", message: /concurrency must be an integer of at least 1, not 0/ });
  assert.throws(() => new Worker(q, () => {}, { leaseMs: 50 }), /leaseMs must be an integer of at least 100/);
  assert.throws(() => new Worker(q, () => {}, { blockMs: 0 }), /blockMs/);
  assert.throws(() => new Worker(q, () => {}, { heartbeatMs: 5 }), /heartbeatMs/);
  assert.throws(() => new Worker(q, () => {}, { closeTimeoutMs: -1 }), /closeTimeoutMs/);
});

test("a Buffer result is kept as it is; a value JSON cannot hold, or a thrown non-Error, nacks", async () => {
  const q = fresh();
  await q.client.call("QCREATE", q.name, "RETAIN-COMPLETED", 60000);
  const [bytes, big, text] = await q.pushMany(["bytes", "big", "text"], { maxDeliveries: 1 });
  const events = [];
  const worker = new Worker(q, (job) => {
    if (job.text() === "bytes") return Buffer.from([1, 2, 255]);
    if (job.text() === "big") return 10n;
    throw "plain text";                                   // eslint-disable-line no-throw-literal
  }, quiet);
  worker.on("completed", (job) => events.push(`completed ${job.id}`));
  worker.on("failed", (job, e) => events.push(`failed ${job.id}`));
  assert.deepEqual(await worker.run({ burst: true }), { acked: 1, failed: 2, lost: 0, abandoned: 0 });
  assert.deepEqual((await q.get(bytes)).result, Buffer.from([1, 2, 255]));
  assert.match((await q.get(big)).last_error, /^TypeError: Do not know how to serialize a BigInt/);
  assert.equal((await q.get(text)).last_error, "ThrownValue: plain text");
  assert.deepEqual(events.sort(), [`completed ${bytes}`, `failed ${big}`, `failed ${text}`]);
});

test("a worker runs once at a time", async () => {
  const q = fresh();
  const worker = new Worker(q, () => {}, { ...quiet, blockMs: 50 });
  const run = worker.run();
  assert.throws(() => worker.run(), /running already/);
  await worker.close();
  assert.deepEqual(await run, { acked: 0, failed: 0, lost: 0, abandoned: 0 });
  await worker.close();                                   // closing a stopped worker does nothing
});

test("1,000 held leases are extended by one request a beat", async () => {
  const q = fresh();
  await q.pushMany(Array.from({ length: 1000 }, (_, i) => `job ${i}`));
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  const worker = new Worker(q, () => gate, { ...quiet, concurrency: 1000, leaseMs: 3000, heartbeatMs: 100 });
  const beats = [];
  worker.on("extended", (count) => beats.push(count));
  const run = worker.run();
  const nextBeat = () => once(worker, "extended");
  const commands = async () => Number(/total_commands_processed:(\d+)/.exec(await q.client.call("INFO", "stats"))[1]);
  try {
    while (worker.held < 1000) await nextBeat();
    await nextBeat();
    const before = await commands();
    const from = beats.length;
    for (let i = 0; i < 5; i++) await nextBeat();
    const during = (await commands()) - before;
    // the five beats' QEXTENDs and the second INFO; a daemon counting otherwise would show more
    assert.ok(during >= 5 && during <= 6, `${during} commands reached the daemon during 5 beats`);
    assert.deepEqual(beats.slice(from, from + 5), [1000, 1000, 1000, 1000, 1000]);
  } finally {
    release();
    await worker.close();
  }
  assert.equal((await run).acked, 1000);
});

test("close() waits closeTimeoutMs, then aborts the handler and nacks its job, ready at once", async () => {
  const q = fresh();
  const id = await q.push("stubborn");
  let started, reason;
  const running = new Promise((resolve) => { started = resolve; });
  const worker = new Worker(q, (job, { signal }) => {
    started();
    signal.addEventListener("abort", () => { reason = signal.reason; });
    return new Promise(() => {});                          // never ends by itself
  }, { ...quiet, closeTimeoutMs: 200 });
  const run = worker.run();
  await running;
  const t0 = Date.now();
  await worker.close();
  assert.ok(Date.now() - t0 < 5_000);
  assert.ok(reason instanceof WorkerClosed);
  assert.deepEqual(await run, { acked: 0, failed: 0, lost: 0, abandoned: 1 });
  const info = await q.get(id);
  assert.equal(info.state, "ready");
  assert.equal(info.last_error, "WorkerClosed: the worker closed before the handler finished (closeTimeoutMs 200)");
});

test("close() during a blocked claim returns at once; a job that claim brings later is handed back", async () => {
  const q = fresh();
  await q.client.call("QCREATE", q.name);
  const worker = new Worker(q, () => "ran", { ...quiet, blockMs: 3000 });
  const run = worker.run();
  const blocked = async () => Number((await q.info()).consumers_blocked);
  while (await blocked() < 1) await new Promise((resolve) => setTimeout(resolve, 10));
  const t0 = Date.now();
  await worker.close();
  assert.ok(Date.now() - t0 < 1000, `close took ${Date.now() - t0} ms`);
  assert.deepEqual(await run, { acked: 0, failed: 0, lost: 0, abandoned: 0 });
  const id = await q.push("late");                       // the claim still parked takes it, and the worker nacks it
  let info = await q.get(id);
  for (let i = 0; i < 500 && !(info.state === "ready" && info.deliveries === 1); i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    info = await q.get(id);
  }
  assert.deepEqual([info.state, info.deliveries], ["ready", 1]);
});

test("SIGTERM with handleSignals: the held jobs finish, then the process ends", async () => {
  const q = fresh();
  await q.client.call("QCREATE", q.name, "RETAIN-COMPLETED", 60000);
  const ids = await q.pushMany(["a", "b"]);
  const child = spawn(process.execPath, [fileURLToPath(new URL("./fixtures/signal-worker.js", import.meta.url)),
    String(daemonPort()), q.name], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = once(child, "exit");
  let out = "";
  child.stdout.setEncoding("utf8");
  const bothStarted = new Promise((resolve) => {
    child.stdout.on("data", (chunk) => { out += chunk; if ((out.match(/started/g) || []).length === 2) resolve(); });
  });
  const deadline = setTimeout(() => child.kill("SIGKILL"), 20_000);
  await bothStarted;
  child.kill("SIGTERM");
  const [code] = await exited;
  clearTimeout(deadline);
  assert.equal(code, 0, out);
  assert.deepEqual(JSON.parse(out.trim().split("\n").at(-1)), { acked: 2, failed: 0, lost: 0, abandoned: 0 });
  for (const id of ids) assert.equal((await q.get(id)).result.toString(), "finished");
});
