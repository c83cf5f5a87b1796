//! The server state every handler reaches (docs/ARCHITECTURE.md, "The HTTP
//! layer"): the settings the handlers read, the service handles, the
//! live-connection budget, and the bounds on how long a request waits for
//! the store (writes run to their end in slots of their own; reads are
//! dropped at the deadline).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use strata_segments::StreamKey;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::error::ApiError;
use super::request::read_body_within;
use crate::service::admission::ReaderPermit;
use crate::service::subscriptions::Subscriptions;
use crate::service::tenancy::TenancyCell;
use crate::service::{ServiceError, Streams};

/// Server settings the handlers read.
pub struct HttpConfig {
    /// Bearer tokens and their projects (none: no authentication); `SIGHUP`
    /// replaces the table.
    pub tenancy: TenancyCell,
    /// The key used for raw-route requests that carry none (development).
    pub dev_default_key: Option<StreamKey>,
    pub long_poll_timeout: Duration,
    pub max_body_bytes: usize,
    /// Open long-poll and SSE requests allowed at once.
    pub max_live_connections: usize,
    /// Longest a request waits for the store (`--append-timeout-ms`): a
    /// write unanswered by then answers 503 `outcome_unknown`, a read 503
    /// `unavailable`. Live waits for new records have their own timeouts.
    pub append_timeout: Duration,
    /// `/metrics` is answered on the main listener (not with
    /// `--metrics-listen`, which serves it apart).
    pub metrics_on_main_listener: bool,
    /// `--operator-token`: the debug endpoints answer on the main listener
    /// to a request bearing it.
    pub operator_token: Option<String>,
    /// What `GET /debug/config` answers (no secrets).
    pub effective_config: serde_json::Value,
    /// Bytes of request bodies read and buffered at once, over every request
    /// (`--max-buffered-body-bytes`; at least `max_body_bytes`).
    pub max_buffered_body_bytes: usize,
    /// Bytes of SSE frames read and not yet taken by their connections, over
    /// every live reader (`--max-live-buffer-bytes`).
    pub max_live_buffer_bytes: usize,
}

/// How long a refused append's answer is held, at least and at most (see
/// `AppState::admit_append`). At a high rate the wait for the next token is
/// a fraction of a millisecond, and the many connections of a client that
/// resends at once would keep the server busy refusing: each refusal is
/// held at least the minimum, so such a client is refused at most four
/// times a second per connection.
pub const RATE_REFUSAL_HOLD_MIN: Duration = Duration::from_millis(250);
pub const RATE_REFUSAL_HOLD_MAX: Duration = Duration::from_secs(1);

/// Longest a live reader waits for room in the live budget before its
/// stream ends (SSE: the client reconnects from its last position).
pub const LIVE_BUDGET_WAIT_MAX: Duration = Duration::from_secs(10);
/// Longest a new SSE reader waits for room for its first read before it is
/// refused (503): a client is not left without an answer for long.
pub const LIVE_BUDGET_FIRST_WAIT_MAX: Duration = Duration::from_secs(1);

/// Writes that may run at once. A write runs to its end even when its
/// request was answered at the deadline, so that no write stops half-done;
/// these slots bound how many writes are under way (and so how many can
/// outlive their requests while the store stalls). A write that finds none
/// free is not started and answers 503 `unavailable` at once.
pub const WRITES_IN_FLIGHT_MAX: usize = 8192;

/// How a fleet member answers a request for a stream served elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetRouting {
    /// Forward it to the owner (streamed), adding `Streams-Replay-To`.
    Forward,
    /// Answer `409 not_stream_owner` with `Streams-Replay-To`.
    Replay,
}

/// The body of requests to other fleet members (a forwarded body, or none).
pub type PeerBody = http_body_util::combinators::BoxBody<bytes::Bytes, hyper::Error>;
/// The HTTP client to other fleet members.
pub type PeerClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    PeerBody,
>;

/// What the HTTP layer of a fleet member needs.
pub struct FleetHttp {
    pub fleet: Arc<crate::service::fleet::Fleet>,
    pub routing: FleetRouting,
    pub client: PeerClient,
    /// What members prove themselves to each other with.
    pub peer_key: super::peer_key::PeerKey,
}

/// Bytes one HTTP/1 connection buffers for reading, and for writing, at
/// most (server and fleet client alike; hyper's default is about 400 KiB):
/// a slow or stalled peer holds this much per connection, so held
/// connections cost little memory; body parts beyond it wait in the socket.
pub const CONNECTION_BUFFER_BYTES_MAX: usize = 64 << 10;

/// A client for other fleet members (plain HTTP, pooled connections).
pub fn peer_client() -> PeerClient {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .http1_max_buf_size(CONNECTION_BUFFER_BYTES_MAX)
        .build_http()
}

