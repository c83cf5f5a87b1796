//! `/v1/stream/{name}`: the Durable Streams protocol over the stream service.
//!
//! PUT creates (or forks), POST appends and closes, GET reads (catch-up,
//! `live=long-poll`, `live=sse`), HEAD describes, DELETE deletes. Offsets are
//! [`Offset`] strings; the stream key comes in `Stream-Encryption-Key` (or the
//! development default key, when the server runs with one).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use strata_engine::ProducerClaim;
use strata_segments::StreamKey;
use strata_wal::MAX_STREAM_SEQ_BYTES;

pub use super::common::ProducerHeaders;
use super::common::{
    ascii_header, decode_stream_name, empty, full, producer_headers, read_body, render, set,
    with_status, ApiError, ApiResult, AppState, Body,
};
use super::live::{self, is_binary, LiveRead, Pace, SseFraming};
use crate::ds::cursor::next_cursor;
use crate::ds::json;
use crate::ds::offsets::{Offset, OffsetParam};
use crate::product::{request_hash, Operation};
use crate::streams::{
    is_json, media_type, AppendResult, AppendSpec, CreateMode, CreateSpec, Expiry, ForkSpec,
    ReadFrom, ReadOutcome, ServiceError, StreamMeta,
};

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
/// The raw route's name for a spent live-connection budget.
const LIVE_CAPACITY_CODE: &str = "live_capacity";
/// Longest stream name, in bytes.
pub const MAX_NAME_BYTES: usize = 1024;

/// Characters escaped when a name goes back into a URL (`/` is kept).
const NAME_ESCAPES: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// Decodes and validates the stream name in a request path.
pub fn stream_name(raw: &str) -> Result<String, ApiError> {
    decode_stream_name(raw, MAX_NAME_BYTES)
        .map_err(|why| ApiError::bad_request(format!("invalid stream name: {why}")))
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

fn stream_key(
    dev_default_key: Option<&StreamKey>,
    headers: &HeaderMap,
) -> Result<StreamKey, ApiError> {
    match header(headers, "stream-encryption-key")? {
        Some(text) => StreamKey::parse(text)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_key", e.to_string())),
        None => dev_default_key.cloned().ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_key",
                "Stream-Encryption-Key is required (32 bytes, base64url)",
            )
        }),
    }
}

