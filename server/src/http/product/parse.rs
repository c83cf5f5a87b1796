//! Parsing and validation of requests to `/v1/streams…`
//! (docs/ARCHITECTURE.md, "The HTTP layer"): method, path, query and
//! headers to a [`ProductRoute`] before the body is read ([`parse_route`],
//! pure, like the raw route's), and the seal body. Header checks that the
//! contract orders after the existence check are kept as results, for the
//! handler to judge in that order.

use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Method, StatusCode};
use percent_encoding::percent_decode;
use strata_segments::StreamKey;

use super::super::common::{
    ascii_header, decode_stream_name, producer_headers, ApiError, ProducerHeaders,
};
use super::errors::{bad, error, method_not_allowed, unknown_route};
use crate::service::catalog::{CatalogCursor, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use crate::service::product::consumer_config::valid_consumer_name;
use crate::service::product::scan_cursor::{SCAN_BYTES_DEFAULT, SCAN_BYTES_MAX, SCAN_BYTES_MIN};
use crate::service::product::watch_cap::parse_capability;
use crate::service::product::watch_keys::WatchKey;
use crate::service::product::{
    READ_BYTES_DEFAULT, READ_BYTES_MAX, READ_BYTES_MIN, RESERVED_PRODUCER_PREFIX,
    ROUTING_KEY_BYTES_MAX, WAIT_MS_MAX,
};

pub const PREFIX: &str = "/v1/streams";

/// Longest collection name, in bytes.
pub const NAME_BYTES_MAX: usize = 512;

/// Path segments a name may not end with (they are subresources).
const RESERVED_LAST_SEGMENTS: [&str; 4] = ["records", "consumers", "watches", "usage"];

/// Inputs of the raw surface or of removed designs, refused on every route.
const REMOVED_HEADERS: [&str; 9] = [
    "stream-encryption-key",
    "stream-key",
    "stream-profile",
    "stream-ttl",
    "stream-expires-at",
    "stream-ordering",
    "stream-segments",
    "stream-scaling",
    "stream-touch-templates",
];

const KEY_HEADER: &str = "prisma-encryption-key";

const ROUTING_KEY_HEADER: &str = "prisma-routing-key";

/// The version of a consumer group (answered on reads, required by deletes).
pub const CONSUMER_VERSION_HEADER: &str = "prisma-consumer-version";

/// What a request to `/v1/streams…` asks for.
#[derive(Debug)]
pub enum ProductRoute {
    Catalog {
        cursor: Option<CatalogCursor>,
        limit: usize,
    },
    Collection {
        name: String,
        op: Box<CollectionOp>,
    },
    /// `GET /v1/projects/{project}/usage` (the project it names).
    ProjectUsage {
        named: String,
    },
}

impl ProductRoute {
    /// The project an observation's capability names (`None`: not an
    /// observation).
    pub fn capability_project(&self) -> Option<&str> {
        match self {
            ProductRoute::Collection { op, .. } => match op.as_ref() {
                CollectionOp::Observe(call) => Some(call.project()),
                _ => None,
            },
            ProductRoute::Catalog { .. } | ProductRoute::ProjectUsage { .. } => None,
        }
    }
}

/// Where a key read starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorParam {
    Beginning,
    Now,
    Token(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Plain,
    LongPoll { wait: Duration },
    Sse { wait: Duration },
}

/// An operation on one collection. Header checks that the contract orders
/// after the existence check are kept as results and judged in the handler.
#[derive(Debug)]
pub enum CollectionOp {
    Create {
        key: StreamKey,
    },
    Metadata,
    Delete,
    Seal {
        key: Result<Option<StreamKey>, ApiError>,
        producer: Result<Option<ProducerHeaders>, ApiError>,
    },
    Append(AppendCall),
    Read {
        key: StreamKey,
        routing_key: Result<Bytes, ApiError>,
        cursor: CursorParam,
        max_bytes: usize,
        transport: Transport,
    },
    /// The collection's usage (docs/API.md §13).
    Usage,
    /// The collection's watch definitions.
    Watches,
    /// One watch definition.
    Watch {
        watch: String,
    },
    /// An observation of one watch key, under a capability (the route's
    /// project is the capability's).
    Observe(ObserveCall),
    /// A page of a snapshot scan (`None`: start one).
    Scan {
        key: StreamKey,
        cursor: Option<String>,
        max_bytes: usize,
    },
    /// Creates a consumer group (or finds it configured the same way).
    ConfigureConsumer {
        consumer: String,
        key: StreamKey,
    },
    ConsumerInfo {
        consumer: String,
    },
    /// Deletes a consumer group at the version `Prisma-Consumer-Version`
    /// names.
    DeleteConsumer {
        consumer: String,
        version: Result<u64, ApiError>,
    },
    Pull {
        consumer: String,
        key: StreamKey,
    },
    Settle {
        consumer: String,
        key: StreamKey,
    },
}

/// An observation (`…/watches/{w}/keys/{watchKey}`), from its path, query
/// and headers.
#[derive(Debug)]
pub struct ObserveCall {
    pub watch: String,
    pub key: WatchKey,
    /// From `Authorization: Prisma-Watch <cap>` or `?cap=` (empty: none).
    pub capability: String,
    pub cursor: Option<String>,
    pub wait: Duration,
}

impl ObserveCall {
    /// The project the capability names (`""` when it names none: such a
    /// request finds nothing and is refused like any other).
    pub fn project(&self) -> &str {
        parse_capability(&self.capability).map_or("", |c| c.project)
    }
}

/// The watch subresource a path names, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchPath<'a> {
    List,
    One(&'a str),
    Key(&'a str, &'a str),
}

/// Splits `{name}/watches`, `{name}/watches/{w}` and
/// `{name}/watches/{w}/keys/{watchKey}` (a watch name is one segment).
fn split_watch_path(rest: &str) -> Option<(&str, WatchPath<'_>)> {
    if let Some(name) = rest.strip_suffix("/watches") {
        return (!name.is_empty()).then_some((name, WatchPath::List));
    }
    let segments: Vec<&str> = rest.rsplitn(5, '/').collect();
    match segments.as_slice() {
        [key, "keys", watch, "watches", name] if !name.is_empty() => {
            Some((name, WatchPath::Key(watch, key)))
        }
        [watch, "watches", ..] => {
            let name = rest.strip_suffix(&format!("/watches/{watch}"))?;
            (!name.is_empty()).then_some((name, WatchPath::One(watch)))
        }
        _ => None,
    }
}

/// The route of a watch path (`None`: not one; only `GET` reaches here).
fn watch_route(
    rest: &str,
    headers: &HeaderMap,
    param: &dyn Fn(&str) -> Option<String>,
    allow_only: &dyn Fn(&[&str]) -> Result<(), ApiError>,
) -> Option<Result<ProductRoute, ApiError>> {
    let (raw_name, path) = split_watch_path(rest)?;
    Some(collection_name(raw_name).and_then(|name| {
        Ok(ProductRoute::Collection {
            name,
            op: Box::new(watch_op(path, headers, param, allow_only)?),
        })
    }))
}

/// The operation of a watch path.
fn watch_op(
    path: WatchPath<'_>,
    headers: &HeaderMap,
    param: &dyn Fn(&str) -> Option<String>,
    allow_only: &dyn Fn(&[&str]) -> Result<(), ApiError>,
) -> Result<CollectionOp, ApiError> {
    let decode = |text: &str| {
        percent_decode(text.as_bytes())
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| bad("invalid_name", "a watch name is UTF-8"))
    };
    let (watch, key) = match path {
        WatchPath::List => {
            allow_only(&[])?;
            return Ok(CollectionOp::Watches);
        }
        WatchPath::One(watch) => {
            allow_only(&[])?;
            return Ok(CollectionOp::Watch {
                watch: decode(watch)?,
            });
        }
        WatchPath::Key(watch, key) => (watch, key),
    };
    allow_only(&["cursor", "timeoutMs", "cap"])?;
    let key = WatchKey::parse(key)
        .ok_or_else(|| bad("invalid_watch_key", "a watch key is 16 hex characters"))?;
    let from_header = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Prisma-Watch "))
        .map(|v| v.trim().to_string());
    Ok(CollectionOp::Observe(ObserveCall {
        watch: decode(watch)?,
        key,
        capability: from_header.or_else(|| param("cap")).unwrap_or_default(),
        cursor: param("cursor").filter(|c| !c.is_empty()),
        wait: wait_param("timeoutMs", param("timeoutMs").as_deref())?,
    }))
}

