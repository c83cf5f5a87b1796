/**
 * The transport: one place that sends requests to the server, with the
 * bearer token, a timeout per attempt, the caller's `AbortSignal`, retries
 * of answers that say "nothing was applied, try again" (429, 503) with
 * exponential backoff, full jitter and the server's `Retry-After` as a
 * floor, and fleet routing (`Streams-Replay-To`, 409 `not_stream_owner`).
 *
 * Whether a request may be sent again after an *ambiguous* outcome (503
 * `outcome_unknown`, a timeout, a reset connection) is the caller's call,
 * stated per request as its {@link Replay} class: reads and idempotent
 * writes are resent, a plain append is not (it could land twice).
 */

import { StreamsError, errorFromResponse, transportError } from "./errors.js";

/** How a request may be resent. */
export type Replay =
  /** Reads: resend after any retryable answer or transport failure. */
  | "read"
  /** Writes that are safe to repeat (creates, seals, deletes, producer
   * appends with the same tuple): resend after ambiguous outcomes too. */
  | "idempotent"
  /** Plain appends: resend only when the server says nothing was applied. */
  | "once";

export interface RetryOptions {
  /** Attempts per request, the first included (default 8). */
  maxAttempts?: number;
  /** The first backoff (default 100 ms), doubled per attempt… */
  baseDelayMs?: number;
  /** …up to this (default 5,000 ms). */
  maxDelayMs?: number;
}

export interface TransportOptions {
  baseUrl: string;
  token?: string | undefined;
  fetch?: typeof fetch | undefined;
  /** Per attempt (default 30,000 ms; live reads add their wait). */
  timeoutMs?: number | undefined;
  retry?: RetryOptions | undefined;
  /** Randomness for jitter (default `Math.random`), injectable for tests. */
  random?: (() => number) | undefined;
  /** Called before each resend, with the error that caused it (logging, metrics). */
  onRetry?: ((error: StreamsError, attempt: number) => void) | undefined;
}

export interface RequestSpec {
  method: string;
  /** Path below the base URL, already encoded, starting with `/`. */
  path: string;
  query?: Record<string, string | number | undefined> | undefined;
  headers?: Record<string, string | undefined> | undefined;
  body?: string | Uint8Array | undefined;
  replay: Replay;
  signal?: AbortSignal | undefined;
  /** Added to the attempt timeout (a live read's own wait). */
  extraTimeoutMs?: number | undefined;
  /** The collection the request is about: fleet routing remembers its member. */
  collection?: string | undefined;
}

/** Status codes whose answer says the request was not applied. */
function notApplied(e: StreamsError): boolean {
  if (e.status === 429) return true;
  return e.status === 503 && e.code !== "outcome_unknown";
}

/** Members remembered per collection, at most this many. */
const ROUTES_MAX = 1024;

export class Transport {
  readonly baseUrl: string;
  private readonly token: string | undefined;
  private readonly fetchFn: typeof fetch;
  private readonly timeoutMs: number;
  private readonly maxAttempts: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly random: () => number;
  private readonly onRetry: ((error: StreamsError, attempt: number) => void) | undefined;
  /** Collection name → the fleet member that serves it. */
  private readonly routes = new Map<string, string>();

  constructor(options: TransportOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.token = options.token;
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("no fetch: pass one in the options");
    this.fetchFn = f.bind(globalThis);
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.maxAttempts = Math.max(1, options.retry?.maxAttempts ?? 8);
    this.baseDelayMs = options.retry?.baseDelayMs ?? 100;
    this.maxDelayMs = options.retry?.maxDelayMs ?? 5_000;
    this.random = options.random ?? Math.random;
    this.onRetry = options.onRetry;
  }

