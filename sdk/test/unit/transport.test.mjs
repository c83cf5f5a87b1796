import { test } from "node:test";
import assert from "node:assert/strict";
import { StreamsClient, StreamsError } from "../../dist/index.js";
import { fakeFetch, json, error, KEY } from "./fake.mjs";

const ack = { cursor: "c1", count: 1, duplicate: false, sealed: false };

function client(fetch, extra = {}) {
  return new StreamsClient({ baseUrl: "http://a.test/", token: "t0ken-t0ken-t0ken", fetch, random: () => 0, ...extra });
}

test("errors carry the server's code, retryable, details and Retry-After", async () => {
  const fetch = fakeFetch([error(409, "producer_gap", { details: { expected: 2, received: 5 } })]);
  const orders = client(fetch).stream("orders", { encryptionKey: KEY });
  const e = await orders.append({ a: 1 }).catch((e) => e);
  assert.ok(e instanceof StreamsError);
  assert.equal(e.status, 409);
  assert.equal(e.code, "producer_gap");
  assert.equal(e.retryable, false);
  assert.deepEqual(e.details, { expected: 2, received: 5 });
  assert.equal(fetch.calls.length, 1);
  const sent = fetch.calls[0];
  assert.equal(sent.url, "http://a.test/v1/streams/orders/records");
  assert.equal(sent.headers.authorization, "Bearer t0ken-t0ken-t0ken");
  assert.equal(sent.headers["prisma-encryption-key"], KEY);
  assert.equal(sent.headers["content-type"], "application/json");
  assert.equal(sent.body, '{"a":1}');
});

test("429 and 503 unavailable are retried after Retry-After, even for plain appends", async () => {
  const fetch = fakeFetch([
    error(429, "rate_limited", {}, { "retry-after": "0" }),
    error(503, "unavailable", {}, { "retry-after": "0" }),
    json(200, ack),
  ]);
  const result = await client(fetch).stream("o", { encryptionKey: KEY }).append(1, { routingKey: "k" });
  assert.deepEqual(result, ack);
  assert.equal(fetch.calls.length, 3);
  assert.equal(fetch.calls[2].headers["prisma-routing-key"], "k");
});

test("a plain append is not resent after an ambiguous outcome", async () => {
  const fetch = fakeFetch([error(503, "outcome_unknown"), json(200, ack)]);
  const e = await client(fetch).stream("o", { encryptionKey: KEY }).append(1).catch((e) => e);
  assert.equal(e.code, "outcome_unknown");
  assert.ok(e.outcomeUnknown);
  assert.equal(fetch.calls.length, 1);
  const reset = fakeFetch([new TypeError("socket hang up"), json(200, ack)]);
  const e2 = await client(reset).stream("o", { encryptionKey: KEY }).append(1).catch((e) => e);
  assert.equal(e2.code, "network_error");
  assert.equal(reset.calls.length, 1);
});

test("a producer append is resent with the same tuple after an ambiguous outcome", async () => {
  const fetch = fakeFetch([error(503, "outcome_unknown"), new TypeError("reset"), json(200, { ...ack, duplicate: true })]);
  const producer = { id: "p", epoch: 3, seq: 7 };
  const r = await client(fetch).stream("o", { encryptionKey: KEY }).append({ n: 1 }, { producer });
  assert.equal(r.duplicate, true);
  assert.equal(fetch.calls.length, 3);
  for (const c of fetch.calls) {
    assert.equal(c.headers["producer-id"], "p");
    assert.equal(c.headers["producer-epoch"], "3");
    assert.equal(c.headers["producer-seq"], "7");
    assert.equal(c.body, '{"n":1}');
  }
});

test("retries are bounded", async () => {
  const fetch = fakeFetch(() => error(503, "unavailable", {}, { "retry-after": "0" }));
  const e = await client(fetch, { retry: { maxAttempts: 3 } }).metadata("o").catch((e) => e);
  assert.equal(e.code, "unavailable");
  assert.equal(fetch.calls.length, 3);
});

test("not_stream_owner is followed to the member named, and remembered", async () => {
  const fetch = fakeFetch([
    error(409, "not_stream_owner", {}, { "streams-replay-to": "http://b.test:9/v1/streams/o" }),
    json(200, { name: "o" }),
    json(200, { name: "o" }),
  ]);
  const c = client(fetch);
  await c.metadata("o");
  await c.metadata("o");
  assert.deepEqual(fetch.calls.map((x) => x.url), [
    "http://a.test/v1/streams/o",
    "http://b.test:9/v1/streams/o",
    "http://b.test:9/v1/streams/o",
  ]);
});

test("an aborted signal ends a request and its retries", async () => {
  const controller = new AbortController();
  const fetch = fakeFetch(() => {
    controller.abort();
    return error(503, "unavailable", {}, { "retry-after": "5" });
  });
  const e = await client(fetch).metadata("o", { signal: controller.signal }).catch((e) => e);
  assert.equal(e.code, "aborted");
  assert.equal(fetch.calls.length, 1);
});

test("names keep their segments and encode the rest", async () => {
  const fetch = fakeFetch([json(200, {})]);
  await client(fetch).metadata("eu/orders 1");
  assert.equal(fetch.calls[0].url, "http://a.test/v1/streams/eu/orders%201");
});

test("the catalog is listed page by page", async () => {
  const fetch = fakeFetch([
    json(200, { streams: [{ name: "a" }, { name: "b" }], cursor: "x" }),
    json(200, { streams: [], cursor: "y" }),
    json(200, { streams: [{ name: "c" }] }),
  ]);
  const names = [];
  for await (const s of client(fetch).listStreams({ limit: 2 })) names.push(s.name);
  assert.deepEqual(names, ["a", "b", "c"]);
  assert.equal(fetch.calls[1].url, "http://a.test/v1/streams?cursor=x&limit=2");
});
