//! Response building shared by both surfaces (docs/ARCHITECTURE.md, "The
//! HTTP layer"): the body type, the headers every response carries (CORS,
//! `nosniff`, CORP), the CORS preflight, and the body of a read (the records
//! as a JSON array or as their bytes).

use std::convert::Infallible;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};

use crate::ds::json;
use crate::service::{is_json, ReadOutcome};

pub type Body = BoxBody<Bytes, Infallible>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

pub fn empty() -> Body {
    Empty::new().boxed()
}

/// A response with `status` and `body` and no headers yet.
pub fn with_status(status: StatusCode, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}

/// Sets a response header (a value that is no header value is left out).
pub fn set(response: &mut Response<Body>, name: &'static str, value: impl AsRef<str>) {
    if let Ok(v) = HeaderValue::from_str(value.as_ref()) {
        response.headers_mut().insert(name, v);
    }
}

const EXPOSE_HEADERS: &str = "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, Stream-Expires-At, Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, Prisma-Next-Cursor, Prisma-Up-To-Date, Prisma-Sealed, Prisma-Next-Scan-Cursor, Prisma-Scan-Complete, Prisma-Consumer-Version, ETag, Location, Content-Type, Retry-After, Streams-Replay-To";
const ALLOW_HEADERS: &str = "Content-Type, Authorization, If-None-Match, Stream-Seq, Stream-TTL, Stream-Expires-At, Stream-Closed, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset, Stream-Encryption-Key, Prisma-Encryption-Key, Prisma-Routing-Key, Prisma-Consumer-Version, Producer-Id, Producer-Epoch, Producer-Seq";
const ALLOW_METHODS: &str = "GET, POST, PUT, DELETE, HEAD, OPTIONS";

/// Headers on every response, errors included.
pub fn common_headers(headers: &mut HeaderMap) {
    headers.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    headers.insert(
        "access-control-expose-headers",
        HeaderValue::from_static(EXPOSE_HEADERS),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("cross-origin"),
    );
}

/// The answer to `OPTIONS` on any path.
pub fn preflight() -> Response<Body> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let h = response.headers_mut();
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static(ALLOW_METHODS),
    );
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static(ALLOW_HEADERS),
    );
    h.insert("access-control-max-age", HeaderValue::from_static("600"));
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    response
}

/// The body of a read: the JSON array of the records, or their bytes.
pub fn render(content_type: &str, outcome: &ReadOutcome) -> Bytes {
    if is_json(content_type) {
        return Bytes::from(json::array_of(
            outcome.records.iter().map(|r| r.payload.as_ref()),
        ));
    }
    match outcome.records.as_slice() {
        [] => Bytes::new(),
        [one] => one.payload.clone(),
        many => {
            let mut out = Vec::with_capacity(many.iter().map(|r| r.payload.len()).sum());
            for r in many {
                out.extend_from_slice(&r.payload);
            }
            Bytes::from(out)
        }
    }
}
