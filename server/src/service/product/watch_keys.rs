//! Watch keys: which cache entries a record invalidates, derived so that a
//! client holding the collection's epoch computes the same keys offline
//! (docs/FORMATS.md, "Watch keys"; the SDK has the same test vectors).
//!
//! ```text
//! definition id = SHA-256("strata/watch-definition/v1" ‖ 0x00 ‖ epoch 16 ‖ canonical({"fields":[…],"name":…}))[..16]
//! watch key     = SHA-256("strata/watch-key/v1" ‖ 0x00 ‖ definition id ‖ canonical([value of each field]))[..8]
//! ```
//!
//! sent as 16 lowercase hex characters. A record yields a key for a watch
//! only when every one of its fields (RFC 6901 JSON pointers) is present.
//!
//! `canonical` is JSON text without whitespace, with object members sorted
//! by their names' UTF-16 code units (JavaScript's default sort), strings
//! escaped as `JSON.stringify` escapes them, and numbers read as doubles and
//! printed as JavaScript prints them (`Number.prototype.toString`): integral
//! values as integers (`1.0` is `1`; beyond 2^53, the nearest double's
//! digits), others in the shortest form that reads back the same, with an
//! exponent outside `1e-7 < |x| < 1e21`. So string, number, boolean, null,
//! array and object values never collide.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::config::WatchDef;

const DEFINITION_LABEL: &[u8] = b"strata/watch-definition/v1\0";
const KEY_LABEL: &[u8] = b"strata/watch-key/v1\0";

/// A 64-bit watch key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WatchKey(pub u64);

impl WatchKey {
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }

    /// Exactly 16 lowercase or uppercase hex characters.
    pub fn parse(text: &str) -> Option<WatchKey> {
        if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(text, 16).ok().map(WatchKey)
    }
}

/// A watch definition's id under one incarnation's epoch.
pub fn definition_id(epoch: &[u8; 16], def: &WatchDef) -> [u8; 16] {
    let doc = serde_json::json!({ "fields": def.fields, "name": def.name });
    let mut hash = Sha256::new();
    hash.update(DEFINITION_LABEL);
    hash.update(epoch);
    hash.update(canonical(&doc).as_bytes());
    hash.finalize()[..16].try_into().expect("16 bytes")
}

/// The key a record has under a watch, if it has every field.
pub fn watch_key(definition_id: &[u8; 16], def: &WatchDef, record: &Value) -> Option<WatchKey> {
    let mut values = Vec::with_capacity(def.fields.len());
    for pointer in &def.fields {
        values.push(record.pointer(pointer)?.clone());
    }
    let mut hash = Sha256::new();
    hash.update(KEY_LABEL);
    hash.update(definition_id);
    hash.update(canonical(&Value::Array(values)).as_bytes());
    let digest = hash.finalize();
    Some(WatchKey(u64::from_be_bytes(
        digest[..8].try_into().expect("8 bytes"),
    )))
}

/// The canonical JSON text of `value`.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(&mut out, value);
    out
}

fn write_canonical(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&js_number(n)),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(out, item);
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (name, member)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, name);
                out.push(':');
                write_canonical(out, member);
            }
            out.push('}');
        }
    }
}

/// `JSON.stringify` of a string: `"` and `\` escaped, control characters
/// as `\b \t \n \f \r` or `\u00xx`, everything else as it is.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON number as JavaScript prints it: JavaScript reads every number
/// as a double, so integers beyond 2^53 print as their nearest double does
/// (`18446744073709551615` is `18446744073709552000`).
fn js_number(n: &serde_json::Number) -> String {
    js_float(n.as_f64().unwrap_or(0.0))
}

