//! `strata serve`: the HTTP server over one store.
//!
//! Start-up opens the store, claims the configured shards (fencing any previous
//! owner), and listens. SIGTERM or Ctrl-C stops accepting connections, lets
//! requests in flight finish (live reads are cut after a grace period), then
//! flushes and stops every shard, so every acknowledged append is durable and
//! nothing staged is lost silently.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use object_store::ObjectStore;
use strata_engine::shard::ChunkCache;
use strata_engine::store::{open_store, Latency, S3Options, StoreOptions};
use strata_engine::{EngineEnv, InstanceId, OsEntropy, Shard, ShardConfig, SystemClock};
use tokio::net::TcpListener;

use super::console::console;
use crate::service::tenancy::TenancyCell;
use strata_manifest::RetryPolicy;
use strata_segments::StreamKey;

use crate::http::fleet::HttpPeers;
use crate::http::peers::{
    HttpDeadLetterPeers, HttpSourceReads, HttpSubscriptionPeers, PeerKey, PEER_KEY_LABEL,
};
use crate::http::{AppState, FleetHttp, FleetRouting, HttpConfig};
use crate::service::fleet::controller::LEASE_MARGIN_MS;
use crate::service::fleet::heartbeat::{check_url, check_weight};
use crate::service::fleet::{EngineOpener, Fleet, FleetConfig};
use crate::service::registry::Registry;
use crate::service::routing::{ShardIndex, ShardRouter};
use crate::service::subscriptions::{Signer, SubscriptionObserver, Subscriptions};
use crate::service::{Streams, StreamsConfig};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("store: {0}")]
    Store(#[from] strata_engine::store::StoreError),
    #[error("opening shard {shard}: {source}")]
    Shard {
        shard: String,
        source: strata_engine::EngineError,
    },
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
    #[error("starting the stream service: {0}")]
    Service(#[from] crate::service::ServiceError),
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,
    /// Object store: a directory, file:///dir, memory:// or s3://bucket/prefix.
    #[arg(long, default_value = "./strata-data")]
    pub store: String,
    /// Bearer token of project `default` (repeatable). With no token of any
    /// kind configured, requests need none and all use project `default`.
    #[arg(long = "auth-token", env = "STRATA_AUTH_TOKEN")]
    pub auth_tokens: Vec<String>,
    /// `PROJECT:TOKEN`: a bearer token and the project it acts in (repeatable).
    #[arg(long = "project-token")]
    pub project_tokens: Vec<String>,
    /// A file of `PROJECT TOKEN` lines (`#` starts a comment).
    #[arg(long, env = "STRATA_TOKENS_FILE")]
    pub tokens_file: Option<std::path::PathBuf>,
    /// Per-project limits, a JSON file (RUNBOOK "Per-project limits"):
    /// `{"default": {…}, "projects": {"name": {…}}}`. `SIGHUP` re-reads it.
    #[arg(long, env = "STRATA_LIMITS_FILE")]
    pub limits_file: Option<std::path::PathBuf>,
    /// A bearer token for the debug endpoints (`/debug/shards`,
    /// `/debug/config`) on `--listen`; they are always on `--metrics-listen`.
    #[arg(long, env = "STRATA_OPERATOR_TOKEN", hide_env_values = true)]
    pub operator_token: Option<String>,
    /// Serve `GET /metrics` (and `/healthz`) on this address only, instead
    /// of on `--listen` (where `/metrics` then answers 404).
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Longest a long-poll (and an idle SSE interval) waits, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    pub long_poll_timeout_ms: u64,
    /// Longest a request waits for the store, in milliseconds: then a write
    /// answers 503 `outcome_unknown` (it may still complete) and a read 503
    /// `unavailable`, both with `Retry-After`.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub append_timeout_ms: u64,
    /// DEVELOPMENT ONLY: the stream key for raw-route requests that carry none.
    #[arg(long, env = "STRATA_DEV_DEFAULT_KEY")]
    pub dev_default_key: Option<String>,
    /// Allow --dev-default-key on a listen address other than loopback.
    #[arg(long)]
    pub allow_dev_key_on_public_address: bool,
    /// Request body bytes read and held at once, over every request (at
    /// least --max-body-bytes): beyond it, bodies wait for room (503 after
    /// 10 s).
    #[arg(long, default_value_t = 512 << 20)]
    pub max_buffered_body_bytes: usize,
    /// Bytes of SSE events read and not yet taken by slow clients, over
    /// every live reader: beyond it, readers wait for room (their stream
    /// ends after 10 s, and the client reconnects).
    #[arg(long, default_value_t = 256 << 20)]
    pub max_live_buffer_bytes: usize,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 32 << 20)]
    pub max_body_bytes: usize,
    /// Largest record, in bytes.
    #[arg(long, default_value_t = 32 << 20)]
    pub max_record_bytes: usize,
    /// Open long-poll and SSE requests at once.
    #[arg(long, default_value_t = 4096)]
    pub max_live_connections: usize,
    /// Watch observations (long-polls) waiting at once.
    #[arg(long, default_value_t = crate::service::watches::OBSERVERS_DEFAULT)]
    pub max_watch_observations: usize,
    /// How often reads are written to their shards (usage and the idle
    /// clock of streams that expire): at most one WAL PUT per shard per
    /// interval, and read counts a crash can lose.
    #[arg(long, default_value_t = 60_000)]
    pub usage_flush_ms: u64,
    /// Tests only: abort at a step of a dead letter (crash tests).
    #[arg(long, hide = true)]
    pub test_crash_at: Option<crate::service::DeadLetterStep>,
    /// Accept plain-HTTP loopback webhook URLs (development and tests only).
    #[arg(long)]
    pub allow_loopback_webhooks: bool,
    /// Shards (one committer each) the streams are spread over.
    #[arg(long, default_value_t = 1)]
    pub shards: usize,
    /// Appends a shard queues before answering 429.
    #[arg(long, default_value_t = ShardConfig::default().ingest_queue_capacity)]
    pub ingest_queue_capacity: usize,
    /// Bytes of appends a shard stages or has in flight before it stops taking
    /// more from its queue (then the queue fills and appends answer 429).
    #[arg(long, default_value_t = ShardConfig::default().max_pending_bytes)]
    pub max_pending_bytes: usize,
    /// WAL PUTs in flight per shard.
    #[arg(long, default_value_t = ShardConfig::default().pipeline_depth)]
    pub pipeline_depth: usize,
    /// Behind a WAL PUT in flight, start another only once this many bytes
    /// are staged (smaller batches wait and ship together).
    #[arg(long, default_value_t = ShardConfig::default().pipeline_min_bytes)]
    pub pipeline_min_bytes: usize,
    /// Minimum gap between WAL flushes of a shard, in milliseconds (cost control).
    #[arg(long, default_value_t = 0)]
    pub min_flush_gap_ms: u64,
    /// Emulated latency added to every PUT, in milliseconds (benchmarks).
    #[arg(long, default_value_t = 0)]
    pub emulate_put_latency_ms: u64,
    /// Emulated latency added to every GET/LIST/HEAD, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub emulate_get_latency_ms: u64,
    /// tokio runtime: one thread for everything, or a worker per core.
    #[arg(long, value_enum, default_value_t = RuntimeFlavor::Multi)]
    pub runtime: RuntimeFlavor,
    /// Worker threads of the multi-thread runtime (default: one fewer than the
    /// cores, at least one: a core stays free for file syncs and the network).
    #[arg(long)]
    pub worker_threads: Option<usize>,
    #[command(flatten)]
    pub sealing: SealArgs,
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub s3: S3Args,
}

