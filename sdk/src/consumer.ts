/**
 * Consumer groups: configure, read and delete a consumer; pull leases and
 * settle them; and `consume`, a loop that pulls, runs a handler per
 * message (several at once — the server leases at most one record per
 * routing key at a time, so per-key order holds), extends the leases of
 * slow handlers, and settles each batch in one request.
 *
 * Delivery is at least once: a handler may see a message again after a
 * crash, an expired lease or an ambiguous settle. Pulls and settles are
 * resent after ambiguous outcomes (a lost pull's leases expire and their
 * records come back; a settle resent with a settled token counts it stale).
 */

import { StreamsError } from "./errors.js";
import { sleep, Transport } from "./http.js";

export interface ConsumerConfig {
  visibilityTimeoutMs?: number;
  maxAttempts?: number;
  deadLetterStream?: string;
  maxBatchRecords?: number;
}

/** A consumer's configuration in normal form, with its version. */
export interface ConsumerInfo {
  config: Required<Omit<ConsumerConfig, "deadLetterStream">> & { deadLetterStream?: string };
  /** `Prisma-Consumer-Version`: deleting needs it. */
  version: number;
  /** Whether configure created it (201). */
  created: boolean;
}

export interface Message<T> {
  /** Names the record for this consumer (stable across deliveries). */
  id: string;
  routingKey: string;
  attempts: number;
  /** Names this delivery: settle with it. */
  leaseToken: string;
  /** The record (JSON collections), or its standard base64 (others). */
  value: T;
}

export interface PullOptions {
  max?: number;
  /** Long-poll up to this long for a message (0–25,000 ms, default 0). */
  waitMs?: number;
  /** This pull's lease time instead of the consumer's. */
  visibilityMs?: number;
  signal?: AbortSignal;
}

export interface SettleRequest {
  acks?: string[];
  retries?: Array<{ leaseToken: string; delayMs?: number }>;
  extends?: Array<{ leaseToken: string; visibilityMs: number }>;
  signal?: AbortSignal;
}

export interface SettleResult {
  acked: number;
  retried: number;
  extended: number;
  dlq: number;
  stale: number;
  backlog: number;
  dlqBlocked: number;
}

/** What a handler may do with its message (default: acknowledge on return). */
export interface MessageControl {
  ack(): void;
  retry(options?: { delayMs?: number }): void;
}

export interface ConsumeOptions {
  /** Handlers running at once (default 10). */
  concurrency?: number;
  /** Each pull's long-poll (default 20,000 ms). */
  waitMs?: number;
  /** Lease time (default: the consumer's). Slow handlers' leases are extended at two thirds of it. */
  visibilityMs?: number;
  /** A throwing handler's retry delay (default 1,000 ms). */
  retryDelayMs?: number;
  signal?: AbortSignal;
  /** Called when a handler throws (the message is retried). */
  onError?: (error: unknown, message: Message<unknown>) => void;
}

export class Consumer<T = unknown> {
  readonly name: string;
  readonly collection: string;
  private readonly transport: Transport;
  private readonly path: string;
  private readonly key: string;

  constructor(transport: Transport, collectionPath: string, collection: string, name: string, key: string) {
    this.transport = transport;
    this.collection = collection;
    this.name = name;
    this.key = key;
    this.path = `${collectionPath}/consumers/${encodeURIComponent(name)}`;
  }

  /** Creates the consumer, or confirms it exists with this configuration. */
  async configure(config: ConsumerConfig = {}, options: { signal?: AbortSignal } = {}): Promise<ConsumerInfo> {
    const response = await this.transport.send({
      method: "PUT",
      path: this.path,
      headers: { "content-type": "application/json", "prisma-encryption-key": this.key },
      body: JSON.stringify(config),
      replay: "idempotent",
      signal: options.signal,
      collection: this.collection,
    });
    return info(response);
  }

  /** The consumer's configuration and version. */
  async get(options: { signal?: AbortSignal } = {}): Promise<ConsumerInfo> {
    const response = await this.transport.send({
      method: "GET",
      path: this.path,
      replay: "read",
      signal: options.signal,
      collection: this.collection,
    });
    return info(response);
  }

  /** Deletes the consumer at `version` (`consumer_version_conflict` if it was recreated). */
  async delete(version: number, options: { signal?: AbortSignal } = {}): Promise<void> {
    await this.transport.send({
      method: "DELETE",
      path: this.path,
      headers: { "prisma-consumer-version": String(version) },
      replay: "idempotent",
      signal: options.signal,
      collection: this.collection,
    });
  }

