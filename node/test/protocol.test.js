// The core without I/O (src/protocol.js): commands built, replies read,
// errors named; no daemon needed.

import assert from "node:assert/strict";
import { test } from "node:test";

import * as protocol from "../src/protocol.js";

test("a push's options become the daemon's tokens", () => {
  assert.deepEqual(protocol.pushCommand("q", "x", { key: "k", keyScope: "active", replace: true, priority: 9,
    delay: 50, maxDeliveries: 3, expire: 1000, group: "g", after: [["p", 1], ["p", 2]], onFail: "run" }),
  ["QPUSH", "q", "x", "KEY", "k", "WHILE", "active", "PRIORITY", 9, "DELAY", 50, "MAXDELIVERIES", 3,
    "EXPIRE", 1000, "ONFAIL", "run", "REPLACE", "AFTER", 2, "p", 1, "p", 2, "GROUP", "g"]);
  assert.deepEqual(protocol.pushManyCommand("q", ["a", "b"], { keys: ["k1", "k2"], groups: ["g1", "g2"], at: 7 }),
    ["QPUSHMANY", "q", 2, "a", "b", "KEYS", "k1", "k2", "AT", 7, "GROUPS", "g1", "g2"]);
  assert.throws(() => protocol.pushManyCommand("q", ["a"], { key: "k" }), /takes keys/);
  assert.throws(() => protocol.pushCommand("q", "x", { onFail: "run" }), /give after too/);
  assert.throws(() => protocol.pushCommand("q", "x", { after: [{ id: 1 }] }), /a Job or a \[queue, id\] pair/);
  assert.throws(() => protocol.pushCommand("q", "x", { keyScope: "queued" }), /give key too/);
});

test("meta is sent last as field value pairs, and read back as an object of strings", () => {
  const b = (t) => Buffer.from(t);
  assert.deepEqual(protocol.pushCommand("q", "x", { meta: { tenant: "acme", raw: b("r") }, group: "g", priority: 3 }),
    ["QPUSH", "q", "x", "PRIORITY", 3, "GROUP", "g", "META", "tenant", "acme", "raw", b("r")]);
  assert.deepEqual(protocol.pushManyCommand("q", ["a", "b"], { meta: new Map([["k", "v"]]) }),
    ["QPUSHMANY", "q", 2, "a", "b", "META", "k", "v"]);
  assert.deepEqual(protocol.pushCommand("q", "x", { meta: {} }), ["QPUSH", "q", "x"]);
  assert.throws(() => protocol.pushCommand("q", "x", { meta: [["a", "b"]] }), /meta is an object of field names/);
  assert.throws(() => protocol.pushCommand("q", "x", { meta: { n: 1 } }), /strings or Buffers: n is number/);
  const first = [7, b("hi"), b("7.1.2"), 100, 2, 5, 50];
  const flatMeta = [b("tenant"), b("acme"), b("raw"), Buffer.from([0xff])];
  const [compact] = protocol.parseJobs("q", [[...first, [b("meta"), flatMeta]]], undefined, true);
  const [resp3] = protocol.parseJobs("q", [[...first, new Map([[b("meta"), new Map([[b("tenant"), b("acme")]])]])]],
    undefined, true);
  assert.deepEqual(compact.meta, { tenant: "acme", raw: "\ufffd" });
  assert.deepEqual(resp3.meta, { tenant: "acme" });
  assert.deepEqual(compact.extra, {});
  assert.equal(protocol.parseJobs("q", [first], undefined, true)[0].meta, null);
  assert.deepEqual(protocol.parseJobInfo([b("id"), 7, b("meta"), flatMeta]).meta, { tenant: "acme", raw: "\ufffd" });
});

test("results: text and bytes as they are, the rest as JSON, undefined as none", () => {
  assert.equal(protocol.resultValue("text"), "text");
  const bytes = Buffer.from([0, 1]);
  assert.equal(protocol.resultValue(bytes), bytes);
  assert.equal(protocol.resultValue({ a: [1, "b"] }), '{"a":[1,"b"]}');
  assert.equal(protocol.resultValue(null), "null");
  assert.equal(protocol.resultValue(undefined), undefined);
  assert.throws(() => protocol.resultValue(() => 1), /of type function cannot be sent as JSON/);
  assert.throws(() => protocol.resultValue(1n), TypeError);
  assert.deepEqual(protocol.ackCommand("q", "1.1.1", 5), ["QACK", "q", "1.1.1", "RESULT", "5"]);
  assert.deepEqual(protocol.ackCommand("q", "1.1.1"), ["QACK", "q", "1.1.1"]);
});

test("a failure's text is '<name>: <message>', bounded", () => {
  assert.equal(protocol.failureText(new RangeError("bad")), "RangeError: bad");
  assert.equal(protocol.failureText(Object.assign(new Error("x"), { name: "Custom" })), "Custom: x");
  assert.equal(protocol.failureText(new Error("")), "Error");
  assert.equal(protocol.failureText("s"), "ThrownValue: s");
  assert.equal(protocol.failureText(undefined), "ThrownValue: undefined");
  const long = protocol.failureText(new Error("x".repeat(10_000)));
  assert.equal(long.length, protocol.MAX_ERROR_CHARS);
  assert.ok(long.endsWith("..."));
});

