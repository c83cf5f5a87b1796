//! `/v1/streams`: the product API over the stream service (contract:
//! `docs/API.md`, `docs/openapi.yaml`).
//!
//! * `PUT/GET/DELETE /v1/streams/{name}`: create with the typed document,
//!   metadata, delete.
//! * `POST .../records` (one record), `POST .../records:batch` (a JSON array,
//!   atomic), with `Prisma-Routing-Key` and optional `Producer-*`.
//! * `GET .../records`, `.../records:long-poll`, `.../records:sse`: key reads
//!   from opaque key cursors.
//! * `POST /v1/streams/{name}:seal`: seal, optionally with a final record.
//! * `GET /v1/streams`: the catalog.
//!
//! Parsing ([`parse_route`]) is pure, like the raw route's. Errors are
//! `{"error":{"code","message","details"?,"retryable"}}`, every answer is
//! `Cache-Control: no-store`, and the stream key (`Prisma-Encryption-Key`),
//! tokens, routing keys and payloads are never echoed. Checks run in the
//! contract's order: authentication, existence, seal state, content type,
//! routing key, producer, body size, JSON syntax, batch count, commit.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use percent_encoding::percent_decode;
use serde_json::{json, Value};
use strata_engine::ProducerClaim;
use strata_segments::StreamKey;

use super::common::{
    ascii_header, decode_stream_name, empty, full, producer_headers, read_body, render, set,
    ApiError, ApiResult, AppState, Body, ProducerHeaders,
};
use super::live::{self, is_binary, LiveRead, Pace, SseFraming};
use crate::catalog::{CatalogCursor, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use crate::ds::json::{self, TopLevel};
use crate::product::config::{CollectionConfig, ExpiryConfig, CONFIG_BYTES_MAX};
use crate::product::cursor::CursorScope;
use crate::product::{
    request_hash, scoped_producer_id, Operation, BATCH_RECORDS_MAX, READ_BYTES_DEFAULT,
    READ_BYTES_MAX, READ_BYTES_MIN, RESERVED_PRODUCER_PREFIX, ROUTING_KEY_BYTES_MAX, WAIT_MS_MAX,
};
use crate::streams::{
    is_json, media_type, AppendOutcome, AppendResult, AppendSpec, CreateMode, CreateSpec, Expiry,
    KeyView, ReadFrom, ReadOutcome, ServiceError, StreamMeta,
};

pub const PREFIX: &str = "/v1/streams";
/// Longest collection name, in bytes.
pub const NAME_BYTES_MAX: usize = 512;
/// Path segments a name may not end with (they are subresources).
const RESERVED_LAST_SEGMENTS: [&str; 3] = ["records", "consumers", "watches"];
/// Inputs of the raw surface or of removed designs, refused on every route.
const REMOVED_HEADERS: [&str; 9] = [
    "stream-encryption-key",
    "stream-key",
    "stream-profile",
    "stream-ttl",
    "stream-expires-at",
    "stream-ordering",
    "stream-segments",
    "stream-scaling",
    "stream-touch-templates",
];
const KEY_HEADER: &str = "prisma-encryption-key";
/// The product's name for a spent live-connection budget.
const LIVE_CAPACITY_CODE: &str = "subscription_capacity";
const ROUTING_KEY_HEADER: &str = "prisma-routing-key";

/// What a request to `/v1/streams…` asks for.
#[derive(Debug)]
pub enum ProductRoute {
    Catalog {
        cursor: Option<CatalogCursor>,
        limit: usize,
    },
    Collection {
        name: String,
        op: Box<CollectionOp>,
    },
}

/// Where a key read starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorParam {
    Beginning,
    Now,
    Token(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Plain,
    LongPoll { wait: Duration },
    Sse { wait: Duration },
}

/// An operation on one collection. Header checks that the contract orders
/// after the existence check are kept as results and judged in the handler.
#[derive(Debug)]
pub enum CollectionOp {
    Create {
        key: StreamKey,
    },
    Metadata,
    Delete,
    Seal {
        key: Result<Option<StreamKey>, ApiError>,
        producer: Result<Option<ProducerHeaders>, ApiError>,
    },
    Append(AppendCall),
    Read {
        key: StreamKey,
        routing_key: Result<Bytes, ApiError>,
        cursor: CursorParam,
        max_bytes: usize,
        transport: Transport,
    },
}

fn error(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(status, code, message).product()
}

fn bad(code: &'static str, message: impl Into<String>) -> ApiError {
    error(StatusCode::BAD_REQUEST, code, message)
}

fn unknown_route() -> ApiError {
    error(StatusCode::NOT_FOUND, "unknown_route", "no such route")
}

fn method_not_allowed(allow: &'static str) -> ApiError {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("use {allow}"),
    )
    .header("allow", allow)
}

