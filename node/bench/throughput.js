// For `leaseq bench workers` (bench/workers.py): a Node Worker with an empty handler drains the
// queue once (a burst run) and prints one JSON line: jobs, seconds, CPU seconds.
// usage: node throughput.js <port> <queue> <concurrency>
import { Queue, Worker } from "../src/index.js";

const [port, name, concurrency] = process.argv.slice(2);
const queue = new Queue(`redis://127.0.0.1:${port}`, name);
const worker = new Worker(queue, () => {}, { concurrency: Number(concurrency), logger: null });
await queue.info();                              // connected before the clock starts
const cpu0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
const stats = await worker.run({ burst: true });
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
const cpu = process.cpuUsage(cpu0);
console.log(JSON.stringify({ jobs: stats.acked, seconds, cpu_seconds: (cpu.user + cpu.system) / 1e6 }));
await queue.close();
