//! `…/consumers/{c}` (docs/API.md, "Consumer groups"): configure (`PUT`),
//! read (`GET`), delete (`DELETE` with `Prisma-Consumer-Version`), `:pull`
//! and `:settle`. Bodies are parsed and bounded here; the service decides.
//! Every answer is `Cache-Control: no-store`; values are the record itself
//! in JSON collections and standard base64 otherwise.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http::{Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Map, Value};
use strata_segments::StreamKey;

use super::super::common::{full, set, ApiError, ApiResult, AppState, Body};
use super::errors::{bad, error, service_error};
use super::parse::CONSUMER_VERSION_HEADER;
use crate::service::product::config::whole_number;
use crate::service::product::consumer_config::{
    ConsumerSettings, CONSUMER_CONFIG_BYTES_MAX, VISIBILITY_MS_MAX, VISIBILITY_MS_MIN,
};
use crate::service::{
    is_json, ConsumerError, ConsumerInfo, PullAnswer, PullRequest, SettleRequest, PULL_WAIT_MS_MAX,
    RETRY_DELAY_MS_DEFAULT,
};

/// Largest pull body.
const PULL_BODY_BYTES_MAX: usize = 4 << 10;
/// Largest settle body (3,000 tokens of the longest routing key fit).
const SETTLE_BODY_BYTES_MAX: usize = 8 << 20;
/// Most messages one pull asks for.
const PULL_MAX: u64 = 1_000;

/// Which consumer operation failed (a missing consumer is named per route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerRoute {
    Config,
    Delivery,
}

/// A consumer error as the product answers it.
pub fn consumer_error(route: ConsumerRoute, e: ConsumerError) -> ApiError {
    match e {
        ConsumerError::NotFound => match route {
            ConsumerRoute::Config => error(
                StatusCode::NOT_FOUND,
                "unknown_consumer",
                "no such consumer",
            ),
            ConsumerRoute::Delivery => error(
                StatusCode::NOT_FOUND,
                "consumer_not_found",
                "no such consumer",
            ),
        },
        ConsumerError::ConfigConflict => error(
            StatusCode::CONFLICT,
            "consumer_config_conflict",
            "the consumer exists with another configuration",
        ),
        ConsumerError::VersionConflict { current } => error(
            StatusCode::CONFLICT,
            "consumer_version_conflict",
            "the consumer's version is not the one given",
        )
        .details(json!({ "currentVersion": current })),
        ConsumerError::Deleted => error(
            StatusCode::CONFLICT,
            "consumer_deleted",
            "the consumer was deleted",
        ),
        ConsumerError::DeadLetterUnknown => bad(
            "unknown_dead_letter_stream",
            "the dead-letter stream does not exist in this project",
        ),
        ConsumerError::DeadLetterSealed => {
            bad("dead_letter_sealed", "the dead-letter stream is sealed")
        }
        ConsumerError::DeadLetterKeyMismatch => bad(
            "dead_letter_key_mismatch",
            "the dead-letter stream does not accept this stream's key",
        ),
        ConsumerError::InvalidConfig(message) => bad("invalid_config", message),
        ConsumerError::Invalid(message) => bad("invalid_body", message),
        ConsumerError::Stream(e) => service_error(e),
    }
}

fn json_answer(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    set(&mut response, "content-type", "application/json");
    set(&mut response, "cache-control", "no-store");
    response
}

fn info_answer(info: &ConsumerInfo) -> Response<Body> {
    let status = if info.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut response = json_answer(status, &info.settings.to_json());
    set(
        &mut response,
        CONSUMER_VERSION_HEADER,
        info.version.to_string(),
    );
    response
}

/// Runs a consumer operation within `deadline`: a store that does not answer
/// in time is the usual 503, a consumer error is named for `route`.
async fn bounded<T>(
    state: &AppState,
    deadline: tokio::time::Instant,
    route: ConsumerRoute,
    work: impl std::future::Future<Output = Result<T, ConsumerError>>,
) -> Result<T, ApiError> {
    state
        .bounded(deadline, async { Ok(work.await) })
        .await
        .map_err(service_error)?
        .map_err(|e| consumer_error(route, e))
}

