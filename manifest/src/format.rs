//! Byte layout of a shard manifest (format version 1); `docs/FORMATS.md` is its
//! prose twin.
//!
//! ```text
//! magic "STRATAMF" · version u16 · reserved u16 (0)
//! manifest version u64 · writer epoch u64 · writer instance [16] · write id [16]
//! shard name (u16 length, 1..=64 bytes UTF-8)
//! replay slot u64 · replay epoch floor u64 · replay chain end u64 · next object id u64
//! index run count u32 · runs × (id u64 · bytes u64)
//! segment count u32 · segments × (id u64 · bytes u64)
//! fence window count u32 · windows × (first slot u64 · end slot u64), sorted, disjoint
//! CRC-32C of every preceding byte, u32
//! ```
//!
//! *Fence windows* are WAL slots that must stay occupied forever (see
//! [`Manifest::fence_windows`]).

use bytes::{BufMut, Bytes, BytesMut};
use strata_codec::{ReadBytes, ReadError};

use crate::store::CasCodec;

pub const MAGIC: [u8; 8] = *b"STRATAMF";
pub const FORMAT_VERSION: u16 = 1;
/// Largest manifest the decoder accepts.
pub const MANIFEST_BYTES_MAX: usize = 16 << 20;
const SHARD_NAME_BYTES_MAX: usize = 64;
const FIXED_BYTES: usize = 8 + 2 + 2 + 8 + 8 + 16 + 16 + 2 + 8 + 8 + 8 + 8 + 4 + 4 + 4 + 4;
/// `chain_end` when no WAL object precedes the replay point.
pub const NO_SLOT: u64 = u64::MAX;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("manifest too short: {len} bytes")]
    TooShort { len: usize },
    #[error("manifest too large: {len} bytes")]
    TooLarge { len: usize },
    #[error("bad manifest magic")]
    BadMagic,
    #[error("unsupported manifest format version {found} (this build reads {FORMAT_VERSION})")]
    UnsupportedVersion { found: u16 },
    #[error("manifest CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("manifest truncated while reading {field}")]
    Truncated { field: &'static str },
    #[error("manifest field {field} is invalid: {reason}")]
    Invalid {
        field: &'static str,
        reason: &'static str,
    },
}

impl From<ReadError> for ManifestError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Truncated { field } => ManifestError::Truncated { field },
            ReadError::NotUtf8 { field } => ManifestError::Invalid {
                field,
                reason: "not UTF-8",
            },
        }
    }
}

/// The owner that wrote a manifest: instance, epoch, and a random id unique to
/// the write (the CAS write token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterIdentity {
    pub instance: [u8; 16],
    pub epoch: u64,
    pub write_id: [u8; 16],
}

/// Where replay starts: the first WAL slot not covered by sealed state, the
/// writer epoch the walk's epoch floor starts at, and the slot of the last WAL
/// object covered (the chain the next data object must continue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayPoint {
    pub slot: u64,
    pub epoch_floor: u64,
    pub chain_end: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexRunRef {
    pub id: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRef {
    pub id: u64,
    pub bytes: u64,
}

/// WAL slots `start..end`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct SlotRange {
    pub start: u64,
    pub end: u64,
}

impl SlotRange {
    pub fn contains(&self, slot: u64) -> bool {
        self.start <= slot && slot < self.end
    }
}

/// Adds `window` to a sorted, disjoint list of ranges, merging what touches.
pub fn add_window(windows: &[SlotRange], window: SlotRange) -> Vec<SlotRange> {
    let mut all: Vec<SlotRange> = windows.iter().copied().chain([window]).collect();
    all.retain(|w| w.start < w.end);
    all.sort();
    let mut out: Vec<SlotRange> = Vec::with_capacity(all.len());
    for w in all {
        match out.last_mut() {
            Some(last) if w.start <= last.end => last.end = last.end.max(w.end),
            _ => out.push(w),
        }
    }
    out
}

/// A shard manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Grows by one with every successful write of the manifest.
    pub version: u64,
    /// The writer that holds the shard; its epoch is the shard's writer epoch.
    pub writer: WriterIdentity,
    pub shard: String,
    pub replay: ReplayPoint,
    /// Ids for new segment and index-run objects are taken from here.
    pub next_object_id: u64,
    pub index_runs: Vec<IndexRunRef>,
    pub segments: Vec<SegmentRef>,
    /// WAL slots an older owner that does not yet know it is fenced may still
    /// try to write: for each change of owner, the slots from the replay
    /// point it claimed from through its fence. Such an owner's next WAL
    /// write targets one of them, and only finds out it is fenced because the
    /// slot is occupied, so they are never deleted (garbage collection
    /// overwrites them with tiny fence objects instead).
    pub fence_windows: Vec<SlotRange>,
}

