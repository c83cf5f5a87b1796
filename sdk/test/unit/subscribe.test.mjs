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
  const sub = collection(fetch).subscribe({ routingKey: "k", reconnectDelayMaxMs: 1, events: false });
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

function eventStream(text, chunk = 7) {
  const bytes = new TextEncoder().encode(text);
  return new Response(
    new ReadableStream({
      start(c) {
        for (let i = 0; i < bytes.length; i += chunk) c.enqueue(bytes.subarray(i, i + chunk));
        c.close();
      },
    }),
    { status: 200, headers: { "content-type": "text/event-stream" } },
  );
}

test("live JSON subscriptions use server-sent events, committing each page at its control event", async () => {
  const fetch = fakeFetch([
    page([1], "c1", { upToDate: true }),
    eventStream('event: control\ndata:{"nextCursor":"c1","upToDate":true}\n\nevent: data\ndata:[2,3]\n\nevent: control\r\ndata:{"nextCursor":"c3","upToDate":true}\r\n\r\n'),
    eventStream('event: data\ndata:[{"n":"end"}]\n\nevent: control\ndata:{"nextCursor":"c4","upToDate":true,"sealed":true}\n\n'),
  ]);
  const sub = collection(fetch).subscribe({ routingKey: "k" });
  const seen = [];
  for await (const r of sub) seen.push([r.value, r.cursor ?? null]);
  assert.deepEqual(seen, [[1, "c1"], [2, null], [3, "c3"], [{ n: "end" }, "c4"]]);
  const urls = fetch.calls.map((c) => new URL(c.url));
  assert.deepEqual(urls.map((u) => u.pathname), ["/v1/streams/o/records", "/v1/streams/o/records:sse", "/v1/streams/o/records:sse"]);
  assert.deepEqual(urls.map((u) => u.searchParams.get("cursor")), ["beginning", "c1", "c3"]);
  assert.equal(fetch.calls[1].headers.accept, "text/event-stream");
});

test("a server without the event route is long-polled instead", async () => {
  const fetch = fakeFetch([
    page([1], "c1", { upToDate: true }),
    error(404, "unknown_route"),
    page([2], "c2", { upToDate: true, sealed: true }),
  ]);
  const values = [];
  for await (const r of collection(fetch).subscribe()) values.push(r.value);
  assert.deepEqual(values, [1, 2]);
  assert.equal(new URL(fetch.calls[2].url).pathname, "/v1/streams/o/records:long-poll");
});
