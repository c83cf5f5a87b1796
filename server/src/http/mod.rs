//! HTTP plumbing shared by the surfaces: bodies, JSON error responses, the
//! headers every response carries (CORS, `nosniff`, CORP), authentication,
//! bounded body reading, and routing.
//!
//! Every error is `{"error":{"code","message"}}` with a fitting status; bad
//! input never panics and never answers 500.

pub mod product;
pub mod raw;
pub mod sse;
pub mod subscriptions;

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::Incoming;
use strata_segments::StreamKey;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::service::subscriptions::Subscriptions;
use crate::streams::{ServiceError, Streams};
use crate::tenancy::Tenancy;

pub type Body = BoxBody<Bytes, Infallible>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

pub fn empty() -> Body {
    Empty::new().boxed()
}

/// Server settings the handlers read.
pub struct HttpConfig {
    /// Bearer tokens and their projects (none: no authentication).
    pub tenancy: Tenancy,
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
}

/// Writes that may run at once. A write runs to its end even when its
/// request was answered at the deadline, so that no write stops half-done;
/// these slots bound how many writes are under way (and so how many can
/// outlive their requests while the store stalls). A write that finds none
/// free is not started and answers 503 `unavailable` at once.
pub const WRITES_IN_FLIGHT_MAX: usize = 8192;

/// Everything a request handler can reach.
pub struct AppState {
    pub streams: Arc<Streams>,
    pub subscriptions: Arc<Subscriptions>,
    pub config: HttpConfig,
    pub live_connections: AtomicUsize,
    write_slots: Arc<Semaphore>,
}

/// A held slot of the live-connection budget.
pub struct LiveSlot(Arc<AppState>);

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
        AppState {
            streams,
            subscriptions,
            config,
            live_connections: AtomicUsize::new(0),
            write_slots: Arc::new(Semaphore::new(WRITES_IN_FLIGHT_MAX)),
        }
    }

    /// When store work started now must have been answered.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.config.append_timeout
    }

    /// The same, with its budget (for the service's own bounded waits).
    pub fn store_deadline(&self) -> crate::streams::StoreDeadline {
        crate::streams::StoreDeadline::after(self.config.append_timeout)
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
        Ok(LiveSlot(self.clone()))
    }
}

/// An error answer: status, stable code, message, and extra headers.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Product answers carry `retryable` (always) and `details` (sometimes).
    pub retryable: Option<bool>,
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            headers: Vec::new(),
            retryable: None,
            details: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn header(mut self, name: &'static str, value: impl AsRef<str>) -> Self {
        if let Ok(v) = HeaderValue::from_str(value.as_ref()) {
            self.headers.push((HeaderName::from_static(name), v));
        }
        self
    }

    /// The product form: `retryable` set (429 and 503 are), `no-store`.
    pub fn product(mut self) -> Self {
        if self.retryable.is_none() {
            self.retryable = Some(matches!(
                self.status,
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            ));
        }
        self.header("cache-control", "no-store")
    }

    pub fn details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn into_response(self) -> Response<Body> {
        let mut error = serde_json::json!({"code": self.code, "message": self.message});
        if let Some(details) = self.details {
            error["details"] = details;
        }
        if let Some(retryable) = self.retryable {
            error["retryable"] = serde_json::Value::Bool(retryable);
        }
        let body = serde_json::json!({ "error": error });
        let mut response = Response::new(full(body.to_string()));
        *response.status_mut() = self.status;
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }
}