/// Whether `path` is a watch observation (authorized by its capability,
/// not by a bearer token).
pub fn is_observation_path(path: &str) -> bool {
    path.strip_prefix(PREFIX)
        .and_then(|rest| rest.strip_prefix('/'))
        .and_then(split_watch_path)
        .is_some_and(|(_, p)| matches!(p, WatchPath::Key(..)))
}

/// An append (`records` or `records:batch`), from its headers.
#[derive(Debug)]
pub struct AppendCall {
    pub key: StreamKey,
    pub batch: bool,
    pub content_type: Option<String>,
    pub routing_key: Result<Bytes, ApiError>,
    pub producer: Result<Option<ProducerHeaders>, ApiError>,
}

/// The subresource a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Collection,
    Records,
    Batch,
    LongPoll,
    Sse,
    Seal,
    Scan,
    Usage,
    Consumer(ConsumerVerb),
}

impl Target {
    /// The methods the target takes, as `Allow` lists them.
    fn methods(self) -> &'static str {
        match self {
            Target::Collection | Target::Consumer(ConsumerVerb::Config) => "GET, PUT, DELETE",
            Target::Records => "GET, POST",
            Target::Batch | Target::Seal | Target::Consumer(_) => "POST",
            Target::LongPoll | Target::Sse | Target::Scan | Target::Usage => "GET",
        }
    }
}

