/**
 * Watches: watch keys derived offline exactly as the server derives them
 * (canonical JSON, SHA-256; the format's §9.3 and its shared test vectors),
 * observation capabilities signed with the stream key (HKDF, HMAC-SHA256;
 * WebCrypto only), and observation as a long-poll iterator.
 *
 * A capability grants one observation (project, collection, epoch, watch,
 * key) until its expiry, at most 300 s ahead; the iterator signs a fresh one
 * for every wait, so the stream key never leaves the client.
 */

import type { Collection } from "./collection.js";
import { StreamsError } from "./errors.js";
import { sleep, Transport } from "./http.js";
import { fromBase64, fromHex, toHex, utf8 } from "./keys.js";
import { WatchDefinition } from "./types.js";

/** The longest capability lifetime the server accepts (seconds). */
export const CAPABILITY_LIFETIME_S_MAX = 300;

/** Canonical JSON: no whitespace, members sorted by UTF-16 code units. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return "[" + value.map(canonicalJson).join(",") + "]";
  if (value !== null && typeof value === "object") {
    const o = value as Record<string, unknown>;
    const members = Object.keys(o)
      .sort()
      .map((k) => JSON.stringify(k) + ":" + canonicalJson(o[k]));
    return "{" + members.join(",") + "}";
  }
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError("not a JSON value");
  return text;
}

/** The value at an RFC 6901 pointer, or `undefined` when absent. */
export function pointerValue(record: unknown, pointer: string): unknown {
  if (pointer === "") return record;
  let at: unknown = record;
  for (const raw of pointer.split("/").slice(1)) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (at === null || typeof at !== "object" || !Object.prototype.hasOwnProperty.call(at, key)) return undefined;
    at = (at as Record<string, unknown>)[key];
  }
  return at;
}

function subtle(): SubtleCrypto {
  const s = globalThis.crypto?.subtle;
  if (!s) throw new TypeError("WebCrypto (crypto.subtle) is not available (browsers: a secure context)");
  return s;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

async function sha256(bytes: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await subtle().digest("SHA-256", bytes as BufferSource));
}

/** A watch's definition id under an incarnation's epoch (16 bytes). */
export async function definitionId(epoch: Uint8Array, watch: WatchDefinition): Promise<Uint8Array> {
  const def = canonicalJson({ fields: watch.fields, name: watch.name });
  const digest = await sha256(concat(utf8("strata/watch-definition/v1\0"), epoch, utf8(def)));
  return digest.subarray(0, 16);
}

/** A record's watch key (16 hex characters), or `null` when it lacks a field. */
export async function watchKey(epoch: Uint8Array | string, watch: WatchDefinition, record: unknown): Promise<string | null> {
  const e = typeof epoch === "string" ? fromHex(epoch) : epoch;
  const values = watch.fields.map((f) => pointerValue(record, f));
  if (values.some((v) => v === undefined)) return null;
  const id = await definitionId(e, watch);
  const digest = await sha256(concat(utf8("strata/watch-key/v1\0"), id, utf8(canonicalJson(values))));
  return toHex(digest.subarray(0, 8));
}

async function hkdf(salt: Uint8Array, ikm: Uint8Array, info: string): Promise<Uint8Array> {
  const key = await subtle().importKey("raw", ikm as BufferSource, "HKDF", false, ["deriveBits"]);
  const bits = await subtle().deriveBits(
    { name: "HKDF", hash: "SHA-256", salt: salt as BufferSource, info: utf8(info) as BufferSource },
    key,
    256,
  );
  return new Uint8Array(bits);
}

/** The key capabilities are signed with: HKDF from the stream key and epoch. */
export async function waitSigKey(epoch: Uint8Array, streamKey: Uint8Array): Promise<Uint8Array> {
  const touch = await hkdf(epoch, streamKey, "touch-capability-v1");
  return hkdf(epoch, touch, "wait-sig-v1");
}

function field(bytes: Uint8Array): Uint8Array {
  const len = new Uint8Array(4);
  new DataView(len.buffer).setUint32(0, bytes.length, true);
  return concat(len, bytes);
}

export interface CapabilityScope {
  project: string;
  collection: string;
  epoch: Uint8Array;
  watch: string;
  /** 16 hex characters. */
  watchKey: string;
  /** Unix seconds. */
  expiry: number;
}

