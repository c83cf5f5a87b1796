//! The typed creation document of a collection (`PUT /v1/streams/{name}`):
//!
//! ```json
//! {"format": {"kind":"json"} | {"kind":"bytes","contentType":"application/x-protobuf"},
//!  "expiry": {"idle":"30d"} | {"at":"2027-01-01T00:00:00Z"},
//!  "watches": [{"name":"by-customer","fields":["/customerId"]}]}
//! ```
//!
//! Parsing validates everything (unknown fields, limits, shapes) and gives a
//! [`CollectionConfig`] in normal form: durations in whole seconds, the
//! absolute expiry as an instant, watches sorted by name with each one's field
//! order kept. Two documents configure the same collection exactly when their
//! normal forms are equal, which is what idempotent creation compares.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Largest creation document.
pub const CONFIG_BYTES_MAX: usize = 256 << 10;
/// Longest idle expiry.
pub const IDLE_SECONDS_MAX: u64 = 10 * 365 * 24 * 3600;
pub const WATCHES_MAX: usize = 64;
pub const WATCH_FIELDS_MAX: usize = 16;
pub const WATCH_NAME_BYTES_MAX: usize = 128;
pub const WATCH_FIELD_BYTES_MAX: usize = 1024;
pub const CONTENT_TYPE_BYTES_MAX: usize = 255;
pub const JSON_CONTENT_TYPE: &str = "application/json";
pub const BYTES_CONTENT_TYPE: &str = "application/octet-stream";

/// A watch definition: a name and the JSON pointers whose values it keys on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchDef {
    pub name: String,
    pub fields: Vec<String>,
}

/// How a collection's records are framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    Json,
    Bytes { content_type: String },
}

impl Format {
    pub fn content_type(&self) -> &str {
        match self {
            Format::Json => JSON_CONTENT_TYPE,
            Format::Bytes { content_type } => content_type,
        }
    }
}

/// When a collection expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpiryConfig {
    Never,
    /// Sliding: this long after the last origin read or write.
    IdleSeconds(u64),
    /// At an instant (the text as given, and its epoch milliseconds).
    At {
        text: String,
        ms: u64,
    },
}

/// A validated creation document in normal form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionConfig {
    pub format: Format,
    pub expiry: ExpiryConfig,
    /// Sorted by name.
    pub watches: Vec<WatchDef>,
}

/// Why a creation document was refused (always 400 `invalid_config`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn bad<T>(message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(message.into()))
}

fn only_fields(
    object: &Map<String, Value>,
    allowed: &[&str],
    what: &str,
) -> Result<(), ConfigError> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(unknown) => bad(format!("{what}: unknown field {unknown:?}")),
        None => Ok(()),
    }
}

/// A MIME type `type/subtype` with optional parameters, printable ASCII.
fn valid_content_type(text: &str) -> bool {
    let media = text.split(';').next().unwrap_or("").trim();
    text.len() <= CONTENT_TYPE_BYTES_MAX
        && text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && media.split_once('/').is_some_and(|(t, s)| {
            let token = |x: &str| {
                !x.is_empty()
                    && x.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
            };
            token(t) && token(s)
        })
}

/// A JSON number that is a whole number within `u64`. JSON has one kind of
/// number, so `5`, `5.0` and `5e0` are the same integer (as JSON Schema
/// judges `integer`); fractions, negatives and larger numbers are not.
pub fn whole_number(value: &Value) -> Option<u64> {
    const LIMIT: f64 = 18_446_744_073_709_551_616.0; // 2^64
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..LIMIT).contains(f))
            .map(|f| f as u64)
    })
}

/// `30d`, `12h`, `45m`, `30s`, or bare seconds (a string or a JSON integer).
pub fn parse_duration_seconds(value: &Value) -> Result<u64, ConfigError> {
    let seconds = match value {
        Value::Number(_) => whole_number(value),
        Value::String(text) => {
            let (digits, unit) = match text.char_indices().last() {
                Some((i, c)) if c.is_ascii_alphabetic() => (&text[..i], Some(c)),
                _ => (text.as_str(), None),
            };
            let canonical = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            let n: Option<u64> = if canonical { digits.parse().ok() } else { None };
            let scale = match unit {
                None | Some('s') => Some(1),
                Some('m') => Some(60),
                Some('h') => Some(3600),
                Some('d') => Some(86_400),
                _ => None,
            };
            n.zip(scale).and_then(|(n, s)| n.checked_mul(s))
        }
        _ => None,
    };
    match seconds {
        Some(0) => bad("expiry.idle must be positive"),
        Some(s) if s > IDLE_SECONDS_MAX => bad(format!(
            "expiry.idle exceeds the maximum of {IDLE_SECONDS_MAX} seconds"
        )),
        Some(s) => Ok(s),
        None => bad("expiry.idle must be like \"30d\", \"12h\", \"45m\", \"30s\" or whole seconds"),
    }
}