/// The subresource a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Collection,
    Records,
    Batch,
    LongPoll,
    Sse,
    Seal,
}

/// Splits the (still encoded) path after `/v1/streams/` into the name and
/// the subresource: the suffix decides, so names may hold `:` and `/`.
fn split_target(rest: &str) -> Result<(&str, Target), ApiError> {
    const RECORDS: [(&str, Target); 4] = [
        ("/records", Target::Records),
        ("/records:batch", Target::Batch),
        ("/records:long-poll", Target::LongPoll),
        ("/records:sse", Target::Sse),
    ];
    for (suffix, target) in RECORDS {
        if let Some(name) = rest.strip_suffix(suffix) {
            return Ok((name, target));
        }
    }
    if let Some(name) = rest.strip_suffix(":seal") {
        return Ok((name, Target::Seal));
    }
    // Routes of later phases (scan, consumers, watches), and unknown verbs.
    let last = rest.rsplit('/').next().unwrap_or("");
    if rest.ends_with(":scan")
        || rest.contains("/consumers/")
        || rest.contains("/watches/")
        || RESERVED_LAST_SEGMENTS.contains(&last)
        || last.starts_with("records:")
        || ["pull", "settle", "batch", "long-poll", "sse"]
            .iter()
            .any(|verb| rest.ends_with(&format!(":{verb}")))
    {
        return Err(unknown_route());
    }
    Ok((rest, Target::Collection))
}

/// Decodes and validates a collection name.
pub fn collection_name(raw: &str) -> Result<String, ApiError> {
    let invalid = |why: &str| bad("invalid_name", format!("invalid collection name: {why}"));
    let name = decode_stream_name(raw, NAME_BYTES_MAX).map_err(|why| invalid(&why.to_string()))?;
    let last = name.rsplit('/').next().unwrap_or("");
    if RESERVED_LAST_SEGMENTS.contains(&last) {
        return Err(invalid(
            "a name cannot end in 'records', 'consumers' or 'watches'",
        ));
    }
    Ok(name)
}

/// The query's parameters, each at most once, strictly UTF-8.
fn query_params(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |text: &str| {
            let plus = text.replace('+', " ");
            percent_decode(plus.as_bytes())
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| bad("invalid_parameter", "query parameters must be UTF-8"))
        };
        let (k, v) = (decode(k)?, decode(v)?);
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(bad(
                "duplicate_parameter",
                format!("query parameter {k:?} is given twice"),
            ));
        }
        out.push((k, v));
    }
    Ok(out)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    ascii_header(headers, name, "invalid_header").map_err(ApiError::product)
}

fn stream_key(headers: &HeaderMap) -> Result<StreamKey, ApiError> {
    match header(headers, KEY_HEADER)? {
        Some(text) => StreamKey::parse(text.trim()).map_err(|_| {
            bad(
                "invalid_key",
                "Prisma-Encryption-Key must be 32 bytes in base64url or base64",
            )
        }),
        None => Err(bad(
            "missing_key",
            "Prisma-Encryption-Key is required (32 bytes, base64url)",
        )),
    }
}

fn optional_key(headers: &HeaderMap) -> Result<Option<StreamKey>, ApiError> {
    match headers.get(KEY_HEADER) {
        None => Ok(None),
        Some(_) => stream_key(headers).map(Some),
    }
}

/// A routing key: exact UTF-8 bytes, at most 1,024.
fn routing_key_bytes(bytes: &[u8]) -> Result<Bytes, ApiError> {
    if bytes.len() > ROUTING_KEY_BYTES_MAX || std::str::from_utf8(bytes).is_err() {
        return Err(bad(
            "invalid_routing_key",
            "a routing key is UTF-8 of at most 1024 bytes",
        ));
    }
    Ok(Bytes::copy_from_slice(bytes))
}

fn producer(headers: &HeaderMap) -> Result<Option<ProducerHeaders>, ApiError> {
    let parsed = producer_headers(headers)
        .map_err(|e| error(StatusCode::BAD_REQUEST, "invalid_producer", e.message))?;
    if parsed
        .as_ref()
        .is_some_and(|p| p.id.starts_with(RESERVED_PRODUCER_PREFIX))
    {
        return Err(bad(
            "invalid_producer",
            "Producer-Id values starting with '__' are reserved",
        ));
    }
    Ok(parsed)
}

