/**
 * Errors the SDK throws. Every answer the server refuses becomes a
 * {@link StreamsError} carrying the server's stable `code`, whether it is
 * `retryable`, and the `Retry-After` it asked for; failures to reach the
 * server at all are `StreamsError`s with `status` 0 and code `network_error`
 * (or `timeout`, `aborted`).
 */

/** The JSON error body the product API answers with. */
export interface ErrorBody {
  error?: {
    code?: string;
    message?: string;
    details?: Record<string, unknown>;
    retryable?: boolean;
  };
}

export interface StreamsErrorInit {
  status: number;
  code: string;
  message: string;
  retryable: boolean;
  retryAfterMs?: number | undefined;
  details?: Record<string, unknown> | undefined;
  replayTo?: string | undefined;
}

export class StreamsError extends Error {
  /** The HTTP status (0 when no answer arrived). */
  readonly status: number;
  /** The server's stable error code, e.g. `producer_gap`, `sealed`. */
  readonly code: string;
  /** True exactly when the same request may be sent again later. */
  readonly retryable: boolean;
  /** How long the server asked the client to wait (`Retry-After`). */
  readonly retryAfterMs: number | undefined;
  /** The error's `details`, where the server gives them. */
  readonly details: Record<string, unknown> | undefined;
  /** `Streams-Replay-To`: the fleet member that serves the collection. */
  readonly replayTo: string | undefined;

  constructor(init: StreamsErrorInit) {
    super(init.message);
    this.name = "StreamsError";
    this.status = init.status;
    this.code = init.code;
    this.retryable = init.retryable;
    this.retryAfterMs = init.retryAfterMs;
    this.details = init.details;
    this.replayTo = init.replayTo;
  }

  /** The write may or may not have landed (503 `outcome_unknown`, or no answer). */
  get outcomeUnknown(): boolean {
    return this.code === "outcome_unknown" || this.status === 0;
  }
}

/** `Retry-After` in milliseconds: seconds, or an HTTP date. */
export function parseRetryAfter(value: string | null, nowMs: number): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value.trim());
  if (Number.isFinite(seconds) && seconds >= 0) return Math.round(seconds * 1000);
  const at = Date.parse(value);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}

/** The error a refused answer stands for (reads its body once). */
export async function errorFromResponse(response: Response, nowMs: number): Promise<StreamsError> {
  let body: ErrorBody = {};
  const text = await response.text().catch(() => "");
  try {
    body = JSON.parse(text) as ErrorBody;
  } catch {
    body = {};
  }
  const status = response.status;
  const e = body.error ?? {};
  return new StreamsError({
    status,
    code: e.code ?? `http_${status}`,
    message: e.message ?? (text.slice(0, 200) || `HTTP ${status}`),
    retryable: e.retryable ?? (status === 429 || status === 503),
    retryAfterMs: parseRetryAfter(response.headers.get("retry-after"), nowMs),
    details: e.details,
    replayTo: response.headers.get("streams-replay-to") ?? undefined,
  });
}

/** The error for a request that got no answer. */
export function transportError(cause: unknown, signal: AbortSignal | undefined): StreamsError {
  if (signal?.aborted) {
    return new StreamsError({
      status: 0,
      code: "aborted",
      message: "the request was aborted",
      retryable: false,
    });
  }
  const timedOut = cause instanceof Error && cause.name === "TimeoutError";
  return new StreamsError({
    status: 0,
    code: timedOut ? "timeout" : "network_error",
    message: cause instanceof Error ? cause.message : String(cause),
    retryable: true,
  });
}
