//! `/v1/streams`: the product API over the stream service
//! (docs/ARCHITECTURE.md, "The HTTP layer"; contract: `docs/API.md`,
//! `docs/openapi.yaml`).
//!
//! * `PUT/GET/DELETE /v1/streams/{name}`: create with the typed document,
//!   metadata, delete.
//! * `POST .../records` (one record), `POST .../records:batch` (a JSON array,
//!   atomic), with `Prisma-Routing-Key` and optional `Producer-*`.
//! * `GET .../records`, `.../records:long-poll`, `.../records:sse`: key reads
//!   from opaque key cursors.
//! * `POST /v1/streams/{name}:seal`: seal, optionally with a final record.
//! * `GET /v1/streams/{name}:scan`: a page of a snapshot scan ([`scan`]).
//! * `GET …/watches`, `…/watches/{w}`, `…/watches/{w}/keys/{watchKey}`:
//!   watch definitions and observations under a capability ([`watches`]).
//! * `PUT/GET/DELETE …/consumers/{c}`, `POST …/consumers/{c}:pull` and
//!   `:settle`: consumer groups ([`consumers`]).
//! * `GET /v1/streams`: the catalog.
//! * `GET …/usage`, `GET /v1/projects/{p}/usage`: usage ([`usage`]).
//!
//! Every answer is `Cache-Control: no-store`, and the stream key
//! (`Prisma-Encryption-Key`), tokens, routing keys and payloads are never
//! echoed. [`parse`] turns the request into a [`ProductRoute`] (pure),
//! [`handlers`] runs it against the service, [`errors`] names service
//! errors as the product does.

pub mod consumers;
pub mod errors;
pub mod handlers;
pub mod parse;
pub mod scan;
pub mod seal_body;
pub mod usage;
pub mod watches;

pub use handlers::{handle, metadata_json};
pub use parse::{
    collection_name, is_observation_path, parse_route, AppendCall, CollectionOp, CursorParam,
    ProductRoute, Transport, NAME_BYTES_MAX, PREFIX,
};
