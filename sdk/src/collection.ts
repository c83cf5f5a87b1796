/**
 * One collection: appends (one record, or an atomic batch), reads of a
 * routing key (one page, or a live subscription), snapshot scans, seal,
 * metadata and delete. A `Collection` holds the stream key and sends it with
 * every request that needs it; it makes no request when it is made.
 *
 * Values: in a JSON collection a record is any JSON value (sent with
 * `JSON.stringify`, read back parsed); in a bytes collection it is a
 * `Uint8Array` ({@link bytesOf} turns text into one).
 */

import { StreamsError } from "./errors.js";
import { Replay, sleep, Transport } from "./http.js";
import { fromBase64, keyText, utf8 } from "./keys.js";
import { Consumer } from "./consumer.js";
import { Producer, ProducerOptions } from "./producer.js";
import { Watch } from "./watches.js";
import { AppendResult, Metadata, Page, ScanItem, StreamRecord } from "./types.js";

/** Producer headers of one request. */
export interface ProducerTuple {
  id: string;
  epoch: number;
  seq: number;
}

export interface AppendOptions {
  routingKey?: string;
  producer?: ProducerTuple;
  signal?: AbortSignal;
}

export interface ReadOptions {
  routingKey?: string;
  /** A key cursor, `"beginning"` (default) or `"now"`. */
  cursor?: string;
  maxBytes?: number;
  signal?: AbortSignal;
}

export interface SubscribeOptions extends ReadOptions {
  /** How long one live wait lasts (default and maximum 25,000 ms). */
  waitMs?: number;
  /** Backoff cap between reconnects after failures (default 5,000 ms). */
  reconnectDelayMaxMs?: number;
  /** Wait live with server-sent events on JSON collections (default true; else long-polls). */
  events?: boolean;
  /** Called when a failed read or a cut live stream is about to be retried. */
  onReconnect?: (error: StreamsError) => void;
}

export interface SealOptions {
  /** Append this JSON value as the collection's last record, atomically. */
  final?: unknown;
  routingKey?: string;
  producer?: ProducerTuple;
  signal?: AbortSignal;
}

/** The encoded path of a collection name (segments kept, each encoded). */
export function namePath(name: string): string {
  return "/v1/streams/" + name.split("/").map(encodeURIComponent).join("/");
}

function isJsonType(contentType: string | null): boolean {
  const media = (contentType ?? "").split(";")[0]!.trim().toLowerCase();
  return media === "application/json" || media.endsWith("+json");
}

export class Collection<T = unknown> {
  readonly name: string;
  /** The collection's encoded path, `/v1/streams/…`. */
  readonly path: string;
  /** The project the client's token belongs to (capabilities name it). */
  readonly project: string;
  private readonly transport: Transport;
  private readonly key: string;

  constructor(transport: Transport, name: string, encryptionKey: string | Uint8Array, project = "default") {
    this.transport = transport;
    this.name = name;
    this.key = keyText(encryptionKey);
    this.path = namePath(name);
    this.project = project;
  }

  private headers(extra: Record<string, string | undefined> = {}): Record<string, string | undefined> {
    return { "prisma-encryption-key": this.key, ...extra };
  }

  /** The collection's metadata. */
  async metadata(options: { signal?: AbortSignal } = {}): Promise<Metadata> {
    return this.transport.json<Metadata>({
      method: "GET",
      path: this.path,
      replay: "read",
      signal: options.signal,
      collection: this.name,
    });
  }

  /** Deletes the whole collection (every routing key). */
  async delete(options: { signal?: AbortSignal } = {}): Promise<void> {
    await this.transport.send({
      method: "DELETE",
      path: this.path,
      replay: "idempotent",
      signal: options.signal,
      collection: this.name,
    });
  }

  /** Appends one record. Without a producer an ambiguous outcome throws
   * (`outcomeUnknown`): the record may have landed. */
  async append(value: T, options: AppendOptions = {}): Promise<AppendResult> {
    const { body, contentType } = encodeValue(value);
    return this.write("/records", body, contentType, options);
  }

  /** Appends records atomically (JSON collections): all land or none. */
  async appendMany(values: T[], options: AppendOptions = {}): Promise<AppendResult> {
    if (values.length === 0) throw new TypeError("appendMany needs at least one record");
    return this.write("/records:batch", JSON.stringify(values), "application/json", options);
  }

  private async write(
    suffix: string,
    body: string | Uint8Array,
    contentType: string | undefined,
    options: AppendOptions,
  ): Promise<AppendResult> {
    const replay: Replay = options.producer ? "idempotent" : "once";
    const response = await this.transport.send({
      method: "POST",
      path: this.path + suffix,
      headers: this.headers({
        "content-type": contentType,
        "prisma-routing-key": options.routingKey || undefined,
        ...producerHeaders(options.producer),
      }),
      body,
      replay,
      signal: options.signal,
      collection: this.name,
    });
    return (await response.json()) as AppendResult;
  }

