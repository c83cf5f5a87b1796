//! Writes the seed corpora of the WAL fuzz targets (`corpus/<target>/`).
//! Run by `scripts/fuzz seeds`; the seeds are committed.

use std::fs;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = root.join(target);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(name), bytes).unwrap();
    };
    for (name, bytes) in strata_wal_fuzz::seed_objects() {
        write("wal_object", name, &bytes);
    }
    // The structure-aware targets read any bytes; a few fixed ones give the
    // fuzzer a start that is not empty.
    for (i, seed) in fixed_bytes().iter().enumerate() {
        write("wal_roundtrip", &format!("bytes-{i}"), seed);
        write("wal_walk", &format!("bytes-{i}"), seed);
    }
}

/// Deterministic pseudo-random byte strings of a few lengths.
fn fixed_bytes() -> Vec<Vec<u8>> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    [16usize, 64, 256, 1024]
        .iter()
        .map(|&len| {
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        })
        .collect()
}