/// Many servers on one store (docs/RUNBOOK.md, "Running a fleet").
#[derive(Args, Debug, Clone)]
pub struct FleetArgs {
    /// Serve as one member of a fleet on this store: heartbeats, placement,
    /// failover, hand-off and routing between members.
    #[arg(long)]
    pub fleet: bool,
    /// How other members and clients reach this one (required with --fleet),
    /// e.g. http://10.0.0.7:8090.
    #[arg(long, requires = "fleet")]
    pub advertise_url: Option<String>,
    /// Heartbeat interval, in milliseconds.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub heartbeat_ms: u64,
    /// A member whose heartbeat has not changed for this long is dead, in
    /// milliseconds (at least twice the heartbeat interval plus one second).
    #[arg(long, default_value_t = 6_000)]
    pub fleet_lease_ms: u64,
    /// A request for a stream served by another member: forward it, or
    /// answer 409 `not_stream_owner` (both with `Streams-Replay-To`).
    #[arg(long, value_enum, default_value_t = FleetRouting::Forward)]
    pub fleet_routing: FleetRouting,
    /// This member's share of shards relative to the others' (1..=64).
    #[arg(long, default_value_t = 1)]
    pub fleet_weight: u32,
}

impl FleetArgs {
    /// The controller's settings, checked (`None` without `--fleet`).
    fn config(&self) -> Result<Option<FleetConfig>, ServeError> {
        if !self.fleet {
            return Ok(None);
        }
        let url = self
            .advertise_url
            .clone()
            .ok_or_else(|| ServeError::Usage("--fleet needs --advertise-url".into()))?;
        check_url(&url).map_err(|e| ServeError::Usage(format!("--advertise-url: {e}")))?;
        check_weight(self.fleet_weight)
            .map_err(|e| ServeError::Usage(format!("--fleet-weight: {e}")))?;
        if self.fleet_lease_ms < 2 * self.heartbeat_ms + LEASE_MARGIN_MS {
            return Err(ServeError::Usage(format!(
                "--fleet-lease-ms {} must be at least twice --heartbeat-ms plus {LEASE_MARGIN_MS}",
                self.fleet_lease_ms
            )));
        }
        let mut config = FleetConfig::new(url, self.heartbeat_ms, self.fleet_lease_ms);
        config.weight = self.fleet_weight;
        Ok(Some(config))
    }
}

