//! The top of the HTTP layer (docs/ARCHITECTURE.md, "The HTTP layer"): one
//! request start to finish — authentication, routing to a surface (the raw
//! Durable Streams route, the product API, the reserved `__ds` API), the
//! preflight and the health check — and the headers every answer carries.
//!
//! Routing is pure ([`parse_request`]: no I/O, no state), so the fuzz
//! targets run exactly the code the server runs. Only this file names every
//! surface; the surfaces never import it.

use std::convert::Infallible;
use std::sync::Arc;

use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use strata_segments::StreamKey;

use super::common::{common_headers, full, preflight, ApiError, ApiResult, AppState, Body};
use super::fleet::{self as fleet_http, Decision};
use super::{peers, product, raw, subscriptions};
use crate::service::routing::{ShardIndex, ShardRouter};
use crate::service::subscriptions::coordinator::COORDINATOR_SHARD;
use crate::service::tenancy::Tenancy;

/// One request, start to finish.
pub async fn handle(
    state: Arc<AppState>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let started = tokio::time::Instant::now();
    let method = request.method().clone();
    let surface = crate::http::common::metrics::surface_of(request.uri().path());
    let mut response = route(state.clone(), request).await.unwrap_or_else(|e| {
        let now = tokio::time::Instant::now();
        state.refusals.note(surface, e.status, e.code, now);
        e.into_response()
    });
    common_headers(response.headers_mut());
    state
        .metrics
        .finished(surface, &method, response.status(), started.elapsed());
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
    /// `GET /healthz`: liveness (no token).
    Health,
    /// `GET /`: what this server is (no token needed, nothing secret).
    Root,
    /// `GET /metrics`: the metrics exposition (no token, like `/healthz`).
    Metrics,
    /// `GET /debug/…`: operators' endpoints (the operator token decides).
    Debug(super::debug::DebugRoute),
    /// `POST /v1/fleet/hint` from another fleet member (its instance id).
    FleetHint(Option<fleet_http::Hint>),
    /// A route only fleet members call (the peer key is checked by its handler).
    FleetPeer(peers::PeerRoute),
    /// The reserved `__ds` API: the caller's project, or `None` for the
    /// routes a callback token authenticates (the token names its project).
    Subscriptions {
        project: Option<String>,
        route: subscriptions::SubRoute,
    },
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
    // The operational routes take GET and HEAD only, with or without a token.
    let command = match path {
        "/healthz" => Some(Command::Health),
        "/" => Some(Command::Root),
        "/metrics" => Some(Command::Metrics),
        _ => None,
    };
    if let Some(command) = command {
        if method != Method::GET && method != Method::HEAD {
            return Err(product::errors::method_not_allowed("GET, HEAD"));
        }
        return Ok(command);
    }
    if let Some(route) = super::debug::debug_route(method, path) {
        return Ok(Command::Debug(route));
    }
    if path == fleet_http::HINT_PATH && method == Method::POST {
        return Ok(Command::FleetHint(fleet_http::parse_hint(headers)));
    }
    if let Some(route) = peers::peer_route(method, path) {
        return Ok(Command::FleetPeer(route));
    }
    let project = config
        .tenancy
        .project_of(headers.get("authorization").and_then(|v| v.to_str().ok()))
        .map(str::to_string);
    if let Some(api) = path
        .strip_prefix(raw::PREFIX)
        .and_then(|rest| rest.strip_prefix("__ds/"))
    {
        let route = subscriptions::parse_route(method, api)?;
        let project = match (route.token_authenticated(), project) {
            (true, _) => None,
            (false, Ok(project)) => Some(project),
            (false, Err(_)) => return Err(unauthorized(path)),
        };
        return Ok(Command::Subscriptions { project, route });
    }
    if product::is_observation_path(path) {
        // Authorized by its capability, which names the project.
        let route = product::parse_route(method, path, query, headers)?;
        let project = route.capability_project().unwrap_or_default().to_string();
        return Ok(Command::Product { project, route });
    }
    let Ok(project) = project else {
        return Err(unauthorized(path));
    };
    if let Some(rest) = path.strip_prefix(raw::PREFIX) {
        let name = raw::stream_name(rest)?;
        let op = raw::parse_stream_op(method, headers, query, config.dev_default_key)?;
        return Ok(Command::Stream { project, name, op });
    }
    if let Some(rest) = path.strip_prefix(product::usage::PROJECTS_PREFIX) {
        let route = product::usage::parse_project_route(method, rest, query)?;
        return Ok(Command::Product { project, route });
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

/// The exposition, as `GET /metrics` answers it.
fn metrics_answer(state: &AppState) -> Response<Body> {
    let mut response = Response::new(full(state.metrics.render()));
    crate::http::common::response::set(
        &mut response,
        "content-type",
        crate::http::common::metrics::CONTENT_TYPE,
    );
    crate::http::common::response::set(&mut response, "cache-control", "no-store");
    response
}

/// Serves `--metrics-listen`: `GET /metrics` and `/healthz`, 404 for
/// anything else. Runs until the process ends.
pub async fn metrics_listener(listener: tokio::net::TcpListener, state: Arc<AppState>) {
    loop {
        let socket = match listener.accept().await {
            Ok((socket, _)) => socket,
            Err(e) => {
                tracing::warn!(error = %e, "metrics listener: accept failed");
                continue;
            }
        };
        let state = state.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let state = state.clone();
            async move {
                let route = super::debug::debug_route(request.method(), request.uri().path());
                let operational = matches!(request.uri().path(), "/metrics" | "/healthz");
                let reading = matches!(*request.method(), Method::GET | Method::HEAD);
                let response = match (request.uri().path(), route) {
                    (_, Some(route)) => super::debug::answer(&state, route),
                    _ if operational && !reading => {
                        product::errors::method_not_allowed("GET, HEAD").into_response()
                    }
                    ("/metrics", _) => metrics_answer(&state),
                    ("/healthz", _) => Response::new(full("ok\n")),
                    _ => ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
                        .into_response(),
                };
                Ok::<_, Infallible>(response)
            }
        });
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(socket);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %e, "metrics connection ended with an error");
            }
        });
    }
}

