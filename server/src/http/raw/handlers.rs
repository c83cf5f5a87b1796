//! The handlers of `/v1/stream/{name}` (docs/ARCHITECTURE.md, "The HTTP
//! layer"): each parsed [`StreamOp`] run against the stream service and its
//! answer rendered — status, `Stream-*` and `Producer-*` headers, the read's
//! body, `ETag` and `Cache-Control` — including the raw route's long-poll and
//! SSE framing over the shared live loop ([`super::super::live`]).

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use strata_segments::StreamKey;

use super::super::common::{
    empty, full, render, set, with_status, ApiError, ApiResult, AppState, Body,
    LIVE_BUDGET_FIRST_WAIT_MAX,
};
use super::super::live::{self, is_binary, LiveRead, Pace, SseFraming};
use super::errors::LIVE_CAPACITY_CODE;
use super::parse::{read_from, AppendRequest, CreateRequest, Live, ReadRequest, StreamOp, PREFIX};
use crate::ds::cursor::next_cursor;
use crate::ds::offsets::{Offset, OffsetParam};
use crate::service::{
    AppendResult, CreateMode, CreateSpec, ReadFrom, ReadOutcome, ServiceError, StreamMeta,
};

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

async fn create(
    state: Arc<AppState>,
    body: Incoming,
    project: &str,
    name: String,
    request: CreateRequest,
) -> ApiResult {
    let body = state.read_body(body, state.config.max_body_bytes).await?;
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

async fn append(
    state: Arc<AppState>,
    body: Incoming,
    project: &str,
    name: String,
    request: AppendRequest,
) -> ApiResult {
    let body = state.read_body(body, state.config.max_body_bytes).await?;
    let body = state.admit_append(project, body).await?;
    super::super::common::usage::admit_stored(&state, project).await?;
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
    let _slot = state
        .live_slot(LIVE_CAPACITY_CODE)?
        .with_project(state.streams.admit_live_reader(project)?);
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

    fn read_bytes_max(&self) -> usize {
        crate::service::RAW_READ_BYTES
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
    let slot = state
        .live_slot(LIVE_CAPACITY_CODE)?
        .with_project(state.streams.admit_live_reader(project)?);
    let reader = RawReader {
        project: project.to_string(),
        name,
        key,
    };
    // Validate the start (offset beyond the tail, wrong key) before streaming;
    // the first frame has its room in the live budget first.
    let reserved = state
        .reserve_live(live::frame_bytes_max(&reader), LIVE_BUDGET_FIRST_WAIT_MAX)
        .await?;
    let first = reader.read(&state, read_from(Some(offset))).await?;
    let framing = RawFraming {
        binary: is_binary(&meta.content_type),
        cursor,
        first_round: true,
    };
    let pace = Pace::raw_sse(state.config.long_poll_timeout);
    Ok(live::sse(
        state,
        slot,
        reader,
        framing,
        (first, reserved),
        pace,
    ))
}