/// Everything a request handler can reach.
pub struct AppState {
    pub streams: Arc<Streams>,
    pub subscriptions: Arc<Subscriptions>,
    pub config: HttpConfig,
    pub live_connections: Arc<AtomicUsize>,
    /// The HTTP layer's metrics and the registry `/metrics` renders.
    pub metrics: super::metrics::HttpMetrics,
    /// One log line per class of refused requests, rate-limited.
    pub refusals: super::refusals::RefusalLog,
    write_slots: Arc<Semaphore>,
    /// The budget of buffered request bodies, in bytes (see `read_body`).
    body_budget: Arc<Semaphore>,
    /// The budget of SSE frames, in bytes (see `reserve_live`).
    live_budget: Arc<Semaphore>,
    /// Set once on a fleet member (`strata serve --fleet`).
    pub fleet: std::sync::OnceLock<FleetHttp>,
    /// True once the server stops: live readers end, paced.
    closing: tokio::sync::watch::Sender<bool>,
    live_tickets: std::sync::atomic::AtomicU64,
}

/// How long the closing of live readers at shutdown is spread over (so that
/// they do not all reconnect at once), in [`LIVE_CLOSE_STEPS`] steps.
pub const LIVE_CLOSE_SPREAD: Duration = Duration::from_secs(2);
const LIVE_CLOSE_STEPS: u64 = 20;

/// A held slot of the live-connection budget, with its ticket (its place in
/// the paced closing at shutdown) and, for a reader this server serves, its
/// place in its project's live-reader budget.
pub struct LiveSlot(Arc<AppState>, u64, Option<ReaderPermit>);

impl LiveSlot {
    /// The same slot, also holding `permit` (a place in the budget of the
    /// reader's project) until it ends.
    pub fn with_project(mut self, permit: ReaderPermit) -> Self {
        self.2 = Some(permit);
        self
    }

    /// Completes when this live reader is to end: the server is closing and
    /// this reader's turn in the pace has come.
    pub async fn closed(&self) {
        self.0.closed(self.1).await
    }
}

