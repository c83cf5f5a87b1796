/**
 * Stream keys and the byte encodings the API uses, with WebCrypto and no
 * runtime-specific buffers, so the same code runs in Node, Bun, Deno and
 * browsers. A stream key is 32 random bytes, sent as base64url in
 * `Prisma-Encryption-Key`; the server never stores it.
 */

const B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

function cryptoApi(): Crypto {
  const c = globalThis.crypto;
  if (!c || typeof c.getRandomValues !== "function") {
    throw new TypeError("WebCrypto (globalThis.crypto) is not available");
  }
  return c;
}

/** A new stream key: 32 random bytes, base64url without padding. */
export function generateKey(): string {
  const bytes = new Uint8Array(32);
  cryptoApi().getRandomValues(bytes);
  return toBase64Url(bytes);
}

function encode(bytes: Uint8Array, alphabet: string, pad: boolean): string {
  let out = "";
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += alphabet[(n >> 18) & 63]! + alphabet[(n >> 12) & 63]! + alphabet[(n >> 6) & 63]! + alphabet[n & 63]!;
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = bytes[i]! << 16;
    out += alphabet[(n >> 18) & 63]! + alphabet[(n >> 12) & 63]! + (pad ? "==" : "");
  } else if (rest === 2) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
    out += alphabet[(n >> 18) & 63]! + alphabet[(n >> 12) & 63]! + alphabet[(n >> 6) & 63]! + (pad ? "=" : "");
  }
  return out;
}

/** base64url, no padding. */
export function toBase64Url(bytes: Uint8Array): string {
  return encode(bytes, B64URL, false);
}

/** Standard base64, padded (the API's `valueB64` and bytes `value`s). */
export function toBase64(bytes: Uint8Array): string {
  return encode(bytes, B64, true);
}

/** Decodes base64 or base64url, padded or not; throws on anything else. */
export function fromBase64(text: string): Uint8Array {
  const clean = text.replace(/=+$/, "");
  if (clean.length % 4 === 1) throw new TypeError("not base64: bad length");
  const out = new Uint8Array(Math.floor((clean.length * 3) / 4));
  let bits = 0;
  let value = 0;
  let o = 0;
  for (const ch of clean) {
    let v = B64.indexOf(ch);
    if (v < 0) v = B64URL.indexOf(ch);
    if (v < 0) throw new TypeError("not base64: bad character");
    value = (value << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (value >> bits) & 0xff;
    }
  }
  return out;
}

/** A key given as text (base64/base64url) or as 32 bytes, as header text. */
export function keyText(key: string | Uint8Array): string {
  const bytes = typeof key === "string" ? fromBase64(key) : key;
  if (bytes.length !== 32) throw new TypeError("a stream key is 32 bytes");
  return toBase64Url(bytes);
}

const UTF8 = new TextEncoder();
const UTF8_DECODE = new TextDecoder();

export function utf8(text: string): Uint8Array {
  return UTF8.encode(text);
}

export function fromUtf8(bytes: Uint8Array): string {
  return UTF8_DECODE.decode(bytes);
}

export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

export function fromHex(hex: string): Uint8Array {
  if (hex.length % 2 !== 0 || /[^0-9a-fA-F]/.test(hex)) throw new TypeError("not hex");
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}
