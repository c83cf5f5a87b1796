//! The test vectors in docs/FORMATS.md ("Test vectors"), checked against the
//! code: key derivations and exact sealed page bytes. The document is parsed,
//! so the document and the code cannot drift apart silently.

use bytes::Bytes;
use strata_segments::keys::{derive_page_key, derive_subkey, fingerprint};
use strata_segments::{open_page, prepare_body, seal_page, PageCipher, StreamEpoch, StreamKey};

#[derive(Debug, Default)]
struct Vector {
    name: String,
    fields: Vec<(String, String)>,
}

impl Vector {
    fn get(&self, key: &str) -> &str {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("vector {} lacks {key}", self.name))
    }

    fn all(&self, key: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads every fenced block that starts with "```text vector-".
fn vectors_from_formats_md() -> Vec<Vector> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMATS.md");
    let text = std::fs::read_to_string(path).expect("docs/FORMATS.md");
    let mut vectors = Vec::new();
    let mut current: Option<Vector> = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("```text vector-") {
            current = Some(Vector {
                name: name.trim().to_string(),
                ..Vector::default()
            });
        } else if line.starts_with("```") {
            if let Some(v) = current.take() {
                vectors.push(v);
            }
        } else if let Some(v) = current.as_mut() {
            if let Some((k, val)) = line.split_once('=') {
                v.fields
                    .push((k.trim().to_string(), val.trim().to_string()));
            }
        }
    }
    vectors
}

fn compute(v: &Vector) -> Vec<(&'static str, String)> {
    let key = StreamKey::from_bytes(unhex(v.get("stream_key")).try_into().unwrap());
    let epoch = StreamEpoch(unhex(v.get("epoch")).try_into().unwrap());
    let routing_key = unhex(v.get("routing_key_hex"));
    let key_version: u32 = v.get("key_version").parse().unwrap();
    let first_offset: u64 = v.get("first_offset").parse().unwrap();
    let timestamp_ms: u64 = v.get("timestamp_ms").parse().unwrap();
    let nonce: [u8; 12] = unhex(v.get("nonce")).try_into().unwrap();
    let records: Vec<Bytes> = v
        .all("record")
        .into_iter()
        .map(|r| Bytes::from(unhex(r)))
        .collect();
    let subkey = derive_subkey(&epoch, &key, &routing_key, key_version);
    let page_key = derive_page_key(&epoch, &subkey);
    let cipher = PageCipher::from_subkey(epoch, &subkey);
    let body = prepare_body(&records, timestamp_ms).unwrap();
    let page = seal_page(
        &cipher,
        &body,
        first_offset,
        key_version,
        &routing_key,
        nonce,
    )
    .unwrap();
    let opened = open_page(&cipher, &page).unwrap();
    let reopened: Vec<Bytes> = opened.records.into_iter().map(|r| r.payload).collect();
    assert_eq!(reopened, records, "vector {} round trip", v.name);
    vec![
        ("fingerprint", hex(&fingerprint(&epoch, &key))),
        ("subkey", hex(subkey.as_slice())),
        ("page_key", hex(page_key.as_slice())),
        ("compressed", body.compressed.to_string()),
        ("page", hex(&page)),
    ]
}

#[test]
fn formats_md_vectors_match_the_code() {
    let vectors = vectors_from_formats_md();
    if std::env::var("PRINT_VECTORS").is_ok() {
        for v in &vectors {
            for (k, value) in compute(v) {
                println!("{} {k} = {value}", v.name);
            }
        }
        return;
    }
    assert!(vectors.len() >= 3, "FORMATS.md holds the page test vectors");
    for v in &vectors {
        for (k, value) in compute(v) {
            assert_eq!(v.get(k), value, "vector {} field {k}", v.name);
        }
    }
}