/// A JSON pointer (RFC 6901) beginning with `/`, with only `~0`/`~1` escapes.
fn valid_pointer(field: &str) -> bool {
    if !field.starts_with('/') || field.len() > WATCH_FIELD_BYTES_MAX {
        return false;
    }
    let bytes = field.as_bytes();
    bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b != b'~' || matches!(bytes.get(i + 1), Some(b'0') | Some(b'1')))
        && !field.chars().any(char::is_control)
}

fn parse_watches(value: &Value) -> Result<Vec<WatchDef>, ConfigError> {
    let Value::Array(items) = value else {
        return bad("watches must be an array");
    };
    if items.len() > WATCHES_MAX {
        return bad(format!("at most {WATCHES_MAX} watches"));
    }
    let mut watches = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(o) = item else {
            return bad("each watch is an object {name, fields}");
        };
        only_fields(o, &["name", "fields"], "watch")?;
        let Some(Value::String(name)) = o.get("name") else {
            return bad("watch.name must be a string");
        };
        if name.is_empty()
            || name.len() > WATCH_NAME_BYTES_MAX
            || name.contains('/')
            || name == "."
            || name == ".."
            || name.chars().any(char::is_control)
        {
            return bad(format!(
                "watch name {name:?}: use 1 to {WATCH_NAME_BYTES_MAX} bytes, one path segment"
            ));
        }
        let Some(Value::Array(fields)) = o.get("fields") else {
            return bad("watch.fields must be an array of JSON pointers");
        };
        if fields.is_empty() || fields.len() > WATCH_FIELDS_MAX {
            return bad(format!("a watch has 1 to {WATCH_FIELDS_MAX} fields"));
        }
        let mut pointers = Vec::with_capacity(fields.len());
        for field in fields {
            match field {
                Value::String(p) if valid_pointer(p) => pointers.push(p.clone()),
                _ => return bad("watch fields are JSON pointers beginning with '/'"),
            }
        }
        watches.push(WatchDef {
            name: name.clone(),
            fields: pointers,
        });
    }
    watches.sort_by(|a, b| a.name.cmp(&b.name));
    if watches.windows(2).any(|w| w[0].name == w[1].name) {
        return bad("watch names must be unique");
    }
    Ok(watches)
}