  /** One page of a routing key's records from `cursor`. */
  async read(options: ReadOptions = {}): Promise<Page<T>> {
    const response = await this.transport.send({
      method: "GET",
      path: this.path + "/records",
      query: readQuery(options),
      headers: this.headers(),
      replay: "read",
      signal: options.signal,
      collection: this.name,
    });
    return decodePage<T>(response);
  }

  /** Waits up to `waitMs` for records after `cursor` (a long-poll). */
  async waitForRecords(options: ReadOptions & { waitMs?: number } = {}): Promise<Page<T>> {
    const waitMs = Math.min(options.waitMs ?? 25_000, 25_000);
    const response = await this.transport.send({
      method: "GET",
      path: this.path + "/records:long-poll",
      query: { ...readQuery(options), waitMs },
      headers: this.headers(),
      replay: "read",
      signal: options.signal,
      extraTimeoutMs: waitMs,
      collection: this.name,
    });
    return decodePage<T>(response);
  }

  /**
   * A live read as server-sent events (JSON collections): the pages the
   * stream carries, each a `data` event's records with the `control` event
   * after it, until the server ends the stream (after `waitMs`).
   */
  async *eventPages(options: ReadOptions & { waitMs?: number } = {}): AsyncGenerator<Page<T>> {
    const waitMs = Math.min(options.waitMs ?? 25_000, 25_000);
    const response = await this.transport.send({
      method: "GET",
      path: this.path + "/records:sse",
      query: { ...readQuery(options), waitMs },
      headers: this.headers({ accept: "text/event-stream" }),
      replay: "read",
      signal: options.signal,
      extraTimeoutMs: waitMs,
      collection: this.name,
    });
    if (!response.body) return;
    // The stream lasts about waitMs; one that goes silent far longer is cut.
    yield* readEvents<T>(response.body, options.signal, waitMs + 30_000);
  }

  /**
   * Every record of a routing key from `cursor` on, live: catches up with
   * reads, then waits for new records, reconnecting after failures, and
   * ends when the collection is sealed and the key is read to its end.
   */
  subscribe(options: SubscribeOptions = {}): Subscription<T> {
    return new Subscription<T>(this, options);
  }

  /** Every record of the collection as of the first page, each once. */
  async *scan(options: { maxBytes?: number; signal?: AbortSignal } = {}): AsyncGenerator<ScanItem<T>> {
    let cursor: string | undefined;
    for (;;) {
      const response = await this.transport.send({
        method: "GET",
        path: this.path + ":scan",
        query: { cursor, maxBytes: options.maxBytes },
        headers: this.headers(),
        replay: "read",
        signal: options.signal,
        collection: this.name,
      });
      const items = (await response.json()) as Array<{ routingKey: string; value?: unknown; valueB64?: string }>;
      for (const item of items) {
        const value = item.valueB64 !== undefined ? fromBase64(item.valueB64) : item.value;
        yield { routingKey: item.routingKey, value: value as T };
      }
      const next = response.headers.get("prisma-next-scan-cursor");
      if (response.headers.get("prisma-scan-complete") === "true" || next === null) return;
      cursor = next;
    }
  }

  /** Seals the collection (with a last JSON record when `final` is given). */
  async seal(options: SealOptions = {}): Promise<AppendResult | { sealed: true }> {
    const withFinal = "final" in options;
    const body: Record<string, unknown> = {};
    if (withFinal) body.final = options.final;
    if (options.routingKey !== undefined) body.routingKey = options.routingKey;
    const response = await this.transport.send({
      method: "POST",
      path: this.path + ":seal",
      headers: {
        "content-type": "application/json",
        ...(withFinal ? this.headers() : {}),
        ...producerHeaders(options.producer),
      },
      body: JSON.stringify(body),
      replay: !withFinal || options.producer ? "idempotent" : "once",
      signal: options.signal,
      collection: this.name,
    });
    return (await response.json()) as AppendResult | { sealed: true };
  }

  /** A watch of this collection (JSON collections created with watches). */
  watch(name: string): Watch {
    return new Watch(this as Collection<unknown>, this.transport, name, this.project, this.key);
  }

  /** A consumer group of this collection. */
  consumer(name: string): Consumer<T> {
    return new Consumer<T>(this.transport, this.path, this.name, name, this.key);
  }

  /** An exactly-once producer writing to this collection. */
  producer(id: string, options: ProducerOptions<T> = {}): Producer<T> {
    return new Producer<T>(this, id, options);
  }
}

/** A live read of one routing key (see {@link Collection.subscribe}). */
export class Subscription<T> implements AsyncIterable<StreamRecord<T>> {
  /** Where to resume without losing a record: the start of the page being
   * yielded, or after it once all of it was yielded. */
  cursor: string;
  private readonly collection: Collection<T>;
  private readonly options: SubscribeOptions;

