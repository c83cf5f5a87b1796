// The SDK against a two-member fleet on one store that answers requests for
// streams the other member serves with 409 not_stream_owner and
// Streams-Replay-To (--fleet-routing replay): the client follows the member
// named, remembers it, and every operation succeeds through either member.
import { test } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { StreamsClient, generateKey } from "../../dist/index.js";
import { StrataServer, TOKEN } from "./server.mjs";

test("requests through the member that does not serve a collection are replayed to the one that does", async () => {
  const members = await StrataServer.fleet(["--fleet-routing", "replay"]);
  try {
    const encryptionKey = generateKey();
    const retried = [];
    const clients = members.map(
      (m) => new StreamsClient({ baseUrl: m.url, token: TOKEN, onRetry: (e) => retried.push(e.code), retry: { maxAttempts: 30, maxDelayMs: 500 } }),
    );
    const [a, b] = clients;
    const viaA = await a.createStream("sdk/fleet", { encryptionKey, format: { kind: "json" } });
    const viaB = b.stream("sdk/fleet", { encryptionKey });
    for (let i = 0; i < 10; i++) await (i % 2 ? viaA : viaB).append({ i }, { routingKey: "k" });
    for (const c of [viaA, viaB]) {
      const page = await c.read({ routingKey: "k" });
      assert.deepEqual(page.records.map((r) => r.i), [...Array(10).keys()]);
    }
    // One of the two members does not serve the collection: its client was
    // sent on at least once, and then went direct.
    assert.ok(retried.includes("not_stream_owner"), `no replay was followed: ${retried}`);
    const before = retried.filter((c) => c === "not_stream_owner").length;
    await viaA.read({ routingKey: "k" });
    await viaB.read({ routingKey: "k" });
    assert.equal(retried.filter((c) => c === "not_stream_owner").length, before, "the owner was not remembered");
  } finally {
    for (const m of members) await m.kill();
    rmSync(members[0].store, { recursive: true, force: true });
  }
});
