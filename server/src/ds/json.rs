//! JSON records (contract C12): a JSON stream stores each record as the exact
//! text of the client's JSON value with the insignificant whitespace outside
//! strings removed. A top-level array in an append body is flattened one level
//! (each element is a record); any other value is one record. A record is
//! admitted only if it is valid JSON whose numbers are finite as f64 and whose
//! strings hold no lone surrogate (serde_json's parser enforces both).

use bytes::Bytes;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error("body is not valid JSON: {0}")]
    Invalid(String),
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Walks JSON text and yields, with its index, every byte outside string
/// literals and each literal's opening quote (so a caller sees a string
/// begin); a literal's contents and closing quote are skipped. The one place
/// that knows where strings are.
fn structural(text: &[u8]) -> impl Iterator<Item = (usize, u8)> + '_ {
    let (mut in_string, mut escaped) = (false, false);
    text.iter().enumerate().filter_map(move |(i, &b)| {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            return None;
        }
        if b == b'"' {
            in_string = true;
        }
        Some((i, b))
    })
}

/// Removes whitespace outside strings, keeping every other byte as sent.
/// The input must already be valid JSON.
fn minify(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut kept_from = 0;
    for (i, b) in structural(text) {
        if is_whitespace(b) {
            out.extend_from_slice(&text[kept_from..i]);
            kept_from = i + 1;
        }
    }
    out.extend_from_slice(&text[kept_from..]);
    out
}

/// Splits minified JSON array text `[a,b,…]` into its elements' text.
fn split_array(minified: &[u8]) -> Vec<Bytes> {
    let inner = &minified[1..minified.len() - 1];
    let mut out = Vec::new();
    if inner.is_empty() {
        return out;
    }
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, b) in structural(inner) {
        match b {
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth -= 1,
            b',' if depth == 0 => {
                out.push(Bytes::copy_from_slice(&inner[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(Bytes::copy_from_slice(&inner[start..]));
    out
}

/// Validates an append body and returns its records (an empty array gives none).
pub fn records_from_body(body: &[u8]) -> Result<Vec<Bytes>, JsonError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| JsonError::Invalid(e.to_string()))?;
    let minified = minify(body);
    Ok(match value {
        serde_json::Value::Array(_) => split_array(&minified),
        _ => vec![Bytes::from(minified)],
    })
}

/// Validates a JSON value and returns it as one record, arrays included
/// (the product's single append: the body wrapped as `[value]` and flattened).
pub fn one_record(body: &[u8]) -> Result<Bytes, JsonError> {
    serde_json::from_slice::<serde_json::Value>(body)
        .map_err(|e| JsonError::Invalid(e.to_string()))?;
    Ok(Bytes::from(minify(body)))
}

/// The shape of a body's top level, from a scan that allocates nothing (the
/// body is not validated: a count to refuse oversized batches before parsing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopLevel {
    /// An array with this many elements.
    Array(usize),
    NotArray,
}

pub fn top_level(body: &[u8]) -> TopLevel {
    let mut bytes = structural(body).filter(|(_, b)| !is_whitespace(*b));
    if bytes.next().map(|(_, b)| b) != Some(b'[') {
        return TopLevel::NotArray;
    }
    let (mut depth, mut elements, mut any) = (1usize, 0usize, false);
    for (_, b) in bytes {
        match b {
            b'[' | b'{' | b'"' => {
                depth += usize::from(b != b'"');
                any = true;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    break;
                }
            }
            b',' if depth == 1 => elements += 1,
            _ => any = true,
        }
    }
    TopLevel::Array(if any { elements + 1 } else { 0 })
}

/// The body of a JSON read: the records as one array.
pub fn array_of<'a>(records: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(b'[');
    for (i, record) in records.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(record);
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(body: &str) -> Vec<String> {
        records_from_body(body.as_bytes())
            .unwrap()
            .into_iter()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn flattens_one_level_and_keeps_exact_text() {
        assert_eq!(texts(r#"{"a": 1}"#), [r#"{"a":1}"#]);
        assert_eq!(
            texts(r#" [ {"a" : [1, 2]}, 3 , "x y" ] "#),
            [r#"{"a":[1,2]}"#, "3", r#""x y""#]
        );
        assert_eq!(texts("[[1,2],[3]]"), ["[1,2]", "[3]"]);
        assert!(texts("[]").is_empty());
        assert_eq!(texts(r#""a\"b, c""#), [r#""a\"b, c""#]);
        // Number literals, key order, duplicate keys and escapes are kept.
        assert_eq!(
            texts(r#"{"b":1.50,"a":2,"a":3,"e":"\u00e9"}"#),
            [r#"{"b":1.50,"a":2,"a":3,"e":"\u00e9"}"#]
        );
        assert_eq!(texts(r#"["]",{"k":"}"}]"#), [r#""]""#, r#"{"k":"}"}"#]);
    }

    #[test]
    fn rejects_invalid_json() {
        for bad in [
            "{ invalid json }",
            "",
            "[1,]",
            r#""\ud800""#,
            "1e999",
            "[1] x",
        ] {
            assert!(records_from_body(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn top_level_counts() {
        assert_eq!(top_level(b" [ ] "), TopLevel::Array(0));
        assert_eq!(top_level(b"[1]"), TopLevel::Array(1));
        assert_eq!(
            top_level(br#"[1, "a,b", [2,3], {"x":[4,5]}]"#),
            TopLevel::Array(4)
        );
        assert_eq!(top_level(br#"{"a":[1,2]}"#), TopLevel::NotArray);
        assert_eq!(top_level(b"3"), TopLevel::NotArray);
        assert_eq!(one_record(b" [1, 2] ").unwrap().as_ref(), b"[1,2]");
        assert!(one_record(b"[1,").is_err());
    }

    #[test]
    fn arrays_round_trip() {
        let records = records_from_body(br#"[{"a":1},2]"#).unwrap();
        let body = array_of(records.iter().map(|r| r.as_ref()));
        assert_eq!(body, br#"[{"a":1},2]"#);
        assert_eq!(array_of(std::iter::empty()), b"[]");
    }
}