/// What a `…/consumers/{c}` path asks of the consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConsumerVerb {
    Config,
    Pull,
    Settle,
}

/// Splits `{name}/consumers/{consumer}[:verb]` (still encoded): the last
/// `/consumers/` whose remainder is one segment.
fn split_consumer(rest: &str) -> Option<Result<(&str, &str, ConsumerVerb), ApiError>> {
    let at = rest.rfind("/consumers/")?;
    let (name, tail) = (&rest[..at], &rest[at + "/consumers/".len()..]);
    if name.is_empty() || tail.contains('/') {
        return None;
    }
    let (consumer, verb) = match tail.split_once(':') {
        None => (tail, ConsumerVerb::Config),
        Some((consumer, "pull")) => (consumer, ConsumerVerb::Pull),
        Some((consumer, "settle")) => (consumer, ConsumerVerb::Settle),
        Some(_) => return Some(Err(unknown_route())),
    };
    Some(Ok((name, consumer, verb)))
}

/// Decodes and validates a consumer name (one segment of 1–128 bytes).
fn consumer_name(raw: &str) -> Result<String, ApiError> {
    let invalid = || {
        bad("invalid_consumer_name", "a consumer name is one segment of 1 to 128 bytes, without '/', ':' or control characters")
    };
    let name = percent_decode(raw.as_bytes())
        .decode_utf8()
        .map_err(|_| invalid())?
        .into_owned();
    if !valid_consumer_name(&name) {
        return Err(invalid());
    }
    Ok(name)
}

/// Splits the (still encoded) path after `/v1/streams/` into the name and
/// the subresource: the suffix decides, so names may hold `:` and `/`.
fn split_target(rest: &str) -> Result<(&str, Target), ApiError> {
    const RECORDS: [(&str, Target); 4] = [
        ("/records", Target::Records),
        ("/records:batch", Target::Batch),
        ("/records:long-poll", Target::LongPoll),
        ("/records:sse", Target::Sse),
    ];
    for (suffix, target) in RECORDS {
        if let Some(name) = rest.strip_suffix(suffix) {
            return Ok((name, target));
        }
    }
    if let Some(name) = rest.strip_suffix(":seal") {
        return Ok((name, Target::Seal));
    }
    if let Some(name) = rest.strip_suffix(":scan") {
        return Ok((name, Target::Scan));
    }
    if let Some(name) = rest.strip_suffix("/usage") {
        return Ok((name, Target::Usage));
    }
    if let Some(split) = split_consumer(rest) {
        let (name, _, verb) = split?;
        return Ok((name, Target::Consumer(verb)));
    }
    // Routes of later phases (consumers, watches), and unknown verbs.
    let last = rest.rsplit('/').next().unwrap_or("");
    if rest.contains("/consumers/")
        || rest.contains("/watches/")
        || RESERVED_LAST_SEGMENTS.contains(&last)
        || last.starts_with("records:")
        || ["pull", "settle", "batch", "long-poll", "sse"]
            .iter()
            .any(|verb| rest.ends_with(&format!(":{verb}")))
    {
        return Err(unknown_route());
    }
    Ok((rest, Target::Collection))
}