impl ApiError {
    /// A service error as either surface answers it: the status is the
    /// service's (one table for both surfaces), the code is the surface's.
    /// 429 and 503 carry `Retry-After`; an internal error is logged and its
    /// details are not sent.
    pub fn from_service(e: &ServiceError, code: &'static str) -> ApiError {
        let status = match e {
            ServiceError::NotFound => StatusCode::NOT_FOUND,
            ServiceError::Gone => StatusCode::GONE,
            ServiceError::Conflict(_)
            | ServiceError::RetainedForForks
            | ServiceError::ContentTypeMismatch
            | ServiceError::Closed { .. }
            | ServiceError::SeqConflict
            | ServiceError::ProducerGap { .. } => StatusCode::CONFLICT,
            ServiceError::ProducerStale { .. } | ServiceError::WrongKey => StatusCode::FORBIDDEN,
            ServiceError::ProducerEpochSeq | ServiceError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ServiceError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ServiceError::Overloaded => StatusCode::TOO_MANY_REQUESTS,
            ServiceError::Unavailable(_) | ServiceError::OutcomeUnknown(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ServiceError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match e {
            ServiceError::Internal(_) => {
                tracing::error!(error = %e, "internal error");
                "internal error".to_string()
            }
            other => other.to_string(),
        };
        let error = ApiError::new(status, code, message);
        match status {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                error.header("retry-after", "1")
            }
            _ => error,
        }
    }
}

/// The raw (Durable Streams) surface's answer to a service error.
impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let code = match &e {
            ServiceError::NotFound => "not_found",
            ServiceError::Gone => "gone",
            ServiceError::Conflict(_) | ServiceError::RetainedForForks => "conflict",
            ServiceError::ContentTypeMismatch => "content_type_mismatch",
            ServiceError::Closed { .. } => "stream_closed",
            ServiceError::SeqConflict => "seq_conflict",
            ServiceError::ProducerStale { .. } => "producer_stale_epoch",
            ServiceError::ProducerGap { .. } => "producer_seq_gap",
            ServiceError::ProducerEpochSeq => "producer_epoch_seq",
            ServiceError::WrongKey => "wrong_key",
            ServiceError::BadRequest(_) => "bad_request",
            ServiceError::TooLarge { .. } => "record_too_large",
            ServiceError::Overloaded => "overloaded",
            ServiceError::Unavailable(_) => "unavailable",
            ServiceError::OutcomeUnknown(_) => "outcome_unknown",
            ServiceError::Internal(_) => "internal",
        };
        let error = ApiError::from_service(&e, code);
        match e {
            ServiceError::Closed { tail } => error.header("stream-closed", "true").header(
                "stream-next-offset",
                crate::ds::offsets::Offset(tail).to_string(),
            ),
            ServiceError::ProducerStale { current_epoch } => {
                error.header("producer-epoch", current_epoch.to_string())
            }
            ServiceError::ProducerGap { expected, received } => error
                .header("producer-expected-seq", expected.to_string())
                .header("producer-received-seq", received.to_string()),
            _ => error,
        }
    }
}

/// A request header as text (400 with `code` when it is not visible ASCII).
pub fn ascii_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
    code: &'static str,
) -> Result<Option<&'a str>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                code,
                format!("header {name} is not ASCII"),
            )
        }),
    }
}

pub type ApiResult = Result<Response<Body>, ApiError>;

const EXPOSE_HEADERS: &str = "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, Stream-Expires-At, Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, Prisma-Next-Cursor, Prisma-Up-To-Date, Prisma-Sealed, ETag, Location, Content-Type, Retry-After";
const ALLOW_HEADERS: &str = "Content-Type, Authorization, If-None-Match, Stream-Seq, Stream-TTL, Stream-Expires-At, Stream-Closed, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset, Stream-Encryption-Key, Prisma-Encryption-Key, Prisma-Routing-Key, Producer-Id, Producer-Epoch, Producer-Seq";
const ALLOW_METHODS: &str = "GET, POST, PUT, DELETE, HEAD, OPTIONS";

/// Headers on every response, errors included.
fn common_headers(headers: &mut HeaderMap) {
    headers.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    headers.insert(
        "access-control-expose-headers",
        HeaderValue::from_static(EXPOSE_HEADERS),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("cross-origin"),
    );
}

fn preflight() -> Response<Body> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let h = response.headers_mut();
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static(ALLOW_METHODS),
    );
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static(ALLOW_HEADERS),
    );
    h.insert("access-control-max-age", HeaderValue::from_static("600"));
    response
}

