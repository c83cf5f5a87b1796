//! Writes the seed corpora of the server fuzz targets (`corpus/<target>/`).
//! Run by `scripts/fuzz seeds`; the seeds are committed.

use std::fs;
use std::path::Path;

use strata_server::ds::offsets::Offset;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = root.join(target);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(name), bytes).unwrap();
    };
    for (i, (a, b, text)) in [
        (0u64, 1u64, Offset(0).to_string()),
        (42, 9_999_999_999_999_999, Offset(42).to_string()),
        (u64::MAX, 10_000_000_000_000_000, "-1".to_string()),
        (7, 8, "now".to_string()),
        (1, 2, "0000000000000000_00000000000000x1".to_string()),
    ]
    .iter()
    .enumerate()
    {
        let mut seed = a.to_le_bytes().to_vec();
        seed.extend_from_slice(&b.to_le_bytes());
        seed.extend_from_slice(text.as_bytes());
        write("offsets", &format!("offset-{i}"), &seed);
    }
    let bodies: [(&str, &[u8]); 7] = [
        ("object", br#"{"msg": "hi", "n": [1, 2.5e3, -0]}"#),
        ("array", br#" [ {"a" : [1, 2]}, 3 , "x y", [] ] "#),
        ("escapes", br#"["a\"b, c", "\u00e9\n", "]", {"k": "}"}]"#),
        ("nested", b"[[[[[[[[1]]]]]]],{\"a\":{\"b\":{\"c\":null}}}]"),
        ("scalar", b"  true  "),
        ("empty-array", b"[]"),
        ("invalid", b"[1,]"),
    ];
    for (name, body) in bodies {
        write("json_records", name, body);
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
        write("http_request", &format!("bytes-{i}"), &seed);
        write("cursor", &format!("bytes-{i}"), &seed);
        write("product_tokens", &format!("bytes-{i}"), &seed);
    }
    // Real tokens: a key cursor (of the target's scope) and a catalog cursor.
    let key = strata_segments::StreamKey::from_bytes([3; 32]);
    let scope = strata_server::service::product::cursor::CursorScope {
        project: "p",
        epoch: [5; 16],
        key: &key,
        routing_key: b"rk",
    };
    write(
        "product_tokens",
        "key-cursor",
        scope.encode(12_345).as_bytes(),
    );
    let catalog = strata_server::service::catalog::CatalogCursor {
        bucket: 3,
        after: "orders/eu".into(),
    };
    write(
        "product_tokens",
        "catalog-cursor",
        catalog.encode().as_bytes(),
    );
    let docs: [(&str, &str); 4] = [
        ("json", r#"{"format":{"kind":"json"}}"#),
        (
            "full",
            r#"{"format":{"kind":"json"},"expiry":{"idle":"30d"},"watches":[{"name":"by-customer","fields":["/customerId","/a~1b"]}]}"#,
        ),
        (
            "bytes-at",
            r#"{"format":{"kind":"bytes","contentType":"application/x-protobuf"},"expiry":{"at":"2099-01-01T00:00:00Z"}}"#,
        ),
        (
            "bucket",
            r#"{"format":1,"entries":[{"name":"a","content_type":"application/json","created_ms":1,"incarnation":1}],"write_token":"00112233445566778899aabbccddeeff"}"#,
        ),
    ];
    for (name, doc) in docs {
        write("creation_doc", name, doc.as_bytes());
    }
}
