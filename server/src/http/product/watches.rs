//! Watch routes (docs/API.md, "Watches"): the definitions
//! (`GET …/watches`, `GET …/watches/{w}`, bearer token, no key) and the
//! observation long-poll (`GET …/watches/{w}/keys/{watchKey}`), authorized
//! by its capability alone. Every refusal of a capability — malformed,
//! forged, expired, another scope's, or naming nothing that exists — is the
//! same 403 `watch_unauthorized`.

use std::sync::Arc;

use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::super::common::{full, set, ApiError, ApiResult, AppState, Body};
use super::errors::{bad, error, service_error, LIVE_CAPACITY_CODE};
use super::parse::ObserveCall;
use crate::service::{Observation, WatchOutcome, WatchRequest};

fn watch_json(status: StatusCode, value: Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    set(&mut response, "content-type", "application/json");
    set(&mut response, "cache-control", "no-store");
    set(&mut response, "referrer-policy", "no-referrer");
    response
}

pub async fn definitions(
    state: &Arc<AppState>,
    project: &str,
    name: &str,
    watch: Option<&str>,
) -> ApiResult {
    let meta = state
        .bounded(state.deadline(), state.streams.head(project, name))
        .await
        .map_err(service_error)?;
    let Some(watch) = watch else {
        return Ok(watch_json(
            StatusCode::OK,
            json!({ "watches": meta.watches }),
        ));
    };
    match meta.watches.iter().find(|w| w.name == watch) {
        Some(def) => Ok(watch_json(StatusCode::OK, json!(def))),
        None => Err(error(
            StatusCode::NOT_FOUND,
            "unknown_watch",
            "the collection has no such watch",
        )),
    }
}

fn unauthorized() -> ApiError {
    error(
        StatusCode::FORBIDDEN,
        "watch_unauthorized",
        "the capability does not grant this observation",
    )
}

pub async fn observe(state: &Arc<AppState>, name: &str, call: ObserveCall) -> ApiResult {
    let request = WatchRequest {
        project: call.project(),
        name,
        watch: &call.watch,
        key: call.key,
        capability: &call.capability,
        cursor: call.cursor.as_deref(),
        wait: call.wait,
    };
    // The lookup is bounded like any request's; the wait by `timeoutMs`.
    let deadline = state.deadline() + call.wait;
    // A missing collection is `Unauthorized` already; the errors left are
    // the store's and the shard's (retryable), which say nothing of it.
    let outcome = state
        .bounded(deadline, state.streams.observe_watch(request))
        .await
        .map_err(service_error)?;
    match outcome {
        WatchOutcome::Unauthorized => Err(unauthorized()),
        WatchOutcome::BadCursor => Err(bad("invalid_cursor", "not a cursor of this watch key")),
        WatchOutcome::Busy => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            LIVE_CAPACITY_CODE,
            "too many observations wait on this server",
        )
        .header("retry-after", "5")),
        WatchOutcome::Answered {
            observation,
            cursor,
        } => {
            let body = match observation {
                Observation::Changed(_) => {
                    json!({"invalidated": true, "reason": "changed", "cursor": cursor})
                }
                Observation::Resync(_) => {
                    json!({"invalidated": true, "reason": "resync", "cursor": cursor})
                }
                Observation::Unchanged(_) => json!({"invalidated": false, "cursor": cursor}),
            };
            Ok(watch_json(StatusCode::OK, body))
        }
    }
}