/// The stream a consumer operation is on.
pub struct ConsumerCall<'a> {
    pub project: &'a str,
    pub name: &'a str,
    pub consumer: &'a str,
}

pub async fn configure(
    state: &Arc<AppState>,
    call: ConsumerCall<'_>,
    key: StreamKey,
    body: Incoming,
) -> ApiResult {
    let body = state
        .read_body(body, CONSUMER_CONFIG_BYTES_MAX)
        .await
        .map_err(|e| bad("invalid_config", e.message))?;
    let settings = ConsumerSettings::parse(&body).map_err(|e| bad("invalid_config", e.0))?;
    let work =
        state
            .streams
            .configure_consumer(call.project, call.name, call.consumer, &key, settings);
    let info = bounded(state, state.deadline(), ConsumerRoute::Config, work).await?;
    Ok(info_answer(&info))
}

pub async fn info(state: &Arc<AppState>, call: ConsumerCall<'_>) -> ApiResult {
    let work = state
        .streams
        .consumer_info(call.project, call.name, call.consumer);
    let info = bounded(state, state.deadline(), ConsumerRoute::Config, work).await?;
    Ok(info_answer(&info))
}

pub async fn delete(
    state: &Arc<AppState>,
    call: ConsumerCall<'_>,
    version: Result<u64, ApiError>,
) -> ApiResult {
    let version = version?;
    let work = state
        .streams
        .delete_consumer(call.project, call.name, call.consumer, version);
    bounded(state, state.deadline(), ConsumerRoute::Config, work).await?;
    let mut response = Response::new(super::super::common::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    set(&mut response, "cache-control", "no-store");
    Ok(response)
}

/// A JSON object body (`{}` when empty).
fn object_body(body: &[u8], what: &str) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(fields)) => Ok(fields),
        _ => Err(bad(
            "invalid_body",
            format!("the {what} body is a JSON object"),
        )),
    }
}

/// A whole-number field within bounds (`None`: absent).
fn whole(
    fields: &Map<String, Value>,
    field: &str,
    bounds: std::ops::RangeInclusive<u64>,
) -> Result<Option<u64>, ApiError> {
    match fields.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => whole_number(v)
            .filter(|n| bounds.contains(n))
            .map(Some)
            .ok_or_else(|| {
                bad(
                    "invalid_body",
                    format!(
                        "{field} must be a whole number from {} to {}",
                        bounds.start(),
                        bounds.end()
                    ),
                )
            }),
    }
}

fn only_fields(fields: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), ApiError> {
    match fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(unknown) => Err(bad(
            "invalid_body",
            format!("the {what} body has an unknown field {unknown:?}"),
        )),
        None => Ok(()),
    }
}

/// A JSON object body of at most `limit` bytes with only `allowed` fields.
async fn fields_of(
    state: &AppState,
    body: Incoming,
    limit: usize,
    what: &str,
    allowed: &[&str],
) -> Result<Map<String, Value>, ApiError> {
    let body = state
        .read_body(body, limit)
        .await
        .map_err(|e| bad("invalid_body", e.message))?;
    let fields = object_body(&body, what)?;
    only_fields(&fields, allowed, what)?;
    Ok(fields)
}

pub async fn pull(
    state: &Arc<AppState>,
    call: ConsumerCall<'_>,
    key: StreamKey,
    body: Incoming,
) -> ApiResult {
    let fields = fields_of(
        state,
        body,
        PULL_BODY_BYTES_MAX,
        "pull",
        &["max", "waitMs", "visibilityMs"],
    )
    .await?;
    let max = whole(&fields, "max", 1..=PULL_MAX)?;
    let wait_ms = whole(&fields, "waitMs", 0..=PULL_WAIT_MS_MAX)?.unwrap_or(0);
    let visibility_ms = whole(
        &fields,
        "visibilityMs",
        VISIBILITY_MS_MIN..=VISIBILITY_MS_MAX,
    )?;
    let request = PullRequest {
        project: call.project,
        name: call.name,
        consumer: call.consumer,
        key: &key,
        max: max.map(|m| m as usize),
        wait: Duration::from_millis(wait_ms),
        visibility_ms,
        write_budget: state.store_deadline().budget,
    };
    // The wait is the client's; the store work around it has the usual bound.
    let bound = state.deadline() + Duration::from_millis(wait_ms);
    let answer = bounded(
        state,
        bound,
        ConsumerRoute::Delivery,
        state.streams.pull(request),
    )
    .await?;
    Ok(json_answer(StatusCode::OK, &render_pull(&answer)))
}

