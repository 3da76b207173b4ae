// What the leaseq package sends and how it reads the answers, with no I/O
// (the Node twin of client/protocol.py): commands are built here from
// JavaScript arguments, and replies (read as Buffers, RESP2 flat arrays
// for job maps) are turned into JavaScript values here.  queue.js and
// worker.js only move them.

import { withTraceContext } from "./tracing.js";

/** Error replies: `code` is the daemon's code word (docs/errors.md). */
export class LeaseqError extends Error {
  constructor(message, code = "ERR") {
    super(message);
    this.name = "LeaseqError";
    this.code = code;
  }
}

const isBytes = (v) => typeof v === "string" || v instanceof Uint8Array;

/** A payload (or a progress value) is a string or a Buffer; anything else
 * has no single encoding, so the caller picks one (JSON.stringify ...). */
export function checkPayload(payload, what = "a payload") {
  if (!isBytes(payload)) {
    const kind = payload === null ? "null" : Array.isArray(payload) ? "array" : typeof payload;
    throw new TypeError(`${what} is a string or a Buffer, not ${kind}; encode it first (JSON.stringify, for example)`);
  }
}

function checkInt(value, name) {
  if (!Number.isInteger(value)) throw new TypeError(`${name} must be an integer, not ${JSON.stringify(value)}`);
  return value;
}

// push option -> [QPUSH token, check]
const PUSH_OPTIONS = {
  priority: "PRIORITY",
  delay: "DELAY",
  at: "AT",
  maxDeliveries: "MAXDELIVERIES",
  expire: "EXPIRE",
  onFail: "ONFAIL",
};
const PUSH_KNOWN = new Set([...Object.keys(PUSH_OPTIONS), "key", "keyScope", "replace", "group", "after", "meta"]);

function pushOptions(options, keyed) {
  for (const name of Object.keys(options)) {
    if (!PUSH_KNOWN.has(name) && name !== "keys" && name !== "groups") {
      throw new TypeError(`unknown push option ${JSON.stringify(name)}: one of ${[...PUSH_KNOWN].join(", ")}`);
    }
  }
  if (options.delay !== undefined && options.at !== undefined) throw new TypeError("give delay or at, not both");
  if (options.keyScope !== undefined && !keyed) throw new TypeError("keyScope applies to a dedupe key: give key too");
  if (options.replace && !keyed) throw new TypeError("replace applies to a dedupe key: give key too");
  if (options.onFail !== undefined && options.after === undefined) throw new TypeError("onFail applies to parents: give after too");
  const args = [];
  if (options.keyScope !== undefined) args.push("WHILE", options.keyScope);
  for (const [name, token] of Object.entries(PUSH_OPTIONS)) {
    const value = options[name];
    if (value === undefined || value === null) continue;
    args.push(token, name === "onFail" ? String(value) : checkInt(value, name));
  }
  if (options.replace) args.push("REPLACE");
  if (options.after !== undefined) {
    const parents = [...options.after].map(parent);
    if (!parents.length) throw new TypeError("after needs at least one parent");
    args.push("AFTER", parents.length, ...parents.flat());
  }
  return args;
}

/** `META field value ...` for a `meta` object (or Map) of names to strings or Buffers, last among
 * the options as the daemon wants it, with the active trace context added (tracing.js: a push made
 * inside a span carries it; a field the caller gives wins); nothing for undefined, null or an empty
 * one outside a span.  The daemon checks the limits (32 fields, names of 1 to 64 bytes, 8 KiB in all)
 * and names what is wrong. */
