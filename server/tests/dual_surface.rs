//! One engine, two views: the raw Durable Streams route (`/v1/stream/{name}`)
//! is the default routing key's view of the product collection
//! (`/v1/streams/{name}`). Every case runs in both orders — written or
//! created through one surface, observed through the other — and compares
//! bytes, positions (offsets and cursors), state and producer state.

mod common;

use common::product::{producer, Answer, Api, JSON_DOC};
use common::{client, free_port, Server, DEV_KEY};
use reqwest::{Method, RequestBuilder};
use serde_json::json;

/// Which surface acts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    RawFirst,
    ProductFirst,
}

const ORDERS: [Order; 2] = [Order::RawFirst, Order::ProductFirst];

struct Rig {
    _dir: tempfile::TempDir,
    server: Server,
    api: Api,
}

impl Rig {
    async fn start() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(dir.path().to_str().unwrap(), free_port(), &[]).await;
        let api = Api::new(&server, None, DEV_KEY);
        Rig {
            _dir: dir,
            server,
            api,
        }
    }

    fn raw(&self, method: Method, name: &str) -> RequestBuilder {
        client()
            .request(method, self.server.url(name))
            .header("stream-encryption-key", DEV_KEY)
    }

    async fn raw_create_json(&self, name: &str) -> Answer {
        Api::send(
            self.raw(Method::PUT, name)
                .header("content-type", "application/json"),
        )
        .await
    }

    async fn raw_append(&self, name: &str, body: &str) -> Answer {
        Api::send(
            self.raw(Method::POST, name)
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
        .await
    }

    /// The raw view from an offset (`-1`: the start).
    async fn raw_read(&self, name: &str, offset: &str) -> Answer {
        Api::send(self.raw(Method::GET, &format!("{name}?offset={offset}"))).await
    }

    async fn raw_head(&self, name: &str) -> Answer {
        Api::send(self.raw(Method::HEAD, name)).await
    }

    /// Creates a JSON stream through `order`'s first surface.
    async fn create(&self, order: Order, name: &str) {
        let status = match order {
            Order::RawFirst => self.raw_create_json(name).await.status,
            Order::ProductFirst => self.api.create(name, JSON_DOC).await.status,
        };
        assert_eq!(status, 201, "{order:?}");
    }

    /// Appends one record of the default key through `order`'s first surface.
    async fn append(&self, order: Order, name: &str, record: &str) {
        let status = match order {
            Order::RawFirst => self.raw_append(name, record).await.status,
            Order::ProductFirst => self.api.append(name, "", record).await.status,
        };
        assert!(status == 200 || status == 204, "{order:?}: {status}");
    }
}