fn wait_param(value: Option<&str>) -> Result<Duration, ApiError> {
    let ms = match value {
        None => WAIT_MS_MAX,
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| bad("invalid_parameter", "waitMs must be a whole number"))?
            .min(WAIT_MS_MAX),
    };
    Ok(Duration::from_millis(ms))
}

/// Maps a request under `/v1/streams` to its route, or to its error. Pure.
pub fn parse_route(
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<ProductRoute, ApiError> {
    if let Some(removed) = REMOVED_HEADERS.iter().find(|h| headers.contains_key(**h)) {
        return Err(bad(
            "unknown_field",
            format!("header {removed} is not part of the product API"),
        ));
    }
    let params = query_params(query)?;
    for (k, _) in &params {
        if k == "key" || k == "offset" {
            return Err(bad(
                "unknown_field",
                format!("query parameter {k:?} is not part of the product API"),
            ));
        }
        if k == "routingKey" && method != Method::GET {
            return Err(bad(
                "unknown_field",
                "routingKey goes in the Prisma-Routing-Key header on writes",
            ));
        }
    }
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let allow_only =
        |allowed: &[&str]| match params.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            Some((k, _)) => Err(bad(
                "unknown_parameter",
                format!("query parameter {k:?} is not accepted here"),
            )),
            None => Ok(()),
        };
    let rest = match path.strip_prefix(PREFIX) {
        Some("") | Some("/") => {
            if method != Method::GET {
                return Err(method_not_allowed("GET"));
            }
            allow_only(&["cursor", "limit"])?;
            let cursor = match param("cursor") {
                None | Some("") => None,
                Some(text) => Some(
                    CatalogCursor::decode(text)
                        .ok_or_else(|| bad("invalid_cursor", "not a catalog cursor"))?,
                ),
            };
            let limit = match param("limit") {
                None => PAGE_LIMIT_DEFAULT,
                Some(text) => text
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=PAGE_LIMIT_MAX).contains(n))
                    .ok_or_else(|| bad("invalid_parameter", "limit is 1 to 1000"))?,
            };
            return Ok(ProductRoute::Catalog { cursor, limit });
        }
        Some(rest) => rest.strip_prefix('/').ok_or_else(unknown_route)?,
        None => return Err(unknown_route()),
    };
    let (raw_name, target) = split_target(rest)?;
    let name = collection_name(raw_name)?;
    let op = match (target, method.clone()) {
        (Target::Collection, m) => {
            allow_only(&[])?;
            match m {
                Method::PUT => CollectionOp::Create {
                    key: stream_key(headers)?,
                },
                Method::GET => CollectionOp::Metadata,
                Method::DELETE => CollectionOp::Delete,
                _ => return Err(method_not_allowed("GET, PUT, DELETE")),
            }
        }
        (Target::Seal, Method::POST) => {
            allow_only(&[])?;
            CollectionOp::Seal {
                key: optional_key(headers),
                producer: producer(headers),
            }
        }
        (Target::Seal, _) => return Err(method_not_allowed("POST")),
        (Target::Records, Method::POST) | (Target::Batch, Method::POST) => {
            allow_only(&[])?;
            CollectionOp::Append(AppendCall {
                key: stream_key(headers)?,
                batch: target == Target::Batch,
                content_type: header(headers, "content-type")?.map(str::to_string),
                routing_key: routing_key_bytes(
                    headers
                        .get(ROUTING_KEY_HEADER)
                        .map_or(&[][..], HeaderValue::as_bytes),
                ),
                producer: producer(headers),
            })
        }
        (Target::Batch, _) => return Err(method_not_allowed("POST")),
        (Target::Records, Method::GET)
        | (Target::LongPoll, Method::GET)
        | (Target::Sse, Method::GET) => {
            let transport = match target {
                Target::Records => {
                    allow_only(&["routingKey", "cursor", "maxBytes"])?;
                    Transport::Plain
                }
                Target::LongPoll => {
                    allow_only(&["routingKey", "cursor", "maxBytes", "waitMs"])?;
                    Transport::LongPoll {
                        wait: wait_param(param("waitMs"))?,
                    }
                }
                _ => {
                    allow_only(&["routingKey", "cursor", "maxBytes", "waitMs"])?;
                    Transport::Sse {
                        wait: wait_param(param("waitMs"))?,
                    }
                }
            };
            let cursor = match param("cursor") {
                None | Some("") | Some("beginning") => CursorParam::Beginning,
                Some("now") => CursorParam::Now,
                Some(token) => CursorParam::Token(token.to_string()),
            };
            let max_bytes = match param("maxBytes") {
                None => READ_BYTES_DEFAULT,
                Some(text) => text
                    .parse::<u64>()
                    .map_err(|_| bad("invalid_parameter", "maxBytes must be a whole number"))?
                    .clamp(READ_BYTES_MIN as u64, READ_BYTES_MAX as u64)
                    as usize,
            };
            CollectionOp::Read {
                key: stream_key(headers)?,
                routing_key: routing_key_bytes(param("routingKey").unwrap_or("").as_bytes()),
                cursor,
                max_bytes,
                transport,
            }
        }
        (Target::Records, _) => return Err(method_not_allowed("GET, POST")),
        (Target::LongPoll, _) | (Target::Sse, _) => return Err(method_not_allowed("GET")),
    };
    Ok(ProductRoute::Collection {
        name,
        op: Box::new(op),
    })
}

