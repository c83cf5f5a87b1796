//! Parsing and validation of requests to `/v1/stream/{name}`
//! (docs/ARCHITECTURE.md, "The HTTP layer"): method, headers and query to a
//! [`StreamOp`] before the body is read, and an append's checks that need
//! its body ([`AppendRequest::spec`]). Pure (no I/O, no state), so the fuzz
//! targets run exactly the code the server runs.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use strata_engine::ProducerClaim;
use strata_segments::StreamKey;
use strata_wal::STREAM_SEQ_BYTES_MAX;

use super::super::common::{
    ascii_header, decode_stream_name, producer_headers, ApiError, ProducerHeaders,
};
use crate::ds::json;
use crate::ds::offsets::{Offset, OffsetParam};
use crate::service::product::{request_hash, Operation};
use crate::service::{is_json, media_type, AppendSpec, Expiry, ForkSpec, ReadFrom};

/// What a request to `/v1/stream/{name}` asks for, as its method, headers and
/// query give it (the body is read later, by the handler). Parsing is pure, so
/// the fuzz targets run exactly the code the server runs.
#[derive(Debug)]
pub enum StreamOp {
    Create(CreateRequest),
    Append(AppendRequest),
    Read(ReadRequest),
    Head,
    Delete,
}

/// A create (`PUT`), from its headers.
#[derive(Debug)]
pub struct CreateRequest {
    pub key: StreamKey,
    pub content_type: Option<String>,
    pub expiry: Expiry,
    pub closed: bool,
    pub fork: Option<ForkSpec>,
    /// The `Host` the `Location` of a created stream names.
    pub host: String,
}

/// An append (`POST`), from its headers.
#[derive(Debug)]
pub struct AppendRequest {
    pub key: StreamKey,
    pub close: bool,
    pub stream_seq: Option<Bytes>,
    pub content_type: Option<String>,
    /// `Producer-Id`, `Producer-Epoch` and `Producer-Seq`, validated.
    pub producer: Option<ProducerHeaders>,
}

/// A read (`GET`). A missing or deleted stream answers as such before the
/// query and the key are judged, so both are kept as results.
#[derive(Debug)]
pub struct ReadRequest {
    pub query: Result<ReadQuery, ApiError>,
    pub key: Result<StreamKey, ApiError>,
}

/// Parses the method, headers and query of a request to a stream.
/// `dev_default_key` is the key used when the request carries none.
pub fn parse_stream_op(
    method: &Method,
    headers: &HeaderMap,
    query: Option<&str>,
    dev_default_key: Option<&StreamKey>,
) -> Result<StreamOp, ApiError> {
    match *method {
        Method::PUT => parse_create(headers, dev_default_key).map(StreamOp::Create),
        Method::POST => parse_append(headers, dev_default_key).map(StreamOp::Append),
        Method::GET => Ok(StreamOp::Read(ReadRequest {
            query: read_query(query),
            key: stream_key(dev_default_key, headers),
        })),
        Method::HEAD => Ok(StreamOp::Head),
        Method::DELETE => Ok(StreamOp::Delete),
        _ => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "use GET, HEAD, PUT, POST, DELETE or OPTIONS",
        )
        .header("allow", "GET, HEAD, PUT, POST, DELETE, OPTIONS")),
    }
}

pub const PREFIX: &str = "/v1/stream/";

/// Longest stream name, in bytes.
pub const STREAM_NAME_BYTES_MAX: usize = 1024;

/// Decodes and validates the stream name in a request path.
pub fn stream_name(raw: &str) -> Result<String, ApiError> {
    decode_stream_name(raw, STREAM_NAME_BYTES_MAX)
        .map_err(|why| ApiError::bad_request(format!("invalid stream name: {why}")))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    ascii_header(headers, name, "bad_request")
}