/// The sealed tier: when pages move into segments, how long garbage waits,
/// and the local cache of sealed chunks.
#[derive(Args, Debug, Clone)]
pub struct SealArgs {
    /// Local disk cache of sealed chunks, in bytes (0 turns it off).
    #[arg(long, default_value_t = 500_000_000)]
    pub cache_bytes: u64,
    /// Directory of the chunk cache, emptied at start (default: a folder in
    /// the system temp directory named after the listen port).
    #[arg(long)]
    pub cache_dir: Option<std::path::PathBuf>,
    /// Seal when a shard's unsealed page bytes reach this many…
    #[arg(long, default_value_t = ShardConfig::default().seal_bytes)]
    pub seal_bytes: u64,
    /// Acknowledged page bytes a shard holds in memory until they are sealed:
    /// beyond it, appends answer 429 until a seal frees them.
    #[arg(long, default_value_t = ShardConfig::default().max_memory_page_bytes)]
    pub max_unsealed_bytes: u64,
    /// …or this many WAL objects were written since its last seal…
    #[arg(long, default_value_t = ShardConfig::default().seal_objects)]
    pub seal_objects: u64,
    /// …or its oldest unsealed change is this old, in milliseconds.
    #[arg(long, default_value_t = ShardConfig::default().seal_age.as_millis() as u64)]
    pub seal_age_ms: u64,
    /// Merge a shard's index runs into one when it has more than this many.
    #[arg(long, default_value_t = ShardConfig::default().max_index_runs)]
    pub max_index_runs: usize,
    /// How long unreferenced objects wait before deletion, in milliseconds.
    #[arg(long, default_value_t = ShardConfig::default().gc_grace.as_millis() as u64)]
    pub gc_grace_ms: u64,
}

