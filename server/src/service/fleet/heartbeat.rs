//! The heartbeat object `fleet/<instance>.json` (docs/FORMATS.md, "Fleet
//! heartbeat"): written by its member alone, overwritten every beat, read by
//! the others to learn its URL, weight and state. Decoding checks the format,
//! the instance id against the key, the URL and the weight before any field
//! is trusted; an object over [`HEARTBEAT_BYTES_MAX`] is not read at all.

use serde::{Deserialize, Serialize};
use strata_engine::InstanceId;

/// Format version of heartbeat objects.
pub const HEARTBEAT_FORMAT: u32 = 1;
/// Largest heartbeat object a member reads.
pub const HEARTBEAT_BYTES_MAX: u64 = 16 * 1024;
/// Largest weight a member may announce (placement gives it that many
/// virtual members per shard).
pub const WEIGHT_MAX: u32 = 64;
/// Longest advertised URL.
pub const URL_BYTES_MAX: usize = 2048;

/// Whether a member takes shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    /// Owns the shards placement gives it.
    Serving,
    /// Stopping: hands its shards off and owns none while a member serves.
    Draining,
}

/// What a member reports about its work (for operators; placement does not
/// read it, so a busy member's shards do not move back and forth).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Load {
    pub shards_owned: u32,
    /// Appends acknowledged per second over the last beat.
    pub append_rate: u64,
    /// Appends queued in its shards when the beat was written.
    pub queue_depth: u64,
}

/// One heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub format: u32,
    /// 32 hex digits; equal to the key's.
    pub instance: String,
    /// How other members and clients reach this one (`http://` or `https://`).
    pub url: String,
    pub started_ms: u64,
    /// Counts the beats of this instance, from 1.
    pub beat: u64,
    /// The writer's clock when it wrote the beat (informational: liveness is
    /// judged by each reader's own clock, see `membership`).
    pub written_ms: u64,
    pub state: MemberState,
    /// 1..=64: its share of shards, relative to the others'.
    pub weight: u32,
    pub load: Load,
    /// The shards it owned when it wrote this beat (after the beat's claims
    /// and releases): a bitmap in hex, bit `i % 8` of byte `i / 8` for shard
    /// `i`. A member that wants a shard this one holds claims it once a beat
    /// shows it released (or a hint says so).
    pub owned: String,
}

/// The `owned` bitmap of `shards`.
pub fn owned_bitmap(shards: impl IntoIterator<Item = u32>) -> String {
    let mut bytes: Vec<u8> = Vec::new();
    for shard in shards {
        let byte = (shard / 8) as usize;
        if bytes.len() <= byte {
            bytes.resize(byte + 1, 0);
        }
        bytes[byte] |= 1 << (shard % 8);
    }
    hex::encode(bytes)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    #[error("heartbeat is not valid JSON: {0}")]
    Json(String),
    #[error("heartbeat has format {0}; this server reads format {HEARTBEAT_FORMAT}")]
    Format(u32),
    #[error("heartbeat of {key} names instance {found}")]
    WrongInstance { key: String, found: String },
    #[error("heartbeat URL {0:?} is not an http(s) URL of at most {URL_BYTES_MAX} bytes")]
    Url(String),
    #[error("heartbeat weight {0} is outside 1..={WEIGHT_MAX}")]
    Weight(u32),
    #[error("heartbeat `owned` is not a hex bitmap")]
    Owned,
}

