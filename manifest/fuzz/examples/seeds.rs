//! Writes the seed corpora of the manifest and index-run fuzz targets
//! (`corpus/<target>/`) from the real encoders. Run by `scripts/fuzz seeds`;
//! the seeds are committed.

use std::fs;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = root.join(target);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(name), bytes).unwrap();
    };
    for (name, bytes) in strata_manifest_fuzz::seed_manifests() {
        write("manifest_decode", name, &bytes);
    }
    for (name, bytes) in strata_manifest_fuzz::seed_runs() {
        write("index_run_decode", name, &bytes);
    }
    // The structure-aware targets read any bytes; a few fixed ones give the
    // fuzzer a start that is not empty.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for (i, len) in [16usize, 64, 256, 1024].into_iter().enumerate() {
        let seed: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        write("manifest_roundtrip", &format!("bytes-{i}"), &seed);
        write("index_run_roundtrip", &format!("bytes-{i}"), &seed);
    }
}