impl SealArgs {
    /// The chunk cache these flags ask for (`None` when turned off).
    fn chunk_cache(&self, listen: SocketAddr) -> Result<Option<Arc<ChunkCache>>, ServeError> {
        if self.cache_bytes == 0 {
            return Ok(None);
        }
        let dir = self.cache_dir.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("strata-chunk-cache-{}", listen.port()))
        });
        let cache = ChunkCache::new(dir.clone(), self.cache_bytes)
            .map_err(|e| ServeError::Usage(format!("chunk cache at {}: {e}", dir.display())))?;
        Ok(Some(Arc::new(cache)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeFlavor {
    /// One thread runs HTTP and the shards (blocking file I/O on its own pool).
    Current,
    /// A worker thread per core.
    Multi,
}

#[derive(Args, Debug, Clone, Default)]
pub struct S3Args {
    /// S3 endpoint URL (default: AWS, or AWS_ENDPOINT_URL).
    #[arg(long)]
    pub s3_endpoint: Option<String>,
    #[arg(long)]
    pub s3_region: Option<String>,
    #[arg(long)]
    pub s3_access_key_id: Option<String>,
    #[arg(long)]
    pub s3_secret_access_key: Option<String>,
    /// Allow plain-HTTP S3 endpoints (loopback test servers).
    #[arg(long)]
    pub s3_allow_http: bool,
}

impl S3Args {
    pub fn options(&self) -> S3Options {
        S3Options {
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            access_key_id: self.s3_access_key_id.clone(),
            secret_access_key: self.s3_secret_access_key.clone(),
            allow_http: self.s3_allow_http,
        }
    }
}

impl ServeArgs {
    /// What `SIGHUP` reads again.
    fn config_files(&self) -> super::reload::ConfigFiles {
        super::reload::ConfigFiles {
            listen: self.listen,
            auth_tokens: self.auth_tokens.clone(),
            project_tokens: self.project_tokens.clone(),
            tokens_file: self.tokens_file.clone(),
            limits_file: self.limits_file.clone(),
        }
    }
}

/// A configuration error as a usage error.
fn usage(e: super::reload::ConfigError) -> ServeError {
    ServeError::Usage(e.to_string())
}

pub fn run(args: ServeArgs) -> Result<(), ServeError> {
    let runtime = match args.runtime {
        RuntimeFlavor::Current => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        RuntimeFlavor::Multi => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let workers = args
                .worker_threads
                .unwrap_or(cores.saturating_sub(1))
                .max(1);
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
        }
    }
    .map_err(|e| ServeError::Usage(e.to_string()))?;
    runtime.block_on(serve(args))
}

async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    // Bind before taking ownership of any shard: a second instance started
    // by mistake on a busy address must fail without fencing the first.
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: args.listen,
            source,
        })?;
    let metrics_listener = match args.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Listen { addr, source })?,
        ),
        None => None,
    };
    let options = StoreOptions {
        s3: args.s3.options(),
        latency: Latency {
            put: Duration::from_millis(args.emulate_put_latency_ms),
            get: Duration::from_millis(args.emulate_get_latency_ms),
            other: Duration::from_millis(args.emulate_get_latency_ms),
        },
    };
    let store = open_store(&args.store, &options)?;
    let server = Server::open(&args, store, listener).await?;
    if let Some(listener) = metrics_listener {
        tracing::info!(addr = ?listener.local_addr().ok(), "metrics: serving /metrics here");
        tokio::spawn(crate::http::metrics_listener(
            listener,
            server.state.clone(),
        ));
    }
    #[cfg(unix)]
    super::reload::spawn_reload(args.config_files(), server.state.clone()).map_err(usage)?;
    let local = server.local_addr();
    tracing::info!(%local, store = %args.store, shards = server.shards.len(), "listening");
    console(format_args!(
        "listening on http://{local} (store {})",
        args.store
    ));
    server.run(shutdown_signal()).await
}

/// A server over an opened store, with its shards claimed, bound to its
/// listener but not serving yet ([`Server::run`]). `strata serve` builds one
/// from its flags; tests build one over a store of their own.
pub struct Server {
    listener: TcpListener,
    local: SocketAddr,
    state: Arc<AppState>,
    shards: Vec<Shard>,
    fleet: Option<Arc<Fleet>>,
}

