import { test } from "node:test";
import assert from "node:assert/strict";
import { generateKey, toBase64, toBase64Url, fromBase64, toHex, fromHex } from "../../dist/index.js";

test("base64 and base64url agree with Node's Buffer for every length", () => {
  for (let n = 0; n < 70; n++) {
    const bytes = new Uint8Array(n).map((_, i) => (i * 37 + n) & 0xff);
    assert.equal(toBase64(bytes), Buffer.from(bytes).toString("base64"));
    assert.equal(toBase64Url(bytes), Buffer.from(bytes).toString("base64url"));
    assert.deepEqual(fromBase64(toBase64(bytes)), bytes);
    assert.deepEqual(fromBase64(toBase64Url(bytes)), bytes);
  }
});

test("malformed base64 is refused", () => {
  assert.throws(() => fromBase64("a"), TypeError);
  assert.throws(() => fromBase64("ab$d"), TypeError);
});

test("generated keys are 32 random bytes in base64url", () => {
  const a = generateKey();
  const b = generateKey();
  assert.match(a, /^[A-Za-z0-9_-]{43}$/);
  assert.equal(fromBase64(a).length, 32);
  assert.notEqual(a, b);
});

test("hex round-trips and refuses non-hex", () => {
  assert.equal(toHex(new Uint8Array([0, 15, 255])), "000fff");
  assert.deepEqual(fromHex("000fff"), new Uint8Array([0, 15, 255]));
  assert.throws(() => fromHex("0g"), TypeError);
  assert.throws(() => fromHex("abc"), TypeError);
});