// ------------------------------------------------------------------ answers

/// A service error as the product answers it.
fn service_error(e: ServiceError) -> ApiError {
    let code = match &e {
        ServiceError::NotFound => "not_found",
        ServiceError::Gone | ServiceError::RetainedForForks => "gone",
        ServiceError::Conflict(_) => "config_mismatch",
        ServiceError::ContentTypeMismatch => "content_type_mismatch",
        ServiceError::Closed { .. } => "sealed",
        ServiceError::SeqConflict => "seq_conflict",
        ServiceError::ProducerStale { .. } => "stale_producer_epoch",
        ServiceError::ProducerGap { .. } => "producer_gap",
        ServiceError::ProducerEpochSeq => "producer_epoch_must_start_at_zero",
        ServiceError::WrongKey => "wrong_key",
        ServiceError::BadRequest(_) => "invalid_body",
        ServiceError::TooLarge { .. } => "body_too_large",
        ServiceError::Overloaded => "rate_limited",
        ServiceError::Unavailable(_) => "unavailable",
        ServiceError::OutcomeUnknown(_) => "outcome_unknown",
        ServiceError::Internal(_) => "internal",
    };
    let mut error = ApiError::from_service(&e, code);
    match e {
        ServiceError::Closed { .. } => error.message = "the collection is sealed".into(),
        ServiceError::ProducerStale { current_epoch } => {
            error = error.details(json!({ "currentEpoch": current_epoch }))
        }
        ServiceError::ProducerGap { expected, received } => {
            error = error.details(json!({ "expected": expected, "received": received }))
        }
        _ => {}
    }
    error.product()
}

/// On writes a key mismatch is `stale_or_wrong_credentials` (a rotated key
/// looks the same as a wrong one).
fn write_error(e: ServiceError) -> ApiError {
    match e {
        ServiceError::WrongKey => error(
            StatusCode::FORBIDDEN,
            "stale_or_wrong_credentials",
            "the key does not match the collection's key",
        ),
        other => service_error(other),
    }
}

fn json_response(status: StatusCode, value: Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    response
}

/// The metadata document of a collection.
pub fn metadata_json(meta: &StreamMeta) -> Value {
    let mut doc = json!({
        "name": meta.name,
        "contentType": meta.content_type,
        "createdAt": meta.created_ms,
        "sealed": meta.closed,
    });
    if let Some(ttl) = meta.ttl_seconds {
        doc["expiry"] = json!({ "idle": format!("{ttl}s") });
    } else if let Some(at) = &meta.expires_at {
        doc["expiry"] = json!({ "at": at });
    }
    if !meta.watches.is_empty() {
        doc["watches"] = serde_json::to_value(&meta.watches).unwrap_or(Value::Null);
        doc["epoch"] = Value::String(meta.epoch.clone());
    }
    doc
}

