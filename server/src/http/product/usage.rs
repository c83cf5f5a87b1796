//! Usage routes (docs/API.md §13): `GET /v1/streams/{name}/usage` (one
//! collection, answered by the member serving it) and `GET
//! /v1/projects/{project}/usage` (a project, summed over every member's
//! shards by `common::usage`).

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::json;

use super::super::common::usage::project_share;
use super::super::common::{ApiError, ApiResult, AppState};
use super::errors::{error, method_not_allowed, service_error, unknown_route};
use super::parse::ProductRoute;

/// The prefix of project routes.
pub const PROJECTS_PREFIX: &str = "/v1/projects/";

/// `{project}/usage` after [`PROJECTS_PREFIX`] (pure).
pub fn parse_project_route(
    method: &Method,
    rest: &str,
    query: Option<&str>,
) -> Result<ProductRoute, ApiError> {
    let Some(named) = rest.strip_suffix("/usage") else {
        return Err(unknown_route());
    };
    if named.is_empty() || named.contains('/') {
        return Err(unknown_route());
    }
    if method != Method::GET {
        return Err(method_not_allowed("GET"));
    }
    if query.is_some_and(|q| !q.is_empty()) {
        return Err(super::errors::bad(
            "unknown_parameter",
            "the usage route takes no query parameters",
        ));
    }
    Ok(ProductRoute::ProjectUsage {
        named: named.to_string(),
    })
}

fn json_answer(value: serde_json::Value) -> ApiResult {
    let mut response = http::Response::new(super::super::common::full(value.to_string()));
    super::super::common::set(&mut response, "content-type", "application/json");
    super::super::common::set(&mut response, "cache-control", "no-store");
    Ok(response)
}

/// `GET /v1/streams/{name}/usage`.
pub async fn collection(state: &AppState, project: &str, name: &str) -> ApiResult {
    let usage = state
        .bounded(
            state.deadline(),
            state.streams.collection_usage(project, name),
        )
        .await
        .map_err(service_error)?;
    json_answer(json!({
        "name": name,
        "records": usage.records,
        "appendedBytes": usage.appended_bytes,
        "storedBytes": usage.stored_bytes,
        "reads": usage.reads,
        "readBytes": usage.read_bytes,
        "createdAt": usage.created_ms,
        "lastAccessAt": usage.last_access_ms,
    }))
}

/// `GET /v1/projects/{named}/usage`: only a token's own project (any other
/// answers 404, as a missing one would).
pub async fn project(state: &Arc<AppState>, project: &str, named: &str) -> ApiResult {
    if named != project {
        return Err(error(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such project for this token",
        ));
    }
    let (share, complete) = project_share(state, project).await;
    let limits = state.streams.admission().limits_of(project);
    let limit = |v: Option<u64>| v.map_or(serde_json::Value::Null, |v| json!(v));
    json_answer(json!({
        "project": project,
        "collections": share.collections,
        "records": share.records,
        "appendedBytes": share.appended_bytes,
        "storedBytes": share.stored_bytes,
        "reads": share.reads,
        "readBytes": share.read_bytes,
        "liveReaders": state.streams.admission().live_readers_of(project),
        "complete": complete,
        "limits": {
            "appendRequestsPerSecond": limit(limits.append_requests_per_second),
            "appendBytesPerSecond": limit(limits.append_bytes_per_second),
            "liveReaders": limit(limits.live_readers),
            "collections": limit(limits.collections),
            "storedBytes": limit(limits.stored_bytes),
        },
    }))
}