impl Heartbeat {
    /// Whether this beat says its member owned `shard`.
    pub fn owns(&self, shard: u32) -> bool {
        let byte = (shard / 8) as usize * 2;
        self.owned
            .get(byte..byte + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .is_some_and(|b| b & (1 << (shard % 8)) != 0)
    }

    pub fn encode(&self) -> bytes::Bytes {
        // A struct of strings and integers always serialises.
        serde_json::to_vec(self).map_or_else(|_| bytes::Bytes::new(), bytes::Bytes::from)
    }

    /// Decodes and checks the heartbeat found under `instance`'s key.
    pub fn decode(instance: &InstanceId, bytes: &[u8]) -> Result<Heartbeat, HeartbeatError> {
        let hb: Heartbeat =
            serde_json::from_slice(bytes).map_err(|e| HeartbeatError::Json(e.to_string()))?;
        if hb.format != HEARTBEAT_FORMAT {
            return Err(HeartbeatError::Format(hb.format));
        }
        if hb.instance != instance.to_string() {
            return Err(HeartbeatError::WrongInstance {
                key: instance.to_string(),
                found: hb.instance,
            });
        }
        check_url(&hb.url)?;
        check_weight(hb.weight)?;
        if !hb.owned.len().is_multiple_of(2) || !hb.owned.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(HeartbeatError::Owned);
        }
        Ok(hb)
    }
}

/// An advertised URL: `http://` or `https://`, a host, no query, bounded.
pub fn check_url(url: &str) -> Result<(), HeartbeatError> {
    let bad = || HeartbeatError::Url(url.chars().take(80).collect());
    if url.len() > URL_BYTES_MAX {
        return Err(bad());
    }
    let parsed = url::Url::parse(url).map_err(|_| bad())?;
    let scheme_ok = matches!(parsed.scheme(), "http" | "https");
    if !scheme_ok || parsed.host_str().is_none() || parsed.query().is_some() {
        return Err(bad());
    }
    Ok(())
}

pub fn check_weight(weight: u32) -> Result<(), HeartbeatError> {
    if (1..=WEIGHT_MAX).contains(&weight) {
        Ok(())
    } else {
        Err(HeartbeatError::Weight(weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat() -> Heartbeat {
        Heartbeat {
            format: HEARTBEAT_FORMAT,
            instance: InstanceId([7; 16]).to_string(),
            url: "http://10.0.0.7:8090".into(),
            started_ms: 1,
            beat: 3,
            written_ms: 5,
            state: MemberState::Serving,
            weight: 1,
            load: Load::default(),
            owned: owned_bitmap([0, 9]),
        }
    }

    #[test]
    fn the_owned_bitmap_names_exactly_its_shards() {
        let hb = beat();
        assert_eq!(hb.owned, "0102");
        let owned: Vec<u32> = (0..64).filter(|s| hb.owns(*s)).collect();
        assert_eq!(owned, vec![0, 9]);
        assert_eq!(owned_bitmap([]), "");
    }

    #[test]
    fn a_heartbeat_round_trips_and_its_checks_hold() {
        let id = InstanceId([7; 16]);
        let hb = beat();
        assert_eq!(Heartbeat::decode(&id, &hb.encode()).unwrap(), hb);
        assert!(matches!(
            Heartbeat::decode(&InstanceId([8; 16]), &hb.encode()),
            Err(HeartbeatError::WrongInstance { .. })
        ));
        let mut bad = hb.clone();
        bad.format = 2;
        assert!(matches!(
            Heartbeat::decode(&id, &bad.encode()),
            Err(HeartbeatError::Format(2))
        ));
        for url in ["ftp://x", "http://", "not a url", "http://h/?q=1"] {
            let mut bad = hb.clone();
            bad.url = url.into();
            assert!(
                matches!(
                    Heartbeat::decode(&id, &bad.encode()),
                    Err(HeartbeatError::Url(_))
                ),
                "{url}"
            );
        }
        let mut bad = hb.clone();
        bad.owned = "0g".into();
        assert!(matches!(
            Heartbeat::decode(&id, &bad.encode()),
            Err(HeartbeatError::Owned)
        ));
        let mut bad = hb;
        bad.weight = 0;
        assert!(matches!(
            Heartbeat::decode(&id, &bad.encode()),
            Err(HeartbeatError::Weight(0))
        ));
        assert!(Heartbeat::decode(&id, b"{").is_err());
    }
}