impl Server {
    /// Claims the shards of `store` (fencing any previous owner) and sets up
    /// both HTTP surfaces as `args` say. `args.store`, `args.listen` (but for
    /// the development key's loopback check) and the emulated latencies are
    /// not used: the store and the listener are given.
    pub async fn open(
        args: &ServeArgs,
        store: Arc<dyn ObjectStore>,
        listener: TcpListener,
    ) -> Result<Server, ServeError> {
        let dev_default_key = match &args.dev_default_key {
            Some(text) => {
                if !args.listen.ip().is_loopback() && !args.allow_dev_key_on_public_address {
                    return Err(ServeError::Usage(
                        "--dev-default-key is for development: refusing it on a non-loopback address \
                         (pass --allow-dev-key-on-public-address to override)"
                            .into(),
                    ));
                }
                tracing::warn!("DEVELOPMENT MODE: requests without Stream-Encryption-Key use the --dev-default-key key; never run this in production");
                console("WARNING: --dev-default-key is on: raw-route requests without a key all share one development key");
                Some(
                    StreamKey::parse(text)
                        .map_err(|e| ServeError::Usage(format!("--dev-default-key: {e}")))?,
                )
            }
            None => None,
        };
        if args
            .operator_token
            .as_ref()
            .is_some_and(|t| t.len() < 16 || !t.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(ServeError::Usage(
                "--operator-token: at least 16 visible ASCII characters".into(),
            ));
        }
        let files = args.config_files();
        let tenancy = super::reload::tenancy(&files).map_err(usage)?;
        let limits = super::reload::limits(&files).map_err(usage)?;
        let local = listener.local_addr().map_err(|source| ServeError::Listen {
            addr: args.listen,
            source,
        })?;
        let env = EngineEnv::production(store.clone());
        let instance = InstanceId(strata_engine::Entropy::bytes16(&OsEntropy));
        let config = ShardConfig {
            ingest_queue_capacity: args.ingest_queue_capacity,
            max_pending_bytes: args.max_pending_bytes,
            pipeline_depth: args.pipeline_depth,
            pipeline_min_bytes: args.pipeline_min_bytes,
            min_flush_gap: Duration::from_millis(args.min_flush_gap_ms),
            max_append_bytes: args.max_body_bytes.max(args.max_record_bytes),
            seal_bytes: args.sealing.seal_bytes,
            max_memory_page_bytes: args.sealing.max_unsealed_bytes,
            seal_objects: args.sealing.seal_objects,
            seal_age: Duration::from_millis(args.sealing.seal_age_ms),
            max_index_runs: args.sealing.max_index_runs,
            gc_grace: Duration::from_millis(args.sealing.gc_grace_ms),
            chunk_cache: args.sealing.chunk_cache(local)?,
            ..ShardConfig::default()
        };
        let shard_count = args.shards.max(1);
        crate::service::topology::settle(&store, shard_count)
            .await
            .map_err(|e| ServeError::Usage(e.to_string()))?;
        let fleet_config = args.fleet.config()?;
        let clock: Arc<dyn strata_engine::Clock> = Arc::new(SystemClock);
        let mut shards = Vec::new();
        let router = if fleet_config.is_some() {
            let count = u32::try_from(shard_count)
                .map_err(|_| ServeError::Usage("--shards is too large".into()))?;
            ShardRouter::fleet(count, clock.clone())?
        } else {
            for i in 0..shard_count {
                let index = ShardIndex(i as u32);
                let name = index
                    .shard_name()
                    .map_err(|e| ServeError::Usage(e.to_string()))?;
                let shard = Shard::open(env.clone(), name.clone(), instance, config.clone())
                    .await
                    .map_err(|source| ServeError::Shard {
                        shard: name.as_str().to_string(),
                        source,
                    })?;
                let report = shard.last_recovery();
                tracing::info!(shard = %name.as_str(), epoch = report.epoch, wal_objects = report.wal_objects_applied, streams = report.streams, "shard open");
                shards.push(shard);
            }
            ShardRouter::new(shards.clone())?
        };
        let registry = Registry::new(
            store.clone(),
            RetryPolicy::default(),
            strata_engine::Clock::now_ms(&SystemClock),
        );
        let streams = Arc::new(Streams::with_router(
            registry,
            Arc::new(router),
            clock,
            Arc::new(OsEntropy),
            StreamsConfig {
                max_record_bytes: args.max_record_bytes,
                watch_observations_max: args.max_watch_observations,
                crash_at: args.test_crash_at,
                usage_flush_interval: Duration::from_millis(args.usage_flush_ms.max(1)),
                ..StreamsConfig::default()
            },
        ));
        streams.admission().replace(limits);
        let signer = Signer::load(&store, || streams.random_bytes16())
            .await
            .map_err(|e| ServeError::Usage(e.to_string()))?;
        let peer_key = PeerKey::new(&signer.derive(PEER_KEY_LABEL));
        let subscriptions = Subscriptions::open(
            streams.clone(),
            signer,
            args.allow_loopback_webhooks,
            fleet_config.is_some(),
        )
        .await
        .map_err(|e| ServeError::Usage(e.to_string()))?;
        streams.set_observer(Arc::new(SubscriptionObserver(Arc::downgrade(
            &subscriptions,
        ))));
        // Streams that expire while nobody touches them: their deadlines, from
        // the registry once now, then as they are created or used.
        tokio::spawn(crate::service::run_reaper(Arc::downgrade(&streams)));
        tokio::spawn(crate::service::usage::run_flusher(
            Arc::downgrade(&streams),
            Duration::from_millis(args.usage_flush_ms.max(1)),
        ));
        streams.begin_startup_scan();
        {
            let streams = streams.clone();
            tokio::spawn(async move {
                match streams.startup_scan().await {
                    Ok(scan) => tracing::info!(
                        expiring = scan.expiring,
                        catalog_added = scan.catalog_added,
                        catalog_removed = scan.catalog_removed,
                        "registry scanned: expiry deadlines loaded, catalogs reconciled"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not scan the registry; streams expire on access and catalogs are not reconciled")
                    }
                }
            });
        }
        let chunk_cache = config.chunk_cache.clone();
        let state = Arc::new(AppState::new(
            streams,
            subscriptions,
            HttpConfig {
                tenancy: TenancyCell::new(tenancy),
                dev_default_key,
                long_poll_timeout: Duration::from_millis(args.long_poll_timeout_ms),
                max_body_bytes: args.max_body_bytes,
                max_live_connections: args.max_live_connections,
                append_timeout: Duration::from_millis(args.append_timeout_ms),
                metrics_on_main_listener: args.metrics_listen.is_none(),
                operator_token: args.operator_token.clone(),
                max_buffered_body_bytes: args.max_buffered_body_bytes,
                max_live_buffer_bytes: args.max_live_buffer_bytes,
                effective_config: args.effective(),
            },
        ));
        if let Some(cache) = chunk_cache {
            state.metrics.set_chunk_cache(cache);
        }
        let fleet = match fleet_config {
            Some(fleet_config) => {
                let client = crate::http::common::state::peer_client();
                let fleet = Fleet::new(
                    instance,
                    fleet_config,
                    store.clone(),
                    state.streams.clone(),
                    Arc::new(EngineOpener {
                        env: env.clone(),
                        instance,
                        config: config.clone(),
                    }),
                    Arc::new(HttpPeers {
                        client: client.clone(),
                        key: peer_key.clone(),
                    }),
                );
                state
                    .subscriptions
                    .set_peers(Arc::new(HttpSubscriptionPeers {
                        client: client.clone(),
                        key: peer_key.clone(),
                    }));
                state.streams.set_source_reads(Arc::new(HttpSourceReads {
                    peers: HttpSubscriptionPeers {
                        client: client.clone(),
                        key: peer_key.clone(),
                    },
                }));
                state
                    .streams
                    .set_dead_letter_peers(Arc::new(HttpDeadLetterPeers {
                        peers: HttpSubscriptionPeers {
                            client: client.clone(),
                            key: peer_key.clone(),
                        },
                    }));
                let _ = state.fleet.set(FleetHttp {
                    fleet: fleet.clone(),
                    routing: args.fleet.fleet_routing,
                    client,
                    peer_key,
                });
                // One beat before serving: a member of a fleet with no other
                // live member claims its shards at once.
                fleet.beat().await;
                tracing::info!(instance = %instance, owned = state.streams.router().owned().len(), "fleet: joined");
                Some(fleet)
            }
            None => None,
        };
        Ok(Server {
            listener,
            local,
            state,
            shards,
            fleet,
        })
    }

