//! What both HTTP surfaces share (docs/ARCHITECTURE.md, "The HTTP layer"):
//! the server state a handler reaches ([`state`]), the error answer and the
//! one table from service errors to status codes ([`error`]), request
//! reading — bounded bodies, header text, stream names, producer headers
//! ([`request`]) — and response building — bodies, the headers every answer
//! carries, the CORS preflight, record rendering ([`response`]) — and the
//! fleet's peer key ([`peer_key`]), the metrics (`/metrics`, [`metrics`]) and a
//! project's usage over the fleet ([`usage`]).
//!
//! Nothing here knows a route: the router and the surfaces import this
//! module, never the other way round.

pub mod error;
pub mod metrics;
pub mod metrics_projects;
pub mod peer_key;
pub mod refusals;
pub mod request;
pub mod response;
pub mod state;
pub mod usage;

pub use error::{ApiError, ApiResult, REPLAY_TO};
pub use request::{
    ascii_header, decode_stream_name, producer_headers, read_body_within, BufferedBody, NameError,
    ProducerHeaders, SAFE_INTEGER_MAX,
};
pub use response::{common_headers, empty, full, preflight, render, set, with_status, Body};
pub use state::{
    AppState, FleetHttp, FleetRouting, HttpConfig, LiveSlot, PeerBody, PeerClient,
    CONNECTION_BUFFER_BYTES_MAX, LIVE_BUDGET_FIRST_WAIT_MAX, LIVE_BUDGET_WAIT_MAX,
    WRITES_IN_FLIGHT_MAX,
};