export function metaArgs(meta) {
  meta = withTraceContext(meta);
  if (meta === undefined || meta === null) return [];
  if (typeof meta !== "object" || Array.isArray(meta) || isBytes(meta)) {
    throw new TypeError("meta is an object of field names to values (strings or Buffers)");
  }
  const entries = meta instanceof Map ? [...meta] : Object.entries(meta);
  const args = [];
  for (const [name, value] of entries) {
    if (!isBytes(name) || !isBytes(value)) {
      throw new TypeError(`meta's names and values are strings or Buffers: ${String(name)} is ${value === null ? "null" : typeof value}`);
    }
    args.push(name, value);
  }
  return args.length ? ["META", ...args] : [];
}

/** A parent for AFTER: a Job, or a [queue, id] pair. */
function parent(p) {
  if (p instanceof Job) return [p.queue, p.id];
  if (Array.isArray(p) && p.length === 2) return [String(p[0]), checkInt(p[1], "a parent's id")];
  throw new TypeError("a parent in after is a Job or a [queue, id] pair");
}

/** QPUSH's arguments. */
export function pushCommand(queue, payload, options = {}) {
  checkPayload(payload);
  const args = ["QPUSH", queue, payload];
  if (options.key !== undefined) args.push("KEY", options.key);
  args.push(...pushOptions(options, options.key !== undefined));
  if (options.group !== undefined) args.push("GROUP", options.group);
  args.push(...metaArgs(options.meta));
  return args;
}

/** QPUSHMANY's arguments: `keys` and `groups` hold one per payload; the
 * other options apply to every job. */
export function pushManyCommand(queue, payloads, options = {}) {
  payloads.forEach((p) => checkPayload(p));
  if (options.key !== undefined) throw new TypeError("pushMany takes keys (one per payload), not key");
  const args = ["QPUSHMANY", queue, payloads.length, ...payloads];
  if (options.keys !== undefined) args.push("KEYS", ...oneEach(options.keys, payloads, "keys"));
  args.push(...pushOptions(options, options.keys !== undefined));
  if (options.group !== undefined && options.groups !== undefined) {
    throw new TypeError("give group (for every job) or groups (one per payload), not both");
  }
  if (options.group !== undefined) args.push("GROUP", options.group);
  else if (options.groups !== undefined) args.push("GROUPS", ...oneEach(options.groups, payloads, "groups"));
  args.push(...metaArgs(options.meta));
  return args;
}

function oneEach(values, payloads, name) {
  if (values.length !== payloads.length) {
    throw new TypeError(`${name} must hold one per payload: ${values.length} ${name} for ${payloads.length} payloads`);
  }
  return values;
}

/** QCLAIM's arguments. */
/** QCLAIM's arguments; `compact` asks for each job as an array of values (parseJobs reads either). */
export function claimCommand(queue, consumer, { count = 1, leaseMs, blockMs, compact = false } = {}) {
  const args = ["QCLAIM", queue, consumer, "COUNT", count];
  if (leaseMs !== undefined) args.push("LEASE", leaseMs);
  if (blockMs !== undefined) args.push("BLOCK", blockMs);
  if (compact) args.push("COMPACT");
  return args;
}

export const tokenOf = (job) => (job instanceof Job ? job.lease : String(job));

/** A handler's return value as an ack's RESULT: strings and Buffers as
 * they are, anything else as JSON; undefined: no result.  TypeError for a
 * value JSON cannot hold (a function, a BigInt, a cycle). */
export function resultValue(value) {
  if (value === undefined || isBytes(value)) return value;
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`a result of type ${typeof value} cannot be sent as JSON`);
  return text;
}

export function ackCommand(queue, job, result) {
  const args = ["QACK", queue, tokenOf(job)];
  const value = resultValue(result);
  if (value !== undefined) args.push("RESULT", value);
  return args;
}

export function nackCommand(queue, job, { error, delayMs, dead = false } = {}) {
  const args = ["QNACK", queue, tokenOf(job)];
  if (delayMs !== undefined) args.push("DELAY", delayMs);
  if (error !== undefined) args.push("ERROR", error);
  if (dead) args.push("DEAD");
  return args;
}