/// Decodes a stream name from a request path (percent-decoded once) and
/// checks the rules both surfaces share: UTF-8, 1 to `max_bytes` bytes, no
/// control characters, no empty, `.` or `..` segment, no leading `__`
/// (reserved). Answers the problem in words.
pub fn decode_stream_name(raw: &str, max_bytes: usize) -> Result<String, String> {
    let name = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| "the name is not UTF-8".to_string())?;
    if name.is_empty() || name.len() > max_bytes {
        return Err(format!("use 1 to {max_bytes} bytes"));
    }
    if name.chars().any(char::is_control) {
        return Err("control characters are not allowed".into());
    }
    if name
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err("empty, '.' and '..' path segments are not allowed".into());
    }
    if name.starts_with("__") {
        return Err("names starting with '__' are reserved".into());
    }
    Ok(name.into_owned())
}

/// Reads a request body up to `limit` bytes (413 beyond it).
pub async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("request body exceeds {limit} bytes"),
            ))
        }
        Err(e) => Err(ApiError::bad_request(format!("reading the body: {e}"))),
    }
}

/// One request, start to finish.
pub async fn handle(
    state: Arc<AppState>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let mut response = route(state, request)
        .await
        .unwrap_or_else(ApiError::into_response);
    common_headers(response.headers_mut());
    Ok(response)
}

/// What the request parser needs of the server's settings.
#[derive(Clone, Copy)]
pub struct ParseConfig<'a> {
    /// Bearer tokens and their projects (none: no authentication).
    pub tenancy: &'a Tenancy,
    /// The key used for raw-route requests that carry none.
    pub dev_default_key: Option<&'a StreamKey>,
}

/// What a request asks for, before its body is read.
#[derive(Debug)]
pub enum Command {
    /// `OPTIONS` on any path: the CORS preflight.
    Preflight,
    /// `/healthz`.
    Health,
    /// The reserved `__ds` API (project `default` only).
    Subscriptions(subscriptions::SubRoute),
    /// `/v1/stream/{name}`.
    Stream {
        project: String,
        name: String,
        op: raw::StreamOp,
    },
    /// `/v1/streams…`: the product API.
    Product {
        project: String,
        route: product::ProductRoute,
    },
}

/// Maps a request's method, path, query and headers to the command it asks
/// for, or to the error it is answered with. Pure (no I/O, no state): the
/// handler runs it first, and the fuzz targets run it alone.
pub fn parse_request(
    config: ParseConfig<'_>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<Command, ApiError> {
    if method == Method::OPTIONS {
        return Ok(Command::Preflight);
    }
    if path == "/healthz" {
        return Ok(Command::Health);
    }
    let Ok(project) = config.tenancy.project_of(headers) else {
        let error = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid Authorization: Bearer token is required",
        )
        .header("www-authenticate", "Bearer");
        return Err(if is_product_path(path) {
            error.product()
        } else {
            error
        });
    };
    let project = project.to_string();
    if let Some(rest) = path.strip_prefix(raw::PREFIX) {
        if let Some(api) = rest.strip_prefix("__ds/") {
            if project != crate::streams::DEFAULT_PROJECT {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    "the __ds API serves the default project only",
                ));
            }
            return subscriptions::parse_route(method, api).map(Command::Subscriptions);
        }
        let name = raw::stream_name(rest)?;
        let op = raw::parse_stream_op(method, headers, query, config.dev_default_key)?;
        return Ok(Command::Stream { project, name, op });
    }
    if is_product_path(path) {
        let route = product::parse_route(method, path, query, headers)?;
        return Ok(Command::Product { project, route });
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route",
    ))
}

fn is_product_path(path: &str) -> bool {
    path == product::PREFIX || path.starts_with("/v1/streams/")
}

async fn route(state: Arc<AppState>, request: Request<Incoming>) -> ApiResult {
    let config = ParseConfig {
        tenancy: &state.config.tenancy,
        dev_default_key: state.config.dev_default_key.as_ref(),
    };
    let command = parse_request(
        config,
        request.method(),
        request.uri().path(),
        request.uri().query(),
        request.headers(),
    )?;
    match command {
        Command::Preflight => Ok(preflight()),
        Command::Health => Ok(Response::new(full("ok\n"))),
        Command::Subscriptions(sub_route) => subscriptions::handle(state, request, sub_route).await,
        Command::Stream { project, name, op } => {
            raw::handle(state, request, project, name, op).await
        }
        Command::Product { project, route } => {
            product::handle(state, request, project, route).await
        }
    }
}