pub async fn handle(
    state: Arc<AppState>,
    request: Request<Incoming>,
    project: String,
    route: ProductRoute,
) -> ApiResult {
    let result = match route {
        ProductRoute::Catalog { cursor, limit } => catalog(&state, &project, cursor, limit).await,
        ProductRoute::Collection { name, op } => {
            let body = request.into_body();
            match *op {
                CollectionOp::Create { key } => create(&state, &project, &name, key, body).await,
                CollectionOp::Metadata => {
                    let meta = state
                        .bounded(state.deadline(), state.streams.head(&project, &name))
                        .await
                        .map_err(service_error)?;
                    Ok(json_response(StatusCode::OK, metadata_json(&meta)))
                }
                CollectionOp::Delete => {
                    let (streams, project, name) =
                        (state.streams.clone(), project.clone(), name.clone());
                    state
                        .write(state.deadline(), async move {
                            streams.delete(&project, &name).await
                        })
                        .await
                        .map_err(service_error)?;
                    let mut response = Response::new(empty());
                    *response.status_mut() = StatusCode::NO_CONTENT;
                    set(&mut response, "cache-control", "no-store");
                    Ok(response)
                }
                CollectionOp::Seal { key, producer } => {
                    seal(&state, &project, &name, key, producer, body).await
                }
                CollectionOp::Append(call) => append(&state, &project, &name, call, body).await,
                CollectionOp::Read {
                    key,
                    routing_key,
                    cursor,
                    max_bytes,
                    transport,
                } => {
                    let routing_key = routing_key?;
                    let call = ReadCall {
                        project: project.clone(),
                        name: name.clone(),
                        key,
                        routing_key,
                        max_bytes,
                        max_records: usize::MAX,
                    };
                    read(state.clone(), call, cursor, transport).await
                }
            }
        }
    };
    result.map_err(ApiError::product)
}

async fn catalog(
    state: &AppState,
    project: &str,
    cursor: Option<CatalogCursor>,
    limit: usize,
) -> ApiResult {
    // The wait for the start-up scan has its own bound; the listing, the
    // store's.
    state.streams.startup_scanned().await;
    let page = state
        .bounded(
            state.deadline(),
            state.streams.catalog_page(project, cursor.as_ref(), limit),
        )
        .await
        .map_err(service_error)?;
    let streams: Vec<Value> = page
        .entries
        .iter()
        .map(|e| json!({"name": e.name, "contentType": e.content_type, "createdAt": e.created_ms}))
        .collect();
    let mut doc = json!({ "streams": streams });
    if let Some(next) = page.next {
        doc["cursor"] = Value::String(next.encode());
    }
    Ok(json_response(StatusCode::OK, doc))
}

async fn create(
    state: &AppState,
    project: &str,
    name: &str,
    key: StreamKey,
    body: Incoming,
) -> ApiResult {
    let body = read_body(body, CONFIG_BYTES_MAX)
        .await
        .map_err(|e| bad("invalid_config", e.message))?;
    let config = CollectionConfig::parse(&body, state.streams.now_ms())
        .map_err(|e| bad("invalid_config", e.0))?;
    let expiry = match &config.expiry {
        ExpiryConfig::Never => Expiry::default(),
        ExpiryConfig::IdleSeconds(s) => Expiry {
            ttl_seconds: Some(*s),
            expires_at: None,
        },
        ExpiryConfig::At { text, ms } => Expiry {
            ttl_seconds: None,
            expires_at: Some((text.clone(), *ms)),
        },
    };
    let spec = CreateSpec {
        mode: CreateMode::Product,
        watches: config.watches.clone(),
        content_type: Some(config.format.content_type().to_string()),
        expiry,
        closed: false,
        body: Bytes::new(),
        fork: None,
    };
    let (streams, project, name) = (state.streams.clone(), project.to_string(), name.to_string());
    let (outcome, meta) = state
        .write(state.deadline(), async move {
            let outcome = streams.create(&project, &name, spec, &key).await?;
            Ok((outcome, streams.head(&project, &name).await?))
        })
        .await
        .map_err(service_error)?;
    let status = if outcome.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json_response(status, metadata_json(&meta)))
}

/// An append (`records` or `records:batch`), from its headers.
#[derive(Debug)]
pub struct AppendCall {
    pub key: StreamKey,
    pub batch: bool,
    pub content_type: Option<String>,
    pub routing_key: Result<Bytes, ApiError>,
    pub producer: Result<Option<ProducerHeaders>, ApiError>,
}

/// The answer to an append or a final seal.
fn append_answer(
    scope: &CursorScope<'_>,
    outcome: &AppendOutcome,
    claim: Option<&ProducerClaim>,
    count: usize,
) -> Result<Value, ApiError> {
    match &outcome.result {
        AppendResult::Duplicate(state) => {
            if let Some(claim) = claim {
                if claim.epoch == state.epoch
                    && claim.seq == state.seq
                    && claim.digest != state.digest
                {
                    return Err(error(
                        StatusCode::CONFLICT,
                        "producer_sequence_reused",
                        "this producer sequence number was used for another request",
                    ));
                }
            }
            Ok(json!({
                "cursor": scope.encode(state.next_offset),
                "count": 0,
                "duplicate": true,
                "sealed": outcome.closed,
            }))
        }
        _ => Ok(json!({
            "cursor": scope.encode(outcome.tail),
            "count": count,
            "duplicate": false,
            "sealed": outcome.closed,
        })),
    }
}