/// Decodes and validates a collection name.
pub fn collection_name(raw: &str) -> Result<String, ApiError> {
    let invalid = |why: &str| bad("invalid_name", format!("invalid collection name: {why}"));
    let name = decode_stream_name(raw, NAME_BYTES_MAX).map_err(|why| invalid(&why.to_string()))?;
    let last = name.rsplit('/').next().unwrap_or("");
    if RESERVED_LAST_SEGMENTS.contains(&last) {
        return Err(invalid(
            "a name cannot end in 'records', 'consumers', 'watches' or 'usage'",
        ));
    }
    Ok(name)
}

/// The query's parameters, each at most once, strictly UTF-8.
fn query_params(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |text: &str| {
            let plus = text.replace('+', " ");
            percent_decode(plus.as_bytes())
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| bad("invalid_parameter", "query parameters must be UTF-8"))
        };
        let (k, v) = (decode(k)?, decode(v)?);
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(bad(
                "duplicate_parameter",
                format!("query parameter {k:?} is given twice"),
            ));
        }
        out.push((k, v));
    }
    Ok(out)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    ascii_header(headers, name, "invalid_header").map_err(ApiError::product)
}

fn stream_key(headers: &HeaderMap) -> Result<StreamKey, ApiError> {
    match header(headers, KEY_HEADER)? {
        Some(text) => StreamKey::parse(text.trim()).map_err(|_| {
            bad(
                "invalid_key",
                "Prisma-Encryption-Key must be 32 bytes in base64url or base64",
            )
        }),
        None => Err(bad(
            "missing_key",
            "Prisma-Encryption-Key is required (32 bytes, base64url)",
        )),
    }
}

fn optional_key(headers: &HeaderMap) -> Result<Option<StreamKey>, ApiError> {
    match headers.get(KEY_HEADER) {
        None => Ok(None),
        Some(_) => stream_key(headers).map(Some),
    }
}

/// A routing key: exact UTF-8 bytes, at most 1,024.
pub(super) fn routing_key_bytes(bytes: &[u8]) -> Result<Bytes, ApiError> {
    if bytes.len() > ROUTING_KEY_BYTES_MAX || std::str::from_utf8(bytes).is_err() {
        return Err(bad(
            "invalid_routing_key",
            "a routing key is UTF-8 of at most 1024 bytes",
        ));
    }
    Ok(Bytes::copy_from_slice(bytes))
}

fn producer(headers: &HeaderMap) -> Result<Option<ProducerHeaders>, ApiError> {
    let parsed = producer_headers(headers)
        .map_err(|e| error(StatusCode::BAD_REQUEST, "invalid_producer", e.message))?;
    if parsed
        .as_ref()
        .is_some_and(|p| p.id.starts_with(RESERVED_PRODUCER_PREFIX))
    {
        return Err(bad(
            "invalid_producer",
            "Producer-Id values starting with '__' are reserved",
        ));
    }
    Ok(parsed)
}

/// A whole number in the query (ASCII digits, optionally after `+`). Every
/// such parameter is clamped, so one beyond `u64` counts as `u64::MAX`.
fn whole_param(name: &str, text: &str) -> Result<u64, ApiError> {
    let digits = text.strip_prefix('+').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        let message = format!("{name} must be a whole number");
        return Err(bad("invalid_parameter", message));
    }
    Ok(digits.parse().unwrap_or(u64::MAX))
}

/// `maxBytes`: a whole number, clamped into `bounds`.
fn max_bytes_param(
    value: Option<&str>,
    default: usize,
    bounds: std::ops::RangeInclusive<usize>,
) -> Result<usize, ApiError> {
    match value {
        None => Ok(default),
        Some(text) => Ok(whole_param("maxBytes", text)?
            .clamp(*bounds.start() as u64, *bounds.end() as u64) as usize),
    }
}

