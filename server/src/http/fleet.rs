//! Fleet routing on the HTTP side (docs/ARCHITECTURE.md, "The fleet"): a
//! request for a stream whose shard another member serves is forwarded to
//! it (streamed both ways, original headers, SSE and long-poll included) or,
//! with `--fleet-routing replay`, answered `409 not_stream_owner`; both carry
//! `Streams-Replay-To: <owner URL>`. A request during a move waits for the
//! shard to settle (bounded by the append timeout, at most
//! [`MOVE_WAIT_MAX`]) and then answers 503 with `Retry-After`.
//!
//! A forwarded request carries [`FORWARDED_BY`]; it is never forwarded
//! again, so a request crosses at most one hop and never loops. A member
//! that receives one for a shard it does not serve waits for its claim when
//! it believes the sender owns the shard (a hand-off in flight: the sender
//! released it to this member), and otherwise answers 503 at once (the two
//! views disagree; they settle within a beat).
//!
//! The reserved `__ds` API is served by the owner of shard 0 (the
//! subscriptions' coordinator), so every member's `__ds` requests meet one
//! subscription service.
//!
//! Also here: the hand-off hint (`POST /v1/fleet/hint`, sent by a member
//! that just released a shard to its new owner) and its client.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use strata_engine::InstanceId;

use super::common::{
    empty, ApiError, ApiResult, AppState, Body, FleetHttp, FleetRouting, LiveSlot, PeerBody,
    PeerClient, REPLAY_TO,
};
use crate::service::fleet::{controller::BoxFuture, Peers};
use crate::service::routing::{Location, Owner, ShardIndex, LAPSED};
use crate::service::ServiceError;

/// The header of a forwarded request: the forwarding member's instance id.
pub const FORWARDED_BY: &str = "strata-forwarded-by";
/// The header of a hint: the sending member's instance id.
pub const HINT_FROM: &str = "strata-fleet-from";
/// The header of a hint: the shards released, as comma-separated
/// `<index>:<epoch>` pairs (the epoch of the claim released).
pub const HINT_SHARDS: &str = "strata-fleet-released";
/// Most shards one hint names.
const HINT_SHARDS_MAX: usize = 4096;
/// The path of the hand-off hint.
pub const HINT_PATH: &str = "/v1/fleet/hint";
/// Most forwarding attempts of one request (each after the shard moved).
const FORWARD_ATTEMPTS_MAX: u32 = 4;
/// Most times one request asks a member again because that member's view
/// lags ours (it names as owner a member that refused our connection), and
/// the first pause between asks (doubling up to [`LAGGING_PAUSE_MAX`], within
/// the append timeout). The pause stays short: the member asked answers at
/// once, and claims the shard as soon as it sees the old owner dead, so a
/// long pause would only hold the request past that claim.
const LAGGING_ASKS_MAX: u32 = 40;
const LAGGING_PAUSE_FIRST: Duration = Duration::from_millis(50);
const LAGGING_PAUSE_MAX: Duration = Duration::from_millis(200);
/// Largest request body kept for a second forwarding attempt.
const FORWARD_RETRY_BYTES_MAX: u64 = 1 << 20;
/// Longest a request waits for a moving shard.
pub const MOVE_WAIT_MAX: Duration = Duration::from_secs(5);
/// Longest a hint waits for its answer (the receiver claims first).
const HINT_TIMEOUT: Duration = Duration::from_secs(35);
/// Hop-by-hop headers (RFC 9110 §7.6.1), never copied across a hop.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// What to do with a request for a stream.
pub enum Decision {
    /// Serve it here.
    Local,
    /// Send it on to the owner.
    Forward(Owner),
    /// Answer it now (replay, or a retryable refusal).
    Answer(ApiError),
}