  /** Leases up to `max` messages, waiting up to `waitMs` for one. */
  async pull(options: PullOptions = {}): Promise<{ messages: Message<T>[]; backlog: number }> {
    const body: Record<string, number> = {};
    if (options.max !== undefined) body.max = options.max;
    if (options.waitMs !== undefined) body.waitMs = Math.min(options.waitMs, 25_000);
    if (options.visibilityMs !== undefined) body.visibilityMs = options.visibilityMs;
    return this.transport.json({
      method: "POST",
      path: this.path + ":pull",
      headers: { "content-type": "application/json", "prisma-encryption-key": this.key },
      body: JSON.stringify(body),
      replay: "idempotent",
      signal: options.signal,
      extraTimeoutMs: body.waitMs ?? 0,
      collection: this.collection,
    });
  }

  /** Acknowledges, retries and extends leases in one atomic change. */
  async settle(request: SettleRequest): Promise<SettleResult> {
    const body = {
      acks: (request.acks ?? []).map((leaseToken) => ({ leaseToken })),
      retries: request.retries ?? [],
      extends: request.extends ?? [],
    };
    return this.transport.json({
      method: "POST",
      path: this.path + ":settle",
      headers: { "content-type": "application/json", "prisma-encryption-key": this.key },
      body: JSON.stringify(body),
      replay: "idempotent",
      signal: request.signal,
      collection: this.collection,
    });
  }

  /**
   * Runs `handler` for every message until `signal` aborts: a handler that
   * returns acknowledges its message (unless it called `retry`), one that
   * throws retries it after `retryDelayMs`.
   */
  async consume(
    handler: (message: Message<T>, control: MessageControl) => unknown,
    options: ConsumeOptions = {},
  ): Promise<void> {
    const concurrency = Math.max(1, options.concurrency ?? 10);
    const visibilityMs = options.visibilityMs ?? (await this.get({ signal: options.signal })).config.visibilityTimeoutMs;
    let failures = 0;
    while (!options.signal?.aborted) {
      let batch: Message<T>[];
      try {
        const pulled = await this.pull({ max: concurrency, waitMs: options.waitMs ?? 20_000, visibilityMs, signal: options.signal });
        batch = pulled.messages;
        failures = 0;
      } catch (e) {
        if (options.signal?.aborted) return;
        if (!(e instanceof StreamsError) || !e.retryable) throw e;
        failures++;
        await sleep((e.retryAfterMs ?? 0) + Math.random() * Math.min(5_000, 100 * 2 ** Math.min(failures, 16)), options.signal).catch(() => undefined);
        continue;
      }
      if (batch.length > 0) await this.runBatch(batch, handler, visibilityMs, options);
    }
  }

  private async runBatch(
    batch: Message<T>[],
    handler: (message: Message<T>, control: MessageControl) => unknown,
    visibilityMs: number,
    options: ConsumeOptions,
  ): Promise<void> {
    const acks: string[] = [];
    const retries: Array<{ leaseToken: string; delayMs: number }> = [];
    const retryDelayMs = options.retryDelayMs ?? 1_000;
    await Promise.all(
      batch.map(async (message) => {
        let decided: "ack" | { delayMs: number } | undefined;
        const control: MessageControl = {
          ack: () => (decided ??= "ack"),
          retry: (o) => (decided ??= { delayMs: o?.delayMs ?? retryDelayMs }),
        };
        const extender = setInterval(() => {
          this.settle({ extends: [{ leaseToken: message.leaseToken, visibilityMs }] }).catch(() => undefined);
        }, Math.max(500, Math.floor((visibilityMs * 2) / 3)));
        try {
          await handler(message, control);
          decided ??= "ack";
        } catch (e) {
          options.onError?.(e, message as Message<unknown>);
          decided ??= { delayMs: retryDelayMs };
        } finally {
          clearInterval(extender);
        }
        if (decided === "ack") acks.push(message.leaseToken);
        else retries.push({ leaseToken: message.leaseToken, ...decided });
      }),
    );
    await this.settle({ acks, retries }).catch((e) => {
      // Unsettled leases expire and their messages come back (at least once).
      if (!(e instanceof StreamsError) || !e.retryable) throw e;
    });
  }
}

async function info(response: Response): Promise<ConsumerInfo> {
  const config = (await response.json()) as ConsumerInfo["config"];
  return { config, version: Number(response.headers.get("prisma-consumer-version") ?? 0), created: response.status === 201 };
}
