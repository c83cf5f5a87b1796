//! `docs/openapi.yaml` against the real binary: every documented operation is
//! exercised with real requests, every answer's status must be one the
//! document lists for that operation, documented JSON bodies (errors above
//! all) must have the documented shape, and an error's code must be one of
//! the response's `x-error-codes`. Every documented status and error code of
//! every operation must also be produced at least once, except the few that
//! only a failing store or an overloaded shard can cause ([`UNPROVOKED`]).
//! `outcome_unknown` is produced by a server whose store answers every PUT
//! later than the server's append deadline.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::product::{producer, Answer, Api, BYTES_DOC, JSON_DOC, OTHER_KEY};
use common::{client, free_port, Server, DEV_KEY};
use reqwest::header::HeaderValue;
use reqwest::{Method, RequestBuilder};
use serde_json::{json, Value};
use strata_server::service::media_type;

const TOKEN: &str = "openapi-test-token-of-alpha";
/// The server's `--max-body-bytes` here (small, to provoke 413 cheaply).
const BODY_BYTES_MAX: usize = 64 << 10;
/// Error codes only a failing store, a moving shard, an overloaded shard or
/// a broken upload produce: documented, not provoked here.
const UNPROVOKED: [&str; 4] = ["rate_limited", "internal", "unavailable", "bad_request"];

/// The (path, method) pairs this test knows how to exercise.
const KNOWN: [(&str, &str); 24] = [
    ("/", "get"),
    ("/metrics", "get"),
    ("/healthz", "get"),
    ("/v1/streams", "get"),
    ("/v1/streams/{name}", "put"),
    ("/v1/streams/{name}", "get"),
    ("/v1/streams/{name}", "delete"),
    ("/v1/streams/{name}:seal", "post"),
    ("/v1/streams/{name}:scan", "get"),
    ("/v1/streams/{name}/watches", "get"),
    ("/v1/streams/{name}/watches/{watch}", "get"),
    ("/v1/streams/{name}/watches/{watch}/keys/{watchKey}", "get"),
    ("/v1/streams/{name}/records", "post"),
    ("/v1/streams/{name}/records", "get"),
    ("/v1/streams/{name}/records:batch", "post"),
    ("/v1/streams/{name}/records:long-poll", "get"),
    ("/v1/streams/{name}/records:sse", "get"),
    ("/v1/streams/{name}/consumers/{consumer}", "put"),
    ("/v1/streams/{name}/consumers/{consumer}", "get"),
    ("/v1/streams/{name}/consumers/{consumer}", "delete"),
    ("/v1/streams/{name}/consumers/{consumer}:pull", "post"),
    ("/v1/streams/{name}/consumers/{consumer}:settle", "post"),
    ("/v1/streams/{name}/usage", "get"),
    ("/v1/projects/{project}/usage", "get"),
];

const USAGE: &str = "/v1/streams/{name}/usage";
const PROJECT_USAGE: &str = "/v1/projects/{project}/usage";

const SEAL: &str = "/v1/streams/{name}:seal";
const SCAN: &str = "/v1/streams/{name}:scan";
const WATCHES: &str = "/v1/streams/{name}/watches";
const WATCH: &str = "/v1/streams/{name}/watches/{watch}";
const OBSERVE: &str = "/v1/streams/{name}/watches/{watch}/keys/{watchKey}";
const COLLECTION: &str = "/v1/streams/{name}";
const RECORDS: &str = "/v1/streams/{name}/records";
const BATCH: &str = "/v1/streams/{name}/records:batch";
const LONG_POLL: &str = "/v1/streams/{name}/records:long-poll";
const SSE: &str = "/v1/streams/{name}/records:sse";
const READS: [&str; 3] = [RECORDS, LONG_POLL, SSE];
const CONSUMER: &str = "/v1/streams/{name}/consumers/{consumer}";
const PULL: &str = "/v1/streams/{name}/consumers/{consumer}:pull";
const SETTLE: &str = "/v1/streams/{name}/consumers/{consumer}:settle";

/// The parsed document.
struct Spec {
    doc: Value,
}

impl Spec {
    fn load() -> Spec {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.yaml");
        let text = std::fs::read_to_string(path).expect("docs/openapi.yaml");
        let doc: Value = serde_norway::from_str(&text).expect("docs/openapi.yaml is YAML");
        assert_eq!(doc["openapi"], "3.1.0");
        Spec { doc }
    }

    /// Follows `$ref`s (local ones only).
    fn resolve<'a>(&'a self, mut value: &'a Value) -> &'a Value {
        for _ in 0..16 {
            let Some(target) = value.get("$ref").and_then(Value::as_str) else {
                return value;
            };
            let pointer = target.strip_prefix('#').expect("a local $ref");
            value = self
                .doc
                .pointer(pointer)
                .unwrap_or_else(|| panic!("dangling $ref {target}"));
        }
        panic!("$ref chain too long");
    }

    /// Every documented (path, method).
    fn operations(&self) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for (path, item) in self.doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys() {
                if [
                    "get", "put", "post", "delete", "patch", "head", "options", "trace",
                ]
                .contains(&method.as_str())
                {
                    out.insert((path.clone(), method.clone()));
                }
            }
        }
        out
    }

    fn operation(&self, path: &str, method: &str) -> &Value {
        let op = &self.doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not documented");
        op
    }

    /// The documented responses of an operation: status → response.
    fn responses(&self, path: &str, method: &str) -> BTreeMap<u16, &Value> {
        self.operation(path, method)["responses"]
            .as_object()
            .expect("responses")
            .iter()
            .map(|(status, r)| {
                let status: u16 = status.parse().expect("statuses are numbers");
                (status, self.resolve(r))
            })
            .collect()
    }

    /// Checks `value` against a JSON schema (the keywords the document uses).
    fn validate(&self, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
        let schema = self.resolve(schema);
        if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
            let matching = options
                .iter()
                .filter(|s| self.validate(s, value, at).is_ok())
                .count();
            if matching != 1 {
                return Err(format!("{at}: {matching} oneOf branches match {value}"));
            }
        }
        if let Some(c) = schema.get("const") {
            if c != value {
                return Err(format!("{at}: {value} is not {c}"));
            }
        }
        if let Some(types) = schema.get("type") {
            let types: Vec<&str> = match types {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => return Err(format!("{at}: bad type keyword")),
            };
            let ok = types.iter().any(|t| match *t {
                "object" => value.is_object(),
                "array" => value.is_array(),
                "string" => value.is_string(),
                "integer" => value.is_u64() || value.is_i64(),
                "number" => value.is_number(),
                "boolean" => value.is_boolean(),
                "null" => value.is_null(),
                _ => false,
            });
            if !ok {
                return Err(format!("{at}: {value} is not of type {types:?}"));
            }
        }
        if let Some(object) = value.as_object() {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = required.as_str().expect("required names");
                if !object.contains_key(name) {
                    return Err(format!("{at}: missing {name:?} in {value}"));
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            for (k, v) in object {
                match properties.and_then(|p| p.get(k)) {
                    Some(s) => self.validate(s, v, &format!("{at}.{k}"))?,
                    None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        return Err(format!("{at}: undocumented property {k:?} in {value}"))
                    }
                    None => {}
                }
            }
        }
        if let Some(items) = value.as_array() {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    self.validate(s, item, &format!("{at}[{i}]"))?;
                }
            }
            let len = items.len() as u64;
            if schema["minItems"].as_u64().is_some_and(|m| len < m)
                || schema["maxItems"].as_u64().is_some_and(|m| len > m)
            {
                return Err(format!("{at}: {len} items out of bounds"));
            }
        }
        if let Some(n) = value.as_i64() {
            if schema["minimum"].as_i64().is_some_and(|m| n < m)
                || schema["maximum"].as_i64().is_some_and(|m| n > m)
            {
                return Err(format!("{at}: {n} out of bounds"));
            }
        }
        Ok(())
    }
}