/// Where a request for shard `index` goes (`router.index_of` of a stream's
/// id; the reserved `__ds` API lives with shard 0).
pub async fn decide(
    state: &AppState,
    fleet: &FleetHttp,
    index: ShardIndex,
    headers: &HeaderMap,
) -> Decision {
    let router = state.streams.router();
    let wait = state.config.append_timeout.min(MOVE_WAIT_MAX);
    let sender = forwarded_by(headers);
    let forwarded = sender.is_some();
    let mut location = router.locate_index(index);
    // A forwarded request for a shard this member believes its sender owns
    // is, unless this member released it to the sender itself or is
    // draining, a hand-off in flight toward us (the sender released it and
    // its hint is on the way): wait for our claim. Otherwise the views
    // disagree for a moment; answering at once lets the client retry while
    // they settle (within a beat).
    let handing_to_us = match (&location, sender) {
        (Location::Elsewhere(owner), Some(sender)) => {
            owner.instance == sender && !owner.handed_off_here && !fleet.fleet.draining()
        }
        _ => false,
    };
    if matches!(location, Location::Moving) || handing_to_us {
        location = router.settled(index, forwarded, wait).await;
    }
    match location {
        Location::Local(_) => Decision::Local,
        Location::Moving => {
            Decision::Answer(ApiError::from_service(&ServiceError::Moving, "unavailable"))
        }
        Location::Lapsed => Decision::Answer(ApiError::from_service(
            &ServiceError::Unavailable(LAPSED.into()),
            "unavailable",
        )),
        Location::Elsewhere(owner) if forwarded => Decision::Answer(ApiError::from_service(
            &ServiceError::NotOwner { owner: owner.url },
            "unavailable",
        )),
        Location::Elsewhere(owner) => match fleet.routing {
            FleetRouting::Forward => Decision::Forward(owner),
            FleetRouting::Replay => Decision::Answer(
                ApiError::new(
                    StatusCode::CONFLICT,
                    "not_stream_owner",
                    "another instance serves this stream: send the request to Streams-Replay-To",
                )
                .header(REPLAY_TO, &owner.url),
            ),
        },
    }
}

