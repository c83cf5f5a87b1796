//! A create whose descriptor landed but whose records' stream did not (the
//! shard stopped between the two writes: a crash, or the shard moving to
//! another fleet member) is finished by its retry, instead of leaving a name
//! that every request answers 404.

mod common;

use std::sync::Arc;

use clap::Parser;
use common::DEV_KEY;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use strata_engine::{EngineEnv, InstanceId, Shard, ShardConfig};
use strata_server::cli::serve::{ServeArgs, Server};
use strata_server::service::routing::{ShardIndex, Slot};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_create_finishes_a_half_made_stream() {
    let client = common::client();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let cli = Cli::parse_from(["strata", "--cache-bytes", "0", "--dev-default-key", DEV_KEY]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = Server::open(&cli.serve, store.clone(), listener)
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let state = server.state().clone();
    let first = server.shards()[0].clone();
    let common::Running { stop, task } = common::run_in_process(server);
    // The shard stops: the create writes its descriptor, then cannot create
    // the stream's records.
    first.shutdown().await;
    let url = format!("{base}/v1/stream/half");
    let create = || {
        client
            .put(&url)
            .header("content-type", "application/json")
            .body("[\"a\"]")
            .send()
    };
    let failed = create().await.unwrap();
    assert_eq!(failed.status(), 503, "the first create cannot finish");
    // The shard is served again (re-opened, as a restart or a claim would).
    let reopened = Shard::open(
        EngineEnv::production(store.clone()),
        ShardIndex(0).shard_name().unwrap(),
        InstanceId([9; 16]),
        ShardConfig::default(),
    )
    .await
    .unwrap();
    state
        .streams
        .router()
        .place(ShardIndex(0), Slot::Owned(reopened));
    let retried = create().await.unwrap();
    assert!(
        retried.status().is_success(),
        "the retry finishes the create: {}",
        retried.status()
    );
    let read = client.get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.text().await.unwrap(), "[\"a\"]");
    let _ = stop.send(());
    task.await.unwrap();
}
