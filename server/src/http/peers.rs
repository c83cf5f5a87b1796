//! Routes only fleet members call, and their client (docs/ARCHITECTURE.md,
//! "The fleet").
//!
//! Owns the check of the peer key (`common::peer_key`), the subscription
//! relay's routes — `POST /v1/fleet/appended` (a member tells the
//! coordinator about appends) and `POST /v1/fleet/tails` (the coordinator
//! reads the tails of a member's streams) — the fork-source route `POST
//! /v1/fleet/source` (a member reads a fork source this one serves, with the
//! caller's stream key), the dead-letter route `POST /v1/fleet/dead-letter`
//! (a consumer's dead letter for a stream this one serves), the usage route
//! `POST /v1/fleet/usage` (a project's share on the shards a member serves),
//! and their clients ([`HttpSubscriptionPeers`],
//! [`HttpSourceReads`]). The hand-off hint (`http::fleet`) checks the same key.
//!
//! Invariant: a request without the right key, or to a server that is not a
//! fleet member, answers 404 like any unknown route: outsiders learn nothing.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::de::DeserializeOwned;

pub use super::common::peer_key::{PeerKey, PEER_KEY_HEADER, PEER_KEY_LABEL};
use super::common::{empty, full, ApiError, ApiResult, AppState, PeerClient};
use crate::service::sources::{
    DeadLetterAppend, DeadLetterPeers, SourceBatch, SourceRead, SourceReads,
};
use crate::service::subscriptions::coordinator::{
    AppendedBatch, BoxFuture, PeerError, SubscriptionPeers, TailsAnswer, TailsRequest,
};
use crate::service::usage::{UsageQuestion, UsageShare};
use crate::service::ServiceError;

/// The relay's route.
pub const APPENDED_PATH: &str = "/v1/fleet/appended";
/// The tails route.
pub const TAILS_PATH: &str = "/v1/fleet/tails";
/// The fork-source route.
pub const SOURCE_PATH: &str = "/v1/fleet/source";
/// The dead-letter route.
pub const DEAD_LETTER_PATH: &str = "/v1/fleet/dead-letter";
/// The usage route (a project's share on the shards a member serves).
pub const USAGE_PATH: &str = "/v1/fleet/usage";
/// The header of the stream key a source read decrypts with.
const KEY_HEADER: &str = "stream-encryption-key";
/// Largest body of a peer request or answer.
const PEER_BODY_BYTES_MAX: usize = 1 << 20;
/// Longest a peer request waits for its answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// A route only members call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRoute {
    Appended,
    Tails,
    Source,
    DeadLetter,
    Usage,
}

/// The peer route of `path`, if it is one (`POST` only; pure).
pub fn peer_route(method: &http::Method, path: &str) -> Option<PeerRoute> {
    if method != http::Method::POST {
        return None;
    }
    match path {
        APPENDED_PATH => Some(PeerRoute::Appended),
        TAILS_PATH => Some(PeerRoute::Tails),
        SOURCE_PATH => Some(PeerRoute::Source),
        DEAD_LETTER_PATH => Some(PeerRoute::DeadLetter),
        USAGE_PATH => Some(PeerRoute::Usage),
        _ => None,
    }
}

fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

/// Whether this server is a fleet member and `headers` carry its key.
pub fn admitted(state: &AppState, headers: &HeaderMap) -> bool {
    state
        .fleet
        .get()
        .is_some_and(|fleet| fleet.peer_key.admits(headers))
}