test("a claimed job is read from RESP2's flat list, unknown fields kept aside", () => {
  const reply = [[Buffer.from("id"), 7, Buffer.from("payload"), Buffer.from("hi"), Buffer.from("lease"),
    Buffer.from("7.1.2"), Buffer.from("deadline"), 100, Buffer.from("deliveries"), 2, Buffer.from("priority"), 5,
    Buffer.from("enqueued_at"), 50, Buffer.from("last_error"), Buffer.from("Error: x"),
    Buffer.from("dead_letter_parent"), [Buffer.from("p"), 3], Buffer.from("new_field"), 1]];
  const [job] = protocol.parseJobs("q", reply);
  assert.equal(job.id, 7);
  assert.equal(job.text(), "hi");
  assert.equal(job.lease, "7.1.2");
  assert.equal(job.lastError, "Error: x");
  assert.deepEqual(job.deadLetterParent, ["p", 3]);
  assert.deepEqual(job.extra, { new_field: 1 });
  assert.equal(job.key, null);
  assert.throws(() => job.progress("x"), /claimed through a Queue/);
  assert.deepEqual(protocol.parseJobs("q", []), []);
});

test("a compact job (QCLAIM ... COMPACT) reads as the same job as its map", () => {
  const b = (t) => Buffer.from(t);
  const first = [7, b("hi"), b("7.1.2"), 100, 2, 5, 50];
  const rest = [b("key"), b("k"), b("last_error"), b("Error: x"), b("new_field"), 1];
  const full = protocol.parseJobs("q", [[b("id"), 7, b("payload"), b("hi"), b("lease"), b("7.1.2"), b("deadline"), 100,
    b("deliveries"), 2, b("priority"), 5, b("enqueued_at"), 50, ...rest]])[0];
  const [compact] = protocol.parseJobs("q", [[...first, rest]], undefined, true);
  assert.deepEqual(compact, full);
  assert.deepEqual(compact.key, b("k"));
  const [plain] = protocol.parseJobs("q", [first], undefined, true);
  assert.deepEqual([plain.id, plain.lease, plain.deliveries, plain.enqueuedAt, plain.lastError], [7, "7.1.2", 2, 50, null]);
  assert.deepEqual(protocol.claimCommand("q", "w", { count: 3, compact: true }), ["QCLAIM", "q", "w", "COUNT", 3, "COMPACT"]);
});

test("error replies get their code; passing faults are told apart", () => {
  const reply = (message) => Object.assign(new Error(message), { name: "ReplyError" });
  const full = protocol.fromReplyError(reply("FULL queue 'q' holds 1 jobs"));
  assert.ok(full instanceof protocol.LeaseqError);
  assert.deepEqual([full.code, full.message], ["FULL", "queue 'q' holds 1 jobs"]);
  assert.deepEqual([protocol.fromReplyError(reply("ERR syntax error")).code,
    protocol.fromReplyError(reply("ERR syntax error")).message], ["ERR", "syntax error"]);
  assert.equal(protocol.fromReplyError(reply("odd reply")).message, "odd reply");
  const lost = new Error("Connection is closed.");
  assert.equal(protocol.fromReplyError(lost), lost);
  assert.ok(protocol.isPassing(lost));
  assert.ok(protocol.isPassing(protocol.fromReplyError(reply("LOADING leaseq is loading the dataset in memory"))));
  assert.ok(protocol.isPassing(protocol.fromReplyError(reply("MISCONF the disk refuses the log"))));
  assert.ok(!protocol.isPassing(protocol.fromReplyError(reply("WRONGPASS invalid username-password pair"))));
  assert.ok(!protocol.isPassing(new TypeError("a bug")));
});

test("the heartbeat beats every third of the lease, or more often", () => {
  assert.equal(protocol.heartbeatMs(30_000), 10_000);
  assert.equal(protocol.heartbeatMs(30_000, 500), 500);
  assert.equal(protocol.heartbeatMs(300, 500), 100);
  assert.equal(protocol.queueIsDrained({ ready: 0, delayed: 0, in_flight: 0 }), true);
  assert.equal(protocol.queueIsDrained({ ready: 0, delayed: 1, in_flight: 0 }), false);
});

test("a sentinel:// URL becomes ioredis's sentinels, service and passwords", () => {
  const options = protocol.sentinelOptions("sentinel://app:s%40cret@s1:1234,s2,[::1]:26380/jobs?sentinelPassword=sp");
  assert.deepEqual(options.sentinels, [{ host: "s1", port: 1234 }, { host: "s2", port: 26379 }, { host: "::1", port: 26380 }]);
  assert.equal(options.name, "jobs");
  assert.equal(options.username, "app");
  assert.equal(options.password, "s@cret");
  assert.equal(options.sentinelPassword, "sp");
  assert.equal(options.reconnectOnError(new Error("READONLY You can't write against a read only replica.")), 2);
  assert.equal(options.reconnectOnError(new Error("ERR other")), false);
  for (const [url, says] of [["sentinel://s1:26379", /names one service/], ["sentinel://s1/a/b", /names one service/],
    ["sentinel://s1:port/jobs", /not a port number: port/], ["sentinel://s1:70000/jobs", /not a port number: 70000/],
    ["sentinel://s1,,s2/jobs", /host\[:port\] of each sentinel/], ["redis://s1/jobs", /not a sentinel:\/\/ URL/],
    ["sentinel://s1/jobs?db=2", /unknown option db/]]) {
    assert.throws(() => protocol.sentinelOptions(url), says, url);
  }
});
