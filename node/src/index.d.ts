// TypeScript declarations of the leaseq package (docs/node.md).

import { EventEmitter } from "node:events";
import type { Redis, RedisOptions } from "ioredis";

export type Payload = string | Buffer | Uint8Array;
/** A parent for `after`: a claimed Job, or [queue, id]. */
export type Parent = Job | [string, number];

export interface PushOptions {
  /** 0 to 9, 5 by default; higher is claimed first. */
  priority?: number;
  /** Ready after this many ms. */
  delay?: number;
  /** Ready at this time (ms since the epoch). */
  at?: number;
  /** A dedupe key: a push with a key already held answers the holder's id. */
  key?: Payload;
  /** How long a key is held: while the job is queued (default), active, or exists. */
  keyScope?: "queued" | "active" | "exists";
  /** With key: replace the payload of the job holding the key. */
  replace?: boolean;
  maxDeliveries?: number;
  /** This job's age limit in ms from its push (dead-lettered, reason expired, beyond it); 0: the queue's. */
  expire?: number;
  /** A flow-control group (GROUP-CONCURRENCY, GROUP-RATE, pauses). */
  group?: Payload;
  /** Jobs this one waits for. */
  after?: Iterable<Parent>;
  /** What a parent's death does to it: fail (default) or run. */
  onFail?: "run" | "fail";
  /** Labels the job carries (META): at most 32 fields, names of 1 to 64 bytes, 8 KiB in all. */
  meta?: Record<string, Payload> | Map<Payload, Payload>;
}

export interface PushManyOptions extends Omit<PushOptions, "key" | "group"> {
  /** One dedupe key per payload. */
  keys?: Payload[];
  /** One group for every job ... */
  group?: Payload;
  /** ... or one per payload. */
  groups?: Payload[];
}

/** A claimed job. */
export declare class Job {
  readonly queue: string;
  readonly id: number;
  readonly payload: Buffer;
  /** The lease token that acks, nacks and extends the job. */
  readonly lease: string;
  /** When the lease runs out, ms since the epoch (the daemon's clock). */
  readonly deadline: number;
  readonly deliveries: number;
  readonly priority: number;
  readonly enqueuedAt: number;
  readonly key: Buffer | null;
  readonly lastError: string | null;
  readonly group: Buffer | null;
  readonly schedule?: string;
  readonly tick?: number;
  readonly deadLetterFrom?: string;
  readonly deadLetterSrcId?: number;
  readonly deadLetterDeliveries?: number;
  readonly deadLetterReason?: string;
  readonly deadLetterParent?: [string, number];
  /** The job's META as pushed, names and values as UTF-8 text; null when it has none. */
  readonly meta: Record<string, string> | null;
  /** Fields a newer daemon adds. */
  readonly extra: Record<string, unknown>;
  /** The payload as UTF-8 text. */
  text(): string;
  /** The payload parsed as JSON. */
  json<T = unknown>(): T;
  /** Report progress (QPROGRESS; strings and Buffers as they are, anything else as JSON); false when the lease is lost. */
  progress(value: unknown): Promise<boolean>;
}

/** What QGET shows of a job, with the daemon's field names. */
export interface JobInfo {
  id: number;
  state: "delayed" | "ready" | "in_flight" | "dead" | "completed" | "waiting" | "cancelled";
  payload?: Buffer;
  deliveries?: number;
  priority?: number;
  result?: Buffer;
  progress?: Buffer;
  last_error?: string;
  meta?: Record<string, string>;
  [field: string]: unknown;
}

/** An error reply of the daemon: `code` is its code word (ERR, NOQUEUE, FULL, DEAD, NOJOB, ...). */
export declare class LeaseqError extends Error {
  readonly code: string;
}

export declare class Queue {
  readonly name: string;
  /** The ioredis connection of ordinary commands (for commands this class does not wrap). */
  readonly client: Redis;
  /** `url`: redis://..., rediss://..., or sentinel://host:26379,host2:26379/service (the primary Redis
   * Sentinel names for it); null with ioredis's `sentinels` and `name` in `options`. */
  constructor(url: string | null, name: string, options?: RedisOptions);
  push(payload: Payload, options?: PushOptions): Promise<number>;
  pushMany(payloads: Iterable<Payload>, options?: PushManyOptions): Promise<number[]>;
  claim(consumer: string, options?: { count?: number; leaseMs?: number; blockMs?: number }): Promise<Job[]>;
  ack(job: Job | string, result?: unknown): Promise<boolean>;
  nack(job: Job | string, options?: { error?: string; delayMs?: number; dead?: boolean }): Promise<boolean>;
  extendMany(jobs: Array<Job | string>, leaseMs?: number): Promise<Array<number | null>>;
  progress(job: Job | string, value: unknown): Promise<boolean>;
  get(id: number): Promise<JobInfo | null>;
  result(id: number, options?: { blockMs?: number }): Promise<Buffer | null>;
  cancel(...ids: number[]): Promise<number>;
  info(): Promise<Record<string, number | string | null>>;
  close(): Promise<void>;
}

export interface WorkerOptions {
  /** Handlers running at once (1). */
  concurrency?: number;
  /** The lease each claim asks for, and each heartbeat renews (30000). */
  leaseMs?: number;
  /** Beat more often than every leaseMs / 3. */
  heartbeatMs?: number;
  /** How long an idle claim waits (1000). */
  blockMs?: number;
  /** The consumer name QGET shows (host:pid). */
  consumer?: string;
  /** How long close() waits for running handlers before it aborts and nacks them (25000; Infinity waits). */
  closeTimeoutMs?: number;
  /** Close on SIGTERM and SIGINT while running (false). */
  handleSignals?: boolean;
  /** Where warnings (and info lines) go; null: nowhere.  By default warnings go to stderr. */
  logger?: { info(message: string): void; warn(message: string): void } | null;
  /** With @opentelemetry/api installed, each job runs in a CONSUMER span "<queue> process":
   * "link" (the default) starts a trace of its own linked to the producer's span; "child" makes it
   * the producer's child (docs/node.md, "Tracing"). */
  traceParent?: "link" | "child";
  /** The OpenTelemetry TracerProvider the job spans come from (the global one by default). */
  tracerProvider?: { getTracer(name: string, version?: string): unknown };
}

export interface WorkerStats {
  acked: number;
  failed: number;
  lost: number;
  /** Nacked by close() after closeTimeoutMs. */
  abandoned: number;
}

export type Handler<R = unknown> = (job: Job, context: { signal: AbortSignal }) => R | Promise<R>;

export declare class Worker extends EventEmitter {
  readonly queue: Queue;
  readonly concurrency: number;
  readonly consumer: string;
  /** How many jobs this worker holds now. */
  readonly held: number;
  constructor(queue: Queue, handler: Handler, options?: WorkerOptions);
  run(options?: { burst?: boolean }): Promise<WorkerStats>;
  close(): Promise<void>;
  on(event: "completed", listener: (job: Job, result: string | Buffer | undefined) => void): this;
  on(event: "failed", listener: (job: Job, error: unknown) => void): this;
  on(event: "lost", listener: (job: Job) => void): this;
  on(event: "extended", listener: (leases: number) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** The reason of a handler's signal when its job was cancelled (QCANCEL). */
export declare class JobCancelled extends Error {}
/** The reason of a handler's signal when close() stopped waiting for it. */
export declare class WorkerClosed extends Error {}
