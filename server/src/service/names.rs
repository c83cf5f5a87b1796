//! The one place that names the server's objects, beside the engine's shard
//! objects (`strata_engine::layout`). Every key is a pure function of
//! identity, so a retry writes the same key; no name carries customer
//! plaintext (stream names and subscription ids appear only as hashes).
//!
//! ```text
//! registry/<project>/streams/<name-hash>.json      stream descriptors (CAS)
//! registry/<project>/subscriptions/<id-hash>.json  subscriptions (CAS)
//! registry/<project>/catalog/<bucket:02>.json      catalog buckets (CAS)
//! server/webhook-signing-key.json                  the server's Ed25519 signing key
//! topology.json                                    the shard count (CAS, written once)
//! fleet/<instance>.json                            a fleet member's heartbeat (its own, overwritten)
//! ```

use hex::encode as hex;
use object_store::path::Path;
use sha2::{Digest, Sha256};

/// 32 hex digits of SHA-256 over a name: names in object keys carry no plaintext.
fn name_hash(domain: &str, name: &str) -> String {
    let mut h = Sha256::new();
    h.update(domain.as_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    hex(&h.finalize()[..16])
}

/// The descriptor of stream `name` in `project` (project names are validated
/// by the caller to be path-safe).
pub fn stream_descriptor(project: &str, name: &str) -> Path {
    Path::from(format!(
        "registry/{project}/streams/{}.json",
        name_hash("stream", name)
    ))
}

/// Which catalog bucket of `buckets` lists stream `name`.
pub fn catalog_bucket_of(name: &str, buckets: u16) -> u16 {
    let mut h = Sha256::new();
    h.update(b"catalog\0");
    h.update(name.as_bytes());
    let digest = h.finalize();
    (u16::from_le_bytes([digest[0], digest[1]])) % buckets.max(1)
}

/// Catalog bucket `bucket` of `project`: the names (and creation facts) of
/// the live streams whose name hashes to it.
pub fn catalog_bucket(project: &str, bucket: u16) -> Path {
    Path::from(format!("registry/{project}/catalog/{bucket:02}.json"))
}

/// The folder of every project's registry (its children are the projects).
pub fn registry_prefix() -> Path {
    Path::from("registry")
}

/// The folder of `project`'s subscription records.
pub fn subscriptions_prefix(project: &str) -> Path {
    Path::from(format!("registry/{project}/subscriptions"))
}

/// The record of subscription `id` in `project`.
pub fn subscription(project: &str, id: &str) -> Path {
    Path::from(format!(
        "registry/{project}/subscriptions/{}.json",
        name_hash("subscription", id)
    ))
}

/// The store's shard topology (the shard count, fixed at first start).
pub fn topology() -> Path {
    Path::from("topology.json")
}

/// The server's webhook signing key (an Ed25519 key pair, created once).
pub fn webhook_signing_key() -> Path {
    Path::from("server/webhook-signing-key.json")
}

/// The folder of fleet heartbeats (listed by every fleet member).
pub fn fleet_prefix() -> Path {
    Path::from("fleet")
}

/// The heartbeat of fleet member `instance` (32 hex digits, random per
/// process start).
pub fn fleet_heartbeat(instance: &strata_engine::InstanceId) -> Path {
    Path::from(format!("fleet/{instance}.json"))
}

/// The instance a heartbeat key names, if it is one (`fleet/<32 hex>.json`).
pub fn fleet_instance_of(key: &Path) -> Option<strata_engine::InstanceId> {
    let name = key.as_ref().strip_prefix("fleet/")?.strip_suffix(".json")?;
    let mut id = [0u8; 16];
    hex::decode_to_slice(name, &mut id).ok()?;
    Some(strata_engine::InstanceId(id))
}
