//! A small client for the product API, for the integration tests.
#![allow(dead_code)]

use reqwest::{Method, RequestBuilder, Response};
use serde_json::Value;

use super::{client, Server};

/// A second valid stream key (base64url of 32 bytes).
pub const OTHER_KEY: &str = "b3RoZXItb3RoZXItb3RoZXItb3RoZXIta2V5LTMyYiE";
pub const JSON_DOC: &str = r#"{"format":{"kind":"json"}}"#;
pub const BYTES_DOC: &str = r#"{"format":{"kind":"bytes"}}"#;

/// A product-API client bound to a server, a token and a stream key.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub token: Option<String>,
    pub key: String,
    http: reqwest::Client,
}

/// An answer: status, headers, body bytes.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: bytes::Bytes,
}

impl Answer {
    pub async fn from(response: Response) -> Answer {
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.bytes().await.expect("body"),
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The error code of a product error, checking the error body's shape.
    pub fn code(&self) -> String {
        let v = self.json();
        let error = &v["error"];
        assert!(error["message"].is_string(), "{v}");
        assert!(
            error["retryable"].is_boolean(),
            "product errors carry retryable: {v}"
        );
        error["code"].as_str().expect("code").to_string()
    }

    /// Asserts an error status and code.
    pub fn expect_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code().as_str()),
            (status, code),
            "{}",
            self.text()
        );
        assert_eq!(self.header("cache-control"), Some("no-store"));
    }

    pub fn cursor(&self) -> String {
        self.header("prisma-next-cursor")
            .expect("Prisma-Next-Cursor")
            .to_string()
    }
}

impl Api {
    pub fn new(server: &Server, token: Option<&str>, key: &str) -> Api {
        Api {
            base: server.base.clone(),
            token: token.map(str::to_string),
            key: key.to_string(),
            http: client(),
        }
    }

    /// A client of a server at `base` (`http://host:port`).
    pub fn at(base: &str, token: Option<&str>, key: &str) -> Api {
        Api {
            base: base.to_string(),
            token: token.map(str::to_string),
            key: key.to_string(),
            http: client(),
        }
    }

    /// The same client with a timeout on every request (a request the
    /// server never answers fails instead of hanging the test).
    pub fn with_timeout(&self, timeout: std::time::Duration) -> Api {
        Api {
            http: reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .expect("client"),
            ..self.clone()
        }
    }

    /// The same client without connection reuse: a request fails only when
    /// the server is down, never on a connection left from a killed server.
    pub fn fresh_connections(&self) -> Api {
        Api {
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("client"),
            ..self.clone()
        }
    }

    pub fn with_key(&self, key: &str) -> Api {
        Api {
            key: key.to_string(),
            ..self.clone()
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/v1/streams/{path}", self.base)
    }

    /// A request with the token and the key.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let mut r = self
            .http
            .request(method, self.url(path))
            .header("prisma-encryption-key", &self.key);
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        r
    }

    /// A request with the token but no key.
    pub fn keyless(&self, method: Method, url: &str) -> RequestBuilder {
        let mut r = self.http.request(method, url);
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        r
    }

    pub async fn send(builder: RequestBuilder) -> Answer {
        Answer::from(builder.send().await.expect("request")).await
    }

    pub async fn create(&self, name: &str, doc: &str) -> Answer {
        Self::send(self.request(Method::PUT, name).body(doc.to_string())).await
    }

    pub async fn metadata(&self, name: &str) -> Answer {
        Self::send(self.keyless(Method::GET, &self.url(name))).await
    }

    pub async fn delete(&self, name: &str) -> Answer {
        Self::send(self.keyless(Method::DELETE, &self.url(name))).await
    }

    /// `POST {name}/records` with a routing key.
    pub async fn append(&self, name: &str, routing_key: &str, body: &str) -> Answer {
        Self::send(
            self.request(Method::POST, &format!("{name}/records"))
                .header("prisma-routing-key", routing_key)
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
        .await
    }

    pub async fn batch(&self, name: &str, routing_key: &str, body: &str) -> Answer {
        Self::send(
            self.request(Method::POST, &format!("{name}/records:batch"))
                .header("prisma-routing-key", routing_key)
                .body(body.to_string()),
        )
        .await
    }

    /// `GET {name}/records` with `routingKey` and an optional cursor.
    pub async fn read(&self, name: &str, routing_key: &str, cursor: Option<&str>) -> Answer {
        let mut query = vec![("routingKey", routing_key.to_string())];
        if let Some(c) = cursor {
            query.push(("cursor", c.to_string()));
        }
        Self::send(
            self.request(Method::GET, &format!("{name}/records"))
                .pairs(&query),
        )
        .await
    }

    /// Reads a key to its end: every record's JSON text, and the last cursor.
    pub async fn read_all_json(&self, name: &str, routing_key: &str) -> (Vec<Value>, String) {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..10_000 {
            let page = self.read(name, routing_key, cursor.as_deref()).await;
            assert_eq!(page.status, 200, "{}", page.text());
            out.extend(page.json().as_array().expect("array").iter().cloned());
            cursor = Some(page.cursor());
            if page.header("prisma-up-to-date") == Some("true") {
                return (out, cursor.unwrap_or_default());
            }
        }
        panic!("the read never came up to date");
    }

    pub async fn seal(&self, name: &str, body: &str) -> Answer {
        Self::send(
            self.request(Method::POST, &format!("{name}:seal"))
                .body(body.to_string()),
        )
        .await
    }

    pub async fn catalog(&self, query: &[(&str, String)]) -> Answer {
        Self::send(
            self.keyless(Method::GET, &format!("{}/v1/streams", self.base))
                .pairs(query),
        )
        .await
    }
}

/// Query parameters for a request (reqwest's `query` needs a feature we
/// do not build).
pub trait QueryPairs {
    fn pairs<K: AsRef<str>, V: AsRef<str>>(self, pairs: &[(K, V)]) -> RequestBuilder;
}

impl QueryPairs for RequestBuilder {
    fn pairs<K: AsRef<str>, V: AsRef<str>>(self, pairs: &[(K, V)]) -> RequestBuilder {
        let (client, request) = self.build_split();
        let mut request = request.expect("request");
        request
            .url_mut()
            .query_pairs_mut()
            .extend_pairs(pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref())));
        RequestBuilder::from_parts(client, request)
    }
}

/// Producer headers on a request.
pub fn producer(builder: RequestBuilder, id: &str, epoch: u64, seq: u64) -> RequestBuilder {
    builder
        .header("producer-id", id)
        .header("producer-epoch", epoch.to_string())
        .header("producer-seq", seq.to_string())
}

/// The stream epoch a collection's metadata shows (collections with watches
/// show it), as bytes.
pub fn epoch_of(meta: &Value) -> [u8; 16] {
    let hex = meta["epoch"].as_str().expect("epoch");
    let mut epoch = [0u8; 16];
    for (i, byte) in epoch.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
    }
    epoch
}