  constructor(collection: Collection<T>, options: SubscribeOptions) {
    this.collection = collection;
    this.options = options;
    this.cursor = options.cursor ?? "beginning";
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<StreamRecord<T>> {
    const routingKey = this.options.routingKey ?? "";
    const delayMax = this.options.reconnectDelayMaxMs ?? 5_000;
    let live = false;
    let json = false;
    let events = this.options.events ?? true;
    let failures = 0;
    for (;;) {
      const at = { ...this.options, cursor: this.cursor };
      let pages: AsyncIterable<Page<T>>;
      if (live && json && events) pages = this.collection.eventPages(at);
      else pages = once(live ? this.collection.waitForRecords(at) : this.collection.read(at));
      try {
        for await (const page of pages) {
          failures = 0;
          const last = page.records.length - 1;
          for (let i = 0; i <= last; i++) {
            yield { value: page.records[i]!, routingKey, cursor: i === last ? page.cursor : undefined };
          }
          this.cursor = page.cursor;
          if (page.sealed) return;
          live = page.upToDate;
          json ||= page.json === true;
        }
      } catch (e) {
        if (!(e instanceof StreamsError)) throw e;
        if (!e.retryable) {
          // A server without the event route: long-poll instead.
          if (live && json && events && (e.status === 404 || e.status === 405)) {
            events = false;
            continue;
          }
          throw e;
        }
        failures++;
        this.options.onReconnect?.(e);
        const cap = Math.min(delayMax, 100 * 2 ** Math.min(failures, 16));
        await sleep((e.retryAfterMs ?? 0) + Math.random() * cap, this.options.signal);
      }
    }
  }
}

async function* once<P>(page: Promise<P>): AsyncGenerator<P> {
  yield await page;
}

/**
 * Pages from a `text/event-stream` body: a `data` event's lines joined are
 * a JSON array of records, committed by the `control` event after it.
 */
async function* readEvents<T>(
  body: ReadableStream<Uint8Array>,
  signal: AbortSignal | undefined,
  idleMs: number,
): AsyncGenerator<Page<T>> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let idle: ReturnType<typeof setTimeout> | undefined;
  const cancel = () => void reader.cancel().catch(() => undefined);
  const arm = () => {
    clearTimeout(idle);
    idle = setTimeout(cancel, idleMs);
  };
  signal?.addEventListener("abort", cancel, { once: true });
  let buffer = "";
  let event = "message";
  let data: string[] = [];
  let records: T[] = [];
  try {
    arm();
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (cause) {
        throw new StreamsError({ status: 0, code: "network_error", message: String(cause), retryable: true });
      }
      if (signal?.aborted) throw new StreamsError({ status: 0, code: "aborted", message: "the request was aborted", retryable: false });
      if (chunk.done) return;
      arm();
      buffer += decoder.decode(chunk.value, { stream: true });
      const lines = buffer.split("\n");
      buffer = lines.pop()!;
      for (const raw of lines) {
        const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
        if (line === "") {
          if (event === "data") records = records.concat(JSON.parse(data.join("\n")) as T[]);
          if (event === "control") {
            const c = JSON.parse(data.join("\n")) as { nextCursor: string; upToDate?: boolean; sealed?: boolean };
            yield { records, cursor: c.nextCursor, upToDate: c.upToDate === true, sealed: c.sealed === true, json: true };
            records = [];
          }
          event = "message";
          data = [];
        } else if (line.startsWith("event:")) {
          event = line.slice(6).trim();
        } else if (line.startsWith("data:")) {
          data.push(line.slice(5).replace(/^ /, ""));
        }
      }
    }
  } finally {
    clearTimeout(idle);
    signal?.removeEventListener("abort", cancel);
    cancel();
  }
}

function producerHeaders(p: ProducerTuple | undefined): Record<string, string | undefined> {
  if (!p) return {};
  return { "producer-id": p.id, "producer-epoch": String(p.epoch), "producer-seq": String(p.seq) };
}

function readQuery(options: ReadOptions): Record<string, string | number | undefined> {
  return {
    routingKey: options.routingKey || undefined,
    cursor: options.cursor,
    maxBytes: options.maxBytes,
  };
}

/** A value's request body: bytes as they are, anything else as JSON. */
function encodeValue(value: unknown): { body: string | Uint8Array; contentType: string | undefined } {
  if (value instanceof Uint8Array) return { body: value, contentType: undefined };
  if (value instanceof ArrayBuffer) return { body: new Uint8Array(value), contentType: undefined };
  return { body: JSON.stringify(value), contentType: "application/json" };
}

/** Decodes a read's answer (200 page or 204 none). */
async function decodePage<T>(response: Response): Promise<Page<T>> {
  const cursor = response.headers.get("prisma-next-cursor");
  if (cursor === null) {
    throw new StreamsError({ status: response.status, code: "invalid_answer", message: "a page without Prisma-Next-Cursor", retryable: false });
  }
  const upToDate = response.headers.get("prisma-up-to-date") === "true";
  const sealed = response.headers.get("prisma-sealed") === "true";
  let records: T[] = [];
  if (response.status !== 204) {
    if (isJsonType(response.headers.get("content-type"))) {
      records = (await response.json()) as T[];
    } else {
      const bytes = new Uint8Array(await response.arrayBuffer());
      if (bytes.length > 0) records = [bytes as T];
    }
  }
  return { records, cursor, upToDate, sealed, json: isJsonType(response.headers.get("content-type")) };
}

/** A string as a bytes collection's record. */
export function bytesOf(text: string): Uint8Array {
  return utf8(text);
}
