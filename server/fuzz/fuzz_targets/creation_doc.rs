//! Product creation documents (`CollectionConfig::parse`) and catalog bucket
//! objects (`BucketCodec::decode`) from untrusted bytes.
//!
//! Properties: no panic; an accepted document obeys every limit (format,
//! expiry bounds and instant after `now`, at most 64 watches, names unique,
//! sorted and one segment, 1–16 JSON-pointer fields, watches only on JSON
//! collections); its normal form written back as a document parses to the
//! same configuration (normalization is idempotent); an accepted catalog
//! bucket is sorted and unique and survives encode → decode unchanged.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use strata_manifest::CasCodec;
use strata_server::service::catalog::BucketCodec;
use strata_server::service::product::config::{
    CollectionConfig, ExpiryConfig, Format, IDLE_SECONDS_MAX, WATCHES_MAX, WATCH_FIELDS_MAX,
};

const NOW_MS: u64 = 1_800_000_000_000;

fuzz_target!(|data: &[u8]| {
    if let Ok(config) = CollectionConfig::parse(data, NOW_MS) {
        match &config.expiry {
            ExpiryConfig::Never => {}
            ExpiryConfig::IdleSeconds(s) => assert!((1..=IDLE_SECONDS_MAX).contains(s)),
            ExpiryConfig::At { ms, .. } => assert!(*ms > NOW_MS),
        }
        assert!(config.watches.len() <= WATCHES_MAX);
        assert!(config.watches.is_empty() || config.format == Format::Json);
        assert!(config.watches.windows(2).all(|w| w[0].name < w[1].name));
        for w in &config.watches {
            assert!(!w.name.is_empty() && !w.name.contains('/'));
            assert!((1..=WATCH_FIELDS_MAX).contains(&w.fields.len()));
            assert!(w.fields.iter().all(|f| f.starts_with('/')));
        }
        let format = match &config.format {
            Format::Json => json!({"kind": "json"}),
            Format::Bytes { content_type } => json!({"kind": "bytes", "contentType": content_type}),
        };
        let mut doc = json!({"format": format, "watches": config.watches});
        match &config.expiry {
            ExpiryConfig::Never => {}
            ExpiryConfig::IdleSeconds(s) => doc["expiry"] = json!({"idle": format!("{s}s")}),
            ExpiryConfig::At { text, .. } => doc["expiry"] = json!({"at": text}),
        }
        let again = CollectionConfig::parse(doc.to_string().as_bytes(), NOW_MS)
            .expect("a normal form is a valid document");
        assert_eq!(again, config);
    }
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(bucket) = BucketCodec::decode(&bytes) {
        assert!(bucket.entries.windows(2).all(|w| w[0].name < w[1].name));
        let encoded = BucketCodec::encode(&bucket).expect("encodes");
        assert_eq!(
            BucketCodec::decode(&encoded).expect("decodes").entries,
            bucket.entries
        );
    }
});
