/**
 * `@strata/streams`: a dependency-free client for Strata's product API
 * (`/v1/streams`), for Node 18+, Bun, Deno and browsers (fetch, streams and
 * WebCrypto only).
 */

export { StreamsClient } from "./client.js";
export type { ClientOptions, CreateOptions } from "./client.js";
export { Collection, Subscription, bytesOf } from "./collection.js";
export type { AppendOptions, ReadOptions, SealOptions, SubscribeOptions, ProducerTuple } from "./collection.js";
export { Producer, MemoryProducerStore, LocalStorageProducerStore } from "./producer.js";
export type { ProducerOptions, ProducerState, ProducerStore, InflightRequest } from "./producer.js";
export { StreamsError } from "./errors.js";
export type { RetryOptions, Replay } from "./http.js";
export { generateKey, toBase64, toBase64Url, fromBase64, toHex, fromHex } from "./keys.js";
export type * from "./types.js";
