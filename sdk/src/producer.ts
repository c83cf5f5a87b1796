/**
 * Exactly-once producers. A producer owns one (collection, routing key,
 * producer id) scope and sends its records in order, batched, one request
 * in flight: each request carries `Producer-Id`/`-Epoch`/`-Seq`, and an
 * ambiguous outcome (503 `outcome_unknown`, a timeout, a reset) is resent
 * with the same tuple and body until the server answers for certain — a
 * request that had landed answers `duplicate`, so every record is written
 * exactly once.
 *
 * Restarts: with a {@link ProducerStore}, the producer saves its epoch and
 * sequence, and the request in flight, *before* sending it. A new process
 * with the same store first resends that request with its old tuple (so
 * it lands exactly once), then claims the next epoch (sequence 0), which
 * fences any older process still running with the same id.
 */

import type { Collection } from "./collection.js";
import { StreamsError } from "./errors.js";
import { sleep } from "./http.js";
import { fromBase64, toBase64 } from "./keys.js";
import { AppendResult } from "./types.js";

/** What a producer keeps across restarts. */
export interface ProducerState {
  epoch: number;
  /** The sequence number of the next request. */
  seq: number;
  /** The request sent with `seq` and not yet answered for certain. */
  inflight?: InflightRequest | undefined;
}

/** A request as stored: the route, the body (base64 when bytes). */
export interface InflightRequest {
  batch: boolean;
  body?: string;
  bodyB64?: string;
}

/** Where producers keep their state. */
export interface ProducerStore {
  load(key: string): Promise<ProducerState | undefined>;
  save(key: string, state: ProducerState): Promise<void>;
}

/** State in this process's memory only. */
export class MemoryProducerStore implements ProducerStore {
  private readonly states = new Map<string, ProducerState>();
  async load(key: string): Promise<ProducerState | undefined> {
    const s = this.states.get(key);
    return s && structuredClone(s);
  }
  async save(key: string, state: ProducerState): Promise<void> {
    this.states.set(key, structuredClone(state));
  }
}

/** State in `localStorage` (browsers), under `prefix + key`. */
export class LocalStorageProducerStore implements ProducerStore {
  constructor(
    private readonly storage: Storage = globalThis.localStorage,
    private readonly prefix = "strata-producer:",
  ) {}
  async load(key: string): Promise<ProducerState | undefined> {
    const text = this.storage.getItem(this.prefix + key);
    return text === null ? undefined : (JSON.parse(text) as ProducerState);
  }
  async save(key: string, state: ProducerState): Promise<void> {
    this.storage.setItem(this.prefix + key, JSON.stringify(state));
  }
}

export interface ProducerOptions<T> {
  routingKey?: string;
  store?: ProducerStore;
  /** Records one request carries at most (default 1,000; bytes records go one per request). */
  maxBatchRecords?: number;
  /** Records waiting to be sent at most; beyond it `append` throws `producer_queue_full` (default 100,000). */
  maxQueuedRecords?: number;
  /** Attempts of one request before the producer gives up and fails (default 50). */
  maxAttempts?: number;
  /** Aborting fails the request in flight and everything queued (`aborted`). */
  signal?: AbortSignal;
  /** Records of this type only (a marker for inference). */
  readonly records?: (value: T) => void;
}

interface Queued<T> {
  value: T;
  resolve: (r: AppendResult) => void;
  reject: (e: unknown) => void;
}

export class Producer<T = unknown> {
  readonly id: string;
  readonly routingKey: string;
  private readonly collection: Collection<T>;
  private readonly store: ProducerStore;
  private readonly storeKey: string;
  private readonly maxBatch: number;
  private readonly maxQueued: number;
  private readonly maxAttempts: number;
  private readonly signal: AbortSignal | undefined;
  private queue: Queued<T>[] = [];
  private state: ProducerState | undefined;
  private pumping: Promise<void> | undefined;
  private failed: unknown;
  private closed = false;
  private ackedInEpoch = false;

  constructor(collection: Collection<T>, id: string, options: ProducerOptions<T> = {}) {
    this.collection = collection;
    this.id = id;
    this.routingKey = options.routingKey ?? "";
    this.store = options.store ?? new MemoryProducerStore();
    this.storeKey = JSON.stringify([collection.name, this.routingKey, id]);
    this.maxBatch = Math.max(1, Math.min(options.maxBatchRecords ?? 1_000, 10_000));
    this.maxQueued = options.maxQueuedRecords ?? 100_000;
    this.maxAttempts = options.maxAttempts ?? 50;
    this.signal = options.signal;
  }

  /** The epoch and next sequence number (after the first request). */
  get position(): ProducerState | undefined {
    return this.state && { epoch: this.state.epoch, seq: this.state.seq };
  }

