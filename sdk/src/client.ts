/**
 * The entry point: a `StreamsClient` knows the server's base URL and the
 * project's bearer token, and hands out {@link Collection}s.
 */

import { Collection, namePath } from "./collection.js";
import { Transport, TransportOptions } from "./http.js";
import { keyText } from "./keys.js";
import { CatalogEntry, Expiry, Format, Metadata, WatchDefinition } from "./types.js";

export interface ClientOptions extends Omit<TransportOptions, "baseUrl"> {
  /** The server, e.g. `http://127.0.0.1:8080`. */
  baseUrl?: string;
  /** Alias of `baseUrl`. */
  url?: string;
  /** The token's project (watch capabilities name it; default `default`). */
  project?: string;
}

export interface CreateOptions {
  /** 32 bytes, or their base64url/base64 text: never stored by the server. */
  encryptionKey: string | Uint8Array;
  format: Format;
  expiry?: Expiry;
  watches?: WatchDefinition[];
  signal?: AbortSignal;
}

export class StreamsClient {
  readonly transport: Transport;
  readonly project: string;

  constructor(options: ClientOptions) {
    const baseUrl = options.baseUrl ?? options.url;
    if (!baseUrl) throw new TypeError("StreamsClient needs a baseUrl");
    this.transport = new Transport({ ...options, baseUrl });
    this.project = options.project ?? "default";
  }

  /** A handle on an existing collection (no request is made). */
  stream<T = unknown>(name: string, options: { encryptionKey: string | Uint8Array }): Collection<T> {
    return new Collection<T>(this.transport, name, options.encryptionKey, this.project);
  }

  /**
   * Creates a collection, or confirms one with the same configuration
   * exists (safe to retry); another configuration throws `config_mismatch`.
   */
  async createStream<T = unknown>(name: string, options: CreateOptions): Promise<Collection<T>> {
    const doc: Record<string, unknown> = { format: options.format };
    if (options.expiry) doc.expiry = options.expiry;
    if (options.watches) doc.watches = options.watches;
    await this.transport.send({
      method: "PUT",
      path: namePath(name),
      headers: { "content-type": "application/json", "prisma-encryption-key": keyText(options.encryptionKey) },
      body: JSON.stringify(doc),
      replay: "idempotent",
      signal: options.signal,
      collection: name,
    });
    return this.stream<T>(name, options);
  }

  /** A collection's metadata (no stream key needed). */
  async metadata(name: string, options: { signal?: AbortSignal } = {}): Promise<Metadata> {
    return this.transport.json<Metadata>({
      method: "GET",
      path: namePath(name),
      replay: "read",
      signal: options.signal,
      collection: name,
    });
  }

  /** Deletes a collection. */
  async deleteStream(name: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    await this.transport.send({
      method: "DELETE",
      path: namePath(name),
      replay: "idempotent",
      signal: options.signal,
      collection: name,
    });
  }

  /** The project's collections, page by page (`limit` per page, default 100). */
  async *listStreams(options: { limit?: number; signal?: AbortSignal } = {}): AsyncGenerator<CatalogEntry> {
    let cursor: string | undefined;
    do {
      const page = await this.transport.json<{ streams: CatalogEntry[]; cursor?: string }>({
        method: "GET",
        path: "/v1/streams",
        query: { cursor, limit: options.limit },
        replay: "read",
        signal: options.signal,
      });
      yield* page.streams;
      cursor = page.cursor;
    } while (cursor !== undefined);
  }
}