fn render_pull(answer: &PullAnswer) -> Value {
    let json_values = is_json(&answer.content_type);
    let messages: Vec<Value> = answer
        .messages
        .iter()
        .map(|m| {
            let value = if json_values {
                serde_json::from_slice(&m.value).unwrap_or(Value::Null)
            } else {
                Value::String(base64::engine::general_purpose::STANDARD.encode(&m.value))
            };
            json!({
                "id": m.id,
                "routingKey": String::from_utf8_lossy(&m.routing_key),
                "attempts": m.attempts,
                "leaseToken": m.lease_token,
                "value": value,
            })
        })
        .collect();
    json!({ "messages": messages, "backlog": answer.backlog })
}

/// The lease tokens of one settle list, each with its number field.
fn settle_items(
    fields: &Map<String, Value>,
    list: &str,
    number: Option<(&str, std::ops::RangeInclusive<u64>, Option<u64>)>,
) -> Result<Vec<(String, u64)>, ApiError> {
    let items = match fields.get(list) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(bad("invalid_body", format!("{list} must be an array"))),
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(item) = item else {
            return Err(bad("invalid_body", format!("each of {list} is an object")));
        };
        let token = match item.get("leaseToken") {
            Some(Value::String(t)) => t.clone(),
            _ => {
                return Err(bad(
                    "invalid_body",
                    format!("each of {list} has a leaseToken string"),
                ))
            }
        };
        let value = match &number {
            None => {
                only_fields(item, &["leaseToken"], list)?;
                0
            }
            Some((field, bounds, default)) => {
                only_fields(item, &["leaseToken", field], list)?;
                match (whole(item, field, bounds.clone())?, default) {
                    (Some(v), _) => v,
                    (None, Some(d)) => *d,
                    (None, None) => {
                        return Err(bad("invalid_body", format!("each of {list} has {field}")))
                    }
                }
            }
        };
        out.push((token, value));
    }
    Ok(out)
}

pub async fn settle(
    state: &Arc<AppState>,
    call: ConsumerCall<'_>,
    key: StreamKey,
    body: Incoming,
) -> ApiResult {
    let fields = fields_of(
        state,
        body,
        SETTLE_BODY_BYTES_MAX,
        "settle",
        &["acks", "retries", "extends"],
    )
    .await?;
    let acks = settle_items(&fields, "acks", None)?;
    let retries = settle_items(
        &fields,
        "retries",
        Some((
            "delayMs",
            0..=VISIBILITY_MS_MAX,
            Some(RETRY_DELAY_MS_DEFAULT),
        )),
    )?;
    let extends = settle_items(
        &fields,
        "extends",
        Some(("visibilityMs", VISIBILITY_MS_MIN..=VISIBILITY_MS_MAX, None)),
    )?;
    let request = SettleRequest {
        project: call.project,
        name: call.name,
        consumer: call.consumer,
        key: &key,
        acks: acks.into_iter().map(|(t, _)| t).collect(),
        retries,
        extends,
    };
    let work = state.streams.settle(request);
    let answer = bounded(state, state.deadline(), ConsumerRoute::Delivery, work).await?;
    let doc = json!({
        "acked": answer.acked,
        "retried": answer.retried,
        "extended": answer.extended,
        "dlq": answer.dlq,
        "stale": answer.stale,
        "backlog": answer.backlog,
        "dlqBlocked": answer.dlq_blocked,
    });
    Ok(json_answer(StatusCode::OK, &doc))
}
