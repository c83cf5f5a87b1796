//! Routes of the reserved `__ds` API under `/v1/stream/__ds/`: the JWKS, and
//! subscriptions with their streams, callbacks, claims, acks and releases.
//!
//! Everything HTTP about subscriptions lives here (docs/ARCHITECTURE.md, §1:
//! only `server/src/http` knows status codes; the subscription service,
//! `service/subscriptions`, knows no HTTP):
//! * `handlers.rs` — the routes, and each request through the service;
//! * `parse.rs` — request bodies into the service's typed requests, with the
//!   validation messages;
//! * `errors.rs` — service errors and refusals to statuses and JSON error codes.

mod errors;
mod handlers;
mod parse;

pub use errors::{status_of, BadRequest};
pub use handlers::{handle, parse_route, SubAction, SubRoute};
pub use parse::{parse_ack, parse_add_streams, parse_claim, parse_config, parse_release};