/// Sends requests, checks each answer against the document, and records
/// which statuses and codes each operation produced.
struct Checker {
    spec: Spec,
    http: reqwest::Client,
    base: String,
    seen: BTreeMap<(String, String), BTreeSet<(u16, String)>>,
}

impl Checker {
    fn url(&self, template: &str, name: &str) -> String {
        let path = template
            .replace("{name}", name)
            .replace("{consumer}", "w")
            .replace("{project}", "alpha");
        format!("{}{path}", self.base)
    }

    /// A request with the token and the stream key.
    fn req(&self, method: Method, template: &str, name: &str) -> RequestBuilder {
        self.bare(method, template, name)
            .header("prisma-encryption-key", DEV_KEY)
    }

    /// A request with the token only.
    fn bare(&self, method: Method, template: &str, name: &str) -> RequestBuilder {
        self.http
            .request(method, self.url(template, name))
            .bearer_auth(TOKEN)
    }

    /// Sends, checks against the document, and asserts the expected status
    /// and error code (`""` for a success).
    async fn expect(
        &mut self,
        template: &str,
        builder: RequestBuilder,
        status: u16,
        code: &str,
    ) -> Answer {
        let request = builder.build().expect("request");
        let method = request.method().as_str().to_ascii_lowercase();
        let what = format!("{} {}", request.method(), request.url());
        let answer = Answer::from(self.http.execute(request).await.expect("request sent")).await;
        let got_code = self.check(template, &method, &answer, &what);
        assert_eq!(
            (answer.status, got_code.as_str()),
            (status, code),
            "{what}: {}",
            answer.text()
        );
        answer
    }

    /// Checks one answer against the operation's documented responses and
    /// returns its error code (`""` when it has none).
    fn check(&mut self, template: &str, method: &str, answer: &Answer, what: &str) -> String {
        let responses = self.spec.responses(template, method);
        let Some(response) = responses.get(&answer.status) else {
            panic!(
                "{what}: status {} is not documented for {method} {template} (documented: {:?}); body {}",
                answer.status,
                responses.keys().collect::<Vec<_>>(),
                answer.text()
            );
        };
        // Documented headers: required ones present, constants equal.
        if let Some(headers) = response.get("headers").and_then(Value::as_object) {
            for (name, header) in headers {
                let header = self.spec.resolve(header);
                let got = answer.header(name);
                if header["required"] == true {
                    assert!(
                        got.is_some(),
                        "{what}: header {name} is documented as required"
                    );
                }
                if let (Some(got), Some(c)) = (got, header["schema"]["const"].as_str()) {
                    assert_eq!(got, c, "{what}: header {name}");
                }
            }
        }
        let mut code = String::new();
        match response.get("content").and_then(Value::as_object) {
            None => assert!(
                answer.body.is_empty() || template == "/healthz",
                "{what}: a documented empty answer has a body: {}",
                answer.text()
            ),
            Some(content) => {
                let media = media_type(answer.header("content-type").unwrap_or(""));
                // The exact media type first, then ranges (`type/*`, `*/*`).
                let range = |documented: &str| {
                    documented == "*/*"
                        || documented
                            .strip_suffix("/*")
                            .is_some_and(|t| media.starts_with(&format!("{t}/")))
                };
                let entry = content
                    .get(&media)
                    .or_else(|| {
                        content
                            .iter()
                            .find(|(documented, _)| range(documented))
                            .map(|(_, entry)| entry)
                    })
                    .unwrap_or_else(|| {
                        panic!(
                            "{what}: content type {media:?} is not documented for {}",
                            answer.status
                        )
                    });
                if media == "application/json" {
                    let body: Value = serde_json::from_slice(&answer.body)
                        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", answer.text()));
                    if let Err(e) = self.spec.validate(&entry["schema"], &body, "body") {
                        panic!("{what}: the body does not match the documented schema: {e}");
                    }
                    if let Some(codes) = response.get("x-error-codes").and_then(Value::as_array) {
                        code = body["error"]["code"].as_str().unwrap_or("").to_string();
                        assert!(
                            codes.iter().any(|c| c == code.as_str()),
                            "{what}: code {code:?} is not among {} documented codes {codes:?}",
                            answer.status
                        );
                        let retryable = matches!(answer.status, 429 | 503);
                        assert_eq!(body["error"]["retryable"], retryable, "{what}");
                    }
                }
            }
        }
        if template != "/healthz" {
            assert_eq!(answer.header("cache-control"), Some("no-store"), "{what}");
        }
        self.seen
            .entry((template.to_string(), method.to_string()))
            .or_default()
            .insert((answer.status, code.clone()));
        code
    }

    /// The name, query and removed-input errors every `{name}` route has.
    async fn generic_400(&mut self, template: &str, method: Method, name: &str) {
        let with_body = |b: RequestBuilder| {
            if method == Method::POST {
                b.body("1")
            } else {
                b
            }
        };
        let url = self.url(template, name);
        let cases: [(RequestBuilder, &str); 5] = [
            (
                self.req(method.clone(), template, name)
                    .header("stream-ttl", "60"),
                "unknown_field",
            ),
            (
                self.http
                    .request(method.clone(), format!("{url}?colour=red"))
                    .bearer_auth(TOKEN)
                    .header("prisma-encryption-key", DEV_KEY),
                "unknown_parameter",
            ),
            (
                self.http
                    .request(method.clone(), format!("{url}?colour=a&colour=b"))
                    .bearer_auth(TOKEN)
                    .header("prisma-encryption-key", DEV_KEY),
                "duplicate_parameter",
            ),
            (
                self.http
                    .request(method.clone(), format!("{url}?colour=%FF"))
                    .bearer_auth(TOKEN)
                    .header("prisma-encryption-key", DEV_KEY),
                "invalid_parameter",
            ),
            (self.req(method.clone(), template, "a//b"), "invalid_name"),
        ];
        for (builder, code) in cases {
            self.expect(template, with_body(builder), 400, code).await;
        }
    }

