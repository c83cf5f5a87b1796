//! `strata bench pages`: sealing and opening pages on one core — 64 KiB pages
//! (compressible and not) and pages of one 256-byte record (docs/BENCHMARKS.md;
//! docs/ARCHITECTURE.md).

use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use strata_engine::{Entropy, OsEntropy};
use strata_segments::{StreamEpoch, StreamKey};

use super::error::BenchError;

#[derive(Args, Debug)]
pub struct PagesBench {
    /// Seconds spent on each measurement.
    #[arg(long, default_value_t = 2.0)]
    seconds_each: f64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// `strata bench pages`: runs the benchmark and prints its report.
pub fn pages(args: &PagesBench) -> Result<(), BenchError> {
    let report = pages_bench(args)?;
    if args.json {
        println!("{}", serde_json::to_string(&report).expect("serialisable"));
    } else {
        println!("page bench (one core, {} s per row):", args.seconds_each);
        for row in &report.rows {
            println!(
                "  {:<34} {:>10.0} pages/s {:>9.1} MB/s of payload",
                row.name, row.pages_per_sec, row.payload_mb_per_sec
            );
        }
    }
    Ok(())
}

#[derive(Debug, serde::Serialize)]
pub struct PagesRow {
    name: &'static str,
    pages_per_sec: f64,
    payload_mb_per_sec: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct PagesReport {
    rows: Vec<PagesRow>,
}

/// Runs `op` repeatedly for about `seconds`; returns operations per second.
fn rate(seconds: f64, mut op: impl FnMut()) -> f64 {
    let deadline = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut count = 0u64;
    while start.elapsed() < deadline {
        for _ in 0..64 {
            op();
        }
        count += 64;
    }
    count as f64 / start.elapsed().as_secs_f64()
}

fn pages_bench(args: &PagesBench) -> Result<PagesReport, BenchError> {
    use strata_segments::{open_page, plan_pages, prepare_body, seal_page, PageCipher};
    let cipher = PageCipher::new(
        StreamEpoch([1; 16]),
        &StreamKey::from_bytes([2; 32]),
        b"",
        0,
    );
    let entropy = OsEntropy;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let noise: Vec<u8> = (0..64 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let text: Vec<u8> =
        b"{\"user\":\"alice\",\"event\":\"click\",\"page\":\"/home\",\"ts\":1700000000}\n"
            .iter()
            .copied()
            .cycle()
            .take(64 * 1024)
            .collect();
    // 64 KiB of body: records of 1 KiB (the page planner's cut keeps them in one page).
    let records_of =
        |data: &[u8]| -> Vec<Bytes> { data.chunks(1000).map(Bytes::copy_from_slice).collect() };
    let mut rows = Vec::new();
    for (name_seal, name_open, data) in [
        (
            "seal 64 KiB page, incompressible",
            "open 64 KiB page, incompressible",
            &noise,
        ),
        (
            "seal 64 KiB page, compressible",
            "open 64 KiB page, compressible",
            &text,
        ),
    ] {
        let all = records_of(data);
        let first = plan_pages(all.iter().map(Bytes::len))[0].clone();
        let records = &all[first];
        let payload: usize = records.iter().map(Bytes::len).sum();
        let seal = || {
            let body = prepare_body(records, 0).expect("page body");
            seal_page(&cipher, &body, 0, 0, b"", entropy.bytes12()).expect("seal")
        };
        let per_sec = rate(args.seconds_each, || {
            std::hint::black_box(seal());
        });
        rows.push(PagesRow {
            name: name_seal,
            pages_per_sec: per_sec,
            payload_mb_per_sec: per_sec * payload as f64 / 1e6,
        });
        let page = seal();
        let per_sec = rate(args.seconds_each, || {
            std::hint::black_box(open_page(&cipher, &page).expect("open"));
        });
        rows.push(PagesRow {
            name: name_open,
            pages_per_sec: per_sec,
            payload_mb_per_sec: per_sec * payload as f64 / 1e6,
        });
    }
    let small = [Bytes::from(noise[..256].to_vec())];
    let seal_small = || {
        let body = prepare_body(&small, 0).expect("page body");
        seal_page(&cipher, &body, 0, 0, b"", entropy.bytes12()).expect("seal")
    };
    let per_sec = rate(args.seconds_each, || {
        std::hint::black_box(seal_small());
    });
    rows.push(PagesRow {
        name: "seal one 256 B record",
        pages_per_sec: per_sec,
        payload_mb_per_sec: per_sec * 256.0 / 1e6,
    });
    let page = seal_small();
    let per_sec = rate(args.seconds_each, || {
        std::hint::black_box(open_page(&cipher, &page).expect("open"));
    });
    rows.push(PagesRow {
        name: "open one 256 B record",
        pages_per_sec: per_sec,
        payload_mb_per_sec: per_sec * 256.0 / 1e6,
    });
    Ok(PagesReport { rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_measured() {
        let report = pages_bench(&PagesBench {
            seconds_each: 0.001,
            json: true,
        })
        .unwrap();
        assert_eq!(report.rows.len(), 6);
        assert!(report.rows.iter().all(|row| row.pages_per_sec > 0.0));
    }
}
