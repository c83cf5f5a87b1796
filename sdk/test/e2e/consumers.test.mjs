// Consumer groups and watches through the SDK against a real strata serve.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { StreamsClient, generateKey } from "../../dist/index.js";
import { StrataServer, TOKEN } from "./server.mjs";

let server;
let client;
before(async () => {
  server = await StrataServer.start();
  client = new StreamsClient({ baseUrl: server.url, token: TOKEN });
});
after(async () => server?.stop());

test("configure, read and delete a consumer; pull and settle by hand", async () => {
  const jobs = await client.createStream("sdk/jobs", { encryptionKey: generateKey(), format: { kind: "json" } });
  const c = jobs.consumer("workers");
  const made = await c.configure({ visibilityTimeoutMs: 5_000, maxAttempts: 3 });
  assert.equal(made.created, true);
  assert.equal(made.config.visibilityTimeoutMs, 5_000);
  const again = await c.configure({ visibilityTimeoutMs: 5_000, maxAttempts: 3 });
  assert.equal(again.created, false);
  assert.equal(again.version, made.version);
  const conflict = await c.configure({ maxAttempts: 4 }).catch((e) => e);
  assert.equal(conflict.code, "consumer_config_conflict");
  await jobs.appendMany([{ n: 1 }, { n: 2 }], { routingKey: "a" });
  await jobs.append({ n: 3 }, { routingKey: "b" });
  const first = await c.pull({ max: 10 });
  // One lease per routing key: a's first record and b's.
  assert.deepEqual(first.messages.map((m) => m.value.n).sort(), [1, 3]);
  assert.equal(first.backlog, 3);
  const settled = await c.settle({ acks: first.messages.map((m) => m.leaseToken) });
  assert.equal(settled.acked, 2);
  const stale = await c.settle({ acks: [first.messages[0].leaseToken] });
  assert.equal(stale.stale, 1);
  const second = await c.pull({ max: 10, waitMs: 1_000 });
  assert.deepEqual(second.messages.map((m) => m.value), [{ n: 2 }]);
  const info = await c.get();
  await c.delete(info.version);
  assert.equal((await c.get().catch((e) => e)).code, "unknown_consumer");
});

test("consume: every message handled, per-key order kept, a throwing handler's message retried", async () => {
  const jobs = await client.createStream("sdk/consume", { encryptionKey: generateKey(), format: { kind: "json" } });
  const c = jobs.consumer("loop");
  await c.configure({ visibilityTimeoutMs: 2_000, maxAttempts: 5, maxBatchRecords: 20 });
  for (let k = 0; k < 4; k++) await jobs.appendMany([0, 1, 2, 3, 4].map((i) => ({ k, i })), { routingKey: `k${k}` });
  const seen = new Map();
  let thrown = false;
  const controller = new AbortController();
  const done = c.consume(
    async (m) => {
      if (m.value.k === 2 && m.value.i === 1 && !thrown) {
        thrown = true;
        throw new Error("first try fails");
      }
      const list = seen.get(m.routingKey) ?? [];
      list.push(m.value.i);
      seen.set(m.routingKey, list);
      if ([...seen.values()].reduce((n, l) => n + l.length, 0) === 20) controller.abort();
    },
    { concurrency: 8, waitMs: 500, retryDelayMs: 0, signal: controller.signal },
  );
  await done;
  assert.ok(thrown);
  for (let k = 0; k < 4; k++) assert.deepEqual(seen.get(`k${k}`), [0, 1, 2, 3, 4], `key k${k}`);
});

