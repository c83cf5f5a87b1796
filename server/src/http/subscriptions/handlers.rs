//! The handlers of the `__ds` API: routes, and requests through the service.
//!
//! Owns the route table ([`parse_route`]) and [`handle`], which reads the
//! body, parses it ([`super::parse`]), calls the subscription service and
//! writes its typed answer as JSON or its refusal through [`super::errors`].
//!
//! Invariant: checks run in the order they always have, so a request wrong in
//! two ways gets the same answer as before: the id before the body of a PUT,
//! the token before the body of a callback, ack or release, the body before
//! the subscription's existence, and the wake's fence before its acks (the
//! service checks those).

use std::sync::Arc;

use http::header::HeaderValue;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use percent_encoding::percent_decode_str;
use serde::Serialize;

use super::errors::{error_answer, Refusal};
use super::parse::{parse_ack, parse_add_streams, parse_claim, parse_config, parse_release};
use crate::http::{empty, full, ApiError, ApiResult, AppState, Body};
use crate::service::subscriptions::{check_id, SubError};

/// Largest body the subscription API reads.
const SUB_BODY_BYTES_MAX: usize = 1 << 20;

fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    match serde_json::to_string(value) {
        Ok(text) => json_text(status, text),
        Err(e) => refusal_response(Refusal::Service(SubError::Encoding(e))),
    }
}

fn json_text(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    response
}

fn no_content() -> Response<Body> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}

fn refusal_response(refusal: Refusal) -> Response<Body> {
    let (status, body) = error_answer(refusal);
    json_text(status, body.to_string())
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

impl SubRoute {
    /// Whether a callback token authenticates the route (and names the
    /// project), rather than the caller's bearer token.
    pub fn token_authenticated(&self) -> bool {
        matches!(
            self,
            SubRoute::Subscription {
                action: SubAction::Acknowledge | SubAction::Release,
                ..
            }
        )
    }
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

/// One `__ds` request; `project` is the caller's (`None` on the routes a
/// callback token authenticates: the token names its project).
pub async fn handle(
    state: Arc<AppState>,
    request: Request<Incoming>,
    project: Option<String>,
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
        SubRoute::NotFound => return Ok(refusal_response(Refusal::NoRoute)),
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
    let body = state
        .read_body(request.into_body(), SUB_BODY_BYTES_MAX)
        .await?;
    // Set by the router on every route a token does not authenticate.
    let project = project.unwrap_or_default();
    let project = project.as_str();
    let result: Result<Response<Body>, Refusal> = async {
        Ok(match action {
            SubAction::Put => {
                check_id(&id)?;
                let config = parse_config(&body)?;
                let put = subs
                    .put(project, &id, config, &format!("http://{host}"), key)
                    .await?;
                let status = if put.created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                json_response(status, &put.subscription)
            }
            SubAction::Get => json_response(StatusCode::OK, &subs.get(project, &id).await?),
            SubAction::Delete => {
                subs.delete(project, &id).await?;
                no_content()
            }
            SubAction::AddStreams => {
                let request = parse_add_streams(&body)?;
                subs.add_streams(project, &id, request).await?;
                no_content()
            }
            SubAction::RemoveStream(path) => {
                subs.remove_stream(project, &id, &path).await?;
                no_content()
            }
            SubAction::Acknowledge => {
                let token = subs.verify_token(&id, token.as_deref())?;
                let request = parse_ack(&body)?;
                json_response(StatusCode::OK, &subs.acknowledge(&token, request).await?)
            }
            SubAction::Claim => {
                let request = parse_claim(&body)?;
                json_response(StatusCode::OK, &subs.claim(project, &id, request).await?)
            }
            SubAction::Release => {
                let token = subs.verify_token(&id, token.as_deref())?;
                let wake = parse_release(&body)?;
                subs.release(&token, wake).await?;
                no_content()
            }
            SubAction::Unknown => return Err(Refusal::NoRoute),
        })
    }
    .await;
    Ok(result.unwrap_or_else(refusal_response))
}
