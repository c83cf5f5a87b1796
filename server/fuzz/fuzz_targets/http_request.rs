//! Structure-aware: a request (method, path, query, headers, server tokens
//! and development key, body) through `parse_request` (raw and product routes), the pure first step of
//! every request the server handles, and, for appends, `AppendRequest::spec`
//! with the body.
//!
//! Properties: no panic; every refusal is a 4xx with a JSON error body (bad
//! input never answers 5xx); with tokens configured, only `OPTIONS`,
//! `/healthz`, the fleet members' routes (their handlers check the peer key)
//! and the `__ds` routes a callback token authenticates pass without a
//! matching bearer token; a parsed stream name obeys
//! the naming rules and comes back from its own (percent-escaped) path; a
//! read's offset prints back to its text and live reads carry one; producer
//! headers, `Stream-Seq`, TTL and fork headers obey their limits; an append's
//! spec has a body or a close, a content type for its body, and the producer
//! digest of that request.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method};
use libfuzzer_sys::fuzz_target;
use strata_segments::StreamKey;
use strata_server::ds::offsets::{Offset, OffsetParam};
use strata_server::http::product::{self, ProductRoute};
use strata_server::http::raw::{self, StreamOp, PREFIX};
use strata_server::http::{parse_request, ApiError, Command, ParseConfig};
use strata_server::service::tenancy::Tenancy;