impl Drop for LiveSlot {
    fn drop(&mut self) {
        self.0.live_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

impl AppState {
    pub fn new(
        streams: Arc<Streams>,
        subscriptions: Arc<Subscriptions>,
        config: HttpConfig,
    ) -> Self {
        let live_connections = Arc::new(AtomicUsize::new(0));
        let body_budget_bytes = config
            .max_buffered_body_bytes
            .max(config.max_body_bytes)
            .min(Semaphore::MAX_PERMITS);
        let live_budget_bytes = config.max_live_buffer_bytes.min(Semaphore::MAX_PERMITS);
        AppState {
            metrics: super::metrics::HttpMetrics::new(streams.clone(), live_connections.clone()),
            refusals: Default::default(),
            streams,
            subscriptions,
            config,
            live_connections,
            write_slots: Arc::new(Semaphore::new(WRITES_IN_FLIGHT_MAX)),
            body_budget: Arc::new(Semaphore::new(body_budget_bytes)),
            live_budget: Arc::new(Semaphore::new(live_budget_bytes)),
            fleet: std::sync::OnceLock::new(),
            closing: tokio::sync::watch::Sender::new(false),
            live_tickets: Default::default(),
        }
    }

    /// Admits a client's append of `body` against its project's rate limits
    /// (see `Streams::admit_append`), answering the body back. A refusal is
    /// answered only after the body is dropped and its wait for a token has
    /// passed, held within [`RATE_REFUSAL_HOLD_MIN`] and
    /// [`RATE_REFUSAL_HOLD_MAX`] (its `Retry-After` counts from the answer):
    /// a client that resends at once after each 429 costs a few requests a
    /// second on each of its connections, not thousands.
    pub async fn admit_append(
        &self,
        project: &str,
        body: bytes::Bytes,
    ) -> Result<bytes::Bytes, crate::service::ServiceError> {
        use crate::service::ServiceError;
        match self.streams.admit_append(project, body.len()) {
            Ok(()) => Ok(body),
            Err(ServiceError::Limited(mut refusal)) => {
                drop(body);
                let hold = Duration::from_millis(refusal.retry_after_ms)
                    .clamp(RATE_REFUSAL_HOLD_MIN, RATE_REFUSAL_HOLD_MAX);
                tokio::time::sleep(hold).await;
                let held_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
                refusal.retry_after_ms = refusal.retry_after_ms.saturating_sub(held_ms);
                Err(ServiceError::Limited(refusal))
            }
            Err(other) => Err(other),
        }
    }

    /// Reads a request body of at most `limit` bytes within the server's
    /// budget of buffered bodies (see [`read_body_within`]); the budget is
    /// given back when this returns.
    pub async fn read_body(
        &self,
        body: hyper::body::Incoming,
        limit: usize,
    ) -> Result<bytes::Bytes, ApiError> {
        read_body_within(body, limit, &self.body_budget)
            .await
            .map(|b| b.bytes)
    }

    /// [`AppState::read_body`], the budget held until the body is dropped
    /// (a body kept for a later resend).
    pub async fn read_body_held(
        &self,
        body: hyper::body::Incoming,
        limit: usize,
    ) -> Result<super::request::BufferedBody, ApiError> {
        read_body_within(body, limit, &self.body_budget).await
    }

    /// Reserves `bytes` of the live budget (a frame being read or sent),
    /// waiting at most `wait` (see [`LIVE_BUDGET_WAIT_MAX`] and
    /// [`LIVE_BUDGET_FIRST_WAIT_MAX`]); a reservation larger than the whole
    /// budget takes the whole budget. 503 when there is no room in time.
    pub async fn reserve_live(
        &self,
        bytes: usize,
        wait: Duration,
    ) -> Result<OwnedSemaphorePermit, ApiError> {
        let whole = self.config.max_live_buffer_bytes.max(1);
        let n = u32::try_from(bytes.clamp(1, whole)).unwrap_or(u32::MAX);
        match tokio::time::timeout(wait, self.live_budget.clone().acquire_many_owned(n)).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "too many live readers are being sent data; retry shortly",
            )
            .header("retry-after", "1")),
        }
    }

    /// When store work started now must have been answered.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.config.append_timeout
    }

    /// The same, with its budget (for the service's own bounded waits).
    pub fn store_deadline(&self) -> crate::service::StoreDeadline {
        crate::service::StoreDeadline::after(self.config.append_timeout)
    }

    /// Runs a write of the service to its end, and waits for it until
    /// `deadline`: past it, the answer is [`ServiceError::OutcomeUnknown`]
    /// while the write goes on in a task of its own (it may still complete).
    /// The write runs in the request's task until then: the common case
    /// costs no task and no wake-up more than the write itself.
    pub async fn write<T, F>(&self, deadline: Instant, write: F) -> Result<T, ServiceError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, ServiceError>> + Send + 'static,
    {
        let Ok(slot) = self.write_slots.clone().try_acquire_owned() else {
            return Err(ServiceError::Unavailable(
                "too many writes are waiting for the store; the request was not applied".into(),
            ));
        };
        let mut write = Box::pin(write);
        match tokio::time::timeout_at(deadline, &mut write).await {
            Ok(answer) => answer,
            Err(_) => {
                tokio::spawn(async move {
                    let _slot = slot;
                    let _ = write.await;
                });
                Err(ServiceError::OutcomeUnknown(format!(
                    "the store did not answer within {} ms; the write may still complete",
                    self.config.append_timeout.as_millis()
                )))
            }
        }
    }

    /// Waits for a read (or a lookup, or a live wait) of the service until
    /// `deadline`, then answers [`ServiceError::Unavailable`]. The read is
    /// dropped there, as when its client hangs up: reads write nothing but
    /// the in-memory access time, except the expiry of a stream whose time
    /// is up, which a drop can cut short as a client hanging up could.
    pub async fn bounded<T>(
        &self,
        deadline: Instant,
        read: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, ServiceError> {
        tokio::time::timeout_at(deadline, read)
            .await
            .unwrap_or_else(|_| {
                Err(ServiceError::Unavailable(format!(
                    "the store did not answer within {} ms",
                    self.config.append_timeout.as_millis()
                )))
            })
    }

    /// A slot of the live-connection budget, or 503 `code` with
    /// `Retry-After` when the budget is spent (each surface names it).
    pub fn live_slot(self: &Arc<Self>, code: &'static str) -> Result<LiveSlot, ApiError> {
        let held = self.live_connections.fetch_add(1, Ordering::Relaxed);
        if held >= self.config.max_live_connections {
            self.live_connections.fetch_sub(1, Ordering::Relaxed);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                code,
                "too many live readers on this server; retry shortly",
            )
            .header("retry-after", "5"));
        }
        Ok(LiveSlot(self.clone(), self.live_ticket(), None))
    }

    /// Ends every live reader (SSE, long-poll, forwarded live answers), each
    /// at its turn within [`LIVE_CLOSE_SPREAD`]: they reconnect (elsewhere,
    /// behind a balancer) over that time rather than all at once.
    pub fn begin_closing(&self) {
        self.closing.send_replace(true);
    }

    /// A place in the paced closing.
    pub fn live_ticket(&self) -> u64 {
        self.live_tickets.fetch_add(1, Ordering::Relaxed)
    }

    /// Completes at `ticket`'s turn once the server is closing.
    pub async fn closed(&self, ticket: u64) {
        let mut closing = self.closing.subscribe();
        if closing.wait_for(|closing| *closing).await.is_err() {
            return std::future::pending().await;
        }
        let step = LIVE_CLOSE_SPREAD / LIVE_CLOSE_STEPS as u32;
        tokio::time::sleep(step * (ticket % LIVE_CLOSE_STEPS) as u32).await;
    }
}