export function extendCommand(queue, jobs, leaseMs) {
  const args = ["QEXTEND", queue, ...jobs.map(tokenOf)];
  if (leaseMs !== undefined) args.push("LEASE", leaseMs);
  return args;
}

export function resultCommand(queue, id, { blockMs } = {}) {
  const args = ["QRESULT", queue, checkInt(id, "a job id")];
  if (blockMs !== undefined) args.push("BLOCK", blockMs);
  return args;
}

// a nack's ERROR text is stored with the job: a whole response body as a message would bloat it
export const MAX_ERROR_CHARS = 4000;

/** A nack's ERROR text: "<name>: <message>", as Node prints an error's first line. */
export function failureText(error) {
  let text;
  if (error instanceof Error || (error && typeof error === "object" && "message" in error)) {
    const name = error.name || error.constructor?.name || "Error";
    text = error.message ? `${name}: ${error.message}` : name;
  } else {
    text = `ThrownValue: ${String(error)}`;            // `throw "x"`: not an Error, so no name of its own
  }
  return text.length <= MAX_ERROR_CHARS ? text : text.slice(0, MAX_ERROR_CHARS - 3) + "...";
}

// -- replies --------------------------------------------------------------------------------------

const text = (v) => (v === null || v === undefined ? v : Buffer.isBuffer(v) ? v.toString("utf8") : String(v));
const int = (v) => (v === null || v === undefined ? v : Number(Buffer.isBuffer(v) ? v.toString() : v));
const bytes = (v) => (v === null || v === undefined ? v : Buffer.isBuffer(v) ? v : Buffer.from(String(v)));

/** A map reply (RESP2's flat [field, value, ...], or a RESP3 map as an
 * object or Map) as a Map with string keys. */
export function asMap(reply) {
  if (reply instanceof Map) return new Map([...reply].map(([k, v]) => [text(k), v]));
  if (Array.isArray(reply)) {
    const out = new Map();
    for (let i = 0; i + 1 < reply.length; i += 2) out.set(text(reply[i]), reply[i + 1]);
    return out;
  }
  return new Map(Object.entries(reply));
}

// claim field -> [Job property, conversion]
const JOB_FIELDS = {
  id: ["id", int], payload: ["payload", bytes], lease: ["lease", text], deadline: ["deadline", int],
  deliveries: ["deliveries", int], priority: ["priority", int], enqueued_at: ["enqueuedAt", int],
  key: ["key", bytes], last_error: ["lastError", text], group: ["group", bytes], schedule: ["schedule", text],
  tick: ["tick", int], dead_letter_from: ["deadLetterFrom", text], dead_letter_src_id: ["deadLetterSrcId", int],
  dead_letter_deliveries: ["deadLetterDeliveries", int], dead_letter_reason: ["deadLetterReason", text],
  dead_letter_parent: ["deadLetterParent", (pair) => [text(pair[0]), int(pair[1])]],
  meta: ["meta", (m) => parseMeta(m)],
};

/** A job's `meta` (RESP2's flat list, or a RESP3 map) as an object of strings. */
export function parseMeta(reply) {
  return Object.fromEntries([...asMap(reply)].map(([name, value]) => [name, text(value)]));
}

/** One claimed job.  `payload`, `key` and `group` are Buffers as pushed;
 * `lease` is the token that acks, nacks and extends it, `deadline` when
 * the lease runs out (ms since the epoch, the daemon's clock); `meta` its
 * META as an object of strings (null: none).  Fields a newer daemon may
 * add are kept in `extra`. */
export class Job {
  constructor(queue, fields) {
    this.queue = queue;
    this.key = null;
    this.lastError = null;
    this.group = null;
    this.meta = null;
    this.extra = {};
    for (const [name, value] of fields) this._set(name, value);
  }

