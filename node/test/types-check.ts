// Compiled (not run) by types.test.js: the declarations in src/index.d.ts
// describe the API as docs/node.md uses it, and refuse what it refuses.
import { trace } from "@opentelemetry/api";
import { Job, JobCancelled, LeaseqError, Queue, Worker, type WorkerStats } from "leaseq";

async function main(): Promise<void> {
  const queue = new Queue("redis://127.0.0.1:6479", "emails", { password: "secret" });
  const id: number = await queue.push("hello", { delay: 1000, priority: 7, key: "k", group: "g", after: [["other", 3]] });
  const ids: number[] = await queue.pushMany(["a", Buffer.from("b")], { keys: ["k1", "k2"], meta: { tenant: "acme" } });
  await queue.push("tagged", { meta: { trace: Buffer.from("t") } });
  const info = await queue.get(id);
  const state: string | undefined = info?.state;
  const result: Buffer | null = await queue.result(ids[0], { blockMs: 1000 });
  const cancelled: number = await queue.cancel(1, 2);
  const worker = new Worker(queue, async (job: Job, { signal }) => {
    await job.progress({ percent: 50 });
    if (signal.aborted && signal.reason instanceof JobCancelled) return undefined;
    const tenant: string | undefined = job.meta?.tenant;
    return { to: job.json<{ to: string }>().to, deliveries: job.deliveries, lastError: job.lastError, tenant };
  }, { concurrency: 50, leaseMs: 30_000, handleSignals: true, closeTimeoutMs: 10_000 });
  worker.on("failed", (job: Job, error: unknown) => console.log(job.id, error instanceof LeaseqError));
  const stats: WorkerStats = await worker.run({ burst: true });
  await worker.close();
  await queue.close();
  console.log(state, result, cancelled, stats.acked);
  // @ts-expect-error: a payload is a string or bytes
  await queue.push({ to: "ann" });
  // @ts-expect-error: a META value is a string or bytes
  await queue.push("x", { meta: { n: 1 } });
  // @ts-expect-error: no such option
  new Worker(queue, () => undefined, { concurency: 2 });
  new Worker(queue, () => undefined, { traceParent: "child", tracerProvider: trace.getTracerProvider() });
  // @ts-expect-error: a job's span is linked to the producer's or its child, nothing else
  new Worker(queue, () => undefined, { traceParent: "parent" });
}

void main;
