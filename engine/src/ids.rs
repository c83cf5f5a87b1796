//! Identifiers: shard names, instance ids, stream ids.

use std::fmt;

use sha2::{Digest, Sha256};

pub use strata_wal::StreamRef;

/// The 16-byte id of a stream: a hash of its project and name, so object names
/// never carry customer plaintext.
pub fn stream_id(project: &str, name: &str) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(b"strata/stream-id/v1\0");
    h.update((project.len() as u64).to_le_bytes());
    h.update(project.as_bytes());
    h.update(name.as_bytes());
    let digest = h.finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid shard name {name:?}: use 1-64 characters of [a-z0-9-], starting with a letter or digit")]
pub struct InvalidShardName {
    pub name: String,
}

/// A shard's name: the path component of `shards/<name>/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardName(String);

impl ShardName {
    pub fn new(name: &str) -> Result<Self, InvalidShardName> {
        let valid = !name.is_empty()
            && name.len() <= strata_wal::format::SHARD_NAME_BYTES_MAX
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !name.starts_with('-');
        if valid {
            Ok(ShardName(name.to_string()))
        } else {
            Err(InvalidShardName {
                name: name.to_string(),
            })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ShardName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A running server instance (random at start-up).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct InstanceId(pub [u8; 16]);

impl fmt::Debug for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InstanceId({})", hex::encode(self.0))
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names() {
        assert!(ShardName::new("s0").is_ok());
        assert!(ShardName::new("a-b-1").is_ok());
        for bad in ["", "-a", "A", "a/b", "a b", &"x".repeat(65)] {
            assert!(ShardName::new(bad).is_err(), "{bad:?}");
        }
    }

    /// Every WAL header names its shard: a name the format cannot hold is
    /// refused here, before a shard can be opened under it.
    #[test]
    fn shard_names_fit_the_wal_header() {
        let longest = "x".repeat(strata_wal::format::SHARD_NAME_BYTES_MAX);
        assert!(ShardName::new(&longest).is_ok());
        let over = "x".repeat(strata_wal::format::SHARD_NAME_BYTES_MAX + 1);
        assert!(ShardName::new(&over).is_err());
    }

    #[test]
    fn stream_ids_separate_projects() {
        assert_ne!(stream_id("p", "ab"), stream_id("pa", "b"));
        assert_eq!(stream_id("p", "x"), stream_id("p", "x"));
    }
}