impl CollectionConfig {
    /// Parses and validates a creation document at `now_ms`.
    pub fn parse(body: &[u8], now_ms: u64) -> Result<Self, ConfigError> {
        if body.len() > CONFIG_BYTES_MAX {
            return bad(format!(
                "the creation document exceeds {CONFIG_BYTES_MAX} bytes"
            ));
        }
        let doc: Value = serde_json::from_slice(body)
            .map_err(|e| ConfigError(format!("the creation document is not JSON: {e}")))?;
        let Value::Object(doc) = doc else {
            return bad("the creation document is a JSON object");
        };
        only_fields(&doc, &["format", "expiry", "watches"], "document")?;
        let format = match doc.get("format") {
            Some(Value::Object(f)) => match f.get("kind") {
                Some(Value::String(kind)) if kind == "json" => {
                    only_fields(f, &["kind"], "format")?;
                    Format::Json
                }
                Some(Value::String(kind)) if kind == "bytes" => {
                    only_fields(f, &["kind", "contentType"], "format")?;
                    let content_type = match f.get("contentType") {
                        None => BYTES_CONTENT_TYPE.to_string(),
                        Some(Value::String(ct)) if valid_content_type(ct) => ct.clone(),
                        Some(_) => return bad("format.contentType must be a MIME type"),
                    };
                    if crate::service::is_json(&content_type) {
                        return bad("a JSON collection uses {\"kind\":\"json\"}");
                    }
                    Format::Bytes { content_type }
                }
                _ => return bad("format.kind must be \"json\" or \"bytes\""),
            },
            Some(_) => return bad("format must be an object"),
            None => return bad("format is required"),
        };
        let expiry = match doc.get("expiry") {
            None | Some(Value::Null) => ExpiryConfig::Never,
            Some(Value::Object(e)) => {
                only_fields(e, &["idle", "at"], "expiry")?;
                match (e.get("idle"), e.get("at")) {
                    (Some(_), Some(_)) => return bad("expiry takes idle or at, not both"),
                    (Some(idle), None) => ExpiryConfig::IdleSeconds(parse_duration_seconds(idle)?),
                    (None, Some(Value::String(text))) => {
                        let at = chrono::DateTime::parse_from_rfc3339(text)
                            .map_err(|_| ConfigError("expiry.at must be RFC 3339".into()))?;
                        let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
                        if ms <= now_ms {
                            return bad("expiry.at must be in the future");
                        }
                        ExpiryConfig::At {
                            text: text.clone(),
                            ms,
                        }
                    }
                    (None, Some(_)) => return bad("expiry.at must be an RFC 3339 string"),
                    (None, None) => return bad("expiry takes idle or at"),
                }
            }
            Some(_) => return bad("expiry must be an object"),
        };
        let watches = match doc.get("watches") {
            None | Some(Value::Null) => Vec::new(),
            Some(w) => parse_watches(w)?,
        };
        if !watches.is_empty() && format != Format::Json {
            return bad("watches need a JSON collection");
        }
        Ok(CollectionConfig {
            format,
            expiry,
            watches,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<CollectionConfig, ConfigError> {
        CollectionConfig::parse(text.as_bytes(), 1_000)
    }

    #[test]
    fn normal_forms() {
        let a = parse(r#"{"format":{"kind":"json"},"expiry":{"idle":"1d"},"watches":[{"name":"b","fields":["/x","/y"]},{"name":"a","fields":["/z"]}]}"#).unwrap();
        let b = parse(r#"{"watches":[{"name":"a","fields":["/z"]},{"fields":["/x","/y"],"name":"b"}],"expiry":{"idle":86400},"format":{"kind":"json"}}"#).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.expiry, ExpiryConfig::IdleSeconds(86_400));
        // Field order inside a watch matters.
        let c = parse(r#"{"format":{"kind":"json"},"expiry":{"idle":"1d"},"watches":[{"name":"b","fields":["/y","/x"]},{"name":"a","fields":["/z"]}]}"#).unwrap();
        assert_ne!(a, c);
        let bytes = parse(r#"{"format":{"kind":"bytes"}}"#).unwrap();
        assert_eq!(bytes.format.content_type(), BYTES_CONTENT_TYPE);
        let at = parse(r#"{"format":{"kind":"bytes","contentType":"application/x-protobuf"},"expiry":{"at":"2030-01-01T00:00:00Z"}}"#).unwrap();
        assert!(matches!(
            at.expiry,
            ExpiryConfig::At {
                ms: 1_893_456_000_000,
                ..
            }
        ));
    }

    #[test]
    fn whole_numbers_are_judged_by_value() {
        for (text, whole) in [
            ("5", Some(5)),
            ("5.0", Some(5)),
            ("5e3", Some(5_000)),
            ("18446744073709551615", Some(u64::MAX)),
            ("5.5", None),
            ("-1", None),
            ("-0.5", None),
            ("1e20", None),
            ("\"5\"", None),
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(whole_number(&value), whole, "{text}");
        }
        let float = parse(r#"{"format":{"kind":"json"},"expiry":{"idle":86400.0}}"#).unwrap();
        assert_eq!(float.expiry, ExpiryConfig::IdleSeconds(86_400));
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"format":{"kind":"text"}}"#,
            r#"{"format":{"kind":"json","contentType":"x/y"}}"#,
            r#"{"format":{"kind":"bytes","contentType":"nonsense"}}"#,
            r#"{"format":{"kind":"bytes","contentType":"application/json"}}"#,
            r#"{"format":{"kind":"json"},"profile":"x"}"#,
            r#"{"format":{"kind":"json"},"expiry":{"idle":"0s"}}"#,
            r#"{"format":{"kind":"json"},"expiry":{"idle":"5w"}}"#,
            r#"{"format":{"kind":"json"},"expiry":{"idle":"030s"}}"#,
            r#"{"format":{"kind":"json"},"expiry":{"idle":"99999d"}}"#,
            r#"{"format":{"kind":"json"},"expiry":{"idle":"1d","at":"2030-01-01T00:00:00Z"}}"#,
            r#"{"format":{"kind":"json"},"expiry":{"at":"1970-01-01T00:00:00Z"}}"#,
            r#"{"format":{"kind":"json"},"expiry":{"at":"tomorrow"}}"#,
            r#"{"format":{"kind":"bytes"},"watches":[{"name":"a","fields":["/x"]}]}"#,
            r#"{"format":{"kind":"json"},"watches":[{"name":"a","fields":[]}]}"#,
            r#"{"format":{"kind":"json"},"watches":[{"name":"a","fields":["x"]}]}"#,
            r#"{"format":{"kind":"json"},"watches":[{"name":"a","fields":["/x~2"]}]}"#,
            r#"{"format":{"kind":"json"},"watches":[{"name":"a/b","fields":["/x"]}]}"#,
            r#"{"format":{"kind":"json"},"watches":[{"name":"a","fields":["/x"]},{"name":"a","fields":["/y"]}]}"#,
            r#"{"format":{"kind":"json"},"watches":[{"name":"a","fields":["/x"],"extra":1}]}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..65)
            .map(|i| format!(r#"{{"name":"w{i}","fields":["/x"]}}"#))
            .collect();
        let doc = format!(
            r#"{{"format":{{"kind":"json"}},"watches":[{}]}}"#,
            many.join(",")
        );
        assert!(parse(&doc).is_err());
        let big = format!(
            r#"{{"format":{{"kind":"json"}},"x":"{}"}}"#,
            "a".repeat(CONFIG_BYTES_MAX)
        );
        assert!(parse(&big).is_err());
    }
}