impl Manifest {
    /// The manifest a shard starts with: epoch 1, replay from slot 0.
    pub fn initial(shard: String, instance: [u8; 16], write_id: [u8; 16]) -> Self {
        Manifest {
            version: 1,
            writer: WriterIdentity {
                instance,
                epoch: 1,
                write_id,
            },
            shard,
            replay: ReplayPoint {
                slot: 0,
                epoch_floor: 0,
                chain_end: NO_SLOT,
            },
            next_object_id: 1,
            index_runs: Vec::new(),
            segments: Vec::new(),
            fence_windows: Vec::new(),
        }
    }

    /// The successor of this manifest written by `writer` (version + 1).
    pub fn successor(&self, writer: WriterIdentity) -> Self {
        Manifest {
            version: self.version + 1,
            writer,
            ..self.clone()
        }
    }

    pub fn writer_epoch(&self) -> u64 {
        self.writer.epoch
    }
}

const INVALID_VERSION: ManifestError = ManifestError::Invalid {
    field: "version",
    reason: "manifest version and writer epoch are 1..u64::MAX (every manifest needs a successor)",
};

/// Versions and epochs start at 1 and stay below `u64::MAX`, so that the
/// successor (`version + 1`) and the next claim (`epoch + 1`) always exist.
fn version_and_epoch_are_valid(version: u64, epoch: u64) -> bool {
    (1..u64::MAX).contains(&version) && (1..u64::MAX).contains(&epoch)
}

fn check_encodable(m: &Manifest) -> Result<(), ManifestError> {
    if m.shard.is_empty() || m.shard.len() > SHARD_NAME_BYTES_MAX {
        return Err(ManifestError::Invalid {
            field: "shard",
            reason: "length must be 1..=64 bytes",
        });
    }
    if !version_and_epoch_are_valid(m.version, m.writer.epoch) {
        return Err(INVALID_VERSION);
    }
    if m.replay.chain_end != NO_SLOT && m.replay.chain_end >= m.replay.slot {
        return Err(ManifestError::Invalid {
            field: "replay chain end",
            reason: "must precede the replay slot",
        });
    }
    if !windows_are_valid(&m.fence_windows) {
        return Err(ManifestError::Invalid {
            field: "fence windows",
            reason: "must be non-empty, sorted and disjoint",
        });
    }
    let len = FIXED_BYTES
        + m.shard.len()
        + 16 * (m.index_runs.len() + m.segments.len() + m.fence_windows.len());
    if len > MANIFEST_BYTES_MAX {
        return Err(ManifestError::TooLarge { len });
    }
    Ok(())
}

pub fn encode(m: &Manifest) -> Result<Bytes, ManifestError> {
    check_encodable(m)?;
    let mut b = BytesMut::with_capacity(FIXED_BYTES + m.shard.len());
    b.put_slice(&MAGIC);
    b.put_u16_le(FORMAT_VERSION);
    b.put_u16_le(0);
    b.put_u64_le(m.version);
    b.put_u64_le(m.writer.epoch);
    b.put_slice(&m.writer.instance);
    b.put_slice(&m.writer.write_id);
    b.put_u16_le(m.shard.len() as u16);
    b.put_slice(m.shard.as_bytes());
    b.put_u64_le(m.replay.slot);
    b.put_u64_le(m.replay.epoch_floor);
    b.put_u64_le(m.replay.chain_end);
    b.put_u64_le(m.next_object_id);
    b.put_u32_le(m.index_runs.len() as u32);
    for r in &m.index_runs {
        b.put_u64_le(r.id);
        b.put_u64_le(r.bytes);
    }
    b.put_u32_le(m.segments.len() as u32);
    for s in &m.segments {
        b.put_u64_le(s.id);
        b.put_u64_le(s.bytes);
    }
    b.put_u32_le(m.fence_windows.len() as u32);
    for w in &m.fence_windows {
        b.put_u64_le(w.start);
        b.put_u64_le(w.end);
    }
    let crc = crc32c::crc32c(&b);
    b.put_u32_le(crc);
    Ok(b.freeze())
}

