//! Operators' debug endpoints: `GET /debug/shards` (every shard as this
//! server sees it: owned ones with the owner's epoch, the WAL range a
//! re-open replays, bytes staged and in flight, queue depth and unsealed
//! bytes; in a fleet, where the others are served) and `GET /debug/config`
//! (the effective configuration, without secrets).
//!
//! Served on the `--metrics-listen` address, and on the main one only to a
//! request bearing `--operator-token` (else 404, like any unknown route).

use http::{HeaderMap, Method, Response, StatusCode};
use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use super::common::{full, set, ApiError, AppState, Body};
use crate::service::routing::{ShardIndex, Slot};

/// A debug route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugRoute {
    Shards,
    Config,
}

/// The debug route of `method` and `path`, if it is one (pure).
pub fn debug_route(method: &Method, path: &str) -> Option<DebugRoute> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    match path {
        "/debug/shards" => Some(DebugRoute::Shards),
        "/debug/config" => Some(DebugRoute::Config),
        _ => None,
    }
}

/// Whether `headers` bear the operator token (compared in constant time).
pub fn operator(state: &AppState, headers: &HeaderMap) -> bool {
    let Some(token) = &state.config.operator_token else {
        return false;
    };
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| bool::from(given.as_bytes().ct_eq(token.as_bytes())))
}

/// 404, as for any route that does not exist.
pub fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

/// The answer to a debug route.
pub fn answer(state: &AppState, route: DebugRoute) -> Response<Body> {
    let body = match route {
        DebugRoute::Shards => shards(state),
        DebugRoute::Config => state.config.effective_config.clone(),
    };
    let mut response = Response::new(full(body.to_string()));
    set(&mut response, "content-type", "application/json");
    set(&mut response, "cache-control", "no-store");
    response
}

fn shards(state: &AppState) -> Value {
    let router = state.streams.router();
    let shards: Vec<Value> = (0..router.count())
        .map(|i| {
            let index = ShardIndex(i);
            match router.slot(index) {
                Slot::Owned(shard) => {
                    let m = shard.metrics();
                    json!({
                        "index": i,
                        "name": shard.name().to_string(),
                        "served": "here",
                        "status": format!("{:?}", shard.status()),
                        "epoch": m.epoch,
                        "walReplaySlot": m.replay_slot,
                        "walNextSlot": m.next_slot,
                        "putsInFlight": m.puts_in_flight,
                        "inflightBytes": m.inflight_bytes,
                        "pendingBytes": m.pending_bytes,
                        "queueDepth": m.queue_depth,
                        "unsealedBytes": m.unsealed_bytes,
                        "walPuts": m.wal_puts,
                        "seals": m.seals,
                        "fences": m.fences,
                    })
                }
                Slot::Elsewhere(owner) => json!({
                    "index": i,
                    "served": "elsewhere",
                    "owner": owner.url,
                    "handedOffHere": owner.handed_off_here,
                }),
                Slot::Unowned => json!({"index": i, "served": "nowhere"}),
            }
        })
        .collect();
    json!({ "shards": shards })
}