#[tokio::test]
async fn records_written_on_one_surface_read_identically_on_the_other() {
    let rig = Rig::start().await;
    for order in ORDERS {
        let name = format!("rw-{order:?}");
        rig.create(order, &name).await;
        // The other surface's create of the same configuration is a retry.
        let again = match order {
            Order::RawFirst => rig.api.create(&name, JSON_DOC).await.status,
            Order::ProductFirst => rig.raw_create_json(&name).await.status,
        };
        assert_eq!(again, 200, "{order:?}");
        for i in 0..4 {
            rig.append(order, &name, &format!(r#"{{ "i": {i}, "s": "a b" }}"#))
                .await;
        }
        let raw = rig.raw_read(&name, "-1").await;
        let product = rig.api.read(&name, "", None).await;
        assert_eq!(raw.status, 200);
        assert_eq!(raw.body, product.body, "{order:?}: the same bytes");
        assert_eq!(
            raw.text(),
            r#"[{"i":0,"s":"a b"},{"i":1,"s":"a b"},{"i":2,"s":"a b"},{"i":3,"s":"a b"}]"#
        );
        assert_eq!(raw.header("stream-up-to-date"), Some("true"));
        assert_eq!(product.header("prisma-up-to-date"), Some("true"));
        // Positions agree: the raw offset and the product cursor after the
        // same record resume at the same place.
        let first_raw = Api::send(rig.raw(Method::GET, &format!("{name}?offset=-1"))).await;
        let raw_tail = first_raw.header("stream-next-offset").unwrap().to_string();
        let product_tail = product.cursor();
        rig.append(order, &name, "5").await;
        let raw_rest = rig.raw_read(&name, &raw_tail).await;
        let product_rest = rig.api.read(&name, "", Some(&product_tail)).await;
        assert_eq!(
            (raw_rest.text(), product_rest.text()),
            ("[5]".into(), "[5]".into())
        );
        // State: content type and open state agree.
        let head = rig.raw_head(&name).await;
        assert_eq!(head.header("content-type"), Some("application/json"));
        assert!(head.header("stream-closed").is_none());
        assert_eq!(rig.api.metadata(&name).await.json()["sealed"], false);
    }
}

#[tokio::test]
async fn other_routing_keys_never_show_on_the_raw_view() {
    let rig = Rig::start().await;
    for order in ORDERS {
        let name = format!("keys-{order:?}");
        rig.create(order, &name).await;
        rig.append(order, &name, "1").await;
        assert_eq!(rig.api.append(&name, "tenant-7", "99").await.status, 200);
        rig.append(order, &name, "2").await;
        let raw = rig.raw_read(&name, "-1").await;
        assert_eq!(raw.text(), "[1,2]", "{order:?}");
        assert_eq!(raw.header("stream-up-to-date"), Some("true"));
        assert_eq!(rig.api.read(&name, "", None).await.text(), "[1,2]");
        assert_eq!(rig.api.read(&name, "tenant-7", None).await.text(), "[99]");
        // A raw read at the tail is up to date and empty.
        let tail = raw.header("stream-next-offset").unwrap().to_string();
        let at_tail = rig.raw_read(&name, &tail).await;
        assert_eq!(
            (at_tail.text().as_str(), at_tail.header("stream-up-to-date")),
            ("[]", Some("true"))
        );
    }
}

#[tokio::test]
async fn json_flattening_is_the_same_on_both_surfaces() {
    let rig = Rig::start().await;
    for order in ORDERS {
        let name = format!("flat-{order:?}");
        rig.create(order, &name).await;
        // Raw flattens one level; product `records` keeps an array as one
        // record; product `records:batch` flattens like raw.
        let writes: [(&str, bool); 3] = [
            ("[1, [2, 3]]", true),
            ("[1, [2, 3]]", false),
            ("[4, 5]", true),
        ];
        for (body, flatten) in writes {
            match (order, flatten) {
                (Order::RawFirst, true) => {
                    assert_eq!(rig.raw_append(&name, body).await.status, 204)
                }
                (Order::ProductFirst, true) => {
                    assert_eq!(rig.api.batch(&name, "", body).await.status, 200)
                }
                (_, false) => assert_eq!(rig.api.append(&name, "", body).await.status, 200),
            }
        }
        let expected = "[1,[2,3],[1,[2,3]],4,5]";
        assert_eq!(
            rig.raw_read(&name, "-1").await.text(),
            expected,
            "{order:?}"
        );
        assert_eq!(rig.api.read(&name, "", None).await.text(), expected);
        // The raw route refuses an empty array; the product refuses an empty batch.
        assert_eq!(rig.raw_append(&name, "[]").await.status, 400);
        assert_eq!(rig.api.batch(&name, "", "[]").await.status, 400);
    }
}

#[tokio::test]
async fn producer_state_is_shared_on_the_default_key() {
    let rig = Rig::start().await;
    for order in ORDERS {
        let name = format!("prod-{order:?}");
        rig.create(order, &name).await;
        let raw_send = |seq: u64, body: &'static str| {
            producer(
                rig.raw(Method::POST, &name)
                    .header("content-type", "application/json")
                    .body(body),
                "w",
                0,
                seq,
            )
        };
        let product_send = |seq: u64, body: &'static str| {
            producer(
                rig.api
                    .request(Method::POST, &format!("{name}/records"))
                    .body(body),
                "w",
                0,
                seq,
            )
        };
        // Seq 0 through the first surface, its retry through the second.
        let (first, retry) = match order {
            Order::RawFirst => (
                Api::send(raw_send(0, "1")).await,
                Api::send(product_send(0, "1")).await,
            ),
            Order::ProductFirst => (
                Api::send(product_send(0, "1")).await,
                Api::send(raw_send(0, "1")).await,
            ),
        };
        assert!(first.status == 200 || first.status == 204, "{order:?}");
        match order {
            Order::RawFirst => {
                assert_eq!(retry.status, 200, "{}", retry.text());
                assert_eq!(retry.json()["duplicate"], true);
            }
            Order::ProductFirst => assert_eq!(retry.status, 204, "a raw duplicate"),
        }
        // The next sequence continues on the other surface; a gap is a gap on both.
        let next = match order {
            Order::RawFirst => Api::send(product_send(1, "2")).await,
            Order::ProductFirst => Api::send(raw_send(1, "2")).await,
        };
        assert!(next.status == 200, "{order:?}: {}", next.text());
        assert_eq!(Api::send(raw_send(5, "9")).await.status, 409);
        assert_eq!(Api::send(product_send(5, "9")).await.status, 409);
        assert_eq!(rig.raw_read(&name, "-1").await.text(), "[1,2]");
        assert_eq!(rig.api.read(&name, "", None).await.text(), "[1,2]");
    }
}

