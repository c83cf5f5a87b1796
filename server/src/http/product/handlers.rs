//! The handlers of `/v1/streams…` (docs/ARCHITECTURE.md, "The HTTP
//! layer"): each parsed route run against the stream service and its answer
//! rendered — the catalog, create, metadata, delete, appends, seal, and key
//! reads from opaque cursors, with the product's long-poll and SSE framing
//! over the shared live loop ([`super::super::live`]). Checks run in the
//! contract's order: authentication, existence, seal state, content type,
//! routing key, producer, body size, JSON syntax, batch count, commit.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};
use strata_engine::ProducerClaim;
use strata_segments::StreamKey;

use super::super::common::usage::admit_stored;
use super::super::common::{
    empty, full, render, set, ApiError, ApiResult, AppState, Body, ProducerHeaders,
    LIVE_BUDGET_FIRST_WAIT_MAX,
};
use super::super::live::{self, is_binary, LiveRead, Pace, SseFraming};
use super::consumers;
use super::errors::{bad, error, service_error, write_error, LIVE_CAPACITY_CODE};
use super::parse::{AppendCall, CollectionOp, CursorParam, ProductRoute, Transport};
use super::scan::{scan, ScanCall};
use super::seal_body::seal_body;
use super::usage;
use super::watches;
use crate::ds::json::{self, TopLevel};
use crate::service::catalog::CatalogCursor;
use crate::service::product::config::{CollectionConfig, ExpiryConfig, CONFIG_BYTES_MAX};
use crate::service::product::cursor::CursorScope;
use crate::service::product::{request_hash, scoped_producer_id, Operation, BATCH_RECORDS_MAX};
use crate::service::{
    is_json, media_type, AppendOutcome, AppendResult, AppendSpec, CreateMode, CreateSpec, Expiry,
    KeyView, ReadFrom, ReadOutcome, ServiceError, StreamMeta,
};

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
        ProductRoute::ProjectUsage { named } => usage::project(&state, &project, &named).await,
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
                CollectionOp::Usage => usage::collection(&state, &project, &name).await,
                CollectionOp::Watches => watches::definitions(&state, &project, &name, None).await,
                CollectionOp::Watch { watch } => {
                    watches::definitions(&state, &project, &name, Some(&watch)).await
                }
                CollectionOp::Observe(call) => watches::observe(&state, &name, call).await,
                CollectionOp::Scan {
                    key,
                    cursor,
                    max_bytes,
                } => {
                    let call = ScanCall {
                        project: &project,
                        name: &name,
                        key,
                        cursor,
                        max_bytes,
                    };
                    scan(&state, call).await
                }
                CollectionOp::ConfigureConsumer { consumer, key } => {
                    let call = consumer_call(&project, &name, &consumer);
                    consumers::configure(&state, call, key, body).await
                }
                CollectionOp::ConsumerInfo { consumer } => {
                    consumers::info(&state, consumer_call(&project, &name, &consumer)).await
                }
                CollectionOp::DeleteConsumer { consumer, version } => {
                    let call = consumer_call(&project, &name, &consumer);
                    consumers::delete(&state, call, version).await
                }
                CollectionOp::Pull { consumer, key } => {
                    let call = consumer_call(&project, &name, &consumer);
                    consumers::pull(&state, call, key, body).await
                }
                CollectionOp::Settle { consumer, key } => {
                    let call = consumer_call(&project, &name, &consumer);
                    consumers::settle(&state, call, key, body).await
                }
            }
        }
    };
    result.map_err(ApiError::product)
}

fn consumer_call<'a>(
    project: &'a str,
    name: &'a str,
    consumer: &'a str,
) -> consumers::ConsumerCall<'a> {
    consumers::ConsumerCall {
        project,
        name,
        consumer,
    }
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
    let body = state
        .read_body(body, CONFIG_BYTES_MAX)
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
    let target = state
        .bounded(
            state.deadline(),
            streams.append_target(project, name, &call.key),
        )
        .await
        .map_err(write_error)?;
    if target.tail.closed {
        return Err(service_error(ServiceError::Closed {
            tail: target.tail.position,
        }));
    }
    let epoch = target.epoch;
    let content_type = target.content_type().to_string();
    let json_stream = is_json(&content_type);
    if let Some(ct) = &call.content_type {
        if media_type(ct) != media_type(&content_type) {
            return Err(service_error(ServiceError::ContentTypeMismatch));
        }
    }
    if call.batch && !json_stream {
        // A 405 names the methods the target allows (RFC 9110 §10.2.1):
        // on this collection, none.
        return Err(error(
            StatusCode::METHOD_NOT_ALLOWED,
            "batch_unsupported_format",
            "records:batch needs a JSON collection",
        )
        .header("allow", ""));
    }
    let routing_key = call.routing_key?;
    let producer = call.producer?;
    let body = state.read_body(body, state.config.max_body_bytes).await?;
    let body = state
        .admit_append(project, body)
        .await
        .map_err(service_error)?;
    admit_stored(state, project).await.map_err(service_error)?;
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
        match json::one_record(&body) {
            Ok(record) => vec![record],
            Err(e) => {
                // Size before syntax: a body too large for one record is 413.
                streams
                    .check_record_sizes(std::slice::from_ref(&body))
                    .map_err(service_error)?;
                return Err(bad("invalid_body", e.to_string()));
            }
        }
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
            &media_type(&content_type),
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
        .append_to(project, name, target, spec, state.store_deadline())
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
    let body = state.read_body(body, state.config.max_body_bytes).await?;
    let body = state
        .admit_append(project, body)
        .await
        .map_err(service_error)?;
    admit_stored(state, project).await.map_err(service_error)?;
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
    // An SSE stream's first frame has its room in the live budget first.
    let reserved = match transport {
        Transport::Sse { .. } => Some(
            state
                .reserve_live(live::frame_bytes_max(&call), LIVE_BUDGET_FIRST_WAIT_MAX)
                .await?,
        ),
        _ => None,
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
        Transport::Sse { wait } => match reserved {
            Some(reserved) => sse(state, call, epoch, (outcome, reserved), wait).await,
            None => Err(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "an SSE read without its reservation",
            )),
        },
    }
}

async fn long_poll(
    state: &Arc<AppState>,
    call: &ReadCall,
    epoch: [u8; 16],
    first: ReadOutcome,
    wait: Duration,
) -> ApiResult {
    let _slot = state.live_slot(LIVE_CAPACITY_CODE)?.with_project(
        state
            .streams
            .admit_live_reader(&call.project)
            .map_err(service_error)?,
    );
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

    fn read_bytes_max(&self) -> usize {
        self.max_bytes
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
    first: (ReadOutcome, tokio::sync::OwnedSemaphorePermit),
    wait: Duration,
) -> ApiResult {
    let slot = state.live_slot(LIVE_CAPACITY_CODE)?.with_project(
        state
            .streams
            .admit_live_reader(&call.project)
            .map_err(service_error)?,
    );
    let framing = ProductFraming {
        call: call.clone(),
        epoch,
        binary: is_binary(&first.0.content_type),
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