async fn append(
    state: &AppState,
    project: &str,
    name: &str,
    call: AppendCall,
    body: Incoming,
) -> ApiResult {
    let streams = &state.streams;
    // Exists, the key is the collection's, not sealed.
    let (meta, epoch) = state
        .bounded(
            state.deadline(),
            streams.keyed_meta(project, name, &call.key),
        )
        .await
        .map_err(write_error)?;
    if meta.closed {
        return Err(service_error(ServiceError::Closed { tail: meta.tail }));
    }
    let json_stream = is_json(&meta.content_type);
    if let Some(ct) = &call.content_type {
        if media_type(ct) != media_type(&meta.content_type) {
            return Err(service_error(ServiceError::ContentTypeMismatch));
        }
    }
    if call.batch && !json_stream {
        return Err(error(
            StatusCode::METHOD_NOT_ALLOWED,
            "batch_unsupported_format",
            "records:batch needs a JSON collection",
        ));
    }
    let routing_key = call.routing_key?;
    let producer = call.producer?;
    let body = read_body(body, state.config.max_body_bytes).await?;
    let records = if !json_stream {
        if body.is_empty() {
            return Err(bad("empty_body", "a record needs a body"));
        }
        vec![body.clone()]
    } else if call.batch {
        match json::top_level(&body) {
            TopLevel::Array(n) if n > BATCH_RECORDS_MAX => {
                return Err(bad(
                    "batch_too_large",
                    format!("a batch holds at most {BATCH_RECORDS_MAX} records"),
                ))
            }
            TopLevel::NotArray
                if serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok() =>
            {
                return Err(bad("invalid_body", "records:batch takes a JSON array"))
            }
            _ => {}
        }
        let records =
            json::records_from_body(&body).map_err(|e| bad("invalid_body", e.to_string()))?;
        if records.is_empty() {
            return Err(bad("empty_batch", "a batch needs at least one record"));
        }
        records
    } else {
        vec![json::one_record(&body).map_err(|e| bad("invalid_body", e.to_string()))?]
    };
    let operation = if call.batch {
        Operation::AppendBatch
    } else {
        Operation::Append
    };
    let claim = producer.map(|p| ProducerClaim {
        id: scoped_producer_id(&routing_key, &p.id),
        epoch: p.epoch,
        seq: p.seq,
        digest: request_hash(
            operation,
            &routing_key,
            &media_type(&meta.content_type),
            &body,
            false,
        ),
    });
    let count = records.len();
    let spec = AppendSpec {
        routing_key: routing_key.clone(),
        content_type: None,
        body: Bytes::new(),
        records: Some(records),
        producer: claim.clone(),
        stream_seq: None,
        close: false,
    };
    let outcome = streams
        .append(project, name, spec, &call.key, state.store_deadline())
        .await
        .map_err(write_error)?;
    let scope = CursorScope {
        project,
        epoch,
        key: &call.key,
        routing_key: &routing_key,
    };
    let answer = append_answer(&scope, &outcome, claim.as_ref(), count)?;
    Ok(json_response(StatusCode::OK, answer))
}

/// The body of `:seal`: `{}` or `{"final": value, "routingKey"?: string}`.
struct SealBody {
    final_record: Option<Bytes>,
    routing_key: Bytes,
}

fn seal_body(body: &[u8]) -> Result<SealBody, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(SealBody {
            final_record: None,
            routing_key: Bytes::new(),
        });
    }
    // The final value's exact text is kept (a raw-value parse); `null` is a
    // record too, so presence is judged by the key, not the value.
    let fields: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_slice(body).map_err(|_| {
            bad(
                "invalid_body",
                "the seal body is {} or {\"final\": value, \"routingKey\"?: string}",
            )
        })?;
    if let Some(unknown) = fields.keys().find(|k| *k != "final" && *k != "routingKey") {
        return Err(bad(
            "invalid_body",
            format!("the seal body has an unknown field {unknown:?}"),
        ));
    }
    let routing_key = match fields.get("routingKey") {
        None => Bytes::new(),
        Some(raw) => {
            let text: String = serde_json::from_str(raw.get())
                .map_err(|_| bad("invalid_routing_key", "routingKey must be a string"))?;
            routing_key_bytes(text.as_bytes())?
        }
    };
    let final_record = match fields.get("final") {
        Some(raw) => Some(
            json::one_record(raw.get().as_bytes())
                .map_err(|e| bad("invalid_body", e.to_string()))?,
        ),
        None => None,
    };
    Ok(SealBody {
        final_record,
        routing_key,
    })
}

