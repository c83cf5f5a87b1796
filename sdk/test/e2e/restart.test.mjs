// The SDK across a kill -9 and restart of the server, and under the
// server's refusals (429 from a tiny ingest queue, 503 from a live-read
// budget of one): producers stay exactly once, subscriptions continue.
import { test } from "node:test";
import assert from "node:assert/strict";
import { StreamsClient, MemoryProducerStore, generateKey } from "../../dist/index.js";
import { StrataServer, TOKEN } from "./server.mjs";

const until = async (condition, what) => {
  for (let i = 0; i < 3000; i++) {
    if (condition()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
};

async function readAll(collection, routingKey) {
  const values = [];
  let cursor = "beginning";
  for (;;) {
    const page = await collection.read({ routingKey, cursor });
    values.push(...page.records);
    cursor = page.cursor;
    if (page.upToDate) return values;
  }
}

test("producer records land exactly once, in order, across kill -9 and restart", async () => {
  const server = await StrataServer.start();
  try {
    // The answer to sequence 20 is lost: the request lands, the server is
    // killed before the client reads the answer (an ambiguous outcome).
    let lost = false;
    const fetchLosingOne = async (url, init) => {
      const response = await fetch(url, init);
      if (!lost && new Headers(init.headers).get("producer-seq") === "20") {
        lost = true;
        await server.crashAndRestart();
        throw new TypeError("the connection was reset");
      }
      return response;
    };
    const retried = [];
    const client = new StreamsClient({
      baseUrl: server.url,
      token: TOKEN,
      timeoutMs: 5_000,
      fetch: fetchLosingOne,
      onRetry: (e) => retried.push(e.code),
    });
    const orders = await client.createStream("sdk/eo", { encryptionKey: generateKey(), format: { kind: "json" } });
    const producer = orders.producer("writer-1", { routingKey: "k", store: new MemoryProducerStore(), maxBatchRecords: 7 });
    const acks = [];
    for (let i = 0; i < 400; i++) {
      acks.push(producer.append({ i }));
      // A second kill -9 with records queued and a request on its way.
      if (i === 300) await server.crashAndRestart();
      if (i % 50 === 0) await new Promise((r) => setTimeout(r, 5));
    }
    const results = await Promise.all(acks);
    await producer.close();
    assert.ok(lost, "no answer was lost");
    assert.ok(retried.includes("network_error"), `nothing was resent: ${retried}`);
    assert.ok(results.some((r) => r.duplicate), "the resent request was not answered as a duplicate");
    const values = await readAll(orders, "k");
    assert.deepEqual(values.map((v) => v.i), [...Array(400).keys()]);
  } finally {
    await server.stop();
  }
});

test("a subscription continues across kill -9 and restart without loss or repeat", async () => {
  const server = await StrataServer.start();
  try {
    const retried = [];
    const client = new StreamsClient({ baseUrl: server.url, token: TOKEN, timeoutMs: 5_000, onRetry: (e) => retried.push(e.code) });
    const feed = await client.createStream("sdk/sub", { encryptionKey: generateKey(), format: { kind: "json" } });
    const seen = [];
    const controller = new AbortController();
    const reading = (async () => {
      const onReconnect = (e) => retried.push(e.code);
      for await (const r of feed.subscribe({ routingKey: "k", waitMs: 1_000, signal: controller.signal, onReconnect })) {
        seen.push(r.value.i);
        if (seen.length === 100) return;
      }
    })();
    const producer = feed.producer("w", { routingKey: "k" });
    for (let i = 0; i < 50; i++) await producer.append({ i });
    await until(() => seen.length === 50, "the first 50 records");
    await server.crashAndRestart();
    for (let i = 50; i < 100; i++) await producer.append({ i });
    await reading;
    assert.deepEqual(seen, [...Array(100).keys()]);
    assert.ok(retried.includes("network_error"), `the live read never reconnected: ${retried}`);
  } finally {
    await server.stop();
  }
});

test("429 from a full ingest queue is retried until every append lands once", async () => {
  // Deterministic overload: with one pending byte allowed, the shard stops
  // taking from its one-command queue while a PUT (5 ms) is in flight, so
  // concurrent appends meet a full queue however fast the server drains it.
  const server = await StrataServer.start([
    "--ingest-queue-capacity", "1",
    "--max-pending-bytes", "1",
    "--emulate-put-latency-ms", "5",
  ]);
  try {
    const retried = [];
    const client = new StreamsClient({
      baseUrl: server.url,
      token: TOKEN,
      retry: { maxAttempts: 50, maxDelayMs: 200 },
      onRetry: (e) => retried.push(`${e.status} ${e.code}`),
    });
    const c = await client.createStream("sdk/busy", { encryptionKey: generateKey(), format: { kind: "json" } });
    const acks = await Promise.all([...Array(200).keys()].map((i) => c.append({ i }, { routingKey: `k${i % 8}` })));
    assert.equal(acks.length, 200);
    assert.ok(retried.includes("429 rate_limited"), `no 429 was met: ${retried.slice(0, 5)}`);
    let total = 0;
    for (let k = 0; k < 8; k++) total += (await readAll(c, `k${k}`)).length;
    assert.equal(total, 200);
  } finally {
    await server.stop();
  }
});

test("503 subscription_capacity is retried: two live readers share a budget of one", async () => {
  const server = await StrataServer.start(["--max-live-connections", "1"]);
  try {
    const retried = [];
    const client = new StreamsClient({ baseUrl: server.url, token: TOKEN, onRetry: (e) => retried.push(e.code) });
    const c = await client.createStream("sdk/capacity", { encryptionKey: generateKey(), format: { kind: "json" } });
    const first = (async () => {
      for await (const r of c.subscribe({ routingKey: "a", cursor: "now", waitMs: 300 })) return r.value;
    })();
    const second = (async () => {
      for await (const r of c.subscribe({ routingKey: "b", cursor: "now", waitMs: 300, reconnectDelayMaxMs: 200 })) return r.value;
    })();
    await until(() => retried.includes("subscription_capacity"), "a 503 subscription_capacity");
    await c.append("for a", { routingKey: "a" });
    await c.append("for b", { routingKey: "b" });
    assert.deepEqual(await Promise.all([first, second]), ["for a", "for b"]);
  } finally {
    await server.stop();
  }
});
