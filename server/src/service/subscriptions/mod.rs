//! Subscriptions: the reserved `__ds` API of the Durable Streams surface, as a
//! service that knows no HTTP (its routes are `http/subscriptions.rs`).
//!
//! A subscription links streams (explicitly, or by a glob `pattern` over stream
//! names: `*` one segment, `**` any number) and remembers, per stream, the
//! offset its consumer has acknowledged. When a linked stream has records past
//! that offset the subscription *wakes*: its `generation` grows, a `wake_id` is
//! minted and the linked tails are snapshotted. A webhook subscription POSTs the
//! wake to its URL, signed with the server's Ed25519 key (published at
//! `__ds/jwks.json`); a pull-wake subscription appends a wake event to its wake
//! stream, and workers `claim` it. Acknowledgements (`callback` / `ack`) and
//! `release` carry a token scoped to (subscription, generation) and the current
//! `wake_id`/`generation`: anything stale is refused as fenced. A lease bounds
//! how long a wake may stay unanswered before it is re-issued.
//!
//! Subscriptions belong to a project (the caller's token names it; a
//! callback token names its own). Everything about a subscription — its
//! configuration, links, acknowledged offsets, generation and the wake in
//! flight with its holder and lease deadline — is stored as a CAS JSON
//! object, so the server that serves the subscriptions next (after a
//! restart, or in a fleet the next owner of shard 0) carries every wake on
//! with the same tokens: tokens are HMAC-SHA256 under a key derived from the
//! store's server seed. In a fleet, members tell the coordinator about
//! appends and answer it the tails of their streams (`coordinator.rs`).
//! Webhook URLs must be `https` to a
//! public address; plain-HTTP loopback URLs are allowed only when the server
//! is started with `--allow-loopback-webhooks` (development and the
//! conformance suite).
//!
//! The files (docs/ARCHITECTURE.md, "Rules of the house": one owner per
//! concern, no import circle between files):
//! * `service.rs` — the [`Subscriptions`] facade, where they are served, CRUD;
//! * `wakes.rs` — the wake logic, leases, claim, acknowledge, release;
//! * `delivery.rs` — one webhook wake being delivered;
//! * `coordinator.rs` — the fleet: the coordinator, the relay, remote tails;
//! * `observer.rs` — the stream observer that feeds it appends and moves;
//! * `store.rs` — the stored records and their CAS storage;
//! * `webhook.rs` — the webhook client: SSRF rules, bounded delivery;
//! * `signing.rs` — the Ed25519 signing key and the JWKS document;
//! * `tokens.rs` — HMAC callback tokens;
//! * `requests.rs`, `answers.rs` — typed requests and answers;
//! * `paths.rs` — path normalisation and globs;
//! * `error.rs` — [`SubError`] and [`OpenError`], with no HTTP statuses.

mod answers;
pub mod coordinator;
mod delivery;
mod error;
mod observer;
mod paths;
mod requests;
mod service;
mod signing;
mod store;
mod tokens;
mod wakes;
mod webhook;

pub use answers::{
    AckAnswer, ClaimAnswer, Description, LinkType, LinkedStream, PutAnswer, Signing, StreamState,
    SubStatus, WakeBody, WakeEvent, WebhookDescription,
};
pub use error::{OpenError, SubError};
pub use observer::SubscriptionObserver;
pub use paths::{glob_match, normalise_path};
pub use requests::{
    check_id, AckEntry, AckRequest, AddStreamsRequest, ClaimRequest, WakeRef, EXPLICIT_STREAMS_MAX,
    ID_BYTES_MAX, LEASE_MS_DEFAULT, LEASE_MS_MAX, LEASE_MS_MIN,
};
pub use service::Subscriptions;
pub use signing::{Jwk, Jwks, Signer};
pub use store::{Kind, Link, StoredWake, SubConfig, SubRecord};
pub use tokens::{VerifiedToken, TOKEN_LIFETIME_S};
pub use webhook::{DeliveryPolicy, DELIVERY_ATTEMPTS_MAX, REPLY_BYTES_MAX};