async fn seal(
    state: &AppState,
    project: &str,
    name: &str,
    key: Result<Option<StreamKey>, ApiError>,
    producer: Result<Option<ProducerHeaders>, ApiError>,
    body: Incoming,
) -> ApiResult {
    let streams = &state.streams;
    let meta = state
        .bounded(state.deadline(), streams.head(project, name))
        .await
        .map_err(service_error)?;
    let key = key?;
    let producer = producer?;
    let body = read_body(body, state.config.max_body_bytes).await?;
    let parsed = seal_body(&body)?;
    let Some(final_record) = parsed.final_record else {
        // Seal only: idempotent, no key needed.
        if producer.is_some() {
            return Err(bad(
                "invalid_producer",
                "Producer-* headers go with a final record",
            ));
        }
        let (streams, project, name) = (streams.clone(), project.to_string(), name.to_string());
        state
            .write(state.deadline(), async move {
                streams.seal(&project, &name).await
            })
            .await
            .map_err(service_error)?;
        return Ok(json_response(StatusCode::OK, json!({ "sealed": true })));
    };
    let key =
        key.ok_or_else(|| bad("missing_key", "a final record needs Prisma-Encryption-Key"))?;
    let store_deadline = state.store_deadline();
    let deadline = store_deadline.at;
    let (_, epoch) = state
        .bounded(deadline, streams.keyed_meta(project, name, &key))
        .await
        .map_err(write_error)?;
    if meta.closed && producer.is_none() {
        return Err(service_error(ServiceError::Closed { tail: meta.tail }));
    }
    if !is_json(&meta.content_type) {
        return Err(bad(
            "invalid_body",
            "a final record in the seal body needs a JSON collection",
        ));
    }
    let claim = producer.map(|p| ProducerClaim {
        id: scoped_producer_id(&parsed.routing_key, &p.id),
        epoch: p.epoch,
        seq: p.seq,
        digest: request_hash(
            Operation::SealFinal,
            &parsed.routing_key,
            &media_type(&meta.content_type),
            &final_record,
            true,
        ),
    });
    let spec = AppendSpec {
        routing_key: parsed.routing_key.clone(),
        content_type: None,
        body: Bytes::new(),
        records: Some(vec![final_record]),
        producer: claim.clone(),
        stream_seq: None,
        close: true,
    };
    let outcome = streams
        .append(project, name, spec, &key, store_deadline)
        .await
        .map_err(write_error)?;
    let scope = CursorScope {
        project,
        epoch,
        key: &key,
        routing_key: &parsed.routing_key,
    };
    let mut answer = append_answer(&scope, &outcome, claim.as_ref(), 1)?;
    answer["sealed"] = Value::Bool(true);
    Ok(json_response(StatusCode::OK, answer))
}

// -------------------------------------------------------------------- reads

/// One key read's fixed parts.
#[derive(Clone)]
struct ReadCall {
    project: String,
    name: String,
    key: StreamKey,
    routing_key: Bytes,
    max_bytes: usize,
    /// 1 on bytes collections: a page's body is one record's bytes, so record
    /// boundaries survive; JSON pages are arrays of any length.
    max_records: usize,
}

impl ReadCall {
    fn scope(&self, epoch: [u8; 16]) -> CursorScope<'_> {
        CursorScope {
            project: &self.project,
            epoch,
            key: &self.key,
            routing_key: &self.routing_key,
        }
    }

    async fn read(&self, state: &AppState, from: ReadFrom) -> Result<ReadOutcome, ApiError> {
        let view = KeyView {
            routing_key: &self.routing_key,
            max_bytes: self.max_bytes,
            max_records: self.max_records,
        };
        let read = state
            .streams
            .read_key(&self.project, &self.name, from, &self.key, view);
        state
            .bounded(state.deadline(), read)
            .await
            .map_err(service_error)
    }
}

fn page_headers(response: &mut Response<Body>, scope: &CursorScope<'_>, outcome: &ReadOutcome) {
    set(response, "prisma-next-cursor", scope.encode(outcome.next));
    if outcome.up_to_date() {
        set(response, "prisma-up-to-date", "true");
    }
    if outcome.at_end() {
        set(response, "prisma-sealed", "true");
    }
    set(response, "cache-control", "no-store");
}