/// The answer to `GET /`: the server's name and version, its two surfaces
/// and where they are documented.
fn root_description() -> Response<Body> {
    let body = serde_json::json!({
        "name": "strata",
        "version": env!("CARGO_PKG_VERSION"),
        "surfaces": {
            "durableStreams": {
                "path": "/v1/stream/{name}",
                "protocol": "https://github.com/durable-streams/durable-streams/blob/main/PROTOCOL.md",
            },
            "product": {
                "path": "/v1/streams/{name}",
                "openapi": "docs/openapi.yaml",
            },
        },
        "health": "/healthz",
        "docs": ["docs/API.md", "docs/openapi.yaml", "docs/RUNBOOK.md"],
    });
    let mut response = Response::new(full(body.to_string()));
    crate::http::common::response::set(&mut response, "content-type", "application/json");
    crate::http::common::response::set(&mut response, "cache-control", "no-store");
    response
}

/// 401 for a request without a valid bearer token (in the product's error
/// shape on product paths).
fn unauthorized(path: &str) -> ApiError {
    let error = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "a valid Authorization: Bearer token is required",
    )
    .header("www-authenticate", "Bearer");
    if is_product_path(path) {
        error.product()
    } else {
        error
    }
}

impl Command {
    /// The shard a command is about (and whether it is a product request),
    /// for fleet routing: a stream's shard, shard 0 for the `__ds` API, and
    /// `None` for commands any member answers itself.
    pub fn fleet_target(&self, router: &ShardRouter) -> Option<(ShardIndex, bool)> {
        let of =
            |project: &str, name: &str| router.index_of(&strata_engine::stream_id(project, name));
        match self {
            Command::Stream { project, name, .. } => Some((of(project, name), false)),
            Command::Product {
                project,
                route: product::ProductRoute::Collection { name, .. },
            } => Some((of(project, name), true)),
            Command::Subscriptions { .. } => Some((COORDINATOR_SHARD, false)),
            _ => None,
        }
    }
}

fn is_product_path(path: &str) -> bool {
    path == product::PREFIX
        || path.starts_with("/v1/streams/")
        || path.starts_with(product::usage::PROJECTS_PREFIX)
}

async fn route(state: Arc<AppState>, request: Request<Incoming>) -> ApiResult {
    // The token table is read under its lock only while parsing (no await).
    let command = state.config.tenancy.with_current(|tenancy| {
        let config = ParseConfig {
            tenancy,
            dev_default_key: state.config.dev_default_key.as_ref(),
        };
        parse_request(
            config,
            request.method(),
            request.uri().path(),
            request.uri().query(),
            request.headers(),
        )
    })?;
    if let Some(fleet) = state.fleet.get() {
        if let Some((index, product)) = command.fleet_target(state.streams.router()) {
            match fleet_http::decide(&state, fleet, index, request.headers()).await {
                Decision::Local => {}
                Decision::Forward(owner) => {
                    let live_code = if product {
                        product::errors::LIVE_CAPACITY_CODE
                    } else {
                        raw::errors::LIVE_CAPACITY_CODE
                    };
                    return fleet_http::forward(state.clone(), index, owner, request, live_code)
                        .await
                        .map_err(|e| if product { e.product() } else { e });
                }
                Decision::Answer(e) => return Err(if product { e.product() } else { e }),
            }
        }
    }
    match command {
        Command::Preflight => Ok(preflight()),
        Command::Health => Ok(Response::new(full("ok\n"))),
        Command::Root => Ok(root_description()),
        Command::Metrics if state.config.metrics_on_main_listener => Ok(metrics_answer(&state)),
        Command::Metrics => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "metrics are served on the --metrics-listen address",
        )),
        Command::Debug(route) if super::debug::operator(&state, request.headers()) => {
            Ok(super::debug::answer(&state, route))
        }
        Command::Debug(_) => Err(super::debug::not_found()),
        Command::FleetHint(hint) => fleet_http::hint(state, request.headers(), hint).await,
        Command::FleetPeer(route) => peers::handle(state, request, route).await,
        Command::Subscriptions { project, route } => {
            subscriptions::handle(state, request, project, route).await
        }
        Command::Stream { project, name, op } => {
            raw::handle(state, request, project, name, op).await
        }
        Command::Product { project, route } => {
            product::handle(state, request, project, route).await
        }
    }
}
