//! The effective configuration of `strata serve`, as operators read it at
//! `GET /debug/config`: every setting after defaults and environment
//! variables, secrets left out (tokens are counted, keys and the S3 secret
//! only said to be set).

use serde_json::{json, Value};

use super::serve::ServeArgs;

impl ServeArgs {
    /// The settings in force, without a secret.
    pub fn effective(&self) -> Value {
        let set = |v: &Option<String>| v.is_some();
        let seal = &self.sealing;
        let fleet = &self.fleet;
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "listen": self.listen.to_string(),
            "metricsListen": self.metrics_listen.map(|a| a.to_string()),
            "store": self.store,
            "shards": self.shards,
            "tokens": {
                "authTokens": self.auth_tokens.len(),
                "projectTokens": self.project_tokens.len(),
                "tokensFile": self.tokens_file.as_ref().map(|p| p.display().to_string()),
            },
            "limitsFile": self.limits_file.as_ref().map(|p| p.display().to_string()),
            "devDefaultKey": set(&self.dev_default_key),
            "operatorToken": set(&self.operator_token),
            "longPollTimeoutMs": self.long_poll_timeout_ms,
            "appendTimeoutMs": self.append_timeout_ms,
            "maxBodyBytes": self.max_body_bytes,
            "maxBufferedBodyBytes": self.max_buffered_body_bytes,
            "maxLiveBufferBytes": self.max_live_buffer_bytes,
            "maxRecordBytes": self.max_record_bytes,
            "maxLiveConnections": self.max_live_connections,
            "maxWatchObservations": self.max_watch_observations,
            "usageFlushMs": self.usage_flush_ms,
            "ingestQueueCapacity": self.ingest_queue_capacity,
            "maxPendingBytes": self.max_pending_bytes,
            "pipelineDepth": self.pipeline_depth,
            "pipelineMinBytes": self.pipeline_min_bytes,
            "minFlushGapMs": self.min_flush_gap_ms,
            "emulatePutLatencyMs": self.emulate_put_latency_ms,
            "emulateGetLatencyMs": self.emulate_get_latency_ms,
            "runtime": format!("{:?}", self.runtime),
            "workerThreads": self.worker_threads,
            "sealing": {
                "cacheBytes": seal.cache_bytes,
                "cacheDir": seal.cache_dir.as_ref().map(|p| p.display().to_string()),
                "sealBytes": seal.seal_bytes,
                "maxUnsealedBytes": seal.max_unsealed_bytes,
                "sealObjects": seal.seal_objects,
                "sealAgeMs": seal.seal_age_ms,
                "maxIndexRuns": seal.max_index_runs,
                "gcGraceMs": seal.gc_grace_ms,
            },
            "fleet": {
                "enabled": fleet.fleet,
                "advertiseUrl": fleet.advertise_url,
                "heartbeatMs": fleet.heartbeat_ms,
                "leaseMs": fleet.fleet_lease_ms,
                "routing": format!("{:?}", fleet.fleet_routing),
                "weight": fleet.fleet_weight,
            },
            "s3": {
                "endpoint": self.s3.s3_endpoint,
                "region": self.s3.s3_region,
                "accessKeyId": set(&self.s3.s3_access_key_id),
                "secretAccessKey": set(&self.s3.s3_secret_access_key),
                "allowHttp": self.s3.s3_allow_http,
            },
        })
    }
}