/** `<project>.<expiry>.<hex mac16>`, signed with the wait signature key. */
export async function signCapability(sigKey: Uint8Array, scope: CapabilityScope): Promise<string> {
  const expiry = String(Math.floor(scope.expiry));
  const message = concat(
    utf8("strata/watch-capability/v1\0"),
    field(utf8(scope.project)),
    field(utf8(scope.collection)),
    field(scope.epoch),
    field(utf8(scope.watch)),
    field(utf8(scope.watchKey.toLowerCase())),
    field(utf8("GET")),
    field(utf8(expiry)),
  );
  const key = await subtle().importKey("raw", sigKey as BufferSource, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await subtle().sign("HMAC", key, message as BufferSource));
  return `${scope.project}.${expiry}.${toHex(mac.subarray(0, 16))}`;
}

/** One answer of an observation. */
export interface Invalidation {
  invalidated: boolean;
  /** `changed`, or `resync` (the server cannot tell: treat it as a change). */
  reason?: "changed" | "resync";
  cursor: string;
}

export interface ObserveOptions {
  /** The previous answer's cursor (default: start now). */
  cursor?: string;
  /** One wait (default and maximum 25,000 ms). */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Backoff cap between reconnects after failures (default 5,000 ms). */
  reconnectDelayMaxMs?: number;
}

/** One watch of a collection. */
export class Watch {
  readonly name: string;
  private readonly collection: Collection<unknown>;
  private readonly transport: Transport;
  private readonly project: string;
  private readonly streamKey: Uint8Array;
  private scope: Promise<{ epoch: Uint8Array; definition: WatchDefinition; sigKey: Uint8Array }> | undefined;

  constructor(collection: Collection<unknown>, transport: Transport, name: string, project: string, streamKey: string) {
    this.collection = collection;
    this.transport = transport;
    this.name = name;
    this.project = project;
    this.streamKey = fromBase64(streamKey);
  }

  /** The epoch and definition, from the collection's metadata (read once). */
  private resolve(): Promise<{ epoch: Uint8Array; definition: WatchDefinition; sigKey: Uint8Array }> {
    this.scope ??= (async () => {
      const meta = await this.collection.metadata();
      const definition = meta.watches?.find((w) => w.name === this.name);
      if (!definition || !meta.epoch) {
        throw new StreamsError({ status: 404, code: "unknown_watch", message: `no watch ${this.name}`, retryable: false });
      }
      const epoch = fromHex(meta.epoch);
      return { epoch, definition, sigKey: await waitSigKey(epoch, this.streamKey) };
    })();
    this.scope.catch(() => (this.scope = undefined));
    return this.scope;
  }

  /** The watch key of a record (as the server derives it), or `null`. */
  async key(record: unknown): Promise<string | null> {
    const { epoch, definition } = await this.resolve();
    return watchKey(epoch, definition, record);
  }

  /** A capability for observing `key`, valid `lifetimeS` (≤ 300) seconds. */
  async capability(key: string, lifetimeS = 240): Promise<string> {
    const { epoch, sigKey } = await this.resolve();
    const expiry = Math.floor(Date.now() / 1000) + Math.min(lifetimeS, CAPABILITY_LIFETIME_S_MAX);
    return signCapability(sigKey, { project: this.project, collection: this.collection.name, epoch, watch: this.name, watchKey: key, expiry });
  }

  /** The observation path of `key` (with `?cap=` for clients that cannot set headers). */
  path(key: string): string {
    return `${this.collection.path}/watches/${encodeURIComponent(this.name)}/keys/${key}`;
  }

  /** Waits once for an invalidation of `key`. */
  async wait(key: string, options: ObserveOptions = {}): Promise<Invalidation> {
    const timeoutMs = Math.min(options.timeoutMs ?? 25_000, 25_000);
    const cap = await this.capability(key);
    return this.transport.json<Invalidation>({
      method: "GET",
      path: this.path(key),
      query: { cursor: options.cursor, timeoutMs },
      headers: { authorization: `Prisma-Watch ${cap}` },
      replay: "read",
      signal: options.signal,
      extraTimeoutMs: timeoutMs,
      collection: this.collection.name,
    });
  }

  /** Every invalidation of `key`, live, until `signal` aborts. */
  async *observe(key: string, options: ObserveOptions = {}): AsyncGenerator<Invalidation> {
    let cursor = options.cursor;
    let failures = 0;
    const delayMax = options.reconnectDelayMaxMs ?? 5_000;
    for (;;) {
      let answer: Invalidation;
      try {
        answer = await this.wait(key, { ...options, cursor });
        failures = 0;
      } catch (e) {
        if (!(e instanceof StreamsError) || !e.retryable) throw e;
        failures++;
        await sleep((e.retryAfterMs ?? 0) + Math.random() * Math.min(delayMax, 100 * 2 ** Math.min(failures, 16)), options.signal);
        continue;
      }
      cursor = answer.cursor;
      if (answer.invalidated) yield answer;
    }
  }
}
