//! The one place that names objects. Every key is a pure function of identity
//! (shard, slot, id), so a retry writes the same key; no name carries customer
//! plaintext (streams appear only as hashes).
//!
//! ```text
//! shards/<shard>/manifest                        the shard's manifest (CAS)
//! shards/<shard>/wal/<slot:020>                  WAL objects (create-only)
//! shards/<shard>/seg/<id:020>                    segment objects (create-only, immutable)
//! shards/<shard>/index/<id:020>                  index runs (create-only, immutable)
//! ```
//!
//! The server's own objects (the registry, catalog, subscriptions, topology)
//! are named by `strata-server`'s `service::names`, beside these prefixes.

use object_store::path::Path;

use crate::ids::ShardName;

const WAL_SLOT_DIGITS: usize = 20;

/// The id of a segment object or index run: the writer epoch in the high 32
/// bits and a per-shard counter (from the manifest) in the low 32 bits, so two
/// owners can never choose the same name, and a retry by one writes the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub u64);

impl ObjectId {
    pub fn new(epoch: u64, counter: u64) -> Self {
        ObjectId(((epoch & 0xffff_ffff) << 32) | (counter & 0xffff_ffff))
    }

    /// The (low 32 bits of the) writer epoch that named the object.
    pub fn epoch(self) -> u64 {
        self.0 >> 32
    }
}

/// The immutable object kinds named by an [`ObjectId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImmutableKind {
    Segment,
    IndexRun,
}

impl ImmutableKind {
    fn dir(self) -> &'static str {
        match self {
            ImmutableKind::Segment => "seg",
            ImmutableKind::IndexRun => "index",
        }
    }
}

/// Where an operator repair moves a damaged object: `quarantine/<its
/// path>.<unix ms>` (the time keeps repeated quarantines of one name apart).
pub fn quarantine(path: &Path, at_ms: u64) -> Path {
    Path::from(format!("quarantine/{path}.{at_ms}"))
}

/// The folder under which every shard lives (`shards/`).
pub fn shards_root() -> Path {
    Path::from("shards")
}

/// The shard a `shards/<shard>` folder names, from a delimited listing.
pub fn parse_shard_folder(path: &Path) -> Option<ShardName> {
    let mut parts = path.parts();
    if parts.next()?.as_ref() != "shards" {
        return None;
    }
    let name = ShardName::new(parts.next()?.as_ref()).ok()?;
    parts.next().is_none().then_some(name)
}

/// Object names of one shard.
#[derive(Debug, Clone)]
pub struct ShardLayout {
    shard: ShardName,
}

impl ShardLayout {
    pub fn new(shard: ShardName) -> Self {
        ShardLayout { shard }
    }

    pub fn shard(&self) -> &ShardName {
        &self.shard
    }

    pub fn root(&self) -> Path {
        Path::from(format!("shards/{}", self.shard))
    }

    pub fn manifest(&self) -> Path {
        Path::from(format!("shards/{}/manifest", self.shard))
    }

    /// The retained copy of manifest `version` (see `shard::history`).
    pub fn manifest_history(&self, version: u64) -> Path {
        Path::from(format!(
            "shards/{}/manifest-history/{version:0width$}",
            self.shard,
            width = WAL_SLOT_DIGITS
        ))
    }

    pub fn manifest_history_prefix(&self) -> Path {
        Path::from(format!("shards/{}/manifest-history", self.shard))
    }

    /// The version a retained manifest copy's name encodes.
    pub fn parse_manifest_history(&self, path: &Path) -> Option<u64> {
        self.parse_numbered(path, "manifest-history")
    }

    pub fn wal_prefix(&self) -> Path {
        Path::from(format!("shards/{}/wal", self.shard))
    }

    pub fn wal(&self, slot: u64) -> Path {
        Path::from(format!(
            "shards/{}/wal/{slot:0width$}",
            self.shard,
            width = WAL_SLOT_DIGITS
        ))
    }

    /// The folder holding every object of `kind`.
    pub fn immutable_prefix(&self, kind: ImmutableKind) -> Path {
        Path::from(format!("shards/{}/{}", self.shard, kind.dir()))
    }

    pub fn immutable(&self, kind: ImmutableKind, id: ObjectId) -> Path {
        Path::from(self.immutable_name(kind, id))
    }

    /// The name `immutable` parses into a [`Path`], as a plain string.
    fn immutable_name(&self, kind: ImmutableKind, id: ObjectId) -> String {
        format!(
            "shards/{}/{}/{:0width$}",
            self.shard,
            kind.dir(),
            id.0,
            width = WAL_SLOT_DIGITS
        )
    }

    pub fn segment(&self, id: ObjectId) -> Path {
        self.immutable(ImmutableKind::Segment, id)
    }

    /// A segment's name as a string (what `segment` displays as), without
    /// parsing it into a [`Path`]: the chunk cache keys every chunk a read
    /// visits by it, and a read may visit a thousand.
    pub fn segment_name(&self, id: ObjectId) -> String {
        self.immutable_name(ImmutableKind::Segment, id)
    }

    pub fn index_run(&self, id: ObjectId) -> Path {
        self.immutable(ImmutableKind::IndexRun, id)
    }

    /// The id a segment or index-run name encodes.
    pub fn parse_object_id(&self, path: &Path, kind: ImmutableKind) -> Option<ObjectId> {
        self.parse_numbered(path, kind.dir()).map(ObjectId)
    }

    /// The slot a WAL object's name encodes, if `path` is one of this shard's.
    pub fn parse_wal_slot(&self, path: &Path) -> Option<u64> {
        self.parse_numbered(path, "wal")
    }

    /// `shards/<shard>/<kind>/<20 digits>` → the number.
    fn parse_numbered(&self, path: &Path, kind: &str) -> Option<u64> {
        let mut parts = path.parts();
        for want in ["shards", self.shard.as_str(), kind] {
            if parts.next()?.as_ref() != want {
                return None;
            }
        }
        let name = parts.next()?;
        if parts.next().is_some() {
            return None;
        }
        let name = name.as_ref();
        if name.len() != WAL_SLOT_DIGITS || !name.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        name.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_names_round_trip_and_sort() {
        let l = ShardLayout::new(ShardName::new("s0").unwrap());
        assert_eq!(l.wal(42).as_ref(), "shards/s0/wal/00000000000000000042");
        assert_eq!(l.parse_wal_slot(&l.wal(42)), Some(42));
        assert_eq!(l.parse_wal_slot(&l.wal(u64::MAX)), Some(u64::MAX));
        assert!(l.wal(9).as_ref() < l.wal(10).as_ref());
        assert_eq!(
            l.parse_wal_slot(&Path::from("shards/s1/wal/00000000000000000042")),
            None
        );
        assert_eq!(l.parse_wal_slot(&l.manifest()), None);
        assert_eq!(l.parse_wal_slot(&Path::from("shards/s0/wal/42")), None);
        let id = ObjectId::new(3, 7);
        assert_eq!(id.epoch(), 3);
        for kind in [ImmutableKind::Segment, ImmutableKind::IndexRun] {
            assert_eq!(l.parse_object_id(&l.immutable(kind, id), kind), Some(id));
        }
        // The chunk cache's keys (and so its file names) stay as they were.
        assert_eq!(l.segment_name(id), l.segment(id).as_ref());
        assert_eq!(
            l.parse_object_id(&l.segment(id), ImmutableKind::IndexRun),
            None
        );
    }
}