  /** A job of QCLAIM ... COMPACT: [id, payload, lease, deadline, deliveries, priority, enqueued_at],
   * then a map of its other fields when it has any (docs/semantics.md §2.1). */
  static fromCompact(queue, item) {
    const job = new Job(queue, []);
    job.id = int(item[0]);
    job.payload = bytes(item[1]);
    job.lease = text(item[2]);
    job.deadline = int(item[3]);
    job.deliveries = int(item[4]);
    job.priority = int(item[5]);
    job.enqueuedAt = int(item[6]);
    if (item.length > 7) for (const [name, value] of asMap(item[7])) job._set(name, value);
    return job;
  }

  _set(name, value) {
    const known = JOB_FIELDS[name];
    if (known) this[known[0]] = value === null ? null : known[1](value);
    else this.extra[name] = value;
  }

  /** The payload as UTF-8 text. */
  text() {
    return this.payload.toString("utf8");
  }

  /** The payload parsed as JSON. */
  json() {
    return JSON.parse(this.text());
  }

  /** QPROGRESS: report this job's progress (a string or Buffer; anything else as JSON), shown by
   * QGET; false when its lease is lost.  Only for a job claimed through a Queue. */
  progress(value) {
    if (!this._owner) throw new Error("progress needs a job claimed through a Queue");
    return this._owner.progress(this, value);
  }
}

/** QCLAIM's reply: a list of job maps, or with `compact` of job arrays (empty when nothing was claimed). */
export function parseJobs(queue, reply, owner, compact = false) {
  return (reply || []).map((item) => {
    const job = compact ? Job.fromCompact(queue, item) : new Job(queue, asMap(item));
    if (owner) Object.defineProperty(job, "_owner", { value: owner, enumerable: false });
    return job;
  });
}

// QGET's fields that are bytes as pushed or reported; its other bulk strings are text
const INFO_BYTES = new Set(["payload", "key", "group", "result", "progress"]);

/** QGET's reply as a plain object with the daemon's field names: numbers
 * as numbers, payload, key, group, result and progress as Buffers, meta
 * as an object of strings, other texts as strings; null for a job the
 * queue does not know. */
export function parseJobInfo(reply) {
  if (reply === null || reply === undefined) return null;
  const out = {};
  for (const [name, value] of asMap(reply)) {
    if (name === "meta" && value !== null) out[name] = parseMeta(value);
    else if (value === null || typeof value === "number") out[name] = value;
    else if (Array.isArray(value)) out[name] = value.map((v) => (Buffer.isBuffer(v) ? text(v) : v));
    else if (INFO_BYTES.has(name)) out[name] = bytes(value);
    else out[name] = text(value);
  }
  return out;
}

/** QINFO's reply as an object (numbers stay numbers, texts become strings). */
export function parseInfo(reply) {
  const out = {};
  for (const [name, value] of asMap(reply)) out[name] = Buffer.isBuffer(value) ? text(value) : value;
  return out;
}

/** A burst run is over when nothing is ready, delayed or in flight
 * (in flight elsewhere may come back: a nack, a lease that runs out). */
export function queueIsDrained(info) {
  return Number(info.ready) + Number(info.delayed) + Number(info.in_flight) === 0;
}

/** An ioredis ReplyError as a LeaseqError with the daemon's code word;
 * other errors (the connection) as they are. */
export function fromReplyError(error) {
  if (!error || error.name !== "ReplyError") return error;
  const message = String(error.message);
  const space = message.indexOf(" ");
  const code = space > 0 && /^[A-Z][A-Z_-]*$/.test(message.slice(0, space)) ? message.slice(0, space) : "ERR";
  const e = new LeaseqError(code === "ERR" && !message.startsWith("ERR ") ? message : message.slice(space + 1), code);
  e.cause = error;
  return e;
}

// error codes a worker waits out: recovery after a restart, a disk that refuses the log for now,
// a node that has become a replica (until the client is pointed at the new primary)
const PASSING_CODES = new Set(["LOADING", "MISCONF", "READONLY", "TRYAGAIN"]);

