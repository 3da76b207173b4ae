// Worker: runs a handler on leaseq jobs, up to `concurrency` at a time,
// with the guarantees of the Python Worker (client/worker.py):
//
// - the claim loop never claims more than the free handler slots;
// - one heartbeat timer extends every held lease in one QEXTEND a beat, and
//   a beat that finds a lease gone asks QGET whether the job was cancelled
//   (QCANCEL): then the handler's AbortSignal is aborted;
// - a handler that returns gets its job acked, what it returned (unless
//   undefined) kept as the result; one that throws gets it nacked with
//   "<name>: <message>" as the job's last_error;
// - close() stops claiming and waits for the held jobs; those still running
//   after closeTimeoutMs are aborted and nacked (ready again at once), so
//   another worker takes them without waiting for their leases to run out;
// - faults that pass (a lost connection, a daemon restarting: LOADING,
//   MISCONF) are waited out with a backoff, ioredis reconnecting meanwhile.

import { EventEmitter } from "node:events";
import os from "node:os";

import * as protocol from "./protocol.js";
import { JobSpans } from "./tracing.js";

/** The reason a handler's signal is aborted when its job is cancelled (QCANCEL). */
export class JobCancelled extends Error {
  constructor(job) {
    super(`job ${job.id} of ${job.queue} was cancelled`);
    this.name = "JobCancelled";
  }
}

/** The reason a handler's signal is aborted when close() gives up waiting for it. */
export class WorkerClosed extends Error {
  constructor(ms) {
    super(`the worker closed before the handler finished (closeTimeoutMs ${ms})`);
    this.name = "WorkerClosed";
  }
}

// how long a worker waits before claiming again after a fault that passes: doubling, up to the cap
const RETRY_FIRST_MS = 100;
const RETRY_CAP_MS = 5_000;

// what a worker says by default: its warnings (a failed handler, a lost lease, a claim that
// failed) on stderr; its info lines (start, drain, stop) only to a logger given as an option
const WARNINGS = { info() {}, warn: (message) => console.warn(`leaseq: ${message}`) };

const ACKED = "acked", FAILED = "failed", LOST = "lost", ABANDONED = "abandoned";

export class Worker extends EventEmitter {
  /**
   * @param {import("./queue.js").Queue} queue
   * @param {(job, {signal}) => any} handler
   */
  constructor(queue, handler, options = {}) {
    super();
    const {
      concurrency = 1, leaseMs = 30_000, heartbeatMs, blockMs = 1_000, consumer, closeTimeoutMs = 25_000,
      handleSignals = false, logger = WARNINGS, traceParent = "link", tracerProvider,
    } = options;
    if (typeof handler !== "function") throw new TypeError("a Worker needs a handler function");
    checkAtLeast("concurrency", concurrency, 1);
    checkAtLeast("leaseMs", leaseMs, 100);                 // the daemon's shortest lease
    checkAtLeast("blockMs", blockMs, 1);                   // a claim must end: the loop looks for a stop between claims
    if (heartbeatMs !== undefined) checkAtLeast("heartbeatMs", heartbeatMs, 10);
    if (closeTimeoutMs !== Infinity) checkAtLeast("closeTimeoutMs", closeTimeoutMs, 0);
    this.queue = queue;
    this.handler = handler;
    this.concurrency = concurrency;
    this.leaseMs = leaseMs;
    this.heartbeatMs = protocol.heartbeatMs(leaseMs, heartbeatMs);
    this.blockMs = blockMs;
    this.consumer = consumer || `${os.hostname()}:${process.pid}`;
    this.closeTimeoutMs = closeTimeoutMs;
    this.handleSignals = handleSignals;
    this.logger = logger || { info() {}, warn() {} };
    // each job's span, when @opentelemetry/api is there (src/tracing.js)
    this._spans = new JobSpans(queue.name, this.consumer, queue.client, protocol.failureText, { traceParent, tracerProvider });
    this._held = new Map();          // lease token -> {job, controller, lost, abandoned, abandon}
    this._running = new Set();       // the promises of jobs being handled, acked or nacked
    this._wakers = [];
    this._run = null;
  }

  /** How many jobs this worker holds now. */
  get held() {
    return this._held.size;
  }

  /**
   * Work until close(), or with burst until the queue has nothing ready, delayed or in flight.
   * Resolves to {acked, failed, lost, abandoned} once the jobs in flight have ended.
   */
  run({ burst = false } = {}) {
    if (this._run) throw new Error("this worker is running already");
    this._stopping = false;
    this._stopSignal = new Promise((resolve) => { this._resolveStop = resolve; });
    this._stats = { acked: 0, failed: 0, lost: 0, abandoned: 0 };
    this._run = this._work(burst).finally(() => { this._run = null; });
    return this._run;
  }