  /** Queues `value`; resolves once it is durable (exactly once). */
  append(value: T): Promise<AppendResult> {
    if (this.failed !== undefined) return Promise.reject(this.failed);
    if (this.closed) return Promise.reject(new TypeError("the producer is closed"));
    if (this.queue.length >= this.maxQueued) {
      return Promise.reject(
        new StreamsError({ status: 0, code: "producer_queue_full", message: "too many records wait to be sent", retryable: true }),
      );
    }
    return new Promise<AppendResult>((resolve, reject) => {
      this.queue.push({ value, resolve, reject });
      this.kick();
    });
  }

  /** Starts the pump unless it runs; a record queued as it ended starts it again. */
  private kick(): void {
    if (this.pumping) return;
    this.pumping = this.pump().finally(() => {
      this.pumping = undefined;
      if (this.queue.length > 0 && this.failed === undefined) this.kick();
    });
  }

  /** Resolves once everything queued so far is durable (or failed). */
  async flush(): Promise<void> {
    while (this.pumping) await this.pumping.catch(() => undefined);
    if (this.failed !== undefined) throw this.failed;
  }

  /** Flushes, then refuses further appends. */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
  }

  private async pump(): Promise<void> {
    try {
      await this.start();
      while (this.queue.length > 0) {
        const batch = this.takeBatch();
        const request = encodeRequest(batch.map((q) => q.value));
        let result: AppendResult;
        try {
          result = await this.send(request);
        } catch (e) {
          for (const q of batch) q.reject(e);
          throw e;
        }
        for (const q of batch) q.resolve(result);
      }
    } catch (e) {
      this.failed = e;
      for (const q of this.queue.splice(0)) q.reject(e);
    }
  }

  /** Loads the stored state once: resends what was in flight, then claims the next epoch. */
  private async start(): Promise<void> {
    if (this.state) return;
    const stored = await this.store.load(this.storeKey);
    if (stored?.inflight) {
      this.state = stored;
      await this.send(stored.inflight, true);
    }
    this.state = { epoch: stored ? stored.epoch + 1 : 0, seq: 0 };
    this.ackedInEpoch = false;
  }

  /** Takes the next batch: JSON values together, a bytes record alone. */
  private takeBatch(): Queued<T>[] {
    const first = this.queue[0]!;
    if (first.value instanceof Uint8Array) return this.queue.splice(0, 1);
    let n = 1;
    while (n < this.queue.length && n < this.maxBatch && !(this.queue[n]!.value instanceof Uint8Array)) n++;
    return this.queue.splice(0, n);
  }

  /** Sends `request` under the current tuple until answered for certain. */
  private async send(request: InflightRequest, resuming = false): Promise<AppendResult> {
    const state = this.state!;
    if (!resuming) {
      state.inflight = request;
      await this.store.save(this.storeKey, state);
    }
    for (let attempt = 1; ; attempt++) {
      const tuple = { id: this.id, epoch: state.epoch, seq: state.seq };
      try {
        const options = { routingKey: this.routingKey, producer: tuple, signal: this.signal };
        const result = request.batch
          ? await this.collection.appendMany(JSON.parse(request.body!) as T[], options)
          : await this.collection.append(decodeBody(request) as T, options);
        this.ackedInEpoch = true;
        await this.store.save(this.storeKey, { epoch: state.epoch, seq: state.seq + 1 });
        state.seq += 1;
        state.inflight = undefined;
        return result;
      } catch (e) {
        if (!(e instanceof StreamsError) || e.code === "aborted") throw e;
        if (e.code === "stale_producer_epoch" && !this.ackedInEpoch && !resuming) {
          // Another process used this id with a newer epoch before we sent
          // anything under ours: claim the one after it.
          const current = Number(e.details?.currentEpoch ?? state.epoch);
          state.epoch = current + 1;
          state.seq = 0;
          await this.store.save(this.storeKey, state);
          continue;
        }
        if (resuming && (e.code === "stale_producer_epoch" || e.code === "producer_gap" || e.code === "sealed")) {
          // The stored request can no longer land as it was: it either
          // landed before a newer epoch, or never will. Move on.
          return { cursor: "", count: 0, duplicate: true, sealed: e.code === "sealed" };
        }
        if (!(e.retryable || e.outcomeUnknown) || attempt >= this.maxAttempts) throw e;
        const cap = Math.min(5_000, 100 * 2 ** Math.min(attempt, 16));
        await sleep((e.retryAfterMs ?? 0) + Math.random() * cap, this.signal);
      }
    }
  }
}

function encodeRequest(values: unknown[]): InflightRequest {
  const first = values[0];
  if (first instanceof Uint8Array) return { batch: false, bodyB64: toBase64(first) };
  if (values.length === 1) return { batch: false, body: JSON.stringify(first) };
  return { batch: true, body: JSON.stringify(values) };
}

function decodeBody(request: InflightRequest): unknown {
  if (request.bodyB64 !== undefined) return fromBase64(request.bodyB64);
  return JSON.parse(request.body!);
}