test("consume extends the lease of a handler slower than its visibility: no second delivery", async () => {
  const jobs = await client.createStream("sdk/slow", { encryptionKey: generateKey(), format: { kind: "json" } });
  const c = jobs.consumer("slow");
  await c.configure({ visibilityTimeoutMs: 1_000, maxAttempts: 5 });
  await jobs.append({ job: 1 }, { routingKey: "a" });
  const deliveries = [];
  const controller = new AbortController();
  await c.consume(
    async (m) => {
      deliveries.push(m.attempts);
      // Twice the visibility: without extensions the lease would lapse,
      // the acknowledgement would be stale, and the pull below would get
      // the message again.
      await new Promise((r) => setTimeout(r, 2_200));
      controller.abort();
    },
    { concurrency: 1, waitMs: 200, signal: controller.signal },
  );
  assert.deepEqual(deliveries, [1]);
  const after = await c.pull({ max: 10 });
  assert.deepEqual(after.messages, []);
  assert.equal(after.backlog, 0);
});

test("a message whose attempts are spent is dead-lettered once, with its id", async () => {
  const encryptionKey = generateKey();
  const jobs = await client.createStream("sdk/poison", { encryptionKey, format: { kind: "json" } });
  const dlq = await client.createStream("sdk/poison-dlq", { encryptionKey, format: { kind: "json" } });
  const c = jobs.consumer("strict");
  await c.configure({ maxAttempts: 1, deadLetterStream: "sdk/poison-dlq" });
  await jobs.append({ bad: true }, { routingKey: "p" });
  const first = await c.pull({ max: 1 });
  assert.equal(first.messages.length, 1);
  const [message] = first.messages;
  assert.equal((await c.settle({ retries: [{ leaseToken: message.leaseToken, delayMs: 0 }] })).retried, 1);
  // The next delivery would be a second attempt: the pull dead-letters it.
  const second = await c.pull({ max: 1, waitMs: 200 });
  assert.deepEqual(second.messages, []);
  assert.equal(second.backlog, 0);
  const letters = await dlq.read({ routingKey: "p" });
  assert.equal(letters.records.length, 1);
  const [letter] = letters.records;
  assert.equal(letter.messageId, message.id);
  assert.equal(letter.sourceStream, "sdk/poison");
  assert.equal(letter.consumer, "strict");
  assert.deepEqual(letter.value, { bad: true });
});

test("watches: keys derived offline match the server, and an append invalidates its key", async () => {
  const orders = await client.createStream("sdk/watched", {
    encryptionKey: generateKey(),
    format: { kind: "json" },
    watches: [{ name: "by-customer", fields: ["/customerId"] }],
  });
  const watch = orders.watch("by-customer");
  const key = await watch.key({ customerId: "c1", total: 1 });
  assert.match(key, /^[0-9a-f]{16}$/);
  assert.equal(await watch.key({ total: 1 }), null);
  const quiet = await watch.wait(key, { timeoutMs: 100 });
  assert.equal(quiet.invalidated, false);
  const waiting = watch.wait(key, { cursor: quiet.cursor, timeoutMs: 10_000 });
  await orders.append({ customerId: "c2" }, { routingKey: "x" });
  await orders.append({ customerId: "c1", total: 2 }, { routingKey: "x" });
  const changed = await waiting;
  assert.equal(changed.invalidated, true);
  assert.equal(changed.reason, "changed");
  // observe yields invalidations only.
  const controller = new AbortController();
  const seen = [];
  const observing = (async () => {
    try {
      for await (const i of watch.observe(key, { cursor: changed.cursor, timeoutMs: 300, signal: controller.signal })) {
        seen.push(i.reason);
        controller.abort();
      }
    } catch (e) {
      if (e.code !== "aborted") throw e;
    }
  })();
  await orders.append({ customerId: "c1", total: 3 });
  await observing;
  assert.deepEqual(seen, ["changed"]);
  // A forged capability is refused like any other: 403 watch_unauthorized.
  const forged = await fetch(`${server.url}${watch.path(key)}?timeoutMs=10`, {
    headers: { authorization: "Prisma-Watch default.9999999999.00000000000000000000000000000000" },
  });
  assert.equal(forged.status, 403);
  assert.equal((await forged.json()).error.code, "watch_unauthorized");
});