    /// The stream-key header errors of a route that needs the key.
    async fn key_400(&mut self, template: &str, method: Method, name: &str, body: &'static str) {
        let base = || self.bare(method.clone(), template, name).body(body);
        let cases = [
            (base(), "missing_key"),
            (
                base().header("prisma-encryption-key", "too-short"),
                "invalid_key",
            ),
            (
                base().header(
                    "prisma-encryption-key",
                    HeaderValue::from_bytes(b"\xffkey").unwrap(),
                ),
                "invalid_header",
            ),
        ];
        for (builder, code) in cases {
            self.expect(template, builder, 400, code).await;
        }
    }

    /// 401 without a token.
    async fn unauthorized(&mut self, template: &str, method: Method, name: &str) {
        let builder = self
            .http
            .request(method, self.url(template, name))
            .header("prisma-encryption-key", DEV_KEY);
        self.expect(template, builder, 401, "unauthorized").await;
    }
}

/// Every documented answer of the usage operations (collection `j` exists,
/// `src` is gone, `missing` never was).
async fn usage_operations(c: &mut Checker) {
    c.generic_400(USAGE, Method::GET, "j").await;
    c.unauthorized(USAGE, Method::GET, "j").await;
    let usage = c
        .expect(USAGE, c.bare(Method::GET, USAGE, "j"), 200, "")
        .await;
    assert!(usage.json()["records"].as_u64().unwrap() > 0);
    c.expect(
        USAGE,
        c.bare(Method::GET, USAGE, "missing"),
        404,
        "not_found",
    )
    .await;
    c.expect(USAGE, c.bare(Method::GET, USAGE, "src"), 410, "gone")
        .await;
    let project = c
        .expect(
            PROJECT_USAGE,
            c.bare(Method::GET, PROJECT_USAGE, ""),
            200,
            "",
        )
        .await;
    assert!(project.json()["collections"].as_u64().unwrap() >= 2);
    let other = c
        .http
        .get(format!("{}/v1/projects/beta/usage", c.base))
        .bearer_auth(TOKEN);
    c.expect(PROJECT_USAGE, other, 404, "not_found").await;
    let query = c
        .http
        .get(format!("{}/v1/projects/alpha/usage?x=1", c.base))
        .bearer_auth(TOKEN);
    c.expect(PROJECT_USAGE, query, 400, "unknown_parameter")
        .await;
    c.unauthorized(PROJECT_USAGE, Method::GET, "").await;
}

