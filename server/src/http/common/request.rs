//! Request reading shared by both surfaces (docs/ARCHITECTURE.md, "The HTTP
//! layer"): bounded body reading, header text, the stream-name rules both
//! surfaces share, and the idempotent producer's `Producer-*` headers.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use strata_wal::PRODUCER_ID_BYTES_MAX;

use super::error::ApiError;

/// Producer epochs and sequences stay JavaScript-safe integers.
pub const SAFE_INTEGER_MAX: u64 = (1 << 53) - 1;

/// A request header as text (400 with `code` when it is not visible ASCII).
pub fn ascii_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
    code: &'static str,
) -> Result<Option<&'a str>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                code,
                format!("header {name} is not ASCII"),
            )
        }),
    }
}

/// Why a stream name in a path is refused (each surface words the answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("the name is not UTF-8")]
    NotUtf8,
    #[error("use 1 to {max_bytes} bytes")]
    Length { max_bytes: usize },
    #[error("control characters are not allowed")]
    Control,
    #[error("empty, '.' and '..' path segments are not allowed")]
    Segment,
    #[error("names starting with '__' are reserved")]
    Reserved,
}

/// Decodes a stream name from a request path (percent-decoded once) and
/// checks the rules both surfaces share: UTF-8, 1 to `max_bytes` bytes, no
/// control characters, no empty, `.` or `..` segment, no leading `__`
/// (reserved).
pub fn decode_stream_name(raw: &str, max_bytes: usize) -> Result<String, NameError> {
    let name = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| NameError::NotUtf8)?;
    if name.is_empty() || name.len() > max_bytes {
        return Err(NameError::Length { max_bytes });
    }
    if name.chars().any(char::is_control) {
        return Err(NameError::Control);
    }
    if name
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(NameError::Segment);
    }
    if name.starts_with("__") {
        return Err(NameError::Reserved);
    }
    Ok(name.into_owned())
}

/// Reads a request body up to `limit` bytes (413 beyond it).
pub async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("request body exceeds {limit} bytes"),
            ))
        }
        Err(e) => Err(ApiError::bad_request(format!("reading the body: {e}"))),
    }
}

/// An idempotent producer's headers (its claim also needs the body's digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerHeaders {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// `Producer-Id`, `Producer-Epoch` and `Producer-Seq`: all three or none,
/// the id UTF-8 of 1 to [`PRODUCER_ID_BYTES_MAX`] bytes, the numbers
/// JavaScript-safe. Refusals are 400 `bad_request` (the product renames
/// the code).
pub fn producer_headers(headers: &HeaderMap) -> Result<Option<ProducerHeaders>, ApiError> {
    // An id is UTF-8 (not only ASCII); the numbers are ASCII digits.
    let id = match headers.get("producer-id") {
        None => None,
        Some(v) => Some(
            std::str::from_utf8(v.as_bytes())
                .map_err(|_| ApiError::bad_request("Producer-Id must be UTF-8"))?,
        ),
    };
    let epoch = ascii_header(headers, "producer-epoch", "bad_request")?;
    let seq = ascii_header(headers, "producer-seq", "bad_request")?;
    let (id, epoch, seq) = match (id, epoch, seq) {
        (None, None, None) => return Ok(None),
        (Some(id), Some(epoch), Some(seq)) => (id, epoch, seq),
        _ => {
            return Err(ApiError::bad_request(
                "Producer-Id, Producer-Epoch and Producer-Seq go together",
            ))
        }
    };
    if id.is_empty() {
        return Err(ApiError::bad_request("Producer-Id must not be empty"));
    }
    if id.len() > PRODUCER_ID_BYTES_MAX {
        return Err(ApiError::bad_request(format!(
            "Producer-Id is longer than {PRODUCER_ID_BYTES_MAX} bytes"
        )));
    }
    let number = |text: &str, what: &str| {
        text.trim()
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= SAFE_INTEGER_MAX && text.trim().bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| ApiError::bad_request(format!("{what} must be a non-negative integer")))
    };
    Ok(Some(ProducerHeaders {
        id: id.to_string(),
        epoch: number(epoch, "Producer-Epoch")?,
        seq: number(seq, "Producer-Seq")?,
    }))
}