/// A peer request, start to finish.
pub async fn handle(
    state: Arc<AppState>,
    request: Request<Incoming>,
    route: PeerRoute,
) -> ApiResult {
    if !admitted(&state, request.headers()) {
        return Err(not_found());
    }
    let key = request
        .headers()
        .get(KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|k| strata_segments::StreamKey::parse(k).ok());
    let body = state
        .read_body(request.into_body(), PEER_BODY_BYTES_MAX)
        .await?;
    let bad = |e: serde_json::Error| ApiError::bad_request(format!("peer request: {e}"));
    match route {
        PeerRoute::Appended => {
            let batch: AppendedBatch = serde_json::from_slice(&body).map_err(bad)?;
            if let Err(e) = state.subscriptions.told(batch) {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    e.to_string(),
                ));
            }
            let mut answer = Response::new(empty());
            *answer.status_mut() = StatusCode::NO_CONTENT;
            Ok(answer)
        }
        PeerRoute::Tails => {
            let request: TailsRequest = serde_json::from_slice(&body).map_err(bad)?;
            json_answer(&state.subscriptions.local_tails(request).await)
        }
        PeerRoute::Source => {
            let request: SourceRead = serde_json::from_slice(&body).map_err(bad)?;
            let key =
                key.ok_or_else(|| ApiError::bad_request("a source read needs its stream key"))?;
            let batch = state
                .streams
                .read_source(&request, &key)
                .await
                .map_err(|e| ApiError::from_service(&e, "unavailable"))?;
            json_answer(&batch)
        }
        PeerRoute::DeadLetter => {
            let request: DeadLetterAppend = serde_json::from_slice(&body).map_err(bad)?;
            let key =
                key.ok_or_else(|| ApiError::bad_request("a dead letter needs its stream key"))?;
            state
                .streams
                .append_dead_letter_here(&request, &key, state.store_deadline())
                .await
                .map_err(|e| ApiError::from_service(&e, "unavailable"))?;
            let mut answer = Response::new(empty());
            *answer.status_mut() = StatusCode::NO_CONTENT;
            Ok(answer)
        }
        PeerRoute::Usage => {
            let question: UsageQuestion = serde_json::from_slice(&body).map_err(bad)?;
            json_answer(&state.streams.local_project_usage(&question.project))
        }
    }
}

fn json_answer<T: serde::Serialize>(value: &T) -> ApiResult {
    let text = serde_json::to_string(value).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("encoding an answer: {e}"),
        )
    })?;
    let mut response = Response::new(full(text));
    response.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// The subscription relay's client.
pub struct HttpSubscriptionPeers {
    pub client: PeerClient,
    pub key: PeerKey,
}

impl HttpSubscriptionPeers {
    /// POSTs `value` as JSON to `url` + `path`, with a stream key
    /// (base64url) in its header if given; answers the reply's body.
    fn post<T: serde::Serialize>(
        &self,
        url: &str,
        path: &str,
        value: &T,
        stream_key: Option<String>,
    ) -> BoxFuture<Result<bytes::Bytes, PeerError>> {
        let body = match serde_json::to_vec(value) {
            Ok(body) => body,
            Err(e) => {
                let url = url.to_string();
                return Box::pin(async move {
                    Err(PeerError::Unreachable {
                        url,
                        reason: format!("encoding the request: {e}"),
                    })
                });
            }
        };
        let client = self.client.clone();
        let key = self.key.clone();
        let target = format!("{}{path}", url.trim_end_matches('/'));
        Box::pin(async move {
            let unreachable = |reason: String| PeerError::Unreachable {
                url: target.clone(),
                reason,
            };
            let body = http_body_util::Full::new(bytes::Bytes::from(body))
                .map_err(|never| match never {})
                .boxed();
            let mut request = Request::post(&target)
                .header(PEER_KEY_HEADER, key.header_value())
                .header("content-type", "application/json");
            if let Some(stream_key) = &stream_key {
                request = request.header(KEY_HEADER, stream_key.as_str());
            }
            let request = request.body(body).map_err(|e| unreachable(e.to_string()))?;
            let answer = tokio::time::timeout(PEER_TIMEOUT, client.request(request))
                .await
                .map_err(|_| unreachable("no answer in time".into()))?
                .map_err(|e| unreachable(e.to_string()))?;
            if !answer.status().is_success() {
                return Err(PeerError::Refused {
                    url: target.clone(),
                    status: answer.status().as_u16(),
                });
            }
            let limited = http_body_util::Limited::new(answer.into_body(), PEER_BODY_BYTES_MAX);
            let bytes = tokio::time::timeout(PEER_TIMEOUT, limited.collect())
                .await
                .map_err(|_| unreachable("the answer did not end in time".into()))?
                .map_err(|e| unreachable(e.to_string()))?
                .to_bytes();
            Ok(bytes)
        })
    }
}

