// Where the tests find the daemon: LEASEQ_PORT, a daemon that
// tests/integration/test_node_package.py started (on 127.0.0.1) for them.

import { after } from "node:test";

import { Queue } from "../src/index.js";

export function daemonPort() {
  const port = Number(process.env.LEASEQ_PORT);
  if (!Number.isInteger(port) || port <= 0) {
    throw new Error("LEASEQ_PORT must name a running leaseq daemon's port (bin/test starts one: "
      + "bin/test tests/integration/test_node_package.py)");
  }
  return port;
}

export const daemonUrl = () => `redis://127.0.0.1:${daemonPort()}`;

/** A test file's `fresh(name?)`: a Queue on the daemon, named `${prefix}-<pid>-<n>`
 * unless `name` is given; every one it opened is closed after the file's tests. */
export function freshQueues(prefix) {
  let n = 0;
  const opened = [];
  after(() => Promise.all(opened.map((q) => q.close())));
  return (name = `${prefix}-${process.pid}-${++n}`) => {
    const queue = new Queue(daemonUrl(), name);
    opened.push(queue);
    return queue;
  };
}
