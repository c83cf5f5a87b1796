/** The product API's documents, as the SDK hands them out. */

/** A collection's record format. */
export type Format = { kind: "json" } | { kind: "bytes"; contentType?: string };

export interface WatchDefinition {
  name: string;
  /** JSON pointers, e.g. `/customerId`. */
  fields: string[];
}

export interface Expiry {
  /** Idle expiry: `"30d"`, `"12h"`, `"45m"`, `"30s"` or seconds. */
  idle?: string | number;
  /** An RFC 3339 instant. */
  at?: string;
}

/** `GET /v1/streams/{name}`. */
export interface Metadata {
  name: string;
  contentType: string;
  createdAt: number;
  sealed: boolean;
  expiry?: { idle?: string; at?: string };
  watches?: WatchDefinition[];
  /** The incarnation's epoch (hex), present when the collection has watches. */
  epoch?: string;
}

/** One entry of the catalog. */
export interface CatalogEntry {
  name: string;
  contentType: string;
  createdAt: number;
}

/** The answer to an append, a batch or a final seal. */
export interface AppendResult {
  /** A key cursor after the appended records. */
  cursor: string;
  count: number;
  /** A producer retry of a request that had landed: nothing was written. */
  duplicate: boolean;
  sealed: boolean;
}

/** One page of a routing key. */
export interface Page<T> {
  records: T[];
  /** Where the next read starts. */
  cursor: string;
  /** The page reaches the collection's tail. */
  upToDate: boolean;
  /** The collection is sealed and this key is read to its end. */
  sealed: boolean;
  /** Whether the collection holds JSON records (from the answer's media type). */
  json?: boolean;
}

/** A record as a subscription yields it. */
export interface StreamRecord<T> {
  value: T;
  routingKey: string;
  /**
   * Set on the last record of each page: resuming from it continues after
   * this record. Other records have none (resume from
   * `Subscription.cursor`, which may deliver the rest of their page again).
   */
  cursor: string | undefined;
}

/** One item of a snapshot scan. */
export interface ScanItem<T> {
  routingKey: string;
  value: T;
}