fn is_true(headers: &HeaderMap, name: &str) -> bool {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// `^(0|[1-9]\d*)$`
fn canonical_integer(text: &str) -> Option<u64> {
    let ok = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if ok {
        text.parse().ok()
    } else {
        None
    }
}

/// The stream key of a raw-route request: `Stream-Encryption-Key`, or the
/// product surface's `Prisma-Encryption-Key` with the same meaning (both
/// present must name the same key), or the development default.
fn stream_key(
    dev_default_key: Option<&StreamKey>,
    headers: &HeaderMap,
) -> Result<StreamKey, ApiError> {
    let parse = |text: &str| {
        StreamKey::parse(text)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_key", e.to_string()))
    };
    let raw = header(headers, "stream-encryption-key")?
        .map(parse)
        .transpose()?;
    let product = header(headers, "prisma-encryption-key")?
        .map(parse)
        .transpose()?;
    match (raw, product) {
        (Some(raw), Some(product)) if raw.expose() != product.expose() => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_key",
            "Stream-Encryption-Key and Prisma-Encryption-Key name different keys",
        )),
        (Some(key), _) | (None, Some(key)) => Ok(key),
        (None, None) => dev_default_key.cloned().ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_key",
                "Stream-Encryption-Key (or Prisma-Encryption-Key) is required (32 bytes, base64url)",
            )
        }),
    }
}

fn content_type(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    Ok(header(headers, "content-type")?
        .map(str::trim)
        .filter(|ct| {
            let media = ct.split(';').next().unwrap_or("").trim();
            media
                .split_once('/')
                .is_some_and(|(t, s)| !t.is_empty() && !s.is_empty())
        })
        .map(str::to_string))
}

fn parse_create(
    headers: &HeaderMap,
    dev_default_key: Option<&StreamKey>,
) -> Result<CreateRequest, ApiError> {
    let key = stream_key(dev_default_key, headers)?;
    let ttl_seconds = match header(headers, "stream-ttl")? {
        Some(text) => Some(canonical_integer(text.trim()).ok_or_else(|| {
            ApiError::bad_request("Stream-TTL must be a whole number of seconds")
        })?),
        None => None,
    };
    let expires_at = match header(headers, "stream-expires-at")? {
        Some(text) => {
            let at = chrono::DateTime::parse_from_rfc3339(text.trim()).map_err(|_| {
                ApiError::bad_request("Stream-Expires-At must be an RFC 3339 timestamp")
            })?;
            let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
            Some((text.trim().to_string(), ms))
        }
        None => None,
    };
    if ttl_seconds.is_some() && expires_at.is_some() {
        return Err(ApiError::bad_request(
            "give Stream-TTL or Stream-Expires-At, not both",
        ));
    }
    let fork_source = match header(headers, "stream-forked-from")? {
        Some(path) => {
            let rest = path.trim().strip_prefix(PREFIX).ok_or_else(|| {
                ApiError::bad_request("Stream-Forked-From must be a path under /v1/stream/")
            })?;
            Some(stream_name(rest)?)
        }
        None => None,
    };
    let fork_offset = match header(headers, "stream-fork-offset")? {
        Some(text) => Some(
            Offset::parse(text.trim())
                .map_err(|e| ApiError::bad_request(e.to_string()))?
                .0,
        ),
        None => None,
    };
    let sub_offset = match header(headers, "stream-fork-sub-offset")? {
        Some(text) => Some(canonical_integer(text.trim()).ok_or_else(|| {
            ApiError::bad_request("Stream-Fork-Sub-Offset must be a non-negative integer")
        })?),
        None => None,
    };
    if fork_source.is_none() && (sub_offset.is_some() || fork_offset.is_some()) {
        return Err(ApiError::bad_request(
            "Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From",
        ));
    }
    let content_type = content_type(headers)?;
    let host = header(headers, "host")?.unwrap_or("localhost").to_string();
    Ok(CreateRequest {
        key,
        content_type,
        expiry: Expiry {
            ttl_seconds,
            expires_at,
        },
        closed: is_true(headers, "stream-closed"),
        fork: fork_source.map(|source| ForkSpec {
            source,
            offset: fork_offset,
            sub_offset: sub_offset.unwrap_or(0),
        }),
        host,
    })
}

fn parse_append(
    headers: &HeaderMap,
    dev_default_key: Option<&StreamKey>,
) -> Result<AppendRequest, ApiError> {
    let close = is_true(headers, "stream-closed");
    let stream_seq = header(headers, "stream-seq")?.map(|s| Bytes::copy_from_slice(s.as_bytes()));
    if stream_seq
        .as_ref()
        .is_some_and(|s| s.len() > STREAM_SEQ_BYTES_MAX)
    {
        return Err(ApiError::bad_request(format!(
            "Stream-Seq is longer than {STREAM_SEQ_BYTES_MAX} bytes"
        )));
    }
    let content_type = header(headers, "content-type")?.map(str::to_string);
    // Producer headers are validated before the body is even read.
    let producer = producer_headers(headers)?;
    let key = stream_key(dev_default_key, headers)?;
    Ok(AppendRequest {
        key,
        close,
        stream_seq,
        content_type,
        producer,
    })
}

