// Queue against a real daemon (LEASEQ_PORT): pushes and their options,
// QGET, QRESULT, QCANCEL, and the errors a caller gets for bad input.

import assert from "node:assert/strict";
import { test } from "node:test";

import { LeaseqError, Queue } from "../src/index.js";
import { daemonUrl, freshQueues } from "./daemon.js";

const fresh = freshQueues("node-queue");

test("push answers the id; its options reach the job", async () => {
  const q = fresh();
  const first = await q.push("plain");
  const delayed = await q.push(Buffer.from([0, 255, 1]), { delay: 60_000, priority: 1, group: "tenant-7" });
  assert.equal(delayed, first + 1);
  const info = await q.get(delayed);
  assert.equal(info.state, "delayed");
  assert.equal(info.priority, 1);
  assert.deepEqual(info.payload, Buffer.from([0, 255, 1]));            // binary-safe
  assert.deepEqual(info.group, Buffer.from("tenant-7"));
  assert.equal((await q.get(first)).state, "ready");
});

test("meta travels with push and pushMany to claims and get", async () => {
  const q = fresh();
  const one = await q.push("one", { meta: { tenant: "acme", trace: Buffer.from("t-1") }, priority: 9 });
  const many = await q.pushMany(["a", "b"], { meta: { batch: "7" } });
  const plain = await q.push("plain");
  assert.deepEqual((await q.get(one)).meta, { tenant: "acme", trace: "t-1" });
  assert.equal((await q.get(plain)).meta, undefined);
  const jobs = await q.claim("me", { count: 5 });
  assert.deepEqual(jobs.map((j) => [j.id, j.meta]),
    [[one, { tenant: "acme", trace: "t-1" }], [many[0], { batch: "7" }], [many[1], { batch: "7" }], [plain, null]]);
  const tooMany = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`f${i}`, "v"]));
  await assert.rejects(q.push("x", { meta: tooMany }), (e) => e instanceof LeaseqError && e.code === "ERR"
    && e.message === "META has 33 fields, more than 32");
  await assert.rejects(q.push("x", { meta: { n: 1 } }), { name: "TypeError" });
  assert.equal((await q.info()).pushed, 4);
});

test("a dedupe key answers the id of the job holding it", async () => {
  const q = fresh();
  const id = await q.push("a", { key: "invoice-1" });
  assert.equal(await q.push("b", { key: "invoice-1" }), id);
  assert.deepEqual(await q.pushMany(["c", "d"], { keys: ["invoice-1", "invoice-2"] }), [id, id + 1]);
});

test("after makes a job wait for its parents", async () => {
  const q = fresh();
  const parent = await q.push("parent");
  const child = await q.push("child", { after: [[q.name, parent]] });
  assert.equal((await q.get(child)).state, "waiting");
  const [job] = await q.claim("me");
  assert.equal(job.id, parent);
  await q.ack(job);
  assert.equal((await q.get(child)).state, "ready");
});

test("pushMany pushes all in order, and an empty list is no command", async () => {
  const q = fresh();
  const ids = await q.pushMany(["a", "b", "c"], { groups: ["x", "y", "x"] });
  assert.deepEqual(ids, [ids[0], ids[0] + 1, ids[0] + 2]);
  assert.deepEqual(await q.pushMany([]), []);
  assert.deepEqual((await q.get(ids[2])).group, Buffer.from("x"));
});

test("bad input is refused before anything is pushed", async () => {
  const q = fresh();
  await q.client.call("QCREATE", q.name);
  await assert.rejects(q.push({ to: "ann" }), { name: "TypeError", message: /string or a Buffer, not object; encode it first/ });
  await assert.rejects(q.push(42), /not number/);
  await assert.rejects(q.push("x", { dleay: 5 }), { name: "TypeError", message: /unknown push option "dleay"/ });
  await assert.rejects(q.push("x", { delay: 5, at: Date.now() }), /give delay or at, not both/);
  await assert.rejects(q.push("x", { delay: 1.5 }), /delay must be an integer/);
  await assert.rejects(q.push("x", { replace: true }), /replace applies to a dedupe key/);
  await assert.rejects(q.push("x", { after: [] }), /after needs at least one parent/);
  await assert.rejects(q.pushMany(["a", "b"], { keys: ["k"] }), /keys must hold one per payload: 1 keys for 2 payloads/);
  await assert.rejects(q.pushMany(["a"], { group: "g", groups: ["g"] }), /not both/);
  await assert.rejects(q.pushMany(["a", null]), /not null/);
  await assert.rejects(q.cancel(), /at least one job id/);
  assert.throws(() => new Queue(daemonUrl(), ""), /needs a name/);
  assert.equal((await q.info()).pushed, 0);
});

test("the daemon's error replies are LeaseqErrors with its code", async () => {
  const q = fresh();
  await q.client.call("QCREATE", q.name, "MAXLEN", 1);
  await q.push("one");
  await assert.rejects(q.push("two"), (e) => e instanceof LeaseqError && e.code === "FULL");
  await assert.rejects(q.push("x", { maxDeliveries: -1 }),
    (e) => e instanceof LeaseqError && e.code === "ERR" && /MAXDELIVERIES must be between/.test(e.message));
  const other = fresh(`${q.name}-never-made`);
  await assert.rejects(other.info(), (e) => e.code === "NOQUEUE" && e.message === `no such queue '${other.name}'`);
});

test("get answers null for a job the queue does not know", async () => {
  const q = fresh();
  await q.push("x");
  assert.equal(await q.get(999_999), null);
});

test("result: null while running, waits with blockMs, then the value", async () => {
  const q = fresh();
  const id = await q.push("x");
  assert.equal(await q.result(id), null);
  const [job] = await q.claim("me");
  const waiting = q.result(id, { blockMs: 10_000 });
  await q.ack(job, { total: 3 });
  assert.equal((await waiting).toString(), '{"total":3}');
});

test("result of a cancelled job throws DEAD; of an unknown one NOJOB", async () => {
  const q = fresh();
  const id = await q.push("x");
  const later = await q.push("y", { delay: 60_000 });
  assert.equal(await q.cancel(id, later, 424242), 2);
  await assert.rejects(q.result(id), (e) => e.code === "DEAD" && e.message === "cancelled");
  await assert.rejects(q.result(424242), (e) => e.code === "NOJOB");
  assert.equal((await q.get(later)).state, "cancelled");
});

test("claim leases jobs with their fields; ack, nack and extend use the token", async () => {
  const q = fresh();
  await q.pushMany(["a", "b"]);
  const jobs = await q.claim("me", { count: 5, leaseMs: 5_000 });
  assert.deepEqual(jobs.map((j) => j.text()), ["a", "b"]);
  const [a, b] = jobs;
  assert.equal(a.deliveries, 1);
  assert.equal(typeof a.lease, "string");
  assert.ok(a.deadline > a.enqueuedAt);
  const [da, db] = await q.extendMany(jobs, 20_000);
  assert.ok(da >= a.deadline && db >= b.deadline);
  assert.equal(await q.nack(b, { error: "later", delayMs: 0 }), true);
  assert.equal(await q.nack(b), false);                        // a stale token
  assert.equal(await q.ack(a.lease), true);
  assert.deepEqual(await q.extendMany([a]), [null]);
  const [again] = await q.claim("me", { blockMs: 1_000 });
  assert.equal(again.id, b.id);
  assert.equal(again.lastError, "later");
  assert.equal(again.deliveries, 2);
});