/// Every documented answer of the consumer-group operations (collection
/// `j` exists with the default key, `src` is gone, `missing` never was).
async fn consumer_operations(c: &mut Checker) {
    for (template, method, key) in [
        (CONSUMER, Method::PUT, true),
        (CONSUMER, Method::GET, false),
        (CONSUMER, Method::DELETE, false),
        (PULL, Method::POST, true),
        (SETTLE, Method::POST, true),
    ] {
        c.generic_400(template, method.clone(), "j").await;
        c.unauthorized(template, method.clone(), "j").await;
        if key {
            c.key_400(template, method.clone(), "j", "{}").await;
            let wrong = c
                .bare(method.clone(), template, "j")
                .header("prisma-encryption-key", OTHER_KEY)
                .body("{}");
            c.expect(template, wrong, 403, "wrong_key").await;
        }
        let bad_name = c
            .http
            .request(
                method.clone(),
                format!(
                    "{}/v1/streams/j/consumers/a%01b{}",
                    c.base,
                    &template[CONSUMER.len()..]
                ),
            )
            .bearer_auth(TOKEN)
            .header("prisma-encryption-key", DEV_KEY)
            .body("{}");
        c.expect(template, bad_name, 400, "invalid_consumer_name")
            .await;
        let on = |c: &Checker, name: &str| {
            c.req(method.clone(), template, name)
                .header("prisma-consumer-version", "1")
                .body("{}")
        };
        c.expect(template, on(c, "missing"), 404, "not_found").await;
        c.expect(template, on(c, "src"), 410, "gone").await;
        let absent = if template == CONSUMER {
            "unknown_consumer"
        } else {
            "consumer_not_found"
        };
        if method != Method::PUT {
            c.expect(template, on(c, "j"), 404, absent).await;
        }
    }
    // Configure: created, found, conflicts, bad documents, dead-letter checks.
    let put = |c: &Checker, doc: &str| c.req(Method::PUT, CONSUMER, "j").body(doc.to_string());
    let created = c
        .expect(CONSUMER, put(c, r#"{"visibilityTimeoutMs":1000}"#), 201, "")
        .await;
    let version = created
        .header("prisma-consumer-version")
        .unwrap()
        .to_string();
    c.expect(CONSUMER, put(c, r#"{"visibilityTimeoutMs":1000}"#), 200, "")
        .await;
    c.expect(CONSUMER, put(c, "{}"), 409, "consumer_config_conflict")
        .await;
    c.expect(
        CONSUMER,
        put(c, r#"{"maxAttempts":0}"#),
        400,
        "invalid_config",
    )
    .await;
    for (target, code) in [
        ("nowhere", "unknown_dead_letter_stream"),
        ("c-sealed", "dead_letter_sealed"),
        ("c-other", "dead_letter_key_mismatch"),
    ] {
        if target == "c-sealed" {
            let create = c.req(Method::PUT, COLLECTION, target).body(JSON_DOC);
            assert_eq!(create.send().await.unwrap().status(), 201);
            let seal = c.req(Method::POST, SEAL, target).body("{}");
            assert_eq!(seal.send().await.unwrap().status(), 200);
        }
        if target == "c-other" {
            let create = c
                .bare(Method::PUT, COLLECTION, target)
                .header("prisma-encryption-key", OTHER_KEY)
                .body(JSON_DOC);
            assert_eq!(create.send().await.unwrap().status(), 201);
        }
        let doc = json!({"deadLetterStream": target}).to_string();
        let other = c
            .req(Method::PUT, "/v1/streams/{name}/consumers/w2", "j")
            .body(doc);
        let answer = Answer::from(other.send().await.unwrap()).await;
        // Checked against the operation's document like every other answer.
        let code_got = c.check(CONSUMER, "put", &answer, "dead-letter check");
        assert_eq!((answer.status, code_got.as_str()), (400, code));
    }
    c.expect(CONSUMER, c.bare(Method::GET, CONSUMER, "j"), 200, "")
        .await;
    // Pull and settle.
    let append = c
        .req(Method::POST, RECORDS, "j")
        .header("prisma-routing-key", "k")
        .header("content-type", "application/json")
        .body(r#"{"a":1}"#);
    assert_eq!(append.send().await.unwrap().status(), 200);
    let pull = |c: &Checker, body: &str| c.req(Method::POST, PULL, "j").body(body.to_string());
    let pulled = c.expect(PULL, pull(c, r#"{"max":5}"#), 200, "").await;
    let token = pulled.json()["messages"][0]["leaseToken"]
        .as_str()
        .expect("a message")
        .to_string();
    c.expect(PULL, pull(c, r#"{"max":0}"#), 400, "invalid_body")
        .await;
    let settle = |c: &Checker, body: String| c.req(Method::POST, SETTLE, "j").body(body);
    let body = json!({"extends":[{"leaseToken": token, "visibilityMs": 60000}]}).to_string();
    let answer = c.expect(SETTLE, settle(c, body), 200, "").await;
    assert_eq!(answer.json()["extended"], 1);
    c.expect(SETTLE, settle(c, "[]".into()), 400, "invalid_body")
        .await;
    // Delete: the version is required and must match; a pull waiting on a
    // deleted consumer answers 409 `consumer_deleted`.
    let delete = |c: &Checker, v: Option<&str>| {
        let r = c.bare(Method::DELETE, CONSUMER, "j");
        match v {
            Some(v) => r.header("prisma-consumer-version", v),
            None => r,
        }
    };
    c.expect(CONSUMER, delete(c, None), 428, "missing_consumer_version")
        .await;
    c.expect(
        CONSUMER,
        delete(c, Some("x")),
        400,
        "invalid_consumer_version",
    )
    .await;
    c.expect(
        CONSUMER,
        delete(c, Some("999")),
        409,
        "consumer_version_conflict",
    )
    .await;
    // A pull that started before it answers 409 `consumer_deleted`; one
    // that started after, 404 (then the consumer is made again and the race
    // run once more).
    let mut version = version;
    for round in 0.. {
        assert!(round < 20, "no pull was ever parked before its delete");
        let waiting = tokio::spawn(pull(c, r#"{"waitMs":20000}"#).send());
        tokio::task::yield_now().await;
        c.expect(CONSUMER, delete(c, Some(&version)), 204, "").await;
        let answer = Answer::from(waiting.await.unwrap().unwrap()).await;
        let code = c.check(PULL, "post", &answer, "a pull across a delete");
        if (answer.status, code.as_str()) == (409, "consumer_deleted") {
            break;
        }
        assert_eq!((answer.status, code.as_str()), (404, "consumer_not_found"));
        let again = c
            .expect(CONSUMER, put(c, r#"{"visibilityTimeoutMs":1000}"#), 201, "")
            .await;
        version = again.header("prisma-consumer-version").unwrap().to_string();
    }
}

/// A scan cursor of collection `name` (one with watches: its metadata shows
/// the epoch) whose time is up.
async fn expired_scan_cursor(c: &Checker, name: &str) -> String {
    use strata_server::service::product::scan_cursor::{ScanCursor, ScanScope};
    let meta = Answer::from(c.bare(Method::GET, COLLECTION, name).send().await.unwrap()).await;
    let epoch = common::product::epoch_of(&meta.json());
    let key = strata_segments::StreamKey::parse(DEV_KEY).unwrap();
    let scope = ScanScope {
        project: "alpha",
        epoch,
        key: &key,
    };
    scope.encode(&ScanCursor {
        end: 1,
        position: 0,
        expires_ms: 1,
    })
}

/// A capability for watch `w` of collection `name` (created with a watch
/// `w` on `/a`) and the watch key of `{"a": 1}`, valid for a minute.
#[allow(clippy::disallowed_methods)] // a client signs with its wall clock
async fn watch_capability(c: &Checker, name: &str) -> (String, String) {
    use strata_server::service::product::config::WatchDef;
    use strata_server::service::product::watch_cap::{CapabilityScope, WaitSigKey};
    use strata_server::service::product::watch_keys::{definition_id, watch_key};
    let meta = Answer::from(c.bare(Method::GET, COLLECTION, name).send().await.unwrap()).await;
    let epoch = common::product::epoch_of(&meta.json());
    let def = WatchDef {
        name: "w".into(),
        fields: vec!["/a".into()],
    };
    let key = watch_key(&definition_id(&epoch, &def), &def, &json!({"a": 1})).unwrap();
    let stream_key = strata_segments::StreamKey::parse(DEV_KEY).unwrap();
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let cap = CapabilityScope {
        project: "alpha",
        collection: name,
        epoch: &epoch,
        watch: "w",
        key,
    }
    .sign(&WaitSigKey::derive(&epoch, stream_key.expose()), now_s + 60);
    (cap, key.hex())
}

#[tokio::test]
async fn every_documented_operation_answers_as_documented() {
    let spec = Spec::load();
    // The document and this test know the same operations.
    let documented = spec.operations();
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(p, m)| (p.to_string(), m.to_string()))
        .collect();
    assert_eq!(
        documented, known,
        "docs/openapi.yaml and tests/openapi.rs must list the same operations"
    );

    let dir = tempfile::tempdir().unwrap();
    let max_body = BODY_BYTES_MAX.to_string();
    let server = Server::start(
        dir.path().to_str().unwrap(),
        free_port(),
        &[
            "--project-token",
            &format!("alpha:{TOKEN}"),
            "--max-body-bytes",
            &max_body,
        ],
    )
    .await;
    let mut c = Checker {
        spec,
        http: client(),
        base: server.base.clone(),
        seen: BTreeMap::new(),
    };

    // /healthz
    let health = c.http.get(format!("{}/healthz", c.base));
    assert_eq!(c.expect("/healthz", health, 200, "").await.text(), "ok\n");
    let root = c.http.get(format!("{}/", c.base));
    assert_eq!(c.expect("/", root, 200, "").await.json()["name"], "strata");
    let metrics = c.http.get(format!("{}/metrics", c.base));
    assert!(c
        .expect("/metrics", metrics, 200, "")
        .await
        .text()
        .ends_with("# EOF\n"));

    // ------------------------------------------------------------ collections
    let watches = r#"{"format":{"kind":"json"},"expiry":{"idle":"1d"},"watches":[{"name":"w","fields":["/a"]}]}"#;
    c.expect(
        COLLECTION,
        c.req(Method::PUT, COLLECTION, "j").body(watches),
        201,
        "",
    )
    .await;
    c.expect(
        COLLECTION,
        c.req(Method::PUT, COLLECTION, "j").body(watches),
        200,
        "",
    )
    .await;
    c.expect(
        COLLECTION,
        c.req(Method::PUT, COLLECTION, "b").body(BYTES_DOC),
        201,
        "",
    )
    .await;
    c.expect(
        COLLECTION,
        c.req(Method::PUT, COLLECTION, "j").body(BYTES_DOC),
        409,
        "config_mismatch",
    )
    .await;
    let other_key = c
        .bare(Method::PUT, COLLECTION, "j")
        .header("prisma-encryption-key", OTHER_KEY)
        .body(watches);
    c.expect(COLLECTION, other_key, 403, "wrong_key").await;
    c.expect(
        COLLECTION,
        c.req(Method::PUT, COLLECTION, "c").body("{}"),
        400,
        "invalid_config",
    )
    .await;
    c.expect(
        COLLECTION,
        c.req(Method::PUT, COLLECTION, "a:pull").body(JSON_DOC),
        404,
        "unknown_route",
    )
    .await;
    c.key_400(COLLECTION, Method::PUT, "c", JSON_DOC).await;
    for method in [Method::PUT, Method::GET, Method::DELETE] {
        c.generic_400(COLLECTION, method.clone(), "j").await;
        c.unauthorized(COLLECTION, method.clone(), "j").await;
        if method != Method::PUT {
            c.expect(
                COLLECTION,
                c.bare(method.clone(), COLLECTION, "missing"),
                404,
                "not_found",
            )
            .await;
            c.expect(
                COLLECTION,
                c.bare(method.clone(), COLLECTION, "j/consumers/c/d"),
                404,
                "unknown_route",
            )
            .await;
        }
    }
    c.expect(COLLECTION, c.bare(Method::GET, COLLECTION, "j"), 200, "")
        .await;
    c.expect(
        COLLECTION,
        c.req(Method::PUT, COLLECTION, "d").body(JSON_DOC),
        201,
        "",
    )
    .await;
    c.expect(COLLECTION, c.bare(Method::DELETE, COLLECTION, "d"), 204, "")
        .await;

    // A deleted collection that a raw fork still reads: 410 gone (409 on create).
    let raw = |method: Method, name: &str| {
        client()
            .request(method, server.url(name))
            .bearer_auth(TOKEN)
            .header("stream-encryption-key", DEV_KEY)
            .header("content-type", "application/json")
    };
    assert_eq!(raw(Method::PUT, "src").send().await.unwrap().status(), 201);
    let fork = raw(Method::PUT, "fk")
        .header("stream-forked-from", "/v1/stream/src")
        .send()
        .await
        .unwrap();
    assert_eq!(fork.status(), 201);
    c.expect(
        COLLECTION,
        c.bare(Method::DELETE, COLLECTION, "src"),
        204,
        "",
    )
    .await;
    c.expect(
        COLLECTION,
        c.bare(Method::GET, COLLECTION, "src"),
        410,
        "gone",
    )
    .await;
    c.expect(
        COLLECTION,
        c.bare(Method::DELETE, COLLECTION, "src"),
        410,
        "gone",
    )
    .await;
    c.expect(
        COLLECTION,
        c.req(Method::PUT, COLLECTION, "src").body(JSON_DOC),
        409,
        "gone",
    )
    .await;

    // ---------------------------------------------------------------- appends
    for template in [RECORDS, BATCH] {
        let batch = template == BATCH;
        let one = if batch { "[1]" } else { "1" };
        c.generic_400(template, Method::POST, "j").await;
        c.unauthorized(template, Method::POST, "j").await;
        c.key_400(template, Method::POST, "j", one).await;
        c.expect(
            template,
            c.req(Method::POST, template, "j").body(one),
            200,
            "",
        )
        .await;
        c.expect(
            template,
            c.req(Method::POST, template, "missing").body(one),
            404,
            "not_found",
        )
        .await;
        c.expect(
            template,
            c.req(Method::POST, template, "src").body(one),
            410,
            "gone",
        )
        .await;
        let wrong = c
            .bare(Method::POST, template, "j")
            .header("prisma-encryption-key", OTHER_KEY)
            .body(one);
        c.expect(template, wrong, 403, "stale_or_wrong_credentials")
            .await;
        let typed = c
            .req(Method::POST, template, "j")
            .header("content-type", "text/plain")
            .body(one);
        c.expect(template, typed, 409, "content_type_mismatch")
            .await;
        let routed = c
            .req(Method::POST, template, "j")
            .header("prisma-routing-key", "r".repeat(1025))
            .body(one);
        c.expect(template, routed, 400, "invalid_routing_key").await;
        let partial = c
            .req(Method::POST, template, "j")
            .header("producer-id", "p")
            .body(one);
        c.expect(template, partial, 400, "invalid_producer").await;
        c.expect(
            template,
            c.req(Method::POST, template, "j").body("{oops"),
            400,
            "invalid_body",
        )
        .await;
        let huge = format!("[\"{}\"]", "x".repeat(BODY_BYTES_MAX));
        c.expect(
            template,
            c.req(Method::POST, template, "j").body(huge),
            413,
            "body_too_large",
        )
        .await;
        // Producers, on their own routing key.
        let id = if batch { "batcher" } else { "writer" };
        let send = |c: &Checker, epoch: u64, seq: u64, body: &'static str| {
            producer(
                c.req(Method::POST, template, "j")
                    .header("prisma-routing-key", "pk")
                    .body(body),
                id,
                epoch,
                seq,
            )
        };
        let (a, b) = if batch { ("[1]", "[2]") } else { ("1", "2") };
        let first = c.expect(template, send(&c, 0, 0, a), 200, "").await;
        let retry = c.expect(template, send(&c, 0, 0, a), 200, "").await;
        assert_eq!(retry.json()["duplicate"], true);
        assert_eq!(retry.json()["cursor"], first.json()["cursor"]);
        c.expect(template, send(&c, 0, 0, b), 409, "producer_sequence_reused")
            .await;
        let gap = c
            .expect(template, send(&c, 0, 5, b), 409, "producer_gap")
            .await;
        assert_eq!(
            gap.json()["error"]["details"],
            json!({"expected": 1, "received": 5})
        );
        c.expect(
            template,
            send(&c, 1, 3, b),
            400,
            "producer_epoch_must_start_at_zero",
        )
        .await;
        c.expect(template, send(&c, 1, 0, b), 200, "").await;
        let stale = c
            .expect(template, send(&c, 0, 1, b), 403, "stale_producer_epoch")
            .await;
        assert_eq!(stale.json()["error"]["details"], json!({"currentEpoch": 1}));
    }
    c.expect(
        RECORDS,
        c.req(Method::POST, RECORDS, "b").body(""),
        400,
        "empty_body",
    )
    .await;
    c.expect(
        RECORDS,
        c.req(Method::POST, RECORDS, "b").body(vec![0u8, 255]),
        200,
        "",
    )
    .await;
    c.expect(
        BATCH,
        c.req(Method::POST, BATCH, "b").body("[1]"),
        405,
        "batch_unsupported_format",
    )
    .await;
    c.expect(
        BATCH,
        c.req(Method::POST, BATCH, "j").body("[]"),
        400,
        "empty_batch",
    )
    .await;
    c.expect(
        BATCH,
        c.req(Method::POST, BATCH, "j").body(r#"{"a":1}"#),
        400,
        "invalid_body",
    )
    .await;
    let too_many = format!("[{}]", vec!["1"; 10_001].join(","));
    c.expect(
        BATCH,
        c.req(Method::POST, BATCH, "j").body(too_many),
        400,
        "batch_too_large",
    )
    .await;

    // ------------------------------------------------------------------ reads
    for template in READS {
        let url = c.url(template, "j");
        let q = |query: &str| format!("{url}?{query}");
        let get = |c: &Checker, url: String| {
            c.http
                .get(url)
                .bearer_auth(TOKEN)
                .header("prisma-encryption-key", DEV_KEY)
        };
        c.generic_400(template, Method::GET, "j").await;
        c.unauthorized(template, Method::GET, "j").await;
        c.key_400(template, Method::GET, "j", "").await;
        let first = if template == RECORDS {
            "maxBytes=4096"
        } else {
            "waitMs=100"
        };
        let page = c.expect(template, get(&c, q(first)), 200, "").await;
        if template == SSE {
            assert!(
                page.text().starts_with("event: data\ndata:[1"),
                "{}",
                page.text()
            );
        } else {
            assert_eq!(page.json()[0], 1);
        }
        c.expect(template, get(&c, q("offset=-1")), 400, "unknown_field")
            .await;
        c.expect(
            template,
            get(&c, q("maxBytes=lots")),
            400,
            "invalid_parameter",
        )
        .await;
        c.expect(
            template,
            get(&c, q("cursor=0000000000000000_0000000000000001")),
            400,
            "invalid_cursor",
        )
        .await;
        let long_key = format!("routingKey={}", "r".repeat(1025));
        c.expect(template, get(&c, q(&long_key)), 400, "invalid_routing_key")
            .await;
        let wrong = c
            .bare(Method::GET, template, "j")
            .header("prisma-encryption-key", OTHER_KEY);
        c.expect(template, wrong, 403, "wrong_key").await;
        c.expect(
            template,
            c.req(Method::GET, template, "missing"),
            404,
            "not_found",
        )
        .await;
        c.expect(template, c.req(Method::GET, template, "src"), 410, "gone")
            .await;
        if template != RECORDS {
            c.expect(
                template,
                get(&c, q("waitMs=soon")),
                400,
                "invalid_parameter",
            )
            .await;
        }
    }
    // ------------------------------------------------------------------ scans
    c.generic_400(SCAN, Method::GET, "j").await;
    c.unauthorized(SCAN, Method::GET, "j").await;
    c.key_400(SCAN, Method::GET, "j", "").await;
    let scan_url = c.url(SCAN, "j");
    let scan_get = |c: &Checker, query: &str| {
        c.http
            .get(format!("{scan_url}?{query}"))
            .bearer_auth(TOKEN)
            .header("prisma-encryption-key", DEV_KEY)
    };
    let page = c.expect(SCAN, scan_get(&c, "maxBytes=4096"), 200, "").await;
    assert_eq!(page.json()[0]["value"], 1);
    let bytes_page = c.expect(SCAN, c.req(Method::GET, SCAN, "b"), 200, "").await;
    assert_eq!(bytes_page.json()[0]["valueB64"], "AP8=");
    c.expect(SCAN, scan_get(&c, "offset=1"), 400, "unknown_field")
        .await;
    c.expect(
        SCAN,
        scan_get(&c, "maxBytes=lots"),
        400,
        "invalid_parameter",
    )
    .await;
    c.expect(
        SCAN,
        scan_get(&c, "cursor=beginning"),
        400,
        "invalid_cursor",
    )
    .await;
    let wrong = c
        .bare(Method::GET, SCAN, "j")
        .header("prisma-encryption-key", OTHER_KEY);
    c.expect(SCAN, wrong, 403, "wrong_key").await;
    c.expect(SCAN, c.req(Method::GET, SCAN, "missing"), 404, "not_found")
        .await;
    c.expect(SCAN, c.req(Method::GET, SCAN, "src"), 410, "gone")
        .await;
    let expired = expired_scan_cursor(&c, "j").await;
    c.expect(
        SCAN,
        scan_get(&c, &format!("cursor={expired}")),
        410,
        "scan_expired",
    )
    .await;
    // -------------------------------------------------------------- consumers
    consumer_operations(&mut c).await;
    usage_operations(&mut c).await;
    // ---------------------------------------------------------------- watches
    for template in [WATCHES, WATCH] {
        let t = |name: &str| template.replace("{watch}", "w").replace("{name}", name);
        let get = |c: &Checker, name: &str| {
            c.http
                .get(format!("{}{}", c.base, t(name)))
                .bearer_auth(TOKEN)
        };
        let answer = c.expect(template, get(&c, "j"), 200, "").await;
        if template == WATCH {
            assert_eq!(answer.json()["fields"], json!(["/a"]));
        }
        for (builder, code) in [
            (get(&c, "j").header("stream-ttl", "60"), "unknown_field"),
            (
                c.http
                    .get(format!("{}{}?colour=red", c.base, t("j")))
                    .bearer_auth(TOKEN),
                "unknown_parameter",
            ),
            (
                c.http
                    .get(format!("{}{}?colour=a&colour=b", c.base, t("j")))
                    .bearer_auth(TOKEN),
                "duplicate_parameter",
            ),
            (
                c.http
                    .get(format!("{}{}?colour=%FF", c.base, t("j")))
                    .bearer_auth(TOKEN),
                "invalid_parameter",
            ),
            (get(&c, "a//b"), "invalid_name"),
        ] {
            c.expect(template, builder, 400, code).await;
        }
        c.expect(
            template,
            c.http.get(format!("{}{}", c.base, t("j"))),
            401,
            "unauthorized",
        )
        .await;
        c.expect(template, get(&c, "missing"), 404, "not_found")
            .await;
        c.expect(template, get(&c, "src"), 410, "gone").await;
    }
    c.expect(
        WATCH,
        c.http
            .get(format!("{}/v1/streams/j/watches/nope", c.base))
            .bearer_auth(TOKEN),
        404,
        "unknown_watch",
    )
    .await;
    let (cap, watch_key) = watch_capability(&c, "j").await;
    let (base, http) = (c.base.clone(), c.http.clone());
    let observe_url =
        |name: &str, key: &str| format!("{base}/v1/streams/{name}/watches/w/keys/{key}");
    let with_cap = |url: String, cap: &str| {
        http.get(url)
            .header("authorization", format!("Prisma-Watch {cap}"))
    };
    let answer = c
        .expect(
            OBSERVE,
            with_cap(
                format!("{}?timeoutMs=10", observe_url("j", &watch_key)),
                &cap,
            ),
            200,
            "",
        )
        .await;
    assert_eq!(answer.json()["invalidated"], false);
    let url = observe_url("j", &watch_key);
    for (query, code) in [
        ("colour=red", "unknown_parameter"),
        ("colour=a&colour=b", "duplicate_parameter"),
        ("colour=%FF", "invalid_parameter"),
        ("timeoutMs=soon", "invalid_parameter"),
        ("cursor=nope", "invalid_cursor"),
    ] {
        c.expect(OBSERVE, with_cap(format!("{url}?{query}"), &cap), 400, code)
            .await;
    }
    c.expect(
        OBSERVE,
        with_cap(url.clone(), &cap).header("stream-ttl", "1"),
        400,
        "unknown_field",
    )
    .await;
    c.expect(
        OBSERVE,
        with_cap(observe_url("a//b", &watch_key), &cap),
        400,
        "invalid_name",
    )
    .await;
    c.expect(
        OBSERVE,
        with_cap(observe_url("j", "xyz"), &cap),
        400,
        "invalid_watch_key",
    )
    .await;
    c.expect(
        OBSERVE,
        with_cap(url.clone(), "alpha.1.00"),
        403,
        "watch_unauthorized",
    )
    .await;
    c.expect(
        OBSERVE,
        http.get(format!("{url}?cap={cap}&timeoutMs=10")),
        200,
        "",
    )
    .await;
    let binary = c
        .expect(RECORDS, c.req(Method::GET, RECORDS, "b"), 200, "")
        .await;
    assert_eq!(&binary.body[..], &[0u8, 255]);
    let idle = format!("{}?cursor=now&waitMs=50", c.url(LONG_POLL, "j"));
    let idle = c
        .http
        .get(idle)
        .bearer_auth(TOKEN)
        .header("prisma-encryption-key", DEV_KEY);
    c.expect(LONG_POLL, idle, 204, "").await;

    // ------------------------------------------------------------------- seal
    c.generic_400(SEAL, Method::POST, "j").await;
    c.unauthorized(SEAL, Method::POST, "j").await;
    let routing_query = format!("{}?routingKey=k", c.url(SEAL, "j"));
    let routing_query = c.http.post(routing_query).bearer_auth(TOKEN).body("{}");
    c.expect(SEAL, routing_query, 400, "unknown_field").await;
    // Refusals that leave `j` open.
    let seal_j = |c: &Checker| c.req(Method::POST, SEAL, "j");
    c.expect(
        SEAL,
        seal_j(&c).body(r#"{"final":1,"extra":2}"#),
        400,
        "invalid_body",
    )
    .await;
    let long_key = format!(r#"{{"final":1,"routingKey":"{}"}}"#, "r".repeat(1025));
    c.expect(SEAL, seal_j(&c).body(long_key), 400, "invalid_routing_key")
        .await;
    c.expect(
        SEAL,
        seal_j(&c).header("producer-id", "p").body("{}"),
        400,
        "invalid_producer",
    )
    .await;
    let keyless = c.bare(Method::POST, SEAL, "j").body(r#"{"final":1}"#);
    c.expect(SEAL, keyless, 400, "missing_key").await;
    let bad_key = c
        .bare(Method::POST, SEAL, "j")
        .header("prisma-encryption-key", "too-short")
        .body("{}");
    c.expect(SEAL, bad_key, 400, "invalid_key").await;
    let bad_header = c
        .bare(Method::POST, SEAL, "j")
        .header(
            "prisma-encryption-key",
            HeaderValue::from_bytes(b"\xffkey").unwrap(),
        )
        .body("{}");
    c.expect(SEAL, bad_header, 400, "invalid_header").await;
    let wrong = c
        .bare(Method::POST, SEAL, "j")
        .header("prisma-encryption-key", OTHER_KEY)
        .body(r#"{"final":1}"#);
    c.expect(SEAL, wrong, 403, "stale_or_wrong_credentials")
        .await;
    let huge = format!(r#"{{"final":"{}"}}"#, "x".repeat(BODY_BYTES_MAX));
    c.expect(SEAL, seal_j(&c).body(huge), 413, "body_too_large")
        .await;
    c.expect(
        SEAL,
        c.req(Method::POST, SEAL, "b").body(r#"{"final":1}"#),
        400,
        "invalid_body",
    )
    .await;
    c.expect(
        SEAL,
        c.req(Method::POST, SEAL, "missing").body("{}"),
        404,
        "not_found",
    )
    .await;
    c.expect(
        SEAL,
        c.req(Method::POST, SEAL, "src").body("{}"),
        410,
        "gone",
    )
    .await;
    // Producer refusals on the default key of `j` (writer's state: epoch 1).
    let final_seal = |c: &Checker, epoch: u64, seq: u64| {
        producer(seal_j(c).body(r#"{"final":"end"}"#), "sealer", epoch, seq)
    };
    let state = producer(c.req(Method::POST, RECORDS, "j").body("0"), "sealer", 2, 0);
    c.expect(RECORDS, state, 200, "").await;
    c.expect(SEAL, final_seal(&c, 1, 0), 403, "stale_producer_epoch")
        .await;
    c.expect(
        SEAL,
        final_seal(&c, 3, 2),
        400,
        "producer_epoch_must_start_at_zero",
    )
    .await;
    c.expect(SEAL, final_seal(&c, 2, 4), 409, "producer_gap")
        .await;
    assert_eq!(
        c.expect(COLLECTION, c.bare(Method::GET, COLLECTION, "j"), 200, "")
            .await
            .json()["sealed"],
        false,
        "refused seals leave the collection open"
    );
    // A final seal, its retry, a reused sequence, then plain seals.
    let sealed = c.expect(SEAL, final_seal(&c, 2, 1), 200, "").await;
    assert_eq!(sealed.json()["sealed"], true);
    let retry = c.expect(SEAL, final_seal(&c, 2, 1), 200, "").await;
    assert_eq!(retry.json()["duplicate"], true);
    let reused = producer(seal_j(&c).body(r#"{"final":"other"}"#), "sealer", 2, 1);
    c.expect(SEAL, reused, 409, "producer_sequence_reused")
        .await;
    c.expect(SEAL, seal_j(&c).body(r#"{"final":2}"#), 409, "sealed")
        .await;
    let plain = c
        .expect(SEAL, c.bare(Method::POST, SEAL, "j").body("{}"), 200, "")
        .await;
    assert_eq!(plain.json(), json!({"sealed": true}));
    c.expect(
        RECORDS,
        c.req(Method::POST, RECORDS, "j").body("3"),
        409,
        "sealed",
    )
    .await;
    c.expect(
        BATCH,
        c.req(Method::POST, BATCH, "j").body("[3]"),
        409,
        "sealed",
    )
    .await;

    // ---------------------------------------------------------------- catalog
    let catalog = |c: &Checker, query: &str| {
        c.http
            .get(format!("{}/v1/streams{query}", c.base))
            .bearer_auth(TOKEN)
    };
    let first = c
        .expect("/v1/streams", catalog(&c, "?limit=1"), 200, "")
        .await;
    let cursor = first.json()["cursor"]
        .as_str()
        .expect("more pages")
        .to_string();
    c.expect(
        "/v1/streams",
        catalog(&c, &format!("?cursor={cursor}")),
        200,
        "",
    )
    .await;
    for (query, code) in [
        ("?limit=0", "invalid_parameter"),
        ("?limit=%FF", "invalid_parameter"),
        ("?cursor=!!!", "invalid_cursor"),
        ("?colour=red", "unknown_parameter"),
        ("?limit=1&limit=2", "duplicate_parameter"),
        ("?key=x", "unknown_field"),
    ] {
        c.expect("/v1/streams", catalog(&c, query), 400, code).await;
    }
    let anonymous = c.http.get(format!("{}/v1/streams", c.base));
    c.expect("/v1/streams", anonymous, 401, "unauthorized")
        .await;

    // Live-reader capacity: a server with no live slots.
    let dir_b = tempfile::tempdir().unwrap();
    let server_b = Server::start(
        dir_b.path().to_str().unwrap(),
        free_port(),
        &[
            "--project-token",
            &format!("alpha:{TOKEN}"),
            "--max-live-connections",
            "0",
            "--max-watch-observations",
            "0",
        ],
    )
    .await;
    let api_b = Api::new(&server_b, Some(TOKEN), DEV_KEY);
    assert_eq!(api_b.create("live", JSON_DOC).await.status, 201);
    let base_a = std::mem::replace(&mut c.base, server_b.base.clone());
    project_limits(&mut c).await;
    for template in [LONG_POLL, SSE] {
        c.expect(
            template,
            c.req(Method::GET, template, "live"),
            503,
            "subscription_capacity",
        )
        .await;
    }
    let watched = r#"{"format":{"kind":"json"},"watches":[{"name":"w","fields":["/a"]}]}"#;
    assert_eq!(api_b.create("watched", watched).await.status, 201);
    let (cap, watch_key) = watch_capability(&c, "watched").await;
    let full = c
        .http
        .get(format!(
            "{}/v1/streams/watched/watches/w/keys/{watch_key}",
            c.base
        ))
        .header("authorization", format!("Prisma-Watch {cap}"));
    c.expect(OBSERVE, full, 503, "subscription_capacity").await;
    // Writes whose outcome is unknown: a server whose store takes longer to
    // answer a PUT than its append deadline.
    let dir_c = tempfile::tempdir().unwrap();
    let server_c = Server::start(
        dir_c.path().to_str().unwrap(),
        free_port(),
        &[
            "--project-token",
            &format!("alpha:{TOKEN}"),
            "--emulate-put-latency-ms",
            "400",
            "--append-timeout-ms",
            "50",
        ],
    )
    .await;
    c.base = server_c.base.clone();
    c.expect(
        COLLECTION,
        c.req(Method::PUT, COLLECTION, "slow").body(JSON_DOC),
        503,
        "outcome_unknown",
    )
    .await;
    // The create completes after its answer.
    let api_c = Api::new(&server_c, Some(TOKEN), DEV_KEY);
    let started = tokio::time::Instant::now();
    while api_c.metadata("slow").await.status != 200 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the create that timed out never landed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for (template, body) in [(RECORDS, "1"), (BATCH, "[1]"), (SEAL, r#"{"final":1}"#)] {
        c.expect(
            template,
            c.req(Method::POST, template, "slow").body(body),
            503,
            "outcome_unknown",
        )
        .await;
    }
    c.expect(
        COLLECTION,
        c.bare(Method::DELETE, COLLECTION, "slow"),
        503,
        "outcome_unknown",
    )
    .await;
    c.base = base_a;

    // Every documented status and code was produced by its operation.
    let mut missing = Vec::new();
    for (path, method) in &documented {
        let seen = c
            .seen
            .get(&(path.clone(), method.clone()))
            .cloned()
            .unwrap_or_default();
        for (status, response) in c.spec.responses(path, method) {
            let codes: Vec<String> = response
                .get("x-error-codes")
                .and_then(Value::as_array)
                .map(|codes| {
                    codes
                        .iter()
                        .map(|c| c.as_str().expect("codes are strings").to_string())
                        .collect()
                })
                .unwrap_or_else(|| vec![String::new()]);
            for code in codes {
                if UNPROVOKED.contains(&code.as_str()) {
                    continue;
                }
                if !seen.contains(&(status, code.clone())) {
                    missing.push(format!("{method} {path}: {status} {code}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documented but never produced:\n{}",
        missing.join("\n")
    );
}

/// Every documented path answers a method the document does not list for it
/// (`OPTIONS` is the CORS preflight everywhere) with 405 `method_not_allowed`
/// and an `Allow` header naming exactly the documented methods (and `HEAD`
/// beside `GET` on the operational routes), before any other input is judged:
/// the query here would be refused on every route.
#[tokio::test]
async fn undocumented_methods_answer_405_with_allow() {
    let spec = Spec::load();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path().to_str().unwrap(),
        free_port(),
        &["--project-token", &format!("alpha:{TOKEN}")],
    )
    .await;
    let http = client();
    let methods = ["GET", "PUT", "POST", "DELETE", "PATCH", "TRACE", "QUERY"];
    let mut sent = 0;
    for (path, item) in spec.doc["paths"].as_object().expect("paths") {
        let documented: BTreeSet<String> = item
            .as_object()
            .expect("path item")
            .keys()
            .filter(|m| methods.contains(&m.to_ascii_uppercase().as_str()))
            .map(|m| m.to_ascii_uppercase())
            .collect();
        let concrete = path
            .replace("{name}", "c")
            .replace("{consumer}", "k")
            .replace("{watch}", "w")
            .replace("{watchKey}", "0123456789abcdef");
        let url = format!("{}{concrete}?routingKey=r&colour=red", server.base);
        for method in methods.iter().filter(|m| !documented.contains(**m)) {
            let method = Method::from_bytes(method.as_bytes()).unwrap();
            let request = http.request(method.clone(), &url).bearer_auth(TOKEN);
            let answer = Answer::from(request.send().await.expect("sent")).await;
            let what = format!("{method} {path}");
            assert_eq!(answer.status, 405, "{what}: {}", answer.text());
            assert_eq!(
                answer.json()["error"]["code"],
                "method_not_allowed",
                "{what}"
            );
            let allow: BTreeSet<String> = answer
                .header("allow")
                .unwrap_or_else(|| panic!("{what}: no Allow header"))
                .split(',')
                .map(|m| m.trim().to_string())
                .filter(|m| m != "HEAD")
                .collect();
            assert_eq!(allow, documented, "{what}: Allow");
            sent += 1;
        }
    }
    assert!(sent > 60, "only {sent} requests");
}

/// The project-limit refusals, from a server whose limits file allows
/// project `alpha` one collection, no live reader and one byte stored.
async fn project_limits(c: &mut Checker) {
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.json");
    std::fs::write(
        &limits,
        r#"{"default": {"collections": 1, "liveReaders": 0, "storedBytes": 1}}"#,
    )
    .unwrap();
    let server = Server::start(
        dir.path().join("store").to_str().unwrap(),
        free_port(),
        &[
            "--project-token",
            &format!("alpha:{TOKEN}"),
            "--limits-file",
            limits.to_str().unwrap(),
        ],
    )
    .await;
    let base = std::mem::replace(&mut c.base, server.base.clone());
    c.expect(
        COLLECTION,
        c.req(Method::PUT, COLLECTION, "one").body(JSON_DOC),
        201,
        "",
    )
    .await;
    let second = c.req(Method::PUT, COLLECTION, "two").body(JSON_DOC);
    c.expect(COLLECTION, second, 429, "stream_limit").await;
    for template in [LONG_POLL, SSE] {
        let read = c.req(Method::GET, template, "one");
        c.expect(template, read, 429, "project_concurrency_limit")
            .await;
    }
    // The first append finds nothing stored; after it, the project is full.
    c.expect(
        RECORDS,
        c.req(Method::POST, RECORDS, "one").body("1"),
        200,
        "",
    )
    .await;
    for (template, body) in [(RECORDS, "2"), (BATCH, "[2]"), (SEAL, r#"{"final":2}"#)] {
        let append = c.req(Method::POST, template, "one").body(body);
        c.expect(template, append, 429, "stored_bytes_limit").await;
    }
    c.base = base;
}