impl AppendRequest {
    /// The producer digest of this append: the product's request hash of the
    /// same request on the default key (a JSON array appends like a batch),
    /// so a retry through either surface is recognised.
    pub fn digest(&self, body: &[u8]) -> [u8; 16] {
        let media = self
            .content_type
            .as_deref()
            .map(media_type)
            .unwrap_or_default();
        let flattened = is_json(&media) && json::top_level(body) != json::TopLevel::NotArray;
        let operation = if flattened {
            Operation::AppendBatch
        } else {
            Operation::Append
        };
        request_hash(operation, b"", &media, body, self.close)
    }

    /// The append with its body: the checks that need the body, and the
    /// producer's claim with the body's digest.
    pub fn spec(&self, body: Bytes) -> Result<AppendSpec, ApiError> {
        if body.is_empty() && !self.close {
            return Err(ApiError::bad_request(
                "an append needs a body (an empty body only with Stream-Closed: true)",
            ));
        }
        if !body.is_empty() && self.content_type.is_none() {
            return Err(ApiError::bad_request(
                "an append with a body needs Content-Type",
            ));
        }
        let producer = self.producer.as_ref().map(|p| ProducerClaim {
            id: p.id.clone(),
            epoch: p.epoch,
            seq: p.seq,
            digest: self.digest(&body),
        });
        Ok(AppendSpec {
            routing_key: Bytes::new(),
            content_type: self.content_type.clone(),
            body,
            records: None,
            producer,
            stream_seq: self.stream_seq.clone(),
            close: self.close,
        })
    }
}

/// The `live` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    LongPoll,
    Sse,
}

/// The query of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadQuery {
    pub offset: Option<OffsetParam>,
    pub live: Option<Live>,
    /// The client's `cursor=` (ignored when not a number).
    pub cursor: Option<u64>,
}

fn read_query(query: Option<&str>) -> Result<ReadQuery, ApiError> {
    let mut offsets = Vec::new();
    let mut live = None;
    let mut cursor = None;
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "offset" => offsets.push(v.into_owned()),
            "live" => {
                live = Some(match v.as_ref() {
                    "long-poll" => Live::LongPoll,
                    "sse" => Live::Sse,
                    _ => return Err(ApiError::bad_request("live must be long-poll or sse")),
                })
            }
            "cursor" => cursor = v.parse().ok(),
            _ => {}
        }
    }
    if offsets.len() > 1 {
        return Err(ApiError::bad_request("give offset at most once"));
    }
    let offset = match offsets.pop() {
        Some(text) => {
            Some(OffsetParam::parse(&text).map_err(|e| ApiError::bad_request(e.to_string()))?)
        }
        None => None,
    };
    if live.is_some() && offset.is_none() {
        return Err(ApiError::bad_request("live reads need an offset"));
    }
    Ok(ReadQuery {
        offset,
        live,
        cursor,
    })
}

pub fn read_from(offset: Option<OffsetParam>) -> ReadFrom {
    match offset {
        None | Some(OffsetParam::Start) => ReadFrom::Start,
        Some(OffsetParam::Now) => ReadFrom::Tail,
        Some(OffsetParam::At(o)) => ReadFrom::Position(o.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names() {
        assert_eq!(stream_name("a%2Fb").unwrap(), "a/b");
        assert_eq!(stream_name("events/x-1").unwrap(), "events/x-1");
        for bad in [
            "", "a//b", "..", "a/./b", "%2E%2E", "a/%2E%2E", "%FF", "__ds", "a%00b", "/a",
        ] {
            assert!(stream_name(bad).is_err(), "{bad:?}");
        }
        assert!(stream_name(&"x".repeat(1025)).is_err());
    }

    #[test]
    fn canonical_integers() {
        assert_eq!(canonical_integer("0"), Some(0));
        assert_eq!(canonical_integer("60"), Some(60));
        for bad in ["", "00060", "+60", "60.5", "1e3", "-1", " 1"] {
            assert_eq!(canonical_integer(bad), None, "{bad:?}");
        }
    }
}
