import { test } from "node:test";
import assert from "node:assert/strict";
import { StreamsClient } from "../../dist/index.js";
import { fakeFetch, page, error, KEY } from "./fake.mjs";

function collection(fetch) {
  return new StreamsClient({ baseUrl: "http://a.test", fetch, random: () => 0 }).stream("o", { encryptionKey: KEY });
}

test("a subscription catches up, waits live, survives a failure, and ends at the seal", async () => {
  const fetch = fakeFetch([
    page([1, 2], "c2"),
    page([3], "c3", { upToDate: true }),
    page([], "c3", { upToDate: true, status: 204 }),
    error(503, "unavailable", {}, { "retry-after": "0" }),
    page([4], "c4", { upToDate: true, sealed: true }),
  ]);
  const sub = collection(fetch).subscribe({ routingKey: "k", reconnectDelayMaxMs: 1 });
  const seen = [];
  for await (const r of sub) seen.push([r.value, r.cursor ?? null, sub.cursor]);
  assert.deepEqual(seen, [
    [1, null, "beginning"],
    [2, "c2", "beginning"],
    [3, "c3", "c2"],
    [4, "c4", "c3"],
  ]);
  assert.equal(sub.cursor, "c4");
  const urls = fetch.calls.map((c) => new URL(c.url));
  assert.deepEqual(urls.map((u) => u.pathname), [
    "/v1/streams/o/records",
    "/v1/streams/o/records",
    "/v1/streams/o/records:long-poll",
    "/v1/streams/o/records:long-poll",
    "/v1/streams/o/records:long-poll",
  ]);
  assert.deepEqual(urls.map((u) => u.searchParams.get("cursor")), ["beginning", "c2", "c3", "c3", "c3"]);
  assert.ok(urls.every((u) => u.searchParams.get("routingKey") === "k"));
});

test("a subscription stops on an error that retrying cannot fix", async () => {
  const fetch = fakeFetch([error(400, "invalid_cursor")]);
  const sub = collection(fetch).subscribe({ cursor: "forged" });
  await assert.rejects(async () => {
    for await (const _ of sub) {
      /* nothing */
    }
  }, (e) => e.code === "invalid_cursor");
});

test("bytes pages are one record each", async () => {
  const bytes = new Response(new Uint8Array([1, 2, 3]), {
    status: 200,
    headers: { "content-type": "application/octet-stream", "prisma-next-cursor": "n" },
  });
  const fetch = fakeFetch([bytes]);
  const p = await collection(fetch).read();
  assert.deepEqual(p.records, [new Uint8Array([1, 2, 3])]);
  assert.equal(p.cursor, "n");
  assert.equal(p.upToDate, false);
});