    /// This member's fleet controller (`None` without `--fleet`).
    pub fn fleet(&self) -> Option<&Arc<Fleet>> {
        self.fleet.as_ref()
    }

    /// The server's state (tests reach the service through it).
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The claimed shards (tests seal or inspect them).
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// Serves until `shutdown` completes, then stops accepting, lets requests
    /// in flight finish (at most 10 s), and flushes and stops every shard.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let Server {
            listener,
            state,
            shards,
            fleet,
            ..
        } = self;
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        if let Some(fleet) = &fleet {
            tokio::spawn(fleet.clone().run());
        }
        // A fleet member hands its shards off while it still accepts
        // requests (they are forwarded to the new owners meanwhile).
        let draining = fleet.clone();
        let shutdown = async move {
            shutdown.await;
            if let Some(fleet) = draining {
                tracing::info!("draining: handing shards to other members");
                console("draining: handing shards to other members");
                fleet.drain().await;
            }
        };
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (socket, _) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            continue;
                        }
                    };
                    let _ = socket.set_nodelay(true);
                    let state = state.clone();
                    let connection = http1::Builder::new()
                        .keep_alive(true)
                        .max_buf_size(crate::http::CONNECTION_BUFFER_BYTES_MAX)
                        .serve_connection(
                            TokioIo::new(socket),
                            service_fn(move |request| crate::http::handle(state.clone(), request)),
                        );
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        if let Err(e) = connection.await {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                    });
                }
                _ = &mut shutdown => break,
            }
        }
        tracing::info!("shutting down: finishing requests in flight");
        console("shutting down: finishing requests in flight");
        drop(listener);
        // Live readers end, paced over a few seconds, and reconnect.
        state.begin_closing();
        if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("some connections were still open after 10 s");
        }
        state.streams.flush_usage().await;
        for shard in &shards {
            shard.shutdown().await;
        }
        if let Some(fleet) = &fleet {
            fleet.stop().await;
        }
        tracing::info!("stopped");
        console("stopped");
        Ok(())
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