  /** Stop claiming; resolves once the held jobs have ended (or, after closeTimeoutMs, been
   * aborted and nacked).  Safe to call more than once, and from a signal handler. */
  async close() {
    if (!this._run) return;
    const run = this._run;
    this._stop();
    if (!this._closeTimer && Number.isFinite(this.closeTimeoutMs)) {
      this._closeTimer = setTimeout(() => this._abandonHeld(), this.closeTimeoutMs);
    }
    try {
      await run;
    } catch {
      // run()'s caller sees why it ended
    }
  }

  async _work(burst) {
    const removeSignals = this.handleSignals ? this._onSignals() : () => {};
    const beat = setInterval(() => this._beat(), this.heartbeatMs);
    this.logger.info(`worker ${this.consumer}: working on queue ${this.queue.name}, ${this.concurrency} at a time`);
    let retryMs = RETRY_FIRST_MS;
    try {
      while (!this._stopping) {
        const free = this.concurrency - this._running.size;
        if (free <= 0) {
          await this._nextEvent();
          continue;
        }
        let jobs;
        try {
          jobs = await this._claimUnlessFinished(free, burst, this._running.size === 0);
        } catch (e) {
          if (!protocol.isPassing(e)) throw e;
          this.logger.warn(`worker ${this.consumer}: cannot claim from ${this.queue.name} (${e.message}); retrying in ${retryMs} ms`);
          await this._pause(retryMs);
          retryMs = Math.min(retryMs * 2, RETRY_CAP_MS);
          continue;
        }
        retryMs = RETRY_FIRST_MS;
        if (jobs === null) {
          this.logger.info(`worker ${this.consumer}: queue ${this.queue.name} is drained`);
          break;
        }
        if (!jobs.length && burst && this._running.size) await this._nextEvent(this.blockMs);
        for (const job of jobs) this._start(job);
      }
      if (this._running.size) this.logger.info(`worker ${this.consumer}: stopping after ${this._running.size} jobs in flight`);
      await Promise.all(this._running);
      return { ...this._stats };
    } catch (e) {
      this._stop();
      await Promise.allSettled(this._running);
      throw e;
    } finally {
      clearInterval(beat);
      clearTimeout(this._closeTimer);
      this._closeTimer = null;
      removeSignals();
    }
  }

  /** Claim up to `free` jobs; null when a burst run is over.  A stop while the claim waits ends
   * the wait; jobs that claim brings later are nacked back at once. */
  async _claimUnlessFinished(free, burst, idle) {
    if (burst && idle && protocol.queueIsDrained(await this.queue.info())) return null;
    // a burst run with jobs of its own waits for them, not in a claim (they may nack, or be the last)
    const blockMs = burst && !idle ? undefined : this.blockMs;
    const claim = this.queue.claim(this.consumer, { count: free, leaseMs: this.leaseMs, blockMs });
    const stopped = Symbol("stopped");
    const first = await Promise.race([claim, this._stopped().then(() => stopped)]);
    if (first !== stopped) return first;
    claim.then((jobs) => jobs.forEach((job) => this._release(job)), () => {});
    return [];
  }

  _release(job) {
    this.queue.nack(job, { delayMs: 0 }).catch(() => {});     // else its lease runs out first
  }

  _start(job) {
    const entry = { job, controller: new AbortController(), lost: false, abandoned: false };
    const abandoned = new Promise((resolve) => { entry.abandon = resolve; });
    this._held.set(job.lease, entry);
    const done = this._process(entry, abandoned).then((outcome) => {
      this._stats[outcome] += 1;
      this._running.delete(done);
      this._wake();
    });
    this._running.add(done);
  }

  /** One job, handled and acked or nacked in its span; its outcome. */
  _process(entry, abandoned) {
    return this._spans.process(entry.job, async (span) => span.ended(...await this._handleAndSettle(entry, abandoned)));
  }

  /** [the job's outcome, what its handler threw or null]. */
  async _handleAndSettle(entry, abandoned) {
    const { job, controller } = entry;
    const outcome = await Promise.race([this._callHandler(job, controller.signal), abandoned]);
    const [failure, value] = outcome;
    if (entry.abandoned) return [ABANDONED, failure];       // nacked by close()
    this._held.delete(job.lease);
    if (entry.lost) {
      this.logger.warn(`job ${job.id} of ${job.queue}: lease lost while the handler ran; not acked`);
      this.emit("lost", job);
      return [LOST, failure];
    }
    let landed;
    try {
      landed = failure === null
        ? await this.queue.ack(job, value)
        : await this.queue.nack(job, { error: protocol.failureText(failure) });
    } catch (e) {
      this.logger.warn(`job ${job.id} of ${job.queue}: could not ${failure === null ? "ack" : "nack"} it (${e.message}); its lease will run out`);
      this.emit("lost", job);
      return [LOST, failure];
    }
    if (!landed) {
      this.logger.warn(`job ${job.id} of ${job.queue}: the lease was lost before the ${failure === null ? "ack" : "nack"}`);
      this.emit("lost", job);
      return [LOST, failure];
    }
    if (failure === null) {
      this.emit("completed", job, value);
      return [ACKED, null];
    }
    this.emit("failed", job, failure);
    return [FAILED, failure];
  }