/// `Number.prototype.toString()` of a finite double (ECMA-262
/// Number::toString, radix 10), from Rust's shortest round-trip digits.
fn js_float(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    // `{:e}` gives the shortest digits that read back the same: d[.ddd]e±x.
    let text = format!("{:e}", x.abs());
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i64;
    let n = exponent.parse::<i64>().unwrap_or(0) + 1;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let e = if e >= 0 {
            format!("+{e}")
        } else {
            e.to_string()
        };
        match digits.len() {
            1 => format!("{digits}e{e}"),
            _ => format!("{}.{}e{e}", &digits[..1], &digits[1..]),
        }
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(name: &str, fields: &[&str]) -> WatchDef {
        WatchDef {
            name: name.into(),
            fields: fields.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn numbers_print_as_javascript_prints_them() {
        let cases = [
            ("1.0", "1"),
            ("-0.0", "0"),
            ("1e3", "1000"),
            ("0.1", "0.1"),
            ("123.456", "123.456"),
            ("1e21", "1e+21"),
            ("1.5e21", "1.5e+21"),
            ("1e20", "100000000000000000000"),
            ("0.000001", "0.000001"),
            ("1e-7", "1e-7"),
            ("-2.5e-8", "-2.5e-8"),
            ("18446744073709551615", "18446744073709552000"),
            ("-9007199254740993", "-9007199254740992"),
            ("9007199254740991", "9007199254740991"),
            ("-7", "-7"),
        ];
        for (text, expected) in cases {
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(canonical(&value), expected, "{text}");
        }
    }

    #[test]
    fn canonical_text_sorts_members_and_escapes_like_json_stringify() {
        let value: Value = serde_json::from_str(
            r#"{"b":[1,true,null,"x"],"a":{"z":1,"y":"\u0001\n\"\\/é"},"\ud83d\ude00":0,"\uffff":1}"#,
        )
        .unwrap();
        // U+1F600 (surrogates D83D DE00) sorts before U+FFFF in UTF-16 order.
        assert_eq!(
            canonical(&value),
            "{\"a\":{\"y\":\"\\u0001\\n\\\"\\\\/é\",\"z\":1},\"b\":[1,true,null,\"x\"],\"😀\":0,\"\u{ffff}\":1}"
        );
    }

    /// Fixed vectors: the SDK's tests carry the same ones.
    #[test]
    fn keys_match_the_shared_vectors() {
        let epoch = [0x11u8; 16];
        let by_customer = def("by-customer", &["/customerId"]);
        let id = definition_id(&epoch, &by_customer);
        assert_eq!(hex::encode(id), VECTOR_DEFINITION_ID);
        let key = watch_key(&id, &by_customer, &json!({"customerId": "c1", "total": 42})).unwrap();
        assert_eq!(key.hex(), VECTOR_KEY_C1);
        // Type-distinct values give distinct keys; equal values equal ones.
        let of = |v: Value| watch_key(&id, &by_customer, &json!({ "customerId": v })).unwrap();
        assert_ne!(of(json!("1")), of(json!(1)));
        assert_ne!(of(json!(null)), of(json!("null")));
        assert_eq!(of(json!(1.0)), of(json!(1)));
        assert_eq!(of(json!({"a":1,"b":2})), of(json!({"b":2,"a":1})));
        // A missing field: no key.
        assert_eq!(watch_key(&id, &by_customer, &json!({"total": 1})), None);
        let two = def("pair", &["/a", "/b~1c"]);
        let two_id = definition_id(&epoch, &two);
        assert!(watch_key(&two_id, &two, &json!({"a": 1, "b/c": 2})).is_some());
        assert_eq!(watch_key(&two_id, &two, &json!({"a": 1})), None);
        // Another epoch, another definition id, other keys.
        assert_ne!(definition_id(&[0x12; 16], &by_customer), id);
    }

    const VECTOR_DEFINITION_ID: &str = "b229a5b96416ccb31bbbeba84e961592";
    const VECTOR_KEY_C1: &str = "e50c5bb85a187117";

    #[test]
    fn watch_keys_parse_as_16_hex_characters() {
        assert_eq!(WatchKey::parse("00000000000000ff"), Some(WatchKey(255)));
        assert_eq!(WatchKey::parse("00000000000000FF"), Some(WatchKey(255)));
        for bad in [
            "",
            "ff",
            "00000000000000fg",
            "000000000000000ff",
            "+0000000000000ff",
        ] {
            assert_eq!(WatchKey::parse(bad), None, "{bad}");
        }
        assert_eq!(WatchKey(255).hex(), "00000000000000ff");
    }
}

/// The shared vectors in `docs/vectors/watches.json` (the SDK's tests read
/// the same file): canonical texts, definition ids and watch keys.
#[cfg(test)]
mod shared_vectors {
    use super::*;

    const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/vectors/watches.json");

    /// What the implementation computes for the file's inputs.
    fn computed(inputs: &Value) -> Value {
        let epoch: [u8; 16] = hex::decode(inputs["epoch"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let canonical_cases: Vec<Value> = inputs["canonical"]
            .as_array()
            .unwrap()
            .iter()
            .map(|case| {
                let text = case["json"].as_str().unwrap();
                let value: Value = serde_json::from_str(text).unwrap();
                serde_json::json!({"json": text, "canonical": canonical(&value)})
            })
            .collect();
        let key_cases: Vec<Value> = inputs["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|case| {
                let def: WatchDef = serde_json::from_value(case["watch"].clone()).unwrap();
                let id = definition_id(&epoch, &def);
                let record: Value = serde_json::from_str(case["record"].as_str().unwrap()).unwrap();
                serde_json::json!({
                    "watch": case["watch"],
                    "record": case["record"],
                    "definitionId": hex::encode(id),
                    "watchKey": watch_key(&id, &def, &record).map(|k| k.hex()),
                })
            })
            .collect();
        serde_json::json!({
            "about": inputs["about"],
            "epoch": inputs["epoch"],
            "canonical": canonical_cases,
            "keys": key_cases,
        })
    }

    #[test]
    fn the_shared_vectors_hold() {
        let file: Value = serde_json::from_str(&std::fs::read_to_string(PATH).unwrap()).unwrap();
        let want = computed(&file);
        if std::env::var_os("STRATA_WRITE_VECTORS").is_some() {
            let text = serde_json::to_string_pretty(&want).unwrap() + "\n";
            std::fs::write(PATH, text).unwrap();
            return;
        }
        assert_eq!(
            file, want,
            "docs/vectors/watches.json and the implementation disagree"
        );
        // The file's first key vector is the one FORMATS.md §9.3 states.
        assert_eq!(
            file["keys"][0]["definitionId"],
            "b229a5b96416ccb31bbbeba84e961592"
        );
        assert_eq!(file["keys"][0]["watchKey"], "e50c5bb85a187117");
    }
}
