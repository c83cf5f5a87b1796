//! The HTTP layer of the `strata` server (docs/ARCHITECTURE.md, "The HTTP
//! layer"): every status code, header and JSON error code the server sends
//! is decided under this module. Module declarations and re-exports only:
//!
//! * [`router`]: one request start to finish, routing to the surfaces;
//! * [`raw`]: `/v1/stream/{name}`, the Durable Streams protocol;
//! * [`product`]: `/v1/streams…`, the product API;
//! * [`subscriptions`]: the reserved `__ds` API;
//! * [`live`]: long-poll and SSE for both surfaces;
//! * [`fleet`]: forwarding to (or replaying toward) the member that serves
//!   a stream, and the hand-off hint;
//! * [`peers`]: the routes only fleet members call (the peer key, the
//!   subscription relay) and their client;
//! * [`common`]: what the surfaces share (state, errors, bodies, headers).
//!
//! Imports go down that list: the router names the surfaces, the surfaces
//! name `live` and `common`, `fleet` and `peers` name `common`, and `common`
//! names no surface.

pub mod common;
pub mod debug;
pub mod fleet;
pub mod live;
pub mod peers;
pub mod product;
pub mod raw;
pub mod router;
pub mod subscriptions;

pub use common::{
    ascii_header, decode_stream_name, empty, full, ApiError, ApiResult, AppState, Body, FleetHttp,
    FleetRouting, HttpConfig, LiveSlot, CONNECTION_BUFFER_BYTES_MAX, WRITES_IN_FLIGHT_MAX,
};
pub use router::{handle, metrics_listener, parse_request, Command, ParseConfig};
