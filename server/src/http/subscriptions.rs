//! Routes of the reserved `__ds` API under `/v1/stream/__ds/`: the JWKS, and
//! subscriptions with their streams, callbacks, claims, acks and releases.
//! Errors are `{"error":{"code","message",…}}` with upper-case codes.

use std::sync::Arc;

use http::header::HeaderValue;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use percent_encoding::percent_decode_str;
use serde_json::{json, Value};

use super::{empty, full, read_body, ApiError, ApiResult, AppState, Body};
use crate::subscriptions::SubError;

/// Largest body the subscription API reads.
const SUB_BODY_BYTES_MAX: usize = 1 << 20;

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    response
}

fn sub_error(e: SubError) -> Response<Body> {
    let mut error = json!({"code": e.code, "message": e.message});
    for (k, v) in e.extra {
        error[k] = v;
    }
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    json_response(status, &json!({ "error": error }))
}

fn decode(segment: &str) -> Result<String, ApiError> {
    percent_decode_str(segment)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ApiError::bad_request("path is not UTF-8"))
}

fn bearer(request: &Request<Incoming>) -> Option<String> {
    request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
}

/// A route of the `__ds` API (`api` is the path after `/v1/stream/__ds/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubRoute {
    /// `GET jwks.json`.
    Jwks,
    /// Not under `subscriptions/`.
    NotFound,
    /// `subscriptions/{id}[/…]`.
    Subscription { id: String, action: SubAction },
}

/// What a request does to one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubAction {
    Put,
    Get,
    Delete,
    AddStreams,
    /// `DELETE …/streams/{path}`, the path decoded.
    RemoveStream(String),
    /// `POST …/callback` or `POST …/ack`.
    Acknowledge,
    Claim,
    Release,
    /// No such route (answered once the body is read).
    Unknown,
}

/// Parses the method and path of a `__ds` request (pure).
pub fn parse_route(method: &Method, api: &str) -> Result<SubRoute, ApiError> {
    if api == "jwks.json" && method == Method::GET {
        return Ok(SubRoute::Jwks);
    }
    let Some(rest) = api.strip_prefix("subscriptions/") else {
        return Ok(SubRoute::NotFound);
    };
    let (id_raw, tail) = match rest.split_once('/') {
        Some((id, tail)) => (id, Some(tail)),
        None => (rest, None),
    };
    let id = decode(id_raw)?;
    let action = match (method.clone(), tail) {
        (Method::PUT, None) => SubAction::Put,
        (Method::GET, None) => SubAction::Get,
        (Method::DELETE, None) => SubAction::Delete,
        (Method::POST, Some("streams")) => SubAction::AddStreams,
        (Method::DELETE, Some(path)) if path.starts_with("streams/") => {
            SubAction::RemoveStream(decode(&path["streams/".len()..])?)
        }
        (Method::POST, Some("callback")) | (Method::POST, Some("ack")) => SubAction::Acknowledge,
        (Method::POST, Some("claim")) => SubAction::Claim,
        (Method::POST, Some("release")) => SubAction::Release,
        _ => SubAction::Unknown,
    };
    Ok(SubRoute::Subscription { id, action })
}

pub async fn handle(
    state: Arc<AppState>,
    request: Request<Incoming>,
    route: SubRoute,
) -> ApiResult {
    let subs = state.subscriptions.clone();
    let (id, action) = match route {
        SubRoute::Jwks => {
            let mut response = json_response(StatusCode::OK, &subs.jwks());
            response.headers_mut().insert(
                "content-type",
                HeaderValue::from_static("application/jwk-set+json"),
            );
            response.headers_mut().insert(
                "cache-control",
                HeaderValue::from_static("public, max-age=300"),
            );
            return Ok(response);
        }
        SubRoute::NotFound => {
            return Ok(sub_error(SubError {
                status: 404,
                code: "NOT_FOUND",
                message: "no such route".into(),
                extra: Vec::new(),
            }))
        }
        SubRoute::Subscription { id, action } => (id, action),
    };
    let host = request
        .headers()
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost")
        .to_string();
    let token = bearer(&request);
    let key = request
        .headers()
        .get("stream-encryption-key")
        .and_then(|v| v.to_str().ok())
        .and_then(|k| strata_segments::StreamKey::parse(k).ok())
        .or_else(|| state.config.dev_default_key.clone());
    let body = read_body(request.into_body(), SUB_BODY_BYTES_MAX).await?;
    let result: Result<Response<Body>, SubError> = match action {
        SubAction::Put => subs
            .put(&id, &body, &format!("http://{host}"), key)
            .await
            .map(|(created, value)| {
                let status = if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                json_response(status, &value)
            }),
        SubAction::Get => subs
            .get(&id)
            .await
            .map(|v| json_response(StatusCode::OK, &v)),
        SubAction::Delete => subs.delete(&id).await.map(|_| no_content()),
        SubAction::AddStreams => subs.add_streams(&id, &body).await.map(|_| no_content()),
        SubAction::RemoveStream(path) => subs.remove_stream(&id, &path).await.map(|_| no_content()),
        SubAction::Acknowledge => subs
            .acknowledge(&id, token.as_deref(), &body)
            .await
            .map(|v| json_response(StatusCode::OK, &v)),
        SubAction::Claim => subs
            .claim(&id, &body)
            .await
            .map(|v| json_response(StatusCode::OK, &v)),
        SubAction::Release => subs
            .release(&id, token.as_deref(), &body)
            .await
            .map(|_| no_content()),
        SubAction::Unknown => Err(SubError {
            status: 404,
            code: "NOT_FOUND",
            message: "no such route".into(),
            extra: Vec::new(),
        }),
    };
    Ok(result.unwrap_or_else(sub_error))
}

fn no_content() -> Response<Body> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}