#[tokio::test]
async fn seal_and_close_are_one_state() {
    let rig = Rig::start().await;
    for order in ORDERS {
        let name = format!("seal-{order:?}");
        rig.create(order, &name).await;
        rig.append(order, &name, "1").await;
        match order {
            Order::RawFirst => {
                let closed =
                    Api::send(rig.raw(Method::POST, &name).header("stream-closed", "true")).await;
                assert_eq!(closed.status, 204);
                // The product sees it sealed.
                assert_eq!(rig.api.metadata(&name).await.json()["sealed"], true);
                rig.api
                    .append(&name, "", "2")
                    .await
                    .expect_error(409, "sealed");
                assert_eq!(rig.api.seal(&name, "{}").await.status, 200, "idempotent");
            }
            Order::ProductFirst => {
                assert_eq!(rig.api.seal(&name, r#"{"final": 2}"#).await.status, 200);
                let head = rig.raw_head(&name).await;
                assert_eq!(head.header("stream-closed"), Some("true"));
                let refused = rig.raw_append(&name, "3").await;
                assert_eq!(refused.status, 409);
                assert_eq!(refused.header("stream-closed"), Some("true"));
            }
        }
        let expected = if order == Order::RawFirst {
            "[1]"
        } else {
            "[1,2]"
        };
        let raw = rig.raw_read(&name, "-1").await;
        let product = rig.api.read(&name, "", None).await;
        assert_eq!(
            (raw.text().as_str(), product.text().as_str()),
            (expected, expected)
        );
        assert_eq!(raw.header("stream-closed"), Some("true"));
        assert_eq!(product.header("prisma-sealed"), Some("true"));
    }
}

#[tokio::test]
async fn delete_is_one_operation() {
    let rig = Rig::start().await;
    for order in ORDERS {
        let name = format!("del-{order:?}");
        rig.create(order, &name).await;
        rig.append(order, &name, "1").await;
        match order {
            Order::RawFirst => {
                assert_eq!(Api::send(rig.raw(Method::DELETE, &name)).await.status, 204);
                rig.api.metadata(&name).await.expect_error(404, "not_found");
                rig.api.delete(&name).await.expect_error(404, "not_found");
                // The catalog forgets it too.
                let listed = rig.api.catalog(&[]).await.json();
                assert!(listed["streams"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|s| s["name"] != name));
                assert_eq!(rig.api.create(&name, JSON_DOC).await.status, 201);
            }
            Order::ProductFirst => {
                assert_eq!(rig.api.delete(&name).await.status, 204);
                assert_eq!(rig.raw_head(&name).await.status, 404);
                assert_eq!(Api::send(rig.raw(Method::DELETE, &name)).await.status, 404);
                assert_eq!(rig.raw_create_json(&name).await.status, 201);
            }
        }
        // One new incarnation, empty on both views.
        assert_eq!(rig.raw_read(&name, "-1").await.text(), "[]");
        assert_eq!(rig.api.read(&name, "", None).await.text(), "[]");
    }
}

#[tokio::test]
async fn ttl_and_idle_expiry_are_one_setting() {
    let rig = Rig::start().await;
    for order in ORDERS {
        let name = format!("ttl-{order:?}");
        let idle_doc = r#"{"format":{"kind":"json"},"expiry":{"idle":"1h"}}"#;
        let raw_put = |ttl: &'static str| {
            rig.raw(Method::PUT, &name)
                .header("content-type", "application/json")
                .header("stream-ttl", ttl)
        };
        match order {
            Order::RawFirst => {
                assert_eq!(Api::send(raw_put("3600")).await.status, 201);
                assert_eq!(rig.api.create(&name, idle_doc).await.status, 200);
                rig.api
                    .create(
                        &name,
                        r#"{"format":{"kind":"json"},"expiry":{"idle":"2h"}}"#,
                    )
                    .await
                    .expect_error(409, "config_mismatch");
                rig.api
                    .create(&name, JSON_DOC)
                    .await
                    .expect_error(409, "config_mismatch");
            }
            Order::ProductFirst => {
                assert_eq!(rig.api.create(&name, idle_doc).await.status, 201);
                assert_eq!(Api::send(raw_put("3600")).await.status, 200);
                assert_eq!(Api::send(raw_put("60")).await.status, 409);
            }
        }
        assert_eq!(rig.raw_head(&name).await.header("stream-ttl"), Some("3600"));
        assert_eq!(
            rig.api.metadata(&name).await.json()["expiry"],
            json!({"idle": "3600s"})
        );
    }
    // An absolute expiry is the same instant on both surfaces.
    for order in ORDERS {
        let name = format!("at-{order:?}");
        let at = "2099-01-01T00:00:00Z";
        let raw_put = rig
            .raw(Method::PUT, &name)
            .header("content-type", "application/json")
            .header("stream-expires-at", at);
        let doc = format!(r#"{{"format":{{"kind":"json"}},"expiry":{{"at":"{at}"}}}}"#);
        let (first, second) = match order {
            Order::RawFirst => (
                Api::send(raw_put).await.status,
                rig.api.create(&name, &doc).await.status,
            ),
            Order::ProductFirst => (
                rig.api.create(&name, &doc).await.status,
                Api::send(raw_put).await.status,
            ),
        };
        assert_eq!((first, second), (201, 200), "{order:?}");
        assert_eq!(
            rig.raw_head(&name).await.header("stream-expires-at"),
            Some(at)
        );
        assert_eq!(
            rig.api.metadata(&name).await.json()["expiry"],
            json!({"at": at})
        );
    }
}

#[tokio::test]
async fn a_raw_fork_opens_as_a_product_collection() {
    let rig = Rig::start().await;
    assert_eq!(rig.raw_create_json("source").await.status, 201);
    assert_eq!(rig.raw_append("source", "[1, 2]").await.status, 204);
    // Records of other keys in the source are not inherited by a fork.
    assert_eq!(rig.api.append("source", "k", "100").await.status, 200);
    let fork = Api::send(
        rig.raw(Method::PUT, "fork")
            .header("content-type", "application/json")
            .header("stream-forked-from", "/v1/stream/source"),
    )
    .await;
    assert_eq!(fork.status, 201, "{}", fork.text());
    assert_eq!(rig.raw_append("fork", "3").await.status, 204);
    let meta = rig.api.metadata("fork").await;
    assert_eq!(meta.status, 200);
    assert_eq!(meta.json()["contentType"], "application/json");
    let raw = rig.raw_read("fork", "-1").await;
    let product = rig.api.read("fork", "", None).await;
    assert_eq!(raw.text(), "[1,2,3]");
    assert_eq!(raw.body, product.body);
    assert_eq!(rig.api.read("fork", "k", None).await.text(), "[]");
    // The fork's own keyed records stay on its product view.
    assert_eq!(rig.api.append("fork", "k", "7").await.status, 200);
    assert_eq!(rig.api.read("fork", "k", None).await.text(), "[7]");
    assert_eq!(rig.raw_read("fork", "-1").await.text(), "[1,2,3]");
    // Opening it with the product's document is a retry of its configuration.
    assert_eq!(rig.api.create("fork", JSON_DOC).await.status, 200);
}
