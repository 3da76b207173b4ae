// Where the tests find the daemon: LEASEQ_PORT, a daemon that
// tests/integration/test_node_package.py started (on 127.0.0.1) for them.

export function daemonPort() {
  const port = Number(process.env.LEASEQ_PORT);
  if (!Number.isInteger(port) || port <= 0) {
    throw new Error("LEASEQ_PORT must name a running leaseq daemon's port (bin/test starts one: "
      + "bin/test tests/integration/test_node_package.py)");
  }
  return port;
}

export const daemonUrl = () => `redis://127.0.0.1:${daemonPort()}`;