pub async fn handle(
    state: Arc<AppState>,
    request: Request<Incoming>,
    project: String,
    name: String,
    op: StreamOp,
) -> ApiResult {
    let project = project.as_str();
    match op {
        StreamOp::Create(create_request) => {
            create(state, request.into_body(), project, name, create_request).await
        }
        StreamOp::Append(append_request) => {
            append(state, request.into_body(), project, name, append_request).await
        }
        StreamOp::Read(read_request) => read(state, request, project, name, read_request).await,
        StreamOp::Head => head(state, project, name).await,
        StreamOp::Delete => {
            let streams = state.streams.clone();
            let project = project.to_string();
            state
                .write(state.deadline(), async move {
                    streams.delete(&project, &name).await
                })
                .await?;
            Ok(with_status(StatusCode::NO_CONTENT, empty()))
        }
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

async fn create(
    state: Arc<AppState>,
    body: Incoming,
    project: &str,
    name: String,
    request: CreateRequest,
) -> ApiResult {
    let body = read_body(body, state.config.max_body_bytes).await?;
    let CreateRequest {
        key,
        content_type,
        expiry,
        closed,
        fork,
        host,
    } = request;
    let spec = CreateSpec {
        mode: CreateMode::Raw,
        watches: Vec::new(),
        content_type,
        expiry,
        closed,
        body,
        fork,
    };
    let outcome = {
        let (streams, project, name) = (state.streams.clone(), project.to_string(), name.clone());
        state
            .write(state.deadline(), async move {
                streams.create(&project, &name, spec, &key).await
            })
            .await?
    };
    let status = if outcome.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut response = with_status(status, empty());
    set(&mut response, "content-type", &outcome.content_type);
    set(
        &mut response,
        "stream-next-offset",
        Offset(outcome.tail).to_string(),
    );
    if outcome.closed {
        set(&mut response, "stream-closed", "true");
    }
    if outcome.created {
        let path: String = utf8_percent_encode(&name, NAME_ESCAPES).collect();
        set(
            &mut response,
            "location",
            format!("http://{host}{PREFIX}{path}"),
        );
    }
    Ok(response)
}

fn parse_append(
    headers: &HeaderMap,
    dev_default_key: Option<&StreamKey>,
) -> Result<AppendRequest, ApiError> {
    let close = is_true(headers, "stream-closed");
    let stream_seq = header(headers, "stream-seq")?.map(|s| Bytes::copy_from_slice(s.as_bytes()));
    if stream_seq
        .as_ref()
        .is_some_and(|s| s.len() > MAX_STREAM_SEQ_BYTES)
    {
        return Err(ApiError::bad_request(format!(
            "Stream-Seq is longer than {MAX_STREAM_SEQ_BYTES} bytes"
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

async fn append(
    state: Arc<AppState>,
    body: Incoming,
    project: &str,
    name: String,
    request: AppendRequest,
) -> ApiResult {
    let body = read_body(body, state.config.max_body_bytes).await?;
    let spec = request.spec(body)?;
    let producer = spec.producer.clone();
    let has_body = !spec.body.is_empty();
    let outcome = state
        .streams
        .append(project, &name, spec, &request.key, state.store_deadline())
        .await?;
    let status = match (&outcome.result, &producer) {
        (AppendResult::Appended, Some(_)) if has_body => StatusCode::OK,
        _ => StatusCode::NO_CONTENT,
    };
    let mut response = with_status(status, empty());
    set(
        &mut response,
        "stream-next-offset",
        Offset(outcome.tail).to_string(),
    );
    if outcome.closed {
        set(&mut response, "stream-closed", "true");
    }
    match (&outcome.result, &producer) {
        (AppendResult::Duplicate(state), _) => {
            set(&mut response, "producer-epoch", state.epoch.to_string());
            set(&mut response, "producer-seq", state.seq.to_string());
        }
        (_, Some(claim)) => {
            set(&mut response, "producer-epoch", claim.epoch.to_string());
            set(&mut response, "producer-seq", claim.seq.to_string());
        }
        _ => {}
    }
    Ok(response)
}

async fn head(state: Arc<AppState>, project: &str, name: String) -> ApiResult {
    let meta = state
        .bounded(state.deadline(), state.streams.head(project, &name))
        .await?;
    let mut response = with_status(StatusCode::OK, empty());
    set(&mut response, "content-type", &meta.content_type);
    set(
        &mut response,
        "stream-next-offset",
        Offset(meta.tail).to_string(),
    );
    set(&mut response, "cache-control", "no-store");
    if meta.closed {
        set(&mut response, "stream-closed", "true");
    }
    if let Some(ttl) = meta.ttl_seconds {
        set(&mut response, "stream-ttl", ttl.to_string());
    }
    if let Some(at) = &meta.expires_at {
        set(&mut response, "stream-expires-at", at);
    }
    Ok(response)
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

fn read_from(offset: Option<OffsetParam>) -> ReadFrom {
    match offset {
        None | Some(OffsetParam::Start) => ReadFrom::Start,
        Some(OffsetParam::Now) => ReadFrom::Tail,
        Some(OffsetParam::At(o)) => ReadFrom::Position(o.0),
    }
}

/// A fresh `Stream-Cursor` value after the client's `cursor=` (one
/// entropy draw, then the clock).
fn fresh_cursor(state: &AppState, client: Option<u64>) -> u64 {
    let [a, b, c, d, e, f, g, h, ..] = state.streams.random_bytes16();
    let random = u64::from_le_bytes([a, b, c, d, e, f, g, h]);
    next_cursor(state.streams.now_ms(), client, random)
}

fn cursor_header(state: &AppState, client: Option<u64>) -> String {
    fresh_cursor(state, client).to_string()
}

fn read_response(outcome: &ReadOutcome, tail_read: bool) -> Response<Body> {
    let mut response = with_status(StatusCode::OK, full(render(&outcome.content_type, outcome)));
    set(&mut response, "content-type", &outcome.content_type);
    set(
        &mut response,
        "stream-next-offset",
        Offset(outcome.next).to_string(),
    );
    if outcome.up_to_date() {
        set(&mut response, "stream-up-to-date", "true");
    }
    if outcome.at_end() {
        set(&mut response, "stream-closed", "true");
    }
    if tail_read {
        set(&mut response, "cache-control", "no-store");
    } else if !outcome.up_to_date() || outcome.at_end() {
        // A completed range never changes: caches may keep it.
        set(
            &mut response,
            "cache-control",
            "public, max-age=31536000, immutable",
        );
    } else {
        set(&mut response, "cache-control", "no-cache");
    }
    response
}

fn etag(outcome: &ReadOutcome) -> String {
    format!(
        "\"{}:{}:{}{}\"",
        outcome.incarnation,
        outcome.from,
        outcome.next,
        if outcome.at_end() { ":c" } else { "" }
    )
}

async fn read(
    state: Arc<AppState>,
    request: Request<Incoming>,
    project: &str,
    name: String,
    read_request: ReadRequest,
) -> ApiResult {
    // A missing or deleted stream answers as such before the query is judged.
    let deadline = state.deadline();
    let meta = state
        .bounded(deadline, state.streams.head(project, &name))
        .await?;
    let query = read_request.query?;
    let key = read_request.key?;
    match query.live {
        Some(Live::Sse) => {
            let offset = query.offset.unwrap_or(OffsetParam::Start);
            sse(state, project, name, meta, offset, query.cursor, key).await
        }
        Some(Live::LongPoll) => {
            long_poll(
                state,
                project,
                name,
                read_from(query.offset),
                query.cursor,
                key,
            )
            .await
        }
        None => {
            let from = read_from(query.offset);
            let outcome = state
                .bounded(deadline, state.streams.read(project, &name, from, &key))
                .await?;
            if from == ReadFrom::Tail {
                return Ok(read_response(&outcome, true));
            }
            let tag = etag(&outcome);
            let matches = request
                .headers()
                .get("if-none-match")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
            if matches {
                let mut response = with_status(StatusCode::NOT_MODIFIED, empty());
                set(&mut response, "etag", &tag);
                return Ok(response);
            }
            let mut response = read_response(&outcome, false);
            set(&mut response, "etag", &tag);
            Ok(response)
        }
    }
}

async fn long_poll(
    state: Arc<AppState>,
    project: &str,
    name: String,
    from: ReadFrom,
    cursor: Option<u64>,
    key: StreamKey,
) -> ApiResult {
    let _slot = state.live_slot(LIVE_CAPACITY_CODE)?;
    // The reads are bounded by the store deadline; the wait for new records
    // in between (in memory) by the long-poll timeout (and, should its
    // lookup need the store, by both).
    let reader = RawReader {
        project: project.to_string(),
        name,
        key,
    };
    let first = reader.read(&state, from).await?;
    let pace = Pace::raw_long_poll(state.config.long_poll_timeout);
    let outcome = live::long_poll(&state, &reader, first, pace).await?;
    if !outcome.records.is_empty() {
        let mut response = read_response(&outcome, false);
        set(
            &mut response,
            "stream-cursor",
            cursor_header(&state, cursor),
        );
        return Ok(response);
    }
    let mut response = with_status(StatusCode::NO_CONTENT, empty());
    set(
        &mut response,
        "stream-next-offset",
        Offset(outcome.next).to_string(),
    );
    set(&mut response, "stream-up-to-date", "true");
    if outcome.closed {
        set(&mut response, "stream-closed", "true");
    } else {
        set(
            &mut response,
            "stream-cursor",
            cursor_header(&state, cursor),
        );
    }
    Ok(response)
}

/// A raw live reader: the default routing key's view of one stream.
struct RawReader {
    project: String,
    name: String,
    key: StreamKey,
}

impl LiveRead for RawReader {
    fn project(&self) -> &str {
        &self.project
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn read(&self, state: &AppState, from: ReadFrom) -> Result<ReadOutcome, ApiError> {
        let read = state
            .streams
            .read(&self.project, &self.name, from, &self.key);
        Ok(state.bounded(state.deadline(), read).await?)
    }

    fn error(&self, e: ServiceError) -> ApiError {
        ApiError::from(e)
    }
}

/// The raw route's events: after every batch (and once at the start) a
/// control `{"streamNextOffset","streamCursor","upToDate"?}`; at a closed
/// stream's end `{"streamNextOffset","streamClosed":true}` (then the
/// response ends); a keep-alive control at the tail each long-poll timeout.
struct RawFraming {
    binary: bool,
    cursor: Option<u64>,
    first_round: bool,
}

impl SseFraming for RawFraming {
    const CACHE_CONTROL: &'static str = "no-cache";

    fn binary(&self) -> bool {
        self.binary
    }

    fn events(&mut self, state: &AppState, outcome: &ReadOutcome, out: &mut Vec<u8>) {
        if !outcome.records.is_empty() {
            live::data_event(out, outcome, self.binary);
        }
        let next = Offset(outcome.next).to_string();
        if outcome.at_end() {
            live::control_event(
                out,
                serde_json::json!({"streamNextOffset": next, "streamClosed": true}),
            );
            return;
        }
        if !outcome.records.is_empty() || self.first_round {
            let value = fresh_cursor(state, self.cursor);
            self.cursor = Some(value);
            let mut control = serde_json::json!({
                "streamNextOffset": next,
                "streamCursor": value.to_string(),
            });
            if outcome.up_to_date() {
                control["upToDate"] = serde_json::Value::Bool(true);
            }
            live::control_event(out, control);
        }
        self.first_round = false;
    }

    fn keep_alive(&mut self, state: &AppState, position: u64, out: &mut Vec<u8>) -> bool {
        // The position, still up to date.
        let value = fresh_cursor(state, self.cursor);
        self.cursor = Some(value);
        live::control_event(
            out,
            serde_json::json!({
                "streamNextOffset": Offset(position).to_string(),
                "streamCursor": value.to_string(),
                "upToDate": true,
            }),
        );
        true
    }
}

async fn sse(
    state: Arc<AppState>,
    project: &str,
    name: String,
    meta: StreamMeta,
    offset: OffsetParam,
    cursor: Option<u64>,
    key: StreamKey,
) -> ApiResult {
    let slot = state.live_slot(LIVE_CAPACITY_CODE)?;
    let reader = RawReader {
        project: project.to_string(),
        name,
        key,
    };
    // Validate the start (offset beyond the tail, wrong key) before streaming.
    let first = reader.read(&state, read_from(Some(offset))).await?;
    let framing = RawFraming {
        binary: is_binary(&meta.content_type),
        cursor,
        first_round: true,
    };
    let pace = Pace::raw_sse(state.config.long_poll_timeout);
    Ok(live::sse(state, slot, reader, framing, first, pace))
}

/// The raw (Durable Streams) surface's answer to a service error.
impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let code = match &e {
            ServiceError::NotFound => "not_found",
            ServiceError::Gone => "gone",
            ServiceError::Conflict(_) | ServiceError::RetainedForForks => "conflict",
            ServiceError::ContentTypeMismatch => "content_type_mismatch",
            ServiceError::Closed { .. } => "stream_closed",
            ServiceError::SeqConflict => "seq_conflict",
            ServiceError::ProducerStale { .. } => "producer_stale_epoch",
            ServiceError::ProducerGap { .. } => "producer_seq_gap",
            ServiceError::ProducerEpochSeq => "producer_epoch_seq",
            ServiceError::WrongKey => "wrong_key",
            ServiceError::BadRequest(_) => "bad_request",
            ServiceError::TooLarge { .. } => "record_too_large",
            ServiceError::Overloaded => "overloaded",
            ServiceError::Unavailable(_) => "unavailable",
            ServiceError::OutcomeUnknown(_) => "outcome_unknown",
            ServiceError::Internal(_) => "internal",
        };
        let error = ApiError::from_service(&e, code);
        match e {
            ServiceError::Closed { tail } => error.header("stream-closed", "true").header(
                "stream-next-offset",
                crate::ds::offsets::Offset(tail).to_string(),
            ),
            ServiceError::ProducerStale { current_epoch } => {
                error.header("producer-epoch", current_epoch.to_string())
            }
            ServiceError::ProducerGap { expected, received } => error
                .header("producer-expected-seq", expected.to_string())
                .header("producer-received-seq", received.to_string()),
            _ => error,
        }
    }
}