/// A live wait (`waitMs`, `timeoutMs`): a whole number of milliseconds,
/// [`WAIT_MS_MAX`] when absent, clamped to it.
fn wait_param(name: &str, value: Option<&str>) -> Result<Duration, ApiError> {
    let ms = match value {
        None => WAIT_MS_MAX,
        Some(text) => whole_param(name, text)?.min(WAIT_MS_MAX),
    };
    Ok(Duration::from_millis(ms))
}

/// Maps a request under `/v1/streams` to its route, or to its error. Pure.
pub fn parse_route(
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<ProductRoute, ApiError> {
    // The path names the route and the route its methods: another method is
    // 405 before any other input is judged.
    let rest = match path.strip_prefix(PREFIX) {
        Some("") | Some("/") => None,
        Some(rest) => Some(rest.strip_prefix('/').ok_or_else(unknown_route)?),
        None => return Err(unknown_route()),
    };
    let methods = match rest {
        None => "GET",
        Some(rest) if split_watch_path(rest).is_some() => "GET",
        Some(rest) => split_target(rest)?.1.methods(),
    };
    if !methods.split(", ").any(|m| m == method.as_str()) {
        return Err(method_not_allowed(methods));
    }
    if let Some(removed) = REMOVED_HEADERS.iter().find(|h| headers.contains_key(**h)) {
        return Err(bad(
            "unknown_field",
            format!("header {removed} is not part of the product API"),
        ));
    }
    let params = query_params(query)?;
    for (k, _) in &params {
        if k == "key" || k == "offset" {
            return Err(bad(
                "unknown_field",
                format!("query parameter {k:?} is not part of the product API"),
            ));
        }
        if k == "routingKey" && method != Method::GET {
            return Err(bad(
                "unknown_field",
                "routingKey goes in the Prisma-Routing-Key header on writes",
            ));
        }
    }
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let allow_only =
        |allowed: &[&str]| match params.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            Some((k, _)) => Err(bad(
                "unknown_parameter",
                format!("query parameter {k:?} is not accepted here"),
            )),
            None => Ok(()),
        };
    let Some(rest) = rest else {
        allow_only(&["cursor", "limit"])?;
        let cursor = match param("cursor") {
            None | Some("") => None,
            Some(text) => Some(
                CatalogCursor::decode(text)
                    .ok_or_else(|| bad("invalid_cursor", "not a catalog cursor"))?,
            ),
        };
        let limit = match param("limit") {
            None => PAGE_LIMIT_DEFAULT,
            Some(text) => text
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=PAGE_LIMIT_MAX).contains(n))
                .ok_or_else(|| bad("invalid_parameter", "limit is 1 to 1000"))?,
        };
        return Ok(ProductRoute::Catalog { cursor, limit });
    };
    let owned_param = |name: &str| param(name).map(str::to_string);
    if let Some(route) = watch_route(rest, headers, &owned_param, &allow_only) {
        return route;
    }
    let (raw_name, target) = split_target(rest)?;
    let name = collection_name(raw_name)?;
    if let Target::Consumer(verb) = target {
        allow_only(&[])?;
        let raw = split_consumer(rest)
            .and_then(Result::ok)
            .map_or("", |(_, consumer, _)| consumer);
        let op = consumer_op(verb, method.clone(), consumer_name(raw)?, headers)?;
        return Ok(ProductRoute::Collection {
            name,
            op: Box::new(op),
        });
    }
    let op = match (target, method.clone()) {
        (Target::Collection, m) => {
            allow_only(&[])?;
            match m {
                Method::PUT => CollectionOp::Create {
                    key: stream_key(headers)?,
                },
                Method::GET => CollectionOp::Metadata,
                Method::DELETE => CollectionOp::Delete,
                _ => return Err(method_not_allowed(target.methods())),
            }
        }
        (Target::Seal, Method::POST) => {
            allow_only(&[])?;
            CollectionOp::Seal {
                key: optional_key(headers),
                producer: producer(headers),
            }
        }
        (Target::Scan, Method::GET) => {
            allow_only(&["cursor", "maxBytes"])?;
            CollectionOp::Scan {
                key: stream_key(headers)?,
                cursor: param("cursor")
                    .filter(|c| !c.is_empty())
                    .map(str::to_string),
                max_bytes: max_bytes_param(
                    param("maxBytes"),
                    SCAN_BYTES_DEFAULT,
                    SCAN_BYTES_MIN..=SCAN_BYTES_MAX,
                )?,
            }
        }
        (Target::Usage, Method::GET) => allow_only(&[]).map(|()| CollectionOp::Usage)?,
        (Target::Records, Method::POST) | (Target::Batch, Method::POST) => {
            allow_only(&[])?;
            CollectionOp::Append(AppendCall {
                key: stream_key(headers)?,
                batch: target == Target::Batch,
                content_type: header(headers, "content-type")?.map(str::to_string),
                routing_key: routing_key_bytes(
                    headers
                        .get(ROUTING_KEY_HEADER)
                        .map_or(&[][..], HeaderValue::as_bytes),
                ),
                producer: producer(headers),
            })
        }
        (Target::Records, Method::GET)
        | (Target::LongPoll, Method::GET)
        | (Target::Sse, Method::GET) => {
            let transport = match target {
                Target::Records => {
                    allow_only(&["routingKey", "cursor", "maxBytes"])?;
                    Transport::Plain
                }
                Target::LongPoll => {
                    allow_only(&["routingKey", "cursor", "maxBytes", "waitMs"])?;
                    Transport::LongPoll {
                        wait: wait_param("waitMs", param("waitMs"))?,
                    }
                }
                _ => {
                    allow_only(&["routingKey", "cursor", "maxBytes", "waitMs"])?;
                    Transport::Sse {
                        wait: wait_param("waitMs", param("waitMs"))?,
                    }
                }
            };
            let cursor = match param("cursor") {
                None | Some("") | Some("beginning") => CursorParam::Beginning,
                Some("now") => CursorParam::Now,
                Some(token) => CursorParam::Token(token.to_string()),
            };
            let max_bytes = max_bytes_param(
                param("maxBytes"),
                READ_BYTES_DEFAULT,
                READ_BYTES_MIN..=READ_BYTES_MAX,
            )?;
            CollectionOp::Read {
                key: stream_key(headers)?,
                routing_key: routing_key_bytes(param("routingKey").unwrap_or("").as_bytes()),
                cursor,
                max_bytes,
                transport,
            }
        }
        // Refused above already (the path decides the methods).
        (target, _) => return Err(method_not_allowed(target.methods())),
    };
    Ok(ProductRoute::Collection {
        name,
        op: Box::new(op),
    })
}

