// The SDK against a real `strata serve`: collections, records, reads,
// subscriptions, scans, seals, and the errors the server answers.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { StreamsClient, StreamsError, generateKey, bytesOf } from "../../dist/index.js";
import { StrataServer, TOKEN } from "./server.mjs";

let server;
let client;
before(async () => {
  server = await StrataServer.start();
  client = new StreamsClient({ baseUrl: server.url, token: TOKEN });
});
after(async () => server?.stop());

test("create is idempotent; another configuration is a conflict; metadata and the catalog show it", async () => {
  const encryptionKey = generateKey();
  const format = { kind: "json" };
  await client.createStream("sdk/orders", { encryptionKey, format, expiry: { idle: "1h" } });
  await client.createStream("sdk/orders", { encryptionKey, format, expiry: { idle: 3600 } });
  const conflict = await client.createStream("sdk/orders", { encryptionKey, format: { kind: "bytes" } }).catch((e) => e);
  assert.ok(conflict instanceof StreamsError);
  assert.equal(conflict.status, 409);
  assert.equal(conflict.code, "config_mismatch");
  const meta = await client.metadata("sdk/orders");
  assert.equal(meta.name, "sdk/orders");
  assert.equal(meta.contentType, "application/json");
  assert.deepEqual(meta.expiry, { idle: "3600s" });
  const names = [];
  for await (const s of client.listStreams({ limit: 1 })) names.push(s.name);
  assert.ok(names.includes("sdk/orders"), names.join());
  await client.deleteStream("sdk/orders");
  assert.equal((await client.metadata("sdk/orders").catch((e) => e)).code, "not_found");
});

test("JSON records: append, atomic batches, per-key reads and cursors", async () => {
  const orders = await client.createStream("sdk/json", { encryptionKey: generateKey(), format: { kind: "json" } });
  const one = await orders.append({ customerId: "c1", total: 42 }, { routingKey: "c1" });
  assert.equal(one.count, 1);
  const many = await orders.appendMany([{ n: 1 }, { n: 2 }, [3]], { routingKey: "c2" });
  assert.equal(many.count, 3);
  await orders.append("default key");
  const c1 = await orders.read({ routingKey: "c1" });
  assert.deepEqual(c1.records, [{ customerId: "c1", total: 42 }]);
  assert.equal(c1.upToDate, true);
  const c2 = await orders.read({ routingKey: "c2" });
  assert.deepEqual(c2.records, [{ n: 1 }, { n: 2 }, [3]]);
  assert.deepEqual((await orders.read()).records, ["default key"]);
  // A cursor from an append reads only what follows it.
  await orders.append({ n: 4 }, { routingKey: "c2" });
  assert.deepEqual((await orders.read({ routingKey: "c2", cursor: many.cursor })).records, [{ n: 4 }]);
  assert.deepEqual((await orders.read({ routingKey: "c2", cursor: "now" })).records, []);
});

test("bytes records keep their boundaries", async () => {
  const blobs = await client.createStream("sdk/bytes", { encryptionKey: generateKey(), format: { kind: "bytes" } });
  await blobs.append(bytesOf("first"), { routingKey: "k" });
  await blobs.append(new Uint8Array([0, 255, 1]), { routingKey: "k" });
  const seen = [];
  const sub = blobs.subscribe({ routingKey: "k" });
  for await (const r of sub) {
    seen.push(Array.from(r.value));
    if (seen.length === 2) break;
  }
  assert.deepEqual(seen, [Array.from(bytesOf("first")), [0, 255, 1]]);
});

test("a subscription catches up, waits live, and ends at the seal's final record", async () => {
  const feed = await client.createStream("sdk/live", { encryptionKey: generateKey(), format: { kind: "json" } });
  await feed.append({ n: 0 }, { routingKey: "k" });
  const values = [];
  const reading = (async () => {
    for await (const r of feed.subscribe({ routingKey: "k", waitMs: 2_000 })) values.push(r.value);
  })();
  while (values.length < 1) await new Promise((r) => setTimeout(r, 10));
  await feed.append({ n: 1 }, { routingKey: "k" });
  await feed.append({ n: "other key" }, { routingKey: "other" });
  const sealed = await feed.seal({ final: { n: "end" }, routingKey: "k" });
  assert.equal(sealed.sealed, true);
  await reading;
  assert.deepEqual(values, [{ n: 0 }, { n: 1 }, { n: "end" }]);
  const refused = await feed.append({ n: 2 }, { routingKey: "k" }).catch((e) => e);
  assert.equal(refused.code, "sealed");
  assert.equal(refused.retryable, false);
});

test("a snapshot scan returns every record once, across keys", async () => {
  const all = await client.createStream("sdk/scan", { encryptionKey: generateKey(), format: { kind: "json" } });
  for (let k = 0; k < 5; k++) await all.appendMany([1, 2, 3].map((i) => ({ k, i })), { routingKey: `k${k}` });
  const items = [];
  for await (const item of all.scan({ maxBytes: 4096 })) items.push(`${item.routingKey}:${item.value.i}`);
  assert.equal(items.length, 15);
  assert.equal(new Set(items).size, 15);
});

test("a wrong key is 403 wrong_key and a forged cursor 400 invalid_cursor", async () => {
  await client.createStream("sdk/keyed", { encryptionKey: generateKey(), format: { kind: "json" } });
  const wrong = client.stream("sdk/keyed", { encryptionKey: generateKey() });
  const e = await wrong.read().catch((e) => e);
  assert.equal(e.status, 403);
  assert.equal(e.code, "wrong_key");
  const append = await wrong.append(1).catch((e) => e);
  assert.equal(append.code, "stale_or_wrong_credentials");
  const right = await client.createStream("sdk/forged", { encryptionKey: generateKey(), format: { kind: "json" } });
  const forged = await right.read({ cursor: "AAAAAAAAAAAAAAAAAAAAAAAAAAAA" }).catch((e) => e);
  assert.equal(forged.status, 400);
  assert.equal(forged.code, "invalid_cursor");
});

test("a bad token is 401 unauthorized", async () => {
  const stranger = new StreamsClient({ baseUrl: server.url, token: "not-a-configured-token" });
  const e = await stranger.metadata("sdk/keyed").catch((e) => e);
  assert.equal(e.status, 401);
  assert.equal(e.code, "unauthorized");
});
