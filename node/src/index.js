// leaseq: push jobs to a leaseq daemon and run workers on them (docs/node.md).
export { Queue } from "./queue.js";
export { Worker, JobCancelled, WorkerClosed } from "./worker.js";
export { Job, LeaseqError } from "./protocol.js";
