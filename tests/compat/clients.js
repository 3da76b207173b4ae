// Drives one Node.js Redis client against a running leaseq, feature by
// feature, and prints one JSON line: {"client", "version", "resp",
// "features": {name: "ok" | "error: ..."}}.  tests/compat/test_node_clients.py
// installs the clients (npm, into a cache) and runs this once per client.
//
// usage: node clients.js <package dir name> <port> <resp 2|3>
"use strict";
const path = require("path");
const [pkg, port, resp] = process.argv.slice(2);
const proto = Number(resp);
const queue = `compat-${pkg}-${proto}-${process.pid}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A job map arrives as an object (RESP3 map), a Map, or a flat array (RESP2).
function asJob(reply) {
  if (Array.isArray(reply)) {
    const job = {};
    for (let i = 0; i < reply.length; i += 2) job[String(reply[i])] = reply[i + 1];
    return job;
  }
  if (reply instanceof Map) return Object.fromEntries([...reply].map(([k, v]) => [String(k), v]));
  return reply;
}

// The two client families behind one small interface.
function ioredisAdapter(Redis) {
  const make = () => new Redis({ port: Number(port), host: "127.0.0.1", protocol: proto, lazyConnect: true,
                                 maxRetriesPerRequest: 1 });
  return {
    async open() { const c = make(); await c.connect(); return c; },
    call: (c, ...args) => c.call(...args),
    pipeline: (c, cmds) => c.pipeline(cmds.map((a) => ["call", ...a])).exec().then((rs) => rs.map(([e, v]) => { if (e) throw e; return v; })),
    multi: (c, cmds) => c.multi(cmds.map((a) => ["call", ...a])).exec().then((rs) => rs.map(([e, v]) => { if (e) throw e; return v; })),
    async subscribe(c, channel, onMessage) { c.on("message", (ch, msg) => { if (ch === channel) onMessage(msg); }); await c.subscribe(channel); },
    unsubscribe: (c, channel) => c.unsubscribe(channel),
    close: (c) => c.disconnect(),
  };
}

function nodeRedisAdapter(createClient) {
  return {
    async open() {
      const c = createClient({ socket: { port: Number(port), host: "127.0.0.1", reconnectStrategy: false }, RESP: proto });
      c.on("error", () => {});
      await c.connect();
      return c;
    },
    call: (c, ...args) => c.sendCommand(args.map(String)),
    pipeline: (c, cmds) => { const m = c.multi(); for (const a of cmds) m.addCommand(a.map(String)); return m.execAsPipeline(); },
    multi: (c, cmds) => { const m = c.multi(); for (const a of cmds) m.addCommand(a.map(String)); return m.exec(); },
    subscribe: (c, channel, onMessage) => c.subscribe(channel, onMessage),
    unsubscribe: (c, channel) => c.unsubscribe(channel),
    close: (c) => c.quit(),
  };
}

function load() {
  const dir = path.join(process.env.LEASEQ_NPM_DIR, "node_modules", pkg);
  const version = require(path.join(dir, "package.json")).version;
  const mod = require(dir);
  if (pkg.startsWith("ioredis")) return { family: "ioredis", version, api: ioredisAdapter(mod.default || mod) };
  return { family: "node-redis", version, api: nodeRedisAdapter(mod.createClient) };
}

async function main() {
  const { family, version, api } = load();
  const features = {};
  const c = await api.open();
  const other = await api.open();
  const spoken = /resp=(\d)/.exec(String(await api.call(c, "CLIENT", "INFO")))[1];
  async function feature(name, fn) {
    try { await fn(); features[name] = "ok"; } catch (e) { features[name] = "error: " + (e && e.message || e); }
  }
  const check = (cond, what) => { if (!cond) throw new Error(what); };

  await feature("push", async () => {
    const id = Number(await api.call(c, "QPUSH", queue, "hello"));
    check(id === 1, `QPUSH gave ${id}`);
    const ids = await api.call(c, "QPUSHMANY", queue, 2, "a", "b");
    check(ids.map(Number).join() === "2,3", `QPUSHMANY gave ${ids}`);
  });
  await feature("claim and ack", async () => {
    const jobs = (await api.call(c, "QCLAIM", queue, "w1", "COUNT", 3)).map(asJob);
    check(jobs.length === 3 && String(jobs[0].payload) === "hello", `QCLAIM gave ${JSON.stringify(jobs)}`);
    const acked = Number(await api.call(c, "QACK", queue, ...jobs.map((j) => String(j.lease))));
    check(acked === 3, `QACK acked ${acked}`);
  });
  await feature("blocking claim", async () => {
    const waiting = api.call(other, "QCLAIM", queue, "w2", "BLOCK", 5000);
    await sleep(200);
    await api.call(c, "QPUSH", queue, "late");
    const jobs = (await waiting).map(asJob);
    check(jobs.length === 1 && String(jobs[0].payload) === "late", `BLOCK gave ${JSON.stringify(jobs)}`);
    await api.call(other, "QACK", queue, String(jobs[0].lease));
  });
  await feature("pipeline", async () => {
    const replies = await api.pipeline(c, [["QPUSH", queue, "p1"], ["QPUSH", queue, "p2"], ["QLEN", queue]]);
    check(Number(replies[2]) === 2, `pipeline gave ${replies}`);
  });
  await feature("MULTI/EXEC", async () => {
    const jobs = (await api.call(c, "QCLAIM", queue, "w1", "COUNT", 2)).map(asJob);
    const replies = await api.multi(c, [["QACK", queue, String(jobs[0].lease)], ["QACK", queue, String(jobs[1].lease)],
                                        ["QPUSH", queue, "next"]]);
    check(Number(replies[0]) === 1 && Number(replies[1]) === 1, `MULTI gave ${replies}`);
  });
  await feature("QWORK through SUBSCRIBE", async () => {
    await api.call(c, "QPUSH", queue, "streamed");
    const channel = `QWORK ${queue} w3 MAX 5`;
    const sub = await api.open();
    const got = [];
    await api.subscribe(sub, channel, (msg) => got.push(JSON.parse(String(msg))));
    for (let i = 0; i < 50 && got.length < 2; i++) await sleep(50);
    check(got.length === 2 && got.every((j) => j.queue === queue), `messages ${JSON.stringify(got)}`);
    for (const j of got) check(Number(await api.call(c, "QACK", queue, j.lease)) === 1, `QACK of ${j.lease}`);
    await api.unsubscribe(sub, channel);
    await api.close(sub);
    const info = asJob(await api.call(c, "QINFO", queue));
    check(Number(info.in_flight) === 0 && Number(info.ready) === 0, `left ${JSON.stringify(info)}`);
  });
  await feature("QWORK refused with advice", async () => {
    let error = null;
    try { await api.call(c, "QWORK", queue, "w4"); } catch (e) { error = e.message; }
    check(error && error.includes('SUBSCRIBE "QWORK'), `QWORK answered ${error}`);
    check(Number(await api.call(c, "QLEN", queue)) === 0, "QLEN after the refusal");
  });
  await api.close(c);
  await api.close(other);
  console.log(JSON.stringify({ client: family, package: pkg, version, resp: proto, spoken: Number(spoken), features }));
}

main().catch((e) => { console.log(JSON.stringify({ package: pkg, resp: proto, fatal: String(e && e.stack || e) })); process.exit(1); });