/** A fault a worker waits out and retries: the connection (a restart of
 * the daemon), LOADING, MISCONF.  Other error replies (a bad password, a
 * bad option) do not pass by themselves. */
export function isPassing(error) {
  if (error instanceof LeaseqError) return PASSING_CODES.has(error.code);
  return error instanceof Error && !(error instanceof TypeError) && !(error instanceof RangeError);
}

/** Leases are extended every third of the lease (two beats may fail before
 * one runs out), or every `heartbeatMs` when that is shorter. */
export function heartbeatMs(leaseMs, heartbeatMs) {
  const third = Math.floor(leaseMs / 3);
  return heartbeatMs === undefined ? third : Math.min(third, heartbeatMs);
}

// -- where a Queue connects ------------------------------------------------------------------

const SENTINEL_PORT = 26379;

/** ioredis's options for a `sentinel://[[user]:password@]host[:port][,host[:port]...]/service[?option=value...]`
 * URL (the form leaseq.client takes too): the sentinels, the service they monitor (ioredis's `name`),
 * the leaseq nodes' user and password, and the sentinels' own (`sentinelUsername`, `sentinelPassword`
 * options).  A connection answered -READONLY (a node that was the primary and is now a replica) is
 * dropped and made again, which asks the sentinels for the primary anew.  Throws a TypeError saying
 * what is wrong with a bad URL. */
export function sentinelOptions(url) {
  let parsed;
  const hostsAt = url.indexOf("://") + 3;
  const slash = url.indexOf("/", hostsAt);
  const authority = url.slice(hostsAt, slash < 0 ? undefined : slash);
  const at = authority.lastIndexOf("@");
  const hosts = authority.slice(at + 1);
  try {
    // (URL cannot read a comma-separated host list: read the rest with a stand-in host)
    parsed = new URL(`redis://${at >= 0 ? authority.slice(0, at + 1) : ""}localhost${slash < 0 ? "" : url.slice(slash)}`);
  } catch {
    throw new TypeError(`not a sentinel:// URL: ${url}`);
  }
  if (!url.startsWith("sentinel://")) throw new TypeError(`not a sentinel:// URL: ${url}`);
  const service = decodeURIComponent(parsed.pathname.replace(/^\//, ""));
  if (!service || service.includes("/")) {
    throw new TypeError(`a sentinel:// URL names one service after the hosts (sentinel://host:26379/mymaster): ${url}`);
  }
  const sentinels = hosts.split(",").map((text) => sentinelAddress(text.trim(), url));
  const options = { sentinels, name: service, reconnectOnError: (e) => (e.message.startsWith("READONLY") ? 2 : false) };
  if (parsed.username) options.username = decodeURIComponent(parsed.username);
  if (parsed.password) options.password = decodeURIComponent(parsed.password);
  for (const [key, value] of parsed.searchParams) {
    if (key === "sentinelPassword" || key === "sentinel_password") options.sentinelPassword = value;
    else if (key === "sentinelUsername" || key === "sentinel_username") options.sentinelUsername = value;
    else throw new TypeError(`unknown option ${key} in ${url} (give ioredis options as the Queue's third argument)`);
  }
  return options;
}

function sentinelAddress(text, url) {
  let host = text;
  let port = "";
  if (text.startsWith("[")) {
    const end = text.indexOf("]");
    host = text.slice(1, end);
    port = text.slice(end + 1).replace(/^:/, "");
  } else if (text.includes(":")) {
    [host, port] = text.split(":");
  }
  if (!host) throw new TypeError(`a sentinel:// URL lists host[:port] of each sentinel, comma-separated: ${url}`);
  if (!port) return { host, port: SENTINEL_PORT };
  const number = Number(port);
  if (!/^\d+$/.test(port) || number < 1 || number > 65535) throw new TypeError(`not a port number: ${port} in ${url}`);
  return { host, port: number };
}