  /** [the error the handler threw, or null; what it returned, as the ack sends it]. */
  async _callHandler(job, signal) {
    try {
      return [null, protocol.resultValue(await this.handler(job, { signal }))];
    } catch (e) {
      if (!signal.aborted) this.logger.warn(`job ${job.id} of ${job.queue} failed: ${protocol.failureText(e)}`);
      return [e, undefined];
    }
  }

  // -- the heartbeat ------------------------------------------------------------------------

  /** Extend every held lease in one QEXTEND; a lease found gone is lost, and its job's signal is
   * aborted when QGET says it was cancelled. */
  async _beat() {
    if (this._beating) return;                  // the last beat has not been answered yet
    this._beating = true;
    try {
      const entries = [...this._held.values()].filter((e) => !e.lost && !e.abandoned);
      if (!entries.length) return;
      let deadlines;
      try {
        deadlines = await this.queue.extendMany(entries.map((e) => e.job), this.leaseMs);
      } catch (e) {
        this.logger.warn(`cannot extend ${entries.length} leases on ${this.queue.name} (${e.message}); trying again next beat`);
        return;
      }
      this.emit("extended", entries.length);
      const lost = entries.filter((e, i) => deadlines[i] === null && this._held.get(e.job.lease) === e);
      for (const e of lost) e.lost = true;
      for (const e of lost) await this._lost(e);
    } finally {
      this._beating = false;
    }
  }

  async _lost(entry) {
    const { job } = entry;
    let state = null;
    try {
      state = (await this.queue.get(job.id))?.state;
    } catch {
      // unknown: counted as lost
    }
    if (state === "cancelled") {
      this.logger.warn(`job ${job.id} of ${job.queue}: cancelled (QCANCEL); its signal is aborted`);
      entry.controller.abort(new JobCancelled(job));
    } else {
      this.logger.warn(`job ${job.id} of ${job.queue}: lease lost (another worker may have it); the handler goes on, but the job will not be acked`);
    }
  }

  // -- stopping -----------------------------------------------------------------------------

  /** close()'s timeout: abort the handlers still running and nack their jobs, ready at once. */
  _abandonHeld() {
    const reason = new WorkerClosed(this.closeTimeoutMs);
    for (const entry of this._held.values()) {
      if (entry.abandoned || entry.lost) continue;
      entry.abandoned = true;
      entry.controller.abort(reason);
      this.logger.warn(`job ${entry.job.id} of ${entry.job.queue}: still running at close; nacked`);
      this.queue.nack(entry.job, { delayMs: 0, error: protocol.failureText(reason) })
        .catch((e) => this.logger.warn(`job ${entry.job.id}: could not nack it (${e.message}); its lease will run out`))
        .finally(() => entry.abandon([reason, undefined]));
    }
    this._held.clear();
  }

  /** SIGTERM and SIGINT close the worker; the first one also removes these listeners, so a
   * second one acts as it would without the worker. */
  _onSignals() {
    const remove = () => {
      process.removeListener("SIGTERM", onSignal);
      process.removeListener("SIGINT", onSignal);
    };
    const onSignal = (name) => {
      remove();
      this.logger.info(`worker ${this.consumer}: ${name}, closing`);
      this.close();
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    return remove;
  }

  // -- waiting ------------------------------------------------------------------------------

  /** Resolves at the next job's end or stop, or after timeoutMs. */
  _nextEvent(timeoutMs) {
    return new Promise((resolve) => {
      const timer = timeoutMs === undefined ? null : setTimeout(resolve, timeoutMs);
      this._wakers.push(() => { clearTimeout(timer); resolve(); });
    });
  }

  _wake() {
    const wakers = this._wakers;
    this._wakers = [];
    for (const wake of wakers) wake();
  }

  _stop() {
    this._stopping = true;
    this._resolveStop();
    this._wake();
  }

  /** Resolves once close() is called. */
  _stopped() {
    return this._stopSignal;
  }

  /** Waits `ms`, or less if close() is called. */
  async _pause(ms) {
    const end = Date.now() + ms;
    while (!this._stopping && Date.now() < end) await this._nextEvent(end - Date.now());
  }
}

function checkAtLeast(name, value, least) {
  if (!Number.isInteger(value) || value < least) {
    throw new RangeError(`${name} must be an integer of at least ${least}, not ${value}`);
  }
}
