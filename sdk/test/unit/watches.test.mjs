// Watch keys and capabilities against the shared vectors the server's own
// tests check (docs/vectors/watches.json, docs/FORMATS.md §9.3).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { canonicalJson, definitionId, watchKey, waitSigKey, signCapability, toHex, fromHex } from "../../dist/index.js";

const vectors = JSON.parse(readFileSync(new URL("../../../docs/vectors/watches.json", import.meta.url), "utf8"));

test("canonical JSON matches every shared vector", () => {
  assert.ok(vectors.canonical.length > 0);
  for (const c of vectors.canonical) assert.equal(canonicalJson(JSON.parse(c.json)), c.canonical, c.json);
});

test("definition ids and watch keys match every shared vector", async () => {
  const epoch = fromHex(vectors.epoch);
  assert.ok(vectors.keys.length > 0);
  for (const c of vectors.keys) {
    assert.equal(toHex(await definitionId(epoch, c.watch)), c.definitionId);
    assert.equal(await watchKey(epoch, c.watch, JSON.parse(c.record)), c.watchKey, c.record);
  }
});

test("the capability vector of the format", async () => {
  const epoch = new Uint8Array(16).fill(0x11);
  const sigKey = await waitSigKey(epoch, new Uint8Array(32).fill(0x22));
  assert.equal(toHex(sigKey), "c5ddb2150b6b6ef946d10ae7711f99daa0418845f0ea34fe3b3218b0463d3f04");
  const cap = await signCapability(sigKey, {
    project: "alpha",
    collection: "orders",
    epoch,
    watch: "by-customer",
    watchKey: "e50c5bb85a187117",
    expiry: 1900000000,
  });
  assert.equal(cap, "alpha.1900000000.a682088f50c1895a681470a146004d60");
});
