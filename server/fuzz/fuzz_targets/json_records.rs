//! JSON append bodies through `records_from_body` (validation, whitespace
//! removal, one level of array flattening) and `array_of` (the read side).
//!
//! Properties: no panic; a body is accepted exactly when serde_json parses it;
//! every record is itself valid JSON with no whitespace outside strings
//! (minifying it again changes nothing); a top-level array gives its elements,
//! any other value one record equal to it; and the records joined by
//! `array_of` parse to the same value as the body (or, for a non-array body,
//! to a one-element array of it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use strata_server::ds::json::{array_of, records_from_body};

fuzz_target!(|data: &[u8]| {
    let parsed: Result<Value, _> = serde_json::from_slice(data);
    let records = match records_from_body(data) {
        Ok(records) => records,
        Err(_) => {
            assert!(parsed.is_err(), "serde_json accepts a refused body");
            return;
        }
    };
    let value = parsed.expect("an accepted body is valid JSON");
    let values: Vec<Value> = records
        .iter()
        .map(|r| serde_json::from_slice(r).expect("a record is valid JSON"))
        .collect();
    for r in &records {
        let again = records_from_body(r).expect("a record is a valid body");
        if r.starts_with(b"[") {
            let rejoined = array_of(again.iter().map(|e| e.as_ref()));
            assert_eq!(rejoined, r[..], "a record is minified");
        } else {
            assert_eq!(again, vec![r.clone()], "a record is minified");
        }
    }
    let joined: Value = serde_json::from_slice(&array_of(records.iter().map(|r| r.as_ref())))
        .expect("joined records are valid JSON");
    match value {
        Value::Array(elements) => {
            assert_eq!(values, elements);
            assert_eq!(joined, Value::Array(elements));
        }
        other => {
            assert_eq!(values, vec![other.clone()]);
            assert_eq!(joined, Value::Array(vec![other]));
        }
    }
});