/// Forwards `request` to `owner` and streams its answer back, with
/// `Streams-Replay-To`. An owner that does not answer gets the client a
/// retryable 503 (nothing was applied, or the owner's answer was lost: the
/// same as any lost answer, which producers' retries resolve).
///
/// A forwarded event stream holds a slot of this member's live-connection
/// budget (refused with `live_code` when spent), as a local one does.
pub async fn forward(
    state: Arc<AppState>,
    index: ShardIndex,
    owner: Owner,
    request: Request<Incoming>,
    live_code: &'static str,
) -> ApiResult {
    let fleet = state.fleet.get().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "not a fleet member",
        )
    })?;
    let (parts, body) = request.into_parts();
    // A small body is kept, so that a request the owner never received (it
    // died: the connection was refused) can be sent again once the shard
    // moved, instead of failing; a larger one is streamed, once.
    let mut body = Some(body);
    let kept = match declared_length(&parts.headers) {
        Some(length) if length <= FORWARD_RETRY_BYTES_MAX => match body.take() {
            // Held in the body budget until the forward ends.
            Some(incoming) => Some(
                state
                    .read_body_held(incoming, FORWARD_RETRY_BYTES_MAX as usize)
                    .await?,
            ),
            None => None,
        },
        _ => None,
    };
    let repeatable = matches!(parts.method, http::Method::GET | http::Method::HEAD)
        || parts.headers.contains_key("producer-id");
    let started = tokio::time::Instant::now();
    let mut owner = owner;
    let mut attempts = 0;
    // Members that did not answer this request (dead, or stopped), and how
    // often a lagging member was asked again.
    let mut refused: Vec<String> = Vec::new();
    let mut refused_members: Vec<InstanceId> = Vec::new();
    let mut lagging_asks = 0;
    let answer = loop {
        attempts += 1;
        let outbound_body = match (&kept, body.take()) {
            (Some(kept), _) => http_body_util::Full::new(kept.bytes.clone())
                .map_err(|never| match never {})
                .boxed(),
            (None, Some(incoming)) => incoming.boxed(),
            (None, None) => return Err(unreachable_owner(&owner)),
        };
        match send(&state, fleet, &owner, &parts, outbound_body).await? {
            // The owner handed the shard off meanwhile (503 naming where it
            // went; nothing applied): send it on once the shard has moved.
            Sent::Answer(answer)
                if answer.status() == StatusCode::SERVICE_UNAVAILABLE
                    && answer.headers().contains_key(REPLAY_TO)
                    && kept.is_some()
                    && attempts < FORWARD_ATTEMPTS_MAX =>
            {
                let named = answer
                    .headers()
                    .get(REPLAY_TO)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
                    .unwrap_or_default();
                let left = state
                    .config
                    .append_timeout
                    .saturating_sub(started.elapsed());
                if refused.contains(&named) {
                    // It names an owner that did not answer us: its view lags ours
                    // (it is the shard's next owner and has not seen the old
                    // one die yet). Ask it again shortly, within the timeout.
                    let pause = (LAGGING_PAUSE_FIRST * 2u32.saturating_pow(lagging_asks.min(5)))
                        .min(LAGGING_PAUSE_MAX);
                    if lagging_asks >= LAGGING_ASKS_MAX || pause >= left {
                        break answer;
                    }
                    lagging_asks += 1;
                    attempts -= 1;
                    tokio::time::sleep(pause).await;
                    continue;
                }
                if named != fleet.fleet.url() {
                    // Sent where the owner says the shard went.
                    owner = Owner {
                        instance: InstanceId([0; 16]),
                        url: named,
                        handed_off_here: false,
                    };
                    continue;
                }
                // It says the shard came to us. Unless we handed it off
                // ourselves or are draining (then the views disagree: answer
                // now), wait for our claim and serve it here.
                let handed_off = matches!(
                    state.streams.router().locate_index(index),
                    Location::Elsewhere(Owner {
                        handed_off_here: true,
                        ..
                    })
                );
                if handed_off || fleet.fleet.draining() {
                    break answer;
                }
                match moved_owner(&state, fleet, index, owner.instance, left).await {
                    Some(here) if here.instance == fleet.fleet.instance() => owner = here,
                    _ => break answer,
                }
            }
            Sent::Answer(answer) => break answer,
            sent @ (Sent::NotDelivered | Sent::Failed)
                if kept.is_some()
                    && (repeatable || matches!(sent, Sent::NotDelivered))
                    && attempts < FORWARD_ATTEMPTS_MAX =>
            {
                // Never delivered (the owner refused the connection), or a
                // read or producer write (deduplicated by its sequence) that
                // may have reached it: sent again at once the first time (a
                // pooled connection the owner had closed), then where the
                // shard went once it left the owner (here included: to our
                // own listener, as a forwarded request), within the append
                // timeout. A refusal, or a second failure, means the owner
                // does not answer.
                let answers_not = matches!(sent, Sent::NotDelivered) || attempts > 1;
                if answers_not && !refused.contains(&owner.url) {
                    refused.push(owner.url.clone());
                    refused_members.push(owner.instance);
                }
                if attempts == 1 {
                    continue;
                }
                let left = state
                    .config
                    .append_timeout
                    .saturating_sub(started.elapsed());
                // Our own view moves the shard within about a beat of the
                // next owner's, which claims only then: waiting for it costs
                // nothing. A view that lags longer (our listings fail or
                // stall) must not hold the request: after a beat it goes to
                // the member placement gives the shard without those that did
                // not answer, which claims by its own listings (until then it
                // names the old owner, and is asked again shortly, above).
                // If that member is this one, our own claim is waited for.
                let beat = fleet.fleet.heartbeat_interval().min(left);
                if let Some(next) = moved_owner(&state, fleet, index, owner.instance, beat).await {
                    owner = next;
                    continue;
                }
                let next = fleet
                    .fleet
                    .owner_without(index, &refused_members)
                    .filter(|next| next.instance != fleet.fleet.instance())
                    .filter(|next| !refused.contains(&next.url));
                if let Some(next) = next {
                    owner = next;
                    continue;
                }
                let left = left.saturating_sub(beat);
                match moved_owner(&state, fleet, index, owner.instance, left).await {
                    Some(next) => owner = next,
                    None => return Err(unreachable_owner(&owner)),
                }
            }
            Sent::NotDelivered | Sent::Failed => return Err(unreachable_owner(&owner)),
        }
    };
    let (parts, body) = answer.into_parts();
    let live = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let body = if live {
        // A forwarded event stream ends, paced, when this member stops.
        stream_body(body, Some(state.live_slot(live_code)?))
    } else {
        stream_body(body, None)
    };
    let mut response = Response::new(body);
    *response.status_mut() = parts.status;
    copy_end_to_end(&parts.headers, response.headers_mut());
    if let Ok(url) = HeaderValue::from_str(&owner.url) {
        response
            .headers_mut()
            .insert(HeaderName::from_static(REPLAY_TO), url);
    }
    Ok(response)
}

