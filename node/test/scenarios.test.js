// The worker scenarios of tests/scenarios/worker.json (what they mean is
// written there), run with this package's Worker against a real daemon at
// LEASEQ_PORT; tests/integration/test_worker_scenarios.py runs the same
// ones with the Python Worker.  tests/integration/test_node_package.py
// starts the daemon and runs `node --test` here.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Queue, Worker } from "../src/index.js";
import { daemonUrl } from "./daemon.js";

const { scenarios } = JSON.parse(readFileSync(new URL("../../tests/scenarios/worker.json", import.meta.url), "utf8"));

function stepsFor(handler, payload) {
  const steps = handler[payload] ?? handler["*"];
  assert.ok(steps, `the scenario says nothing of what the handler does with ${payload}`);
  return steps;
}

/** Resolves when `signal` aborts, or after `ms`. */
function aborted(signal, ms) {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

async function runScenario(scenario, index) {
  const name = `scenario-node-${process.pid}-${index}`;
  const queue = new Queue(daemonUrl(), name);
  try {
    await queue.client.call("QCREATE", name, "RETAIN-COMPLETED", 60000, ...(scenario.create ?? []));
    const ids = {};
    for (const { payload, options = [] } of scenario.push) {
      ids[payload] = Number(await queue.client.call("QPUSH", name, payload, ...options));
    }
    const started = new Set();
    let running = 0, peak = 0, onStart = () => {};
    const afterFirstStart = async (payload, job) => {
      if ((scenario.cancel ?? []).includes(payload)) await queue.cancel(ids[payload]);
      if ((scenario.release ?? []).includes(payload)) await queue.client.call("QNACK", name, job.lease, "DELAY", 0);
    };

    const handler = async (job, { signal }) => {
      running += 1;
      peak = Math.max(peak, running);
      try {
        const payload = job.text();
        if (!started.has(payload)) {
          started.add(payload);
          onStart();
          await afterFirstStart(payload, job);
        }
        for (const step of stepsFor(scenario.handler, payload)) {
          if (step.when_delivery !== undefined && step.when_delivery !== job.deliveries) continue;
          if ("return" in step) return step.return;
          if (step.return_nothing) return undefined;
          if (step.throw) throw Object.assign(new Error(step.throw[1]), { name: step.throw[0] });
          if ("progress" in step) await job.progress(step.progress);
          if (step.sleep_ms) await sleep(step.sleep_ms);
          if (step.wait_for_cancel_ms) await aborted(signal, step.wait_for_cancel_ms);
        }
        return undefined;
      } finally {
        running -= 1;
      }
    };

    const settings = scenario.worker ?? {};
    const worker = new Worker(queue, handler, {
      concurrency: settings.concurrency ?? 1, leaseMs: settings.lease_ms ?? 30_000,
      heartbeatMs: settings.heartbeat_ms, logger: null,
    });
    let stats;
    if ((scenario.run ?? "burst") === "burst") {
      stats = await worker.run({ burst: true });
    } else {
      const everyOne = new Set(scenario.push.map((p) => p.payload)).size;
      const allStarted = new Promise((resolve) => { onStart = () => started.size === everyOne && resolve(); });
      const run = worker.run();
      await allStarted;
      await worker.close();
      stats = await run;
    }

    for (const [payload, expected] of Object.entries(scenario.expect.jobs)) {
      const info = await queue.get(ids[payload]);
      assert.ok(info, `QGET of ${payload} is nil`);
      const seen = {
        state: info.state, deliveries: info.deliveries,
        result: info.result ? info.result.toString() : null,
        last_error: info.last_error ?? null,
        progress: info.progress ? info.progress.toString() : null,
      };
      for (const [field, value] of Object.entries(expected)) {
        assert.deepEqual(seen[field], value, `${payload}'s ${field}`);
      }
    }
    const { acked, failed, lost } = stats;
    assert.deepEqual({ acked, failed, lost }, scenario.expect.stats);
    if (scenario.expect.peak !== undefined) assert.equal(peak, scenario.expect.peak, "the most handlers at once");
  } finally {
    await queue.close();
  }
}

scenarios.forEach((scenario, index) => {
  test(scenario.name, { timeout: 30_000 }, () => runScenario(scenario, index));
});
