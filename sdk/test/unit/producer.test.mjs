import { test } from "node:test";
import assert from "node:assert/strict";
import { StreamsClient, MemoryProducerStore } from "../../dist/index.js";
import { fakeFetch, json, error, KEY } from "./fake.mjs";

const ack = (count) => json(200, { cursor: "c", count, duplicate: false, sealed: false });
const tuple = (c) => [c.headers["producer-epoch"], c.headers["producer-seq"]].join("/");

function collection(fetch) {
  return new StreamsClient({ baseUrl: "http://a.test", fetch, random: () => 0 }).stream("o", { encryptionKey: KEY });
}

test("records queued while a request is out go together in the next, in order", async () => {
  let release, sent;
  const gate = new Promise((r) => (release = r));
  const firstSent = new Promise((r) => (sent = r));
  const fetch = fakeFetch(async (call, i) => {
    if (i === 0) {
      sent();
      await gate;
    }
    return ack(i === 0 ? 1 : 3);
  });
  const p = collection(fetch).producer("w", { routingKey: "k" });
  const first = p.append({ n: 0 });
  await firstSent;
  const rest = [p.append({ n: 1 }), p.append({ n: 2 }), p.append({ n: 3 })];
  release();
  await Promise.all([first, ...rest]);
  assert.equal(fetch.calls.length, 2);
  assert.equal(fetch.calls[0].url, "http://a.test/v1/streams/o/records");
  assert.equal(fetch.calls[1].url, "http://a.test/v1/streams/o/records:batch");
  assert.equal(fetch.calls[1].body, '[{"n":1},{"n":2},{"n":3}]');
  assert.deepEqual(fetch.calls.map(tuple), ["0/0", "0/1"]);
  assert.equal(fetch.calls[1].headers["prisma-routing-key"], "k");
  assert.deepEqual(p.position, { epoch: 0, seq: 2 });
});

test("an ambiguous outcome is resent with the same tuple and body", async () => {
  const fetch = fakeFetch([error(503, "outcome_unknown"), new TypeError("reset"), ack(1), ack(1)]);
  const p = collection(fetch).producer("w");
  await p.append({ n: 1 });
  await p.append({ n: 2 });
  assert.deepEqual(fetch.calls.map(tuple), ["0/0", "0/0", "0/0", "0/1"]);
  assert.deepEqual(fetch.calls.map((c) => c.body), ['{"n":1}', '{"n":1}', '{"n":1}', '{"n":2}']);
});

test("a newer epoch met before anything was sent is claimed past", async () => {
  const fetch = fakeFetch([error(403, "stale_producer_epoch", { details: { currentEpoch: 4 } }), ack(1), ack(1)]);
  const p = collection(fetch).producer("w");
  await p.append(1);
  await p.append(2);
  assert.deepEqual(fetch.calls.map(tuple), ["0/0", "5/0", "5/1"]);
});

test("a newer epoch after this producer wrote fences it: it fails, and stays failed", async () => {
  const fetch = fakeFetch([ack(1), error(403, "stale_producer_epoch", { details: { currentEpoch: 9 } })]);
  const p = collection(fetch).producer("w");
  await p.append(1);
  const e = await p.append(2).catch((e) => e);
  assert.equal(e.code, "stale_producer_epoch");
  assert.equal((await p.append(3).catch((e) => e)).code, "stale_producer_epoch");
  assert.equal(fetch.calls.length, 2);
});

test("a restarted producer resends its stored request, then claims the next epoch", async () => {
  const store = new MemoryProducerStore();
  // The first process: its request is answered ambiguously, then it dies.
  const dying = fakeFetch([ack(1), error(503, "outcome_unknown")]);
  const first = collection(dying).producer("w", { store, maxAttempts: 1 });
  await first.append({ n: 1 });
  await assert.rejects(first.append({ n: 2 }));
  // The second process resends {n:2} under 0/1, then writes under epoch 1.
  const fetch = fakeFetch([json(200, { cursor: "c", count: 0, duplicate: true, sealed: false }), ack(1)]);
  const second = collection(fetch).producer("w", { store });
  await second.append({ n: 3 });
  assert.deepEqual(fetch.calls.map(tuple), ["0/1", "1/0"]);
  assert.deepEqual(fetch.calls.map((c) => c.body), ['{"n":2}', '{"n":3}']);
  assert.deepEqual(await store.load(JSON.stringify(["o", "", "w"])), { epoch: 1, seq: 1 });
});

test("bytes records go one per request, sent as they are", async () => {
  const fetch = fakeFetch([ack(1), ack(1)]);
  const p = collection(fetch).producer("w");
  await Promise.all([p.append(new Uint8Array([104, 105])), p.append(new Uint8Array([33]))]);
  assert.deepEqual(fetch.calls.map((c) => c.body), ["hi", "!"]);
  assert.equal(fetch.calls[0].headers["content-type"], undefined);
});

test("the queue is bounded", async () => {
  const fetch = fakeFetch(() => new Promise(() => {}));
  const c = new StreamsClient({ baseUrl: "http://a.test", fetch, timeoutMs: 20, retry: { maxAttempts: 1 } });
  const p = c.stream("o", { encryptionKey: KEY }).producer("w", { maxQueuedRecords: 2, maxAttempts: 1 });
  const inflight = p.append(1);
  while (fetch.calls.length === 0) await new Promise((r) => setTimeout(r, 1));
  const queued = [p.append(2), p.append(3)];
  const e = await p.append(4).catch((e) => e);
  assert.equal(e.code, "producer_queue_full");
  // The request in flight times out; the producer fails what it holds.
  assert.equal((await inflight.catch((e) => e)).code, "timeout");
  for (const q of queued) assert.equal((await q.catch((e) => e)).code, "timeout");
});

test("aborting a producer fails what it holds, at once", async () => {
  const fetch = fakeFetch(() => new Promise(() => {}));
  const controller = new AbortController();
  const p = collection(fetch).producer("w", { signal: controller.signal });
  const first = p.append(1);
  const second = p.append(2);
  while (fetch.calls.length === 0) await new Promise((r) => setTimeout(r, 1));
  controller.abort();
  assert.equal((await first.catch((e) => e)).code, "aborted");
  assert.equal((await second.catch((e) => e)).code, "aborted");
  assert.equal((await p.append(3).catch((e) => e)).code, "aborted");
});