  /** Sends `spec`, retrying as its replay class allows; a refusal throws. */
  async send(spec: RequestSpec): Promise<Response> {
    let lastError: StreamsError | undefined;
    for (let attempt = 0; attempt < this.maxAttempts; attempt++) {
      if (attempt > 0 && lastError) {
        this.onRetry?.(lastError, attempt);
        await this.backoff(attempt, lastError, spec.signal);
      }
      const origin = this.originFor(spec.collection);
      let response: Response;
      try {
        response = await this.once(origin, spec);
      } catch (cause) {
        const e = transportError(cause, spec.signal);
        if (e.code === "aborted" || spec.replay === "once") throw e;
        if (origin !== this.baseUrl && spec.collection !== undefined) {
          this.routes.delete(spec.collection);
        }
        lastError = e;
        continue;
      }
      this.learnRoute(spec.collection, response);
      if (response.ok) return response;
      const e = await errorFromResponse(response, Date.now());
      if (e.code === "not_stream_owner" && e.replayTo && spec.collection !== undefined) {
        this.remember(spec.collection, e.replayTo);
        lastError = new StreamsError({ ...e, retryable: true, retryAfterMs: 0, message: e.message });
        continue;
      }
      const again = spec.replay === "once" ? notApplied(e) : e.retryable;
      if (!again) throw e;
      lastError = e;
    }
    throw lastError ?? new StreamsError({ status: 0, code: "network_error", message: "no attempt made", retryable: true });
  }

  /** Sends and parses a JSON answer. */
  async json<T>(spec: RequestSpec): Promise<T> {
    const response = await this.send(spec);
    return (await response.json()) as T;
  }

  private async once(origin: string, spec: RequestSpec): Promise<Response> {
    const url = new URL(origin + spec.path);
    for (const [k, v] of Object.entries(spec.query ?? {})) {
      if (v !== undefined) url.searchParams.set(k, String(v));
    }
    const headers = new Headers();
    if (this.token !== undefined) headers.set("authorization", `Bearer ${this.token}`);
    for (const [k, v] of Object.entries(spec.headers ?? {})) {
      if (v !== undefined) headers.set(k, v);
    }
    const timeout = this.timeoutMs + (spec.extraTimeoutMs ?? 0);
    const { signal, done } = withTimeout(spec.signal, timeout);
    try {
      const init: RequestInit = { method: spec.method, headers, signal };
      if (spec.body !== undefined) init.body = spec.body as BodyInit;
      const response = await this.fetchFn(url, init);
      return response;
    } finally {
      done();
    }
  }

  private async backoff(attempt: number, e: StreamsError, signal: AbortSignal | undefined): Promise<void> {
    const cap = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (attempt - 1));
    const floor = e.retryAfterMs ?? 0;
    await sleep(floor + this.random() * cap, signal);
  }

  private originFor(collection: string | undefined): string {
    return (collection !== undefined && this.routes.get(collection)) || this.baseUrl;
  }

  private learnRoute(collection: string | undefined, response: Response): void {
    const to = response.headers.get("streams-replay-to");
    if (collection !== undefined && to && response.ok) this.remember(collection, to);
  }

  private remember(collection: string, url: string): void {
    let origin: string;
    try {
      origin = new URL(url).origin;
    } catch {
      return;
    }
    if (this.routes.size >= ROUTES_MAX) this.routes.clear();
    this.routes.set(collection, origin);
  }
}

/** Sleeps `ms`, or until `signal` aborts (then throws `aborted`). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(transportError(undefined, signal));
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(transportError(undefined, signal));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A signal that aborts with the caller's or after `ms` (a `TimeoutError`). */
function withTimeout(outer: AbortSignal | undefined, ms: number): { signal: AbortSignal; done: () => void } {
  const controller = new AbortController();
  const timer = setTimeout(() => {
    controller.abort(new DOMException("the request timed out", "TimeoutError"));
  }, ms);
  const onAbort = () => controller.abort(outer?.reason);
  if (outer?.aborted) controller.abort(outer.reason);
  outer?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: controller.signal,
    done: () => {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    },
  };
}