#[derive(Arbitrary, Debug)]
struct Input {
    method: MethodChoice,
    path: PathChoice,
    query: Option<Vec<(QueryKey, Value)>>,
    raw_query: Option<String>,
    headers: Vec<(HeaderChoice, Value)>,
    tokens: Vec<String>,
    dev_key: bool,
    body: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
enum MethodChoice {
    Get,
    Put,
    Post,
    Head,
    Delete,
    Options,
    Patch,
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum PathChoice {
    Stream(String),
    Ds(String),
    Subscription(String, Option<String>),
    Health,
    FleetHint,
    FleetPeer(bool),
    Raw(String),
    /// `/v1/streams/{name}{suffix}`.
    Product(String, ProductSuffix),
}

#[derive(Arbitrary, Debug)]
enum ProductSuffix {
    None,
    Records,
    Batch,
    LongPoll,
    Sse,
    Seal,
    Scan,
    Watch(String),
    Consumer(String, u8),
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum QueryKey {
    Offset,
    Live,
    Cursor,
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum HeaderChoice {
    Key,
    ContentType,
    Ttl,
    ExpiresAt,
    ForkedFrom,
    ForkOffset,
    ForkSubOffset,
    Closed,
    StreamSeq,
    ProducerId,
    ProducerEpoch,
    ProducerSeq,
    Authorization,
    Host,
    IfNoneMatch,
    FleetFrom,
    FleetReleased,
    ProductKey,
    ConsumerVersion,
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum Value {
    Text(String),
    Bytes(Vec<u8>),
    Key([u8; 32]),
    Offset(u64),
    Number(u64),
    /// `Bearer ` and the n-th configured token.
    Bearer(u8),
    /// A path under `/v1/stream/`.
    Path(String),
    Special(Special),
}

#[derive(Arbitrary, Debug)]
enum Special {
    True,
    MinusOne,
    Now,
    LongPoll,
    Sse,
    Json,
    Rfc3339,
}

impl Value {
    fn bytes(&self, tokens: &[String]) -> Vec<u8> {
        match self {
            Value::Text(t) => t.clone().into_bytes(),
            Value::Bytes(b) => b.clone(),
            Value::Key(k) => StreamKey::from_bytes(*k).to_base64url().into_bytes(),
            Value::Offset(n) => Offset(*n).to_string().into_bytes(),
            Value::Number(n) => n.to_string().into_bytes(),
            Value::Bearer(i) => match tokens.get(*i as usize % tokens.len().max(1)) {
                Some(t) => format!("Bearer {t}").into_bytes(),
                None => b"Bearer ".to_vec(),
            },
            Value::Path(p) => format!("{PREFIX}{p}").into_bytes(),
            Value::Special(s) => match s {
                Special::True => b"true".to_vec(),
                Special::MinusOne => b"-1".to_vec(),
                Special::Now => b"now".to_vec(),
                Special::LongPoll => b"long-poll".to_vec(),
                Special::Sse => b"sse".to_vec(),
                Special::Json => b"application/json".to_vec(),
                Special::Rfc3339 => b"2030-01-02T03:04:05Z".to_vec(),
            },
        }
    }
}

fn percent_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        out.push_str(&format!("%{b:02X}"));
    }
    out
}

fuzz_target!(|input: Input| {
    let method = match &input.method {
        MethodChoice::Get => Method::GET,
        MethodChoice::Put => Method::PUT,
        MethodChoice::Post => Method::POST,
        MethodChoice::Head => Method::HEAD,
        MethodChoice::Delete => Method::DELETE,
        MethodChoice::Options => Method::OPTIONS,
        MethodChoice::Patch => Method::PATCH,
        MethodChoice::Other(m) => match Method::from_bytes(m.as_bytes()) {
            Ok(m) => m,
            Err(_) => return,
        },
    };
    let path = match &input.path {
        PathChoice::Stream(name) => format!("{PREFIX}{name}"),
        PathChoice::Ds(api) => format!("{PREFIX}__ds/{api}"),
        PathChoice::Subscription(id, None) => format!("{PREFIX}__ds/subscriptions/{id}"),
        PathChoice::Subscription(id, Some(tail)) => {
            format!("{PREFIX}__ds/subscriptions/{id}/{tail}")
        }
        PathChoice::Health => "/healthz".to_string(),
        PathChoice::FleetHint => "/v1/fleet/hint".to_string(),
        PathChoice::FleetPeer(tails) => if *tails {
            "/v1/fleet/tails"
        } else {
            "/v1/fleet/appended"
        }
        .to_string(),
        PathChoice::Raw(p) => p.clone(),
        PathChoice::Product(name, suffix) => {
            let suffix = match suffix {
                ProductSuffix::None => String::new(),
                ProductSuffix::Records => "/records".into(),
                ProductSuffix::Batch => "/records:batch".into(),
                ProductSuffix::LongPoll => "/records:long-poll".into(),
                ProductSuffix::Sse => "/records:sse".into(),
                ProductSuffix::Seal => ":seal".into(),
                ProductSuffix::Scan => ":scan".into(),
                ProductSuffix::Watch(w) => format!("/watches/{w}"),
                ProductSuffix::Consumer(c, verb) => {
                    let verb = ["", ":pull", ":settle", ":other"][*verb as usize % 4];
                    format!("/consumers/{c}{verb}")
                }
                ProductSuffix::Other(o) => o.clone(),
            };
            format!("{}/{name}{suffix}", product::PREFIX)
        }
    };
    let query = match (&input.query, &input.raw_query) {
        (Some(pairs), _) => Some(
            pairs
                .iter()
                .map(|(k, v)| {
                    let k = match k {
                        QueryKey::Offset => "offset".to_string(),
                        QueryKey::Live => "live".to_string(),
                        QueryKey::Cursor => "cursor".to_string(),
                        QueryKey::Other(o) => o.clone(),
                    };
                    format!("{k}={}", String::from_utf8_lossy(&v.bytes(&input.tokens)))
                })
                .collect::<Vec<_>>()
                .join("&"),
        ),
        (None, raw) => raw.clone(),
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &input.headers {
        let name = match name {
            HeaderChoice::Key => "stream-encryption-key",
            HeaderChoice::ContentType => "content-type",
            HeaderChoice::Ttl => "stream-ttl",
            HeaderChoice::ExpiresAt => "stream-expires-at",
            HeaderChoice::ForkedFrom => "stream-forked-from",
            HeaderChoice::ForkOffset => "stream-fork-offset",
            HeaderChoice::ForkSubOffset => "stream-fork-sub-offset",
            HeaderChoice::Closed => "stream-closed",
            HeaderChoice::StreamSeq => "stream-seq",
            HeaderChoice::ProducerId => "producer-id",
            HeaderChoice::ProducerEpoch => "producer-epoch",
            HeaderChoice::ProducerSeq => "producer-seq",
            HeaderChoice::Authorization => "authorization",
            HeaderChoice::Host => "host",
            HeaderChoice::IfNoneMatch => "if-none-match",
            HeaderChoice::FleetFrom => "strata-fleet-from",
            HeaderChoice::FleetReleased => "strata-fleet-released",
            HeaderChoice::ProductKey => "prisma-encryption-key",
            HeaderChoice::ConsumerVersion => "prisma-consumer-version",
            HeaderChoice::Other(o) => o.as_str(),
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value.bytes(&input.tokens)),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    let dev_key = StreamKey::from_bytes([7; 32]);
    let mut tenancy = Tenancy::open();
    let mut tokens = Vec::new();
    for (i, token) in input.tokens.iter().enumerate() {
        if tenancy.add(&format!("p{i}"), token).is_ok() {
            tokens.push(token.clone());
        }
    }
    let config = ParseConfig {
        tenancy: &tenancy,
        dev_default_key: input.dev_key.then_some(&dev_key),
    };

    let command = match parse_request(config, &method, &path, query.as_deref(), &headers) {
        Ok(command) => command,
        Err(e) => return check_error(e),
    };
    let unauthenticated = matches!(
        command,
        Command::Preflight
            | Command::Health
            | Command::Root
            | Command::Metrics
            | Command::Debug(_)
            | Command::FleetHint(_)
            | Command::FleetPeer(_)
    ) || matches!(&command, Command::Subscriptions { project: None, .. });
    if !tokens.is_empty() && !unauthenticated {
        let bearer = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        assert!(bearer.is_some_and(|b| tokens.iter().any(|t| t == b)));
    }
    match command {
        Command::Preflight => assert_eq!(method, Method::OPTIONS),
        Command::Health => {
            assert_eq!(path, "/healthz");
            assert!(method == Method::GET || method == Method::HEAD);
        }
        Command::Root => {
            assert_eq!(path, "/");
            assert!(method == Method::GET || method == Method::HEAD);
        }
        Command::Metrics => {
            assert_eq!(path, "/metrics");
            assert!(method == Method::GET || method == Method::HEAD);
        }
        Command::Subscriptions { project, route } => {
            assert!(path.starts_with(&format!("{PREFIX}__ds/")));
            // Only a callback token's routes go without the caller's project.
            assert_eq!(project.is_none(), route.token_authenticated());
        }
        Command::Debug(_) => {
            assert!(path == "/debug/shards" || path == "/debug/config");
            assert!(method == Method::GET || method == Method::HEAD);
        }
        Command::FleetPeer(_) => {
            assert_eq!(method, Method::POST);
            assert!(path.starts_with("/v1/fleet/"));
        }
        Command::FleetHint(hint) => {
            assert_eq!(method, Method::POST);
            assert_eq!(path, "/v1/fleet/hint");
            if let Some(hint) = hint {
                assert!(hint.shards.len() <= 4096);
            }
        }
        Command::Product { route, .. } => {
            assert!(
                path.starts_with(product::PREFIX)
                    || path.starts_with(product::usage::PROJECTS_PREFIX)
            );
            if let ProductRoute::Collection { name, .. } = route {
                assert!(!name.is_empty() && name.len() <= product::NAME_BYTES_MAX);
                assert!(!name.chars().any(char::is_control) && !name.starts_with("__"));
                assert_eq!(
                    product::collection_name(&percent_escape(&name)).ok(),
                    Some(name.clone())
                );
            }
        }
        Command::Stream { name, op, .. } => {
            assert!(!name.is_empty() && name.len() <= raw::STREAM_NAME_BYTES_MAX);
            assert!(!name.chars().any(char::is_control));
            assert!(!name.starts_with("__"));
            assert!(name
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."));
            assert_eq!(
                raw::stream_name(&percent_escape(&name)).ok(),
                Some(name.clone())
            );
            check_op(op, &headers, &input.body);
        }
    }
});

fn check_error(e: ApiError) {
    assert!(e.status.is_client_error(), "{e:?}");
    let _ = e.into_response();
}

fn check_op(op: StreamOp, headers: &HeaderMap, body: &[u8]) {
    match op {
        StreamOp::Read(read) => {
            if let Ok(query) = &read.query {
                if let Some(OffsetParam::At(o)) = query.offset {
                    assert_eq!(OffsetParam::parse(&o.to_string()), Ok(OffsetParam::At(o)));
                }
                assert!(query.live.is_none() || query.offset.is_some());
            }
            if let Err(e) = read.query {
                check_error(e);
            }
            if let Err(e) = read.key {
                check_error(e);
            }
        }
        StreamOp::Create(create) => {
            assert!(create.expiry.ttl_seconds.is_none() || create.expiry.expires_at.is_none());
            if create.fork.is_none() {
                assert!(headers.get("stream-fork-offset").is_none());
                assert!(headers.get("stream-fork-sub-offset").is_none());
            }
            if let Some(fork) = &create.fork {
                assert!(!fork.source.is_empty());
            }
        }
        StreamOp::Append(append) => {
            assert!(append.stream_seq.as_ref().is_none_or(|s| s.len() <= 256));
            if let Some(p) = &append.producer {
                assert!(!p.id.is_empty() && p.id.len() <= 256);
                assert!(p.epoch < 1 << 53 && p.seq < 1 << 53);
            }
            match append.spec(Bytes::copy_from_slice(body)) {
                Ok(spec) => {
                    assert!(!spec.body.is_empty() || spec.close);
                    assert!(spec.body.is_empty() || spec.content_type.is_some());
                    assert_eq!(spec.producer.is_some(), append.producer.is_some());
                    if let Some(claim) = &spec.producer {
                        assert_eq!(claim.digest, append.digest(body));
                    }
                }
                Err(e) => check_error(e),
            }
        }
        StreamOp::Head | StreamOp::Delete => {}
    }
}