/// What became of one forwarding attempt.
enum Sent {
    Answer(Response<Incoming>),
    /// The owner never got the request (no connection): it may be sent again.
    NotDelivered,
    /// It may have reached the owner; not sent again.
    Failed,
}

/// One forwarding attempt of the request in `parts` with `body` to `owner`.
async fn send(
    state: &AppState,
    fleet: &FleetHttp,
    owner: &Owner,
    parts: &http::request::Parts,
    body: PeerBody,
) -> Result<Sent, ApiError> {
    let uri = owner_uri(&owner.url, &parts.uri).ok_or_else(|| {
        ApiError::from_service(
            &ServiceError::Unavailable(format!("the owner's URL {:?} is not usable", owner.url)),
            "unavailable",
        )
    })?;
    let mut outbound = Request::builder()
        .method(parts.method.clone())
        .uri(uri)
        .body(body)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    // `Host` is kept: answers that name URLs (the `__ds` callback and key
    // URLs) name the member the client asked.
    copy_end_to_end(&parts.headers, outbound.headers_mut());
    if let Ok(me) = HeaderValue::from_str(&fleet.fleet.instance().to_string()) {
        outbound
            .headers_mut()
            .insert(HeaderName::from_static(FORWARDED_BY), me);
    }
    // The answer's headers come within the longest wait the owner may take.
    let bound = state.config.append_timeout + state.config.long_poll_timeout + MOVE_WAIT_MAX;
    let ticket = state.live_ticket();
    let asked = tokio::time::timeout(bound, fleet.client.request(outbound));
    let answer = tokio::select! {
        answer = asked => answer,
        // This member stops: a forwarded wait (a long-poll) ends, retryably.
        _ = state.closed(ticket) => return Err(ApiError::from_service(
            &ServiceError::Unavailable("this server is shutting down; retry".into()),
            "unavailable",
        )),
    };
    Ok(match answer {
        Ok(Ok(answer)) => Sent::Answer(answer),
        Ok(Err(e)) if e.is_connect() => {
            tracing::debug!(owner = %owner.url, error = %e, "fleet: the owner refused the connection");
            Sent::NotDelivered
        }
        Ok(Err(e)) => {
            tracing::debug!(owner = %owner.url, error = %e, "fleet: forwarding failed");
            Sent::Failed
        }
        Err(_) => Sent::Failed,
    })
}

/// The request's `Content-Length` (0 for a request without a body header
/// that is not chunked).
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    if headers.contains_key(http::header::TRANSFER_ENCODING) {
        return None;
    }
    match headers.get(http::header::CONTENT_LENGTH) {
        Some(value) => value.to_str().ok()?.parse().ok(),
        None => Some(0),
    }
}

/// Where shard `index` is served once it left `from` (waiting at most
/// `left`): this member, another one, or `None` (still moving).
async fn moved_owner(
    state: &AppState,
    fleet: &FleetHttp,
    index: ShardIndex,
    from: InstanceId,
    left: Duration,
) -> Option<Owner> {
    match state.streams.router().moved_from(index, from, left).await {
        Location::Local(_) => Some(Owner {
            instance: fleet.fleet.instance(),
            url: fleet.fleet.url().to_string(),
            handed_off_here: false,
        }),
        Location::Elsewhere(next) if next.instance != from => Some(next),
        Location::Elsewhere(_) | Location::Moving | Location::Lapsed => None,
    }
}

fn unreachable_owner(owner: &Owner) -> ApiError {
    ApiError::from_service(
        &ServiceError::Unavailable(format!(
            "the instance serving this stream ({}) did not answer",
            owner.url
        )),
        "unavailable",
    )
}

/// The owner's URL with the request's path and query.
fn owner_uri(owner_url: &str, original: &Uri) -> Option<Uri> {
    let path_and_query = original.path_and_query().map_or("/", |p| p.as_str());
    format!("{}{}", owner_url.trim_end_matches('/'), path_and_query)
        .parse()
        .ok()
}

/// Copies every header but the hop-by-hop ones (and those `Connection` names).
fn copy_end_to_end(from: &HeaderMap, to: &mut HeaderMap) {
    let named: Vec<String> = from
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_ascii_lowercase())
        .collect();
    for (name, value) in from {
        let lower = name.as_str();
        if HOP_BY_HOP.contains(&lower) || named.iter().any(|n| n == lower) {
            continue;
        }
        to.append(name.clone(), value.clone());
    }
}

