//! Consumer groups in a fleet: configured, pulled and settled through a
//! member that does not serve the collection (forwarded to its owner);
//! dead letters appended to a dead-letter stream another member serves (the
//! fleet's peer route); and the consumer's state carried over a kill -9 of
//! the owner to the member that takes the shard over (an acknowledged
//! record never comes back, a lease out at the kill comes back only after
//! its visibility, its attempt counted).

mod common;

use common::fleet::{agreed_owner, settled, Fleet, MEMBERS};
use common::product::{Answer, Api, JSON_DOC};
use common::DEV_KEY;
use reqwest::Method;
use serde_json::{json, Value};

/// Creates `jobs` and dead-letter candidates until one lives on another
/// member than `jobs`: answers `jobs`' owner and that candidate. Placement
/// is random per fleet (instance ids are), and one member may own every
/// shard; then that member is restarted under a new id (bounded rounds).
async fn split_pair(fleet: &mut Fleet, apis: &[Api]) -> (usize, String) {
    let create = |name: String| {
        let api = apis[0].clone();
        async move {
            let created = settled(|| api.request(Method::PUT, &name).body(JSON_DOC)).await;
            assert!(matches!(created.status, 200 | 201), "{}", created.text());
        }
    };
    create("jobs".to_string()).await;
    for round in 0..5 {
        let owner = agreed_owner(fleet, apis, "jobs").await;
        for candidate in 0..16 {
            let name = format!("dlq-{round}-{candidate}");
            create(name.clone()).await;
            if agreed_owner(fleet, apis, &name).await != owner {
                return (owner, name);
            }
        }
        fleet.kill_9(owner);
        fleet.restart(owner).await;
    }
    panic!("every candidate stream lived on the owner of jobs");
}

fn body(value: Value) -> String {
    value.to_string()
}

fn messages(answer: &Answer) -> Vec<Value> {
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.json()["messages"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_work_through_any_member_and_survive_the_owners_death() {
    let dir = tempfile::tempdir().unwrap();
    let mut fleet = Fleet::start(dir.path().to_str().unwrap(), &[]).await;
    let apis: Vec<Api> = (0..MEMBERS)
        .map(|i| Api::at(&fleet.base(i), None, DEV_KEY).fresh_connections())
        .collect();
    let (owner, dlq) = split_pair(&mut fleet, &apis).await;
    let via = (owner + 1) % MEMBERS;
    let dlq = dlq.as_str();

    let api = &apis[via];
    let configure = |consumer: &str, doc: String| {
        let path = format!("jobs/consumers/{consumer}");
        let api = api.clone();
        move || api.request(Method::PUT, &path).body(doc.clone())
    };
    let dead = json!({"maxAttempts": 1, "deadLetterStream": dlq});
    assert_eq!(settled(configure("dead", body(dead))).await.status, 201);
    let keep = json!({"maxAttempts": 5, "visibilityTimeoutMs": 1000});
    assert_eq!(settled(configure("keep", body(keep))).await.status, 201);
    for (key, n) in [("p", 1), ("q", 2)] {
        let answer = settled(|| {
            api.request(Method::POST, "jobs/records")
                .header("prisma-routing-key", key)
                .header("content-type", "application/json")
                .body(json!({ "n": n }).to_string())
        })
        .await;
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    let pull = |consumer: &str, wait_ms: u64| {
        let path = format!("jobs/consumers/{consumer}:pull");
        let api = api.clone();
        move || {
            api.request(Method::POST, &path)
                .body(json!({ "waitMs": wait_ms }).to_string())
        }
    };
    let settle = |consumer: &str, doc: Value| {
        let path = format!("jobs/consumers/{consumer}:settle");
        let api = api.clone();
        move || api.request(Method::POST, &path).body(doc.to_string())
    };
    let token = |m: &Value| m["leaseToken"].as_str().unwrap().to_string();
    let by_key = |ms: &[Value], key: &str| ms.iter().find(|m| m["routingKey"] == key).cloned();

    // Dead letter across members: p's one attempt is spent at the next pull.
    let got = messages(&settled(pull("dead", 0)).await);
    assert_eq!(got.len(), 2);
    let p = by_key(&got, "p").unwrap();
    let retry = json!({"retries": [{"leaseToken": token(&p), "delayMs": 0}]});
    assert_eq!(settled(settle("dead", retry)).await.json()["retried"], 1);
    let after = settled(pull("dead", 0)).await;
    assert!(messages(&after).is_empty(), "{}", after.text());
    let (letters, _) = apis[owner].read_all_json(dlq, "p").await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["value"], json!({"n": 1}));

    // `keep`: ack q, leave p leased, kill the owner.
    let got = messages(&settled(pull("keep", 0)).await);
    assert_eq!(got.len(), 2);
    let q = by_key(&got, "q").unwrap();
    let ack = json!({"acks": [{"leaseToken": token(&q)}]});
    assert_eq!(settled(settle("keep", ack)).await.json()["acked"], 1);
    fleet.kill_9(owner);
    // The survivor that takes the shard over knows q is done and p leased
    // (attempt 1); once p's visibility passes it comes back as attempt 2.
    let back = messages(&settled(pull("keep", 20_000)).await);
    assert_eq!(back.len(), 1, "{back:?}");
    assert_eq!(back[0]["routingKey"], "p");
    assert_eq!(back[0]["attempts"], 2);
    let ack = json!({"acks": [{"leaseToken": token(&back[0])}]});
    let done = settled(settle("keep", ack)).await;
    assert_eq!(done.json()["acked"], 1, "{}", done.text());
    assert_eq!(done.json()["backlog"], 0);
}
