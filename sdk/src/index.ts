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
export { Consumer } from "./consumer.js";
export type { ConsumerConfig, ConsumerInfo, Message, MessageControl, PullOptions, SettleRequest, SettleResult, ConsumeOptions } from "./consumer.js";
export { Watch, watchKey, definitionId, canonicalJson, pointerValue, waitSigKey, signCapability, CAPABILITY_LIFETIME_S_MAX } from "./watches.js";
export type { Invalidation, ObserveOptions, CapabilityScope } from "./watches.js";