/// The operation a consumer path and method name.
fn consumer_op(
    verb: ConsumerVerb,
    method: Method,
    consumer: String,
    headers: &HeaderMap,
) -> Result<CollectionOp, ApiError> {
    Ok(match (verb, method) {
        (ConsumerVerb::Config, Method::PUT) => CollectionOp::ConfigureConsumer {
            consumer,
            key: stream_key(headers)?,
        },
        (ConsumerVerb::Config, Method::GET) => CollectionOp::ConsumerInfo { consumer },
        (ConsumerVerb::Config, Method::DELETE) => CollectionOp::DeleteConsumer {
            consumer,
            version: consumer_version(headers),
        },
        (ConsumerVerb::Pull, Method::POST) => CollectionOp::Pull {
            consumer,
            key: stream_key(headers)?,
        },
        (ConsumerVerb::Settle, Method::POST) => CollectionOp::Settle {
            consumer,
            key: stream_key(headers)?,
        },
        // Refused by `parse_route` already (the path decides the methods).
        (verb, _) => return Err(method_not_allowed(Target::Consumer(verb).methods())),
    })
}

/// `Prisma-Consumer-Version`: the version a delete expects.
fn consumer_version(headers: &HeaderMap) -> Result<u64, ApiError> {
    let text = header(headers, CONSUMER_VERSION_HEADER)?.ok_or_else(|| {
        error(
            StatusCode::PRECONDITION_REQUIRED,
            "missing_consumer_version",
            "a consumer delete needs Prisma-Consumer-Version (from a read of the consumer)",
        )
    })?;
    text.parse::<u64>().ok().filter(|v| *v > 0).ok_or_else(|| {
        bad(
            "invalid_consumer_version",
            "Prisma-Consumer-Version is a positive whole number",
        )
    })
}
