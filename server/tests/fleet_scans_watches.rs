//! Scans and watch observations in a fleet: a member that does not serve the
//! collection forwards both to its owner (the observation by the project its
//! capability names, with no bearer token), so a scan through any member
//! returns the snapshot and an observation through any member wakes on an
//! append through any other.

// Capabilities carry wall-clock expiries; the test signs them as a client.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::fleet::{agreed_owner, settled, Fleet, MEMBERS};
use common::product::{epoch_of, Answer, Api, QueryPairs};
use common::DEV_KEY;
use reqwest::Method;
use serde_json::{json, Value};
use strata_segments::StreamKey;
use strata_server::service::product::config::WatchDef;
use strata_server::service::product::watch_cap::{CapabilityScope, WaitSigKey};
use strata_server::service::product::watch_keys::{definition_id, watch_key};
use strata_server::service::DEFAULT_PROJECT;

const DOC: &str =
    r#"{"format":{"kind":"json"},"watches":[{"name":"by-customer","fields":["/customerId"]}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_and_observations_are_served_through_any_member() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet::start(dir.path().to_str().unwrap(), &[]).await;
    let apis: Vec<Api> = (0..MEMBERS)
        .map(|i| Api::at(&fleet.base(i), None, DEV_KEY))
        .collect();
    let created = settled(|| apis[0].request(Method::PUT, "orders").body(DOC)).await;
    assert!(
        created.status == 201 || created.status == 200,
        "{}",
        created.text()
    );
    let meta = created.json();
    // A member the collection's owner is not: its answers name the owner.
    let owner = agreed_owner(&fleet, &apis, "orders").await;
    let via = (owner + 1) % MEMBERS;
    let other = (via + 1) % MEMBERS;

    // Observation through the forwarder, appends through another member.
    let epoch = epoch_of(&meta);
    let def = WatchDef {
        name: "by-customer".into(),
        fields: vec!["/customerId".into()],
    };
    let key = watch_key(
        &definition_id(&epoch, &def),
        &def,
        &json!({"customerId": "c1"}),
    )
    .unwrap();
    let expiry = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 120;
    let stream_key = StreamKey::parse(DEV_KEY).unwrap();
    let cap = CapabilityScope {
        project: DEFAULT_PROJECT,
        collection: "orders",
        epoch: &epoch,
        watch: "by-customer",
        key,
    }
    .sign(&WaitSigKey::derive(&epoch, stream_key.expose()), expiry);
    let url = format!(
        "{}/v1/streams/orders/watches/by-customer/keys/{}",
        fleet.base(via),
        key.hex()
    );
    let http = common::client();
    let observe = |cursor: Option<String>, timeout_ms: u64| {
        let mut query = vec![("timeoutMs", timeout_ms.to_string())];
        if let Some(c) = cursor {
            query.push(("cursor", c));
        }
        http.get(&url)
            .header("authorization", format!("Prisma-Watch {cap}"))
            .pairs(&query)
    };
    let first = settled(|| observe(None, 50)).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.json()["invalidated"], false);
    let cursor = first.json()["cursor"].as_str().unwrap().to_string();
    let parked = {
        let request = observe(Some(cursor), 20_000);
        tokio::spawn(async move { Answer::from(request.send().await.unwrap()).await })
    };
    for (n, customer) in ["c2", "c1", "c3"].iter().enumerate() {
        let body = json!({"customerId": customer, "n": n}).to_string();
        let answer = settled(|| {
            apis[other]
                .request(Method::POST, "orders/records")
                .header("prisma-routing-key", *customer)
                .header("content-type", "application/json")
                .body(body.clone())
        })
        .await;
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    let woken = tokio::time::timeout(Duration::from_secs(15), parked)
        .await
        .expect("woken, not timed out")
        .unwrap();
    assert_eq!(woken.status, 200, "{}", woken.text());
    assert_eq!(woken.json()["invalidated"], true, "{}", woken.text());

    // A scan through the forwarder: the three records, every key.
    let page = settled(|| apis[via].request(Method::GET, "orders:scan")).await;
    assert_eq!(page.status, 200, "{}", page.text());
    assert_eq!(page.header("prisma-scan-complete"), Some("true"));
    let keys: Vec<Value> = page
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["routingKey"].clone())
        .collect();
    assert_eq!(keys, vec![json!("c2"), json!("c1"), json!("c3")]);
}

/// A project's usage is summed over every member's shards, asked through
/// any member; a collection's is answered by (or forwarded to) its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_usage_is_summed_over_the_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet::start(dir.path().to_str().unwrap(), &[]).await;
    let apis: Vec<Api> = (0..MEMBERS)
        .map(|i| Api::at(&fleet.base(i), None, DEV_KEY))
        .collect();
    let names: Vec<String> = (0..12).map(|i| format!("c{i}")).collect();
    for name in &names {
        let created = settled(|| apis[0].request(Method::PUT, name).body(DOC)).await;
        assert!(matches!(created.status, 200 | 201), "{}", created.text());
        let appended = settled(|| {
            apis[0]
                .request(Method::POST, &format!("{name}/records"))
                .header("content-type", "application/json")
                .body(r#"{"customerId":"c1"}"#)
        })
        .await;
        assert_eq!(appended.status, 200, "{}", appended.text());
    }
    // Every collection's owner is settled before the sums are compared.
    let mut owners = std::collections::BTreeSet::new();
    for name in &names {
        owners.insert(agreed_owner(&fleet, &apis, name).await);
    }
    for api in &apis {
        let answer = settled(|| {
            api.keyless(
                Method::GET,
                &format!("{}/v1/projects/default/usage", api.base),
            )
        })
        .await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        let usage = answer.json();
        assert_eq!(usage["collections"], 12, "{usage} (owners {owners:?})");
        assert_eq!(usage["records"], 12, "{usage}");
        assert_eq!(usage["complete"], true, "{usage}");
        let one = settled(|| api.keyless(Method::GET, &api.url("c3/usage"))).await;
        assert_eq!(one.status, 200, "{}", one.text());
        assert_eq!(one.json()["records"], 1);
    }
}
