//! `/v1/stream/{name}`: the Durable Streams protocol over the stream service
//! (docs/ARCHITECTURE.md, "The HTTP layer").
//!
//! PUT creates (or forks), POST appends and closes, GET reads (catch-up,
//! `live=long-poll`, `live=sse`), HEAD describes, DELETE deletes. Offsets are
//! [`Offset`](crate::ds::offsets::Offset) strings; the stream key comes in
//! `Stream-Encryption-Key` (or the development default key, when the server
//! runs with one).
//!
//! * [`parse`]: the request to a [`StreamOp`] (pure);
//! * [`handlers`]: the operation against the service, and its answer;
//! * [`errors`]: service errors as this surface names them.

pub mod errors;
pub mod handlers;
pub mod parse;

pub use super::common::ProducerHeaders;
pub use handlers::handle;
pub use parse::{
    parse_stream_op, stream_name, AppendRequest, CreateRequest, Live, ReadQuery, ReadRequest,
    StreamOp, PREFIX, STREAM_NAME_BYTES_MAX,
};