fn page_response(scope: &CursorScope<'_>, outcome: &ReadOutcome) -> Response<Body> {
    let mut response = Response::new(full(render(&outcome.content_type, outcome)));
    set(&mut response, "content-type", &outcome.content_type);
    page_headers(&mut response, scope, outcome);
    response
}

async fn read(
    state: Arc<AppState>,
    mut call: ReadCall,
    cursor: CursorParam,
    transport: Transport,
) -> ApiResult {
    // Exists (404/410) and the key is the collection's (403) before the
    // cursor is judged.
    let lookup = state
        .streams
        .keyed_meta(&call.project, &call.name, &call.key);
    let (meta, epoch) = state
        .bounded(state.deadline(), lookup)
        .await
        .map_err(service_error)?;
    if !is_json(&meta.content_type) {
        call.max_records = 1;
    }
    let from = match &cursor {
        CursorParam::Beginning => ReadFrom::Start,
        CursorParam::Now => ReadFrom::Tail,
        CursorParam::Token(token) => {
            ReadFrom::Position(call.scope(epoch).decode(token).ok_or_else(|| {
                bad(
                    "invalid_cursor",
                    "not a cursor of this collection and routing key",
                )
            })?)
        }
    };
    let outcome = call.read(&state, from).await.map_err(|e| match e.code {
        // A position past the tail can only come from a forged cursor.
        "invalid_body" => bad(
            "invalid_cursor",
            "the cursor is beyond the collection's tail",
        ),
        _ => e,
    })?;
    match transport {
        Transport::Plain => Ok(page_response(&call.scope(epoch), &outcome)),
        Transport::LongPoll { wait } => long_poll(&state, &call, epoch, outcome, wait).await,
        Transport::Sse { wait } => sse(state, call, epoch, outcome, wait).await,
    }
}

async fn long_poll(
    state: &Arc<AppState>,
    call: &ReadCall,
    epoch: [u8; 16],
    first: ReadOutcome,
    wait: Duration,
) -> ApiResult {
    let _slot = state.live_slot(LIVE_CAPACITY_CODE)?;
    let outcome = live::long_poll(state, call, first, Pace::product(wait)).await?;
    let scope = call.scope(epoch);
    if !outcome.records.is_empty() {
        return Ok(page_response(&scope, &outcome));
    }
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    page_headers(&mut response, &scope, &outcome);
    Ok(response)
}

impl LiveRead for ReadCall {
    fn project(&self) -> &str {
        &self.project
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn read(&self, state: &AppState, from: ReadFrom) -> Result<ReadOutcome, ApiError> {
        ReadCall::read(self, state, from).await
    }

    fn error(&self, e: ServiceError) -> ApiError {
        service_error(e)
    }
}

/// The product's events: after every read a control
/// `{"nextCursor","upToDate"?,"sealed"?}`; the response ends at the sealed
/// collection's end, at `waitMs`, or when nothing moves.
struct ProductFraming {
    call: ReadCall,
    epoch: [u8; 16],
    binary: bool,
}

impl SseFraming for ProductFraming {
    const CACHE_CONTROL: &'static str = "no-store";

    fn binary(&self) -> bool {
        self.binary
    }

    fn events(&mut self, _state: &AppState, outcome: &ReadOutcome, out: &mut Vec<u8>) {
        let scope = self.call.scope(self.epoch);
        if !outcome.records.is_empty() {
            live::data_event(out, outcome, self.binary);
        }
        let mut control = json!({ "nextCursor": scope.encode(outcome.next) });
        if outcome.up_to_date() {
            control["upToDate"] = Value::Bool(true);
        }
        if outcome.at_end() {
            control["sealed"] = Value::Bool(true);
        }
        live::control_event(out, control);
    }

    fn keep_alive(&mut self, _state: &AppState, _position: u64, _out: &mut Vec<u8>) -> bool {
        false
    }
}

async fn sse(
    state: Arc<AppState>,
    call: ReadCall,
    epoch: [u8; 16],
    first: ReadOutcome,
    wait: Duration,
) -> ApiResult {
    let slot = state.live_slot(LIVE_CAPACITY_CODE)?;
    let framing = ProductFraming {
        call: call.clone(),
        epoch,
        binary: is_binary(&first.content_type),
    };
    Ok(live::sse(
        state,
        slot,
        call,
        framing,
        first,
        Pace::product(wait),
    ))
}