/// The owner's body, passed on frame by frame as it arrives (an SSE stream
/// stays open as long as the owner keeps it, or until `closing` says this
/// member stops). An error from the owner ends
/// the body; a body with a length then ends short, which the client's HTTP
/// library reports as a failed response.
fn stream_body(body: Incoming, slot: Option<LiveSlot>) -> Body {
    let until = async move {
        match slot {
            Some(slot) => slot.closed().await,
            None => std::future::pending().await,
        }
    };
    let frames = http_body_util::BodyStream::new(body)
        .take_until(Box::pin(until))
        .take_while(|frame| {
            if let Err(e) = frame {
                tracing::debug!(error = %e, "fleet: the owner's body ended with an error");
            }
            std::future::ready(frame.is_ok())
        })
        .filter_map(|frame| std::future::ready(frame.ok().map(Ok::<_, std::convert::Infallible>)));
    BodyExt::boxed(StreamBody::new(frames))
}

/// A hand-off hint as parsed: its sender and the shards it released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    pub from: InstanceId,
    pub shards: Vec<(ShardIndex, u64)>,
}

/// `POST /v1/fleet/hint`: another member released shards to this one.
pub async fn hint(state: Arc<AppState>, headers: &HeaderMap, hint: Option<Hint>) -> ApiResult {
    let (Some(fleet), Some(hint)) = (state.fleet.get(), hint) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such route",
        ));
    };
    if !fleet.peer_key.admits(headers) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such route",
        ));
    }
    fleet.fleet.hinted(hint.from, hint.shards).await;
    let mut answer = Response::new(empty());
    *answer.status_mut() = StatusCode::NO_CONTENT;
    Ok(answer)
}

/// The member that forwarded a request, if one did.
fn forwarded_by(headers: &HeaderMap) -> Option<InstanceId> {
    instance_header(headers, FORWARDED_BY)
}

fn instance_header(headers: &HeaderMap, name: &str) -> Option<InstanceId> {
    let text = headers.get(name)?.to_str().ok()?;
    let mut id = [0u8; 16];
    hex::decode_to_slice(text, &mut id).ok()?;
    Some(InstanceId(id))
}

/// Parses a hint (`None`: not one; answered 404 like any unknown route).
pub fn parse_hint(headers: &HeaderMap) -> Option<Hint> {
    let from = instance_header(headers, HINT_FROM)?;
    let shards = match headers.get(HINT_SHARDS) {
        None => Vec::new(),
        Some(value) => value
            .to_str()
            .ok()?
            .split(',')
            .filter(|s| !s.is_empty())
            .take(HINT_SHARDS_MAX)
            .map(|pair| {
                let (shard, epoch) = pair.trim().split_once(':')?;
                Some((ShardIndex(shard.parse().ok()?), epoch.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()?,
    };
    Some(Hint { from, shards })
}

/// Hints over the peers' HTTP client.
pub struct HttpPeers {
    pub client: PeerClient,
    pub key: super::common::peer_key::PeerKey,
}

impl Peers for HttpPeers {
    fn hint(&self, url: &str, from: InstanceId, shards: Vec<(ShardIndex, u64)>) -> BoxFuture<()> {
        let client = self.client.clone();
        let key = self.key.clone();
        let target = format!("{}{HINT_PATH}", url.trim_end_matches('/'));
        let shards: Vec<String> = shards
            .iter()
            .map(|(shard, epoch)| format!("{}:{epoch}", shard.0))
            .collect();
        Box::pin(async move {
            let body = http_body_util::Empty::new()
                .map_err(|never| match never {})
                .boxed();
            let Ok(request) = Request::post(&target)
                .header(HINT_FROM, from.to_string())
                .header(super::common::peer_key::PEER_KEY_HEADER, key.header_value())
                .header(HINT_SHARDS, shards.join(","))
                .body(body)
            else {
                return;
            };
            match tokio::time::timeout(HINT_TIMEOUT, client.request(request)).await {
                Ok(Ok(answer)) if answer.status().is_success() => {}
                Ok(Ok(answer)) => {
                    tracing::debug!(%target, status = %answer.status(), "fleet: hint refused")
                }
                Ok(Err(e)) => tracing::debug!(%target, error = %e, "fleet: hint not delivered"),
                Err(_) => tracing::debug!(%target, "fleet: hint unanswered"),
            }
        })
    }
}