fn decoded<T: DeserializeOwned>(url: &str, bytes: &[u8]) -> Result<T, PeerError> {
    serde_json::from_slice(bytes).map_err(|e| PeerError::Unreachable {
        url: url.to_string(),
        reason: format!("an answer that does not parse: {e}"),
    })
}

impl SubscriptionPeers for HttpSubscriptionPeers {
    fn appended(&self, url: &str, batch: AppendedBatch) -> BoxFuture<Result<(), PeerError>> {
        let sent = self.post(url, APPENDED_PATH, &batch, None);
        Box::pin(async move { sent.await.map(|_| ()) })
    }

    fn tails(&self, url: &str, request: TailsRequest) -> BoxFuture<Result<TailsAnswer, PeerError>> {
        let sent = self.post(url, TAILS_PATH, &request, None);
        let url = url.to_string();
        Box::pin(async move { decoded(&url, &sent.await?) })
    }
}

impl HttpSubscriptionPeers {
    /// A member's share of a project's usage.
    pub fn usage(
        &self,
        url: &str,
        question: &UsageQuestion,
    ) -> BoxFuture<Result<UsageShare, PeerError>> {
        let sent = self.post(url, USAGE_PATH, question, None);
        let url = url.to_string();
        Box::pin(async move { decoded(&url, &sent.await?) })
    }
}

/// Dead letters over the peers' HTTP client.
pub struct HttpDeadLetterPeers {
    pub peers: HttpSubscriptionPeers,
}

impl DeadLetterPeers for HttpDeadLetterPeers {
    fn append(
        &self,
        url: &str,
        request: DeadLetterAppend,
        key: &strata_segments::StreamKey,
    ) -> BoxFuture<Result<(), ServiceError>> {
        let sent = self
            .peers
            .post(url, DEAD_LETTER_PATH, &request, Some(key.to_base64url()));
        Box::pin(async move {
            sent.await.map(|_| ()).map_err(|e| {
                ServiceError::Unavailable(format!("appending a dead letter at its owner: {e}"))
            })
        })
    }
}

/// Fork-source reads over the peers' HTTP client.
pub struct HttpSourceReads {
    pub peers: HttpSubscriptionPeers,
}

impl SourceReads for HttpSourceReads {
    fn read(
        &self,
        url: &str,
        request: SourceRead,
        key: &strata_segments::StreamKey,
    ) -> BoxFuture<Result<strata_engine::ReadBatch, ServiceError>> {
        let sent = self
            .peers
            .post(url, SOURCE_PATH, &request, Some(key.to_base64url()));
        let url = url.to_string();
        Box::pin(async move {
            let unavailable =
                |e: PeerError| ServiceError::Unavailable(format!("reading a fork source: {e}"));
            let batch: SourceBatch =
                decoded(&url, &sent.await.map_err(unavailable)?).map_err(unavailable)?;
            batch.into_batch()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_admitted_and_nothing_else() {
        let key = PeerKey::new(&[7; 32]);
        let mut headers = HeaderMap::new();
        assert!(!key.admits(&headers));
        headers.insert(
            PEER_KEY_HEADER,
            PeerKey::new(&[8; 32]).header_value().parse().unwrap(),
        );
        assert!(!key.admits(&headers));
        headers.insert(PEER_KEY_HEADER, key.header_value()[..10].parse().unwrap());
        assert!(!key.admits(&headers));
        headers.insert(PEER_KEY_HEADER, key.header_value().parse().unwrap());
        assert!(key.admits(&headers));
    }

    #[test]
    fn peer_routes_are_posts_to_their_paths() {
        use http::Method;
        assert_eq!(
            peer_route(&Method::POST, APPENDED_PATH),
            Some(PeerRoute::Appended)
        );
        assert_eq!(
            peer_route(&Method::POST, TAILS_PATH),
            Some(PeerRoute::Tails)
        );
        assert_eq!(
            peer_route(&Method::POST, DEAD_LETTER_PATH),
            Some(PeerRoute::DeadLetter)
        );
        assert_eq!(peer_route(&Method::GET, TAILS_PATH), None);
        assert_eq!(peer_route(&Method::GET, DEAD_LETTER_PATH), None);
        assert_eq!(peer_route(&Method::POST, "/v1/fleet/other"), None);
    }
}