pub fn decode(bytes: &Bytes) -> Result<Manifest, ManifestError> {
    let len = bytes.len();
    if len > MANIFEST_BYTES_MAX {
        return Err(ManifestError::TooLarge { len });
    }
    if len < FIXED_BYTES {
        return Err(ManifestError::TooShort { len });
    }
    if bytes[..8] != MAGIC {
        return Err(ManifestError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != FORMAT_VERSION {
        return Err(ManifestError::UnsupportedVersion { found: version });
    }
    let crc_at = len - 4;
    let stored = u32::from_le_bytes(bytes[crc_at..].try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(&bytes[..crc_at]);
    if stored != computed {
        return Err(ManifestError::CrcMismatch { stored, computed });
    }
    let mut b = bytes.slice(10..crc_at);
    if b.read_u16("reserved")? != 0 {
        return Err(ManifestError::Invalid {
            field: "reserved",
            reason: "must be zero",
        });
    }
    let manifest_version = b.read_u64("version")?;
    let epoch = b.read_u64("writer epoch")?;
    let instance = b.read_array("writer instance")?;
    let write_id = b.read_array("write id")?;
    let name_len = b.read_u16("shard name length")? as usize;
    if name_len == 0 || name_len > SHARD_NAME_BYTES_MAX || name_len > b.len() {
        return Err(ManifestError::Invalid {
            field: "shard name",
            reason: "length must be 1..=64 bytes and inside the object",
        });
    }
    let shard = b.read_utf8(name_len, "shard name")?;
    let replay = ReplayPoint {
        slot: b.read_u64("replay slot")?,
        epoch_floor: b.read_u64("replay epoch floor")?,
        chain_end: b.read_u64("replay chain end")?,
    };
    if replay.chain_end != NO_SLOT && replay.chain_end >= replay.slot {
        return Err(ManifestError::Invalid {
            field: "replay chain end",
            reason: "must precede the replay slot",
        });
    }
    let next_object_id = b.read_u64("next object id")?;
    let index_runs = get_refs(&mut b, "index runs")?
        .into_iter()
        .map(|(id, bytes)| IndexRunRef { id, bytes })
        .collect();
    let segments = get_refs(&mut b, "segments")?
        .into_iter()
        .map(|(id, bytes)| SegmentRef { id, bytes })
        .collect();
    let fence_windows: Vec<SlotRange> = get_refs(&mut b, "fence windows")?
        .into_iter()
        .map(|(start, end)| SlotRange { start, end })
        .collect();
    if !windows_are_valid(&fence_windows) {
        return Err(ManifestError::Invalid {
            field: "fence windows",
            reason: "must be non-empty, sorted and disjoint",
        });
    }
    if !b.is_empty() {
        return Err(ManifestError::Invalid {
            field: "trailer",
            reason: "trailing bytes before the CRC",
        });
    }
    if !version_and_epoch_are_valid(manifest_version, epoch) {
        return Err(INVALID_VERSION);
    }
    Ok(Manifest {
        version: manifest_version,
        writer: WriterIdentity {
            instance,
            epoch,
            write_id,
        },
        shard,
        replay,
        next_object_id,
        index_runs,
        segments,
        fence_windows,
    })
}

fn windows_are_valid(windows: &[SlotRange]) -> bool {
    windows.iter().all(|w| w.start < w.end) && windows.windows(2).all(|p| p[0].end < p[1].start)
}

fn get_refs(b: &mut Bytes, field: &'static str) -> Result<Vec<(u64, u64)>, ManifestError> {
    let count = b.read_u32(field)? as usize;
    b.ensure_items(count, 16, field)?;
    (0..count)
        .map(|_| Ok((b.read_u64(field)?, b.read_u64(field)?)))
        .collect()
}

/// [`CasCodec`] for manifests; the write token is the writer's write id.
pub struct ManifestCodec;

impl CasCodec for ManifestCodec {
    type Value = Manifest;
    type Error = ManifestError;

    fn encode(value: &Manifest) -> Result<Bytes, ManifestError> {
        encode(value)
    }

    fn decode(bytes: &Bytes) -> Result<Manifest, ManifestError> {
        decode(bytes)
    }

    fn write_token(value: &Manifest) -> [u8; 16] {
        value.writer.write_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Manifest {
        let mut m = Manifest::initial("s0".into(), [1; 16], [2; 16]);
        m.version = 7;
        m.replay = ReplayPoint {
            slot: 40,
            epoch_floor: 3,
            chain_end: 38,
        };
        m.index_runs = vec![IndexRunRef { id: 5, bytes: 100 }];
        m.segments = vec![
            SegmentRef { id: 3, bytes: 9 },
            SegmentRef { id: 4, bytes: 10 },
        ];
        m.fence_windows = vec![
            SlotRange { start: 0, end: 3 },
            SlotRange { start: 20, end: 22 },
        ];
        m
    }

    #[test]
    fn windows_merge_and_invalid_ones_are_refused() {
        let w = |start, end| SlotRange { start, end };
        let merged = add_window(&[w(0, 3), w(20, 22)], w(3, 5));
        assert_eq!(merged, vec![w(0, 5), w(20, 22)]);
        assert_eq!(add_window(&merged, w(7, 7)), merged, "empty windows vanish");
        assert_eq!(add_window(&merged, w(4, 21)), vec![w(0, 22)]);
        let mut m = sample();
        m.fence_windows = vec![w(5, 9), w(2, 3)];
        assert!(encode(&m).is_err(), "unsorted");
        m.fence_windows = vec![w(5, 5)];
        assert!(encode(&m).is_err(), "empty");
    }

    #[test]
    fn round_trip() {
        let m = sample();
        assert_eq!(decode(&encode(&m).unwrap()).unwrap(), m);
    }

    #[test]
    fn truncations_and_bit_flips_are_errors() {
        let bytes = encode(&sample()).unwrap();
        for len in 0..bytes.len() {
            assert!(decode(&bytes.slice(..len)).is_err());
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut v = bytes.to_vec();
                v[i] ^= 1 << bit;
                assert!(decode(&Bytes::from(v)).is_err(), "byte {i} bit {bit}");
            }
        }
    }

    #[test]
    fn versions_and_epochs_without_a_successor_are_refused() {
        for (version, epoch) in [(u64::MAX, 1), (1, u64::MAX), (0, 1), (1, 0)] {
            let mut m = sample();
            m.version = version;
            m.writer.epoch = epoch;
            assert_eq!(encode(&m), Err(INVALID_VERSION), "{version} {epoch}");
            // Written anyway (a forged object, CRC fixed): the decoder refuses it.
            let mut ok = sample();
            ok.version = 5;
            let mut bytes = encode(&ok).unwrap().to_vec();
            bytes[12..20].copy_from_slice(&version.to_le_bytes());
            bytes[20..28].copy_from_slice(&epoch.to_le_bytes());
            let crc_at = bytes.len() - 4;
            let crc = crc32c::crc32c(&bytes[..crc_at]);
            bytes[crc_at..].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(decode(&Bytes::from(bytes)), Err(INVALID_VERSION));
        }
        let mut top = sample();
        top.version = u64::MAX - 1;
        top.writer.epoch = u64::MAX - 1;
        assert_eq!(decode(&encode(&top).unwrap()).unwrap(), top);
    }

    #[test]
    fn wrong_version_rejected() {
        let mut v = encode(&sample()).unwrap().to_vec();
        v[8] = 9;
        assert_eq!(
            decode(&Bytes::from(v)),
            Err(ManifestError::UnsupportedVersion { found: 9 })
        );
    }

    #[test]
    fn oversized_rejected() {
        let big = Bytes::from(vec![0u8; MANIFEST_BYTES_MAX + 1]);
        assert!(matches!(decode(&big), Err(ManifestError::TooLarge { .. })));
    }

    #[test]
    fn lying_counts_with_valid_crc_are_errors() {
        let m = sample();
        let mut v = encode(&m).unwrap().to_vec();
        let runs_at = 8 + 2 + 2 + 8 + 8 + 16 + 16 + 2 + m.shard.len() + 32;
        v[runs_at..runs_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let n = v.len() - 4;
        let crc = crc32c::crc32c(&v[..n]);
        v[n..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode(&Bytes::from(v)),
            Err(ManifestError::Truncated { .. })
        ));
    }

    proptest! {
        #[test]
        fn any_manifest_round_trips(
            version in 1u64..,
            epoch in 1u64..,
            shard in "[a-z0-9]{1,64}",
            slot in any::<u64>(),
            floor in any::<u64>(),
            runs in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..5),
        ) {
            let m = Manifest {
                version,
                writer: WriterIdentity { instance: [3; 16], epoch, write_id: [4; 16] },
                shard,
                replay: ReplayPoint { slot, epoch_floor: floor, chain_end: slot.checked_sub(1).unwrap_or(NO_SLOT) },
                next_object_id: 9,
                index_runs: runs.iter().map(|&(id, bytes)| IndexRunRef { id, bytes }).collect(),
                segments: runs.iter().map(|&(id, bytes)| SegmentRef { id, bytes }).collect(),
                fence_windows: runs
                    .iter()
                    .fold(Vec::new(), |w, &(a, b)| add_window(&w, SlotRange { start: a.min(b), end: a.max(b) })),
            };
            prop_assert_eq!(decode(&encode(&m).unwrap()).unwrap(), m);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&Bytes::from(data));
        }
    }
}
