// Queue: one leaseq queue over ioredis.  Ordinary commands (pushes, acks,
// nacks, extends) share one connection, which ioredis pipelines; a command
// that may block (a claim with blockMs, QRESULT with blockMs) borrows a
// connection of its own, so it never holds the others back.

import Redis from "ioredis";

import * as protocol from "./protocol.js";

export class Queue {
  /**
   * @param {string|null} url  redis://[:password@]host:port (rediss:// for TLS), or
   *   sentinel://host:26379,host2:26379/service for the primary Redis Sentinel names (docs/node.md),
   *   or null with ioredis's own `sentinels` and `name` in options
   * @param {string} name the queue
   * @param {object} [options] ioredis options (password, tls, retryStrategy, sentinels, ...)
   */
  constructor(url, name, options = {}) {
    if (typeof name !== "string" || !name) throw new TypeError("a queue needs a name (a non-empty string)");
    this.name = name;
    const viaSentinels = typeof url === "string" && url.startsWith("sentinel://");
    this._url = viaSentinels ? null : url;
    this._options = viaSentinels ? { ...protocol.sentinelOptions(url), ...options } : { ...options };
    this.client = this._connect();
    this._idle = [];          // blocking connections not in use
    this._busy = new Set();
    this._closed = false;
  }

  _connect() {
    const client = this._url == null ? new Redis(this._options) : new Redis(this._url, this._options);
    // ioredis reports a lost connection as an 'error' event before it reconnects; the commands
    // that fail because of it reject on their own, so the event itself needs no more than a record
    client.on("error", (e) => { this.lastConnectionError = e; });
    return client;
  }

  // -- producing ---------------------------------------------------------------------------

  /** Push one job; its id.  Options: priority, delay (ms) or at (ms epoch), key (with keyScope,
   * replace), maxDeliveries, expire (ms), group, after (parents: Jobs or [queue, id]), onFail, meta
   * (with the current trace context added when @opentelemetry/api is there: src/tracing.js). */
  async push(payload, options = {}) {
    return this._call(protocol.pushCommand(this.name, payload, options));
  }

  /** Push several jobs at once, all or none; their ids in order.  keys and groups: one per payload. */
  async pushMany(payloads, options = {}) {
    payloads = [...payloads];
    if (!payloads.length) return [];
    return this._call(protocol.pushManyCommand(this.name, payloads, options));
  }

  // -- consuming ---------------------------------------------------------------------------

  /** Lease up to `count` jobs to `consumer`; with blockMs, wait that long when none is ready.  The
   * jobs travel in QCLAIM's compact form (docs/semantics.md §2.1). */
  async claim(consumer, { count = 1, leaseMs, blockMs } = {}) {
    const command = protocol.claimCommand(this.name, consumer, { count, leaseMs, blockMs, compact: true });
    const reply = blockMs === undefined ? await this._call(command) : await this._blocking(command);
    return protocol.parseJobs(this.name, reply, this, true);
  }

  /** Complete a job (a Job or its lease token), with `result` kept as its result; false: the token is stale. */
  async ack(job, result) {
    return (await this._call(protocol.ackCommand(this.name, job, result))) === 1;
  }

  /** Release a job: ready again after delayMs (else the queue's BACKOFF), `error` kept as its
   * last_error; with dead, dead-lettered now.  false: the token is stale. */
  async nack(job, { error, delayMs, dead } = {}) {
    return (await this._call(protocol.nackCommand(this.name, job, { error, delayMs, dead }))) === 1;
  }

  /** QEXTEND of many leases in one command: per job its new deadline, or null when its lease is lost. */
  async extendMany(jobs, leaseMs) {
    if (!jobs.length) return [];
    return this._call(protocol.extendCommand(this.name, jobs, leaseMs));
  }

  /** QPROGRESS: a held job's latest progress (a string or Buffer; anything else as JSON). */
  async progress(job, value) {
    const sent = protocol.resultValue(value);
    if (sent === undefined) throw new TypeError("a progress value is needed");
    return (await this._call(["QPROGRESS", this.name, protocol.tokenOf(job), sent])) === 1;
  }

  // -- looking and ending ------------------------------------------------------------------

  /** QGET: the job's fields (state, payload, deliveries, ...), or null when the queue does not know it. */
  async get(id) {
    return protocol.parseJobInfo(await this._call(["QGET", this.name, id]));
  }

  /** QRESULT: the job's result (a Buffer), or null while it has not ended; blockMs waits for its end
   * (0: for ever).  Throws LeaseqError code DEAD (its message the reason) when it died or was
   * cancelled, NOJOB when unknown, expired or acked without a result. */
  async result(id, { blockMs } = {}) {
    const command = protocol.resultCommand(this.name, id, { blockMs });
    return blockMs === undefined ? this._call(command) : this._blocking(command);
  }

  /** QCANCEL: end these jobs now; how many were.  A worker holding one aborts its handler's signal. */
  async cancel(...ids) {
    if (!ids.length) throw new TypeError("cancel needs at least one job id");
    return this._call(["QCANCEL", this.name, ...ids]);
  }

  /** QINFO: the queue's counters and options by name. */
  async info() {
    return protocol.parseInfo(await this._call(["QINFO", this.name]));
  }

  /** Close every connection. */
  async close() {
    this._closed = true;
    const all = [this.client, ...this._idle, ...this._busy];
    this._idle = [];
    this._busy.clear();
    await Promise.all(all.map((c) => c.quit().catch(() => c.disconnect())));
  }

  // -- connections -------------------------------------------------------------------------

  async _call(command, client = this.client) {
    try {
      return await client.callBuffer(...command);
    } catch (e) {
      throw protocol.fromReplyError(e);
    }
  }

  /** A command that may wait, on a connection of its own for the time it takes. */
  async _blocking(command) {
    if (this._closed) throw new Error("Connection is closed.");
    const client = this._idle.pop() || this._connect();
    this._busy.add(client);
    try {
      return await this._call(command, client);
    } finally {
      this._busy.delete(client);
      if (this._closed) client.disconnect();
      else this._idle.push(client);
    }
  }
}
