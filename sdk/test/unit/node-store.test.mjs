import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { StreamsClient } from "../../dist/index.js";
import { FileProducerStore } from "../../dist/node.js";
import { fakeFetch, json, error, KEY } from "./fake.mjs";

const ack = (count) => json(200, { cursor: "c", count, duplicate: false, sealed: false });
const tuple = (c) => [c.headers["producer-epoch"], c.headers["producer-seq"]].join("/");
const collection = (fetch) =>
  new StreamsClient({ baseUrl: "http://a.test", fetch, random: () => 0 }).stream("o", { encryptionKey: KEY });

test("the file store keeps each key's state, and only it", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sdk-store-"));
  try {
    const store = new FileProducerStore(join(dir, "producers"));
    assert.equal(await store.load("a"), undefined);
    await store.save("a", { epoch: 2, seq: 5, inflight: { batch: false, body: "1" } });
    await store.save("b", { epoch: 0, seq: 1 });
    await store.save("a", { epoch: 2, seq: 6 });
    const again = new FileProducerStore(join(dir, "producers"));
    assert.deepEqual(await again.load("a"), { epoch: 2, seq: 6 });
    assert.deepEqual(await again.load("b"), { epoch: 0, seq: 1 });
    assert.deepEqual(readdirSync(join(dir, "producers")).filter((f) => f.endsWith(".tmp")), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a producer restarted on the same file store resends what was in flight, then claims the next epoch", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sdk-store-"));
  try {
    const dying = fakeFetch([ack(1), error(503, "outcome_unknown")]);
    const first = collection(dying).producer("w", { store: new FileProducerStore(dir), maxAttempts: 1 });
    await first.append({ n: 1 });
    await assert.rejects(first.append({ n: 2 }));
    const fetch = fakeFetch([json(200, { cursor: "c", count: 0, duplicate: true, sealed: false }), ack(1)]);
    const second = collection(fetch).producer("w", { store: new FileProducerStore(dir) });
    await second.append({ n: 3 });
    assert.deepEqual(fetch.calls.map(tuple), ["0/1", "1/0"]);
    assert.deepEqual(fetch.calls.map((c) => c.body), ['{"n":2}', '{"n":3}']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
