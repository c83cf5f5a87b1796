//! A consumer group's name and configuration document
//! (`PUT /v1/streams/{name}/consumers/{consumer}`, docs/API.md §8b):
//!
//! ```json
//! {"visibilityTimeoutMs": 30000, "maxAttempts": 5,
//!  "deadLetterStream": "orders-dlq", "maxBatchRecords": 10}
//! ```
//!
//! Every field is optional. Parsing validates shapes and bounds and gives
//! the document in normal form (defaults filled in), so two documents
//! configure the same consumer exactly when their normal forms are equal:
//! the same → 200, a new consumer → 201, another configuration of an
//! existing one → 409 `consumer_config_conflict`. The dead-letter target's
//! own checks (it exists, in the same project, not sealed, accepts the
//! key) need the registry and happen where the consumer is created.

use serde_json::{Map, Value};

use super::config::{whole_number, ConfigError};

pub const CONSUMER_NAME_BYTES_MAX: usize = 128;
pub const VISIBILITY_MS_DEFAULT: u64 = 30_000;
pub const VISIBILITY_MS_MIN: u64 = 1_000;
pub const VISIBILITY_MS_MAX: u64 = 12 * 3600 * 1000;
pub const MAX_ATTEMPTS_DEFAULT: u32 = 5;
pub const MAX_ATTEMPTS_MAX: u32 = 1_000;
pub const MAX_BATCH_DEFAULT: u32 = 10;
pub const MAX_BATCH_MAX: u32 = 1_000;
/// Largest configuration document.
pub const CONSUMER_CONFIG_BYTES_MAX: usize = 16 << 10;

/// A validated consumer configuration in normal form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSettings {
    pub visibility_ms: u64,
    pub max_attempts: u32,
    /// A collection name (validated as one by the caller's name rules).
    pub dead_letter_stream: Option<String>,
    pub max_batch_records: u32,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        ConsumerSettings {
            visibility_ms: VISIBILITY_MS_DEFAULT,
            max_attempts: MAX_ATTEMPTS_DEFAULT,
            dead_letter_stream: None,
            max_batch_records: MAX_BATCH_DEFAULT,
        }
    }
}

fn bad<T>(message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(message.into()))
}

/// A consumer name: one path segment of 1–128 bytes, no `/` or `:`, no
/// control characters, not `.` or `..`.
pub fn valid_consumer_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= CONSUMER_NAME_BYTES_MAX
        && name != "."
        && name != ".."
        && !name.contains(['/', ':'])
        && !name.chars().any(char::is_control)
}

fn whole(
    object: &Map<String, Value>,
    field: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, ConfigError> {
    match object.get(field) {
        None => Ok(None),
        Some(value) => match whole_number(value) {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => bad(format!(
                "{field} must be a whole number from {min} to {max}"
            )),
        },
    }
}

impl ConsumerSettings {
    /// Parses a configuration document (an empty body is `{}`).
    pub fn parse(body: &[u8]) -> Result<ConsumerSettings, ConfigError> {
        if body.len() > CONSUMER_CONFIG_BYTES_MAX {
            return bad(format!(
                "a consumer configuration is at most {CONSUMER_CONFIG_BYTES_MAX} bytes"
            ));
        }
        let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
            Value::Object(Map::new())
        } else {
            serde_json::from_slice(body).map_err(|e| ConfigError(format!("not JSON: {e}")))?
        };
        let Value::Object(object) = value else {
            return bad("a consumer configuration is a JSON object");
        };
        const FIELDS: [&str; 4] = [
            "visibilityTimeoutMs",
            "maxAttempts",
            "deadLetterStream",
            "maxBatchRecords",
        ];
        if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return bad(format!("unknown field {unknown:?}"));
        }
        let defaults = ConsumerSettings::default();
        let dead_letter_stream = match object.get("deadLetterStream") {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) if !name.is_empty() => Some(name.clone()),
            Some(_) => return bad("deadLetterStream must be a collection name"),
        };
        Ok(ConsumerSettings {
            visibility_ms: whole(
                &object,
                "visibilityTimeoutMs",
                VISIBILITY_MS_MIN,
                VISIBILITY_MS_MAX,
            )?
            .unwrap_or(defaults.visibility_ms),
            max_attempts: whole(&object, "maxAttempts", 1, u64::from(MAX_ATTEMPTS_MAX))?
                .map_or(defaults.max_attempts, |n| n as u32),
            dead_letter_stream,
            max_batch_records: whole(&object, "maxBatchRecords", 1, u64::from(MAX_BATCH_MAX))?
                .map_or(defaults.max_batch_records, |n| n as u32),
        })
    }

    /// The document in normal form (what a read of the consumer answers).
    pub fn to_json(&self) -> Value {
        let mut doc = serde_json::json!({
            "visibilityTimeoutMs": self.visibility_ms,
            "maxAttempts": self.max_attempts,
            "maxBatchRecords": self.max_batch_records,
        });
        if let Some(dlq) = &self.dead_letter_stream {
            doc["deadLetterStream"] = Value::String(dlq.clone());
        }
        doc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_in_and_normal_forms_compare() {
        let empty = ConsumerSettings::parse(b"").unwrap();
        assert_eq!(empty, ConsumerSettings::default());
        assert_eq!(ConsumerSettings::parse(b"{}").unwrap(), empty);
        let explicit = ConsumerSettings::parse(
            br#"{"maxBatchRecords":10,"maxAttempts":5,"visibilityTimeoutMs":30000}"#,
        )
        .unwrap();
        assert_eq!(
            explicit, empty,
            "the defaults spelled out are the same consumer"
        );
        let other = ConsumerSettings::parse(br#"{"maxAttempts":6}"#).unwrap();
        assert_ne!(other, empty);
        let float = ConsumerSettings::parse(br#"{"maxAttempts":6.0}"#).unwrap();
        assert_eq!(float, other, "6.0 is the whole number 6");
        let with_dlq = ConsumerSettings::parse(
            br#"{"deadLetterStream":"orders-dlq","visibilityTimeoutMs":1000}"#,
        )
        .unwrap();
        assert_eq!(with_dlq.dead_letter_stream.as_deref(), Some("orders-dlq"));
        assert_eq!(
            ConsumerSettings::parse(with_dlq.to_json().to_string().as_bytes()).unwrap(),
            with_dlq
        );
    }

    #[test]
    fn bounds_shapes_and_unknown_fields_are_refused() {
        for doc in [
            r#"{"visibilityTimeoutMs":999}"#,
            r#"{"visibilityTimeoutMs":43200001}"#,
            r#"{"visibilityTimeoutMs":"30s"}"#,
            r#"{"maxAttempts":0}"#,
            r#"{"maxAttempts":1001}"#,
            r#"{"maxAttempts":2.5}"#,
            r#"{"maxBatchRecords":0}"#,
            r#"{"maxBatchRecords":1001}"#,
            r#"{"deadLetterStream":7}"#,
            r#"{"deadLetterStream":""}"#,
            r#"{"extra":1}"#,
            r#"[]"#,
            r#"{"#,
        ] {
            assert!(ConsumerSettings::parse(doc.as_bytes()).is_err(), "{doc}");
        }
        let big = format!(
            r#"{{"deadLetterStream":"{}"}}"#,
            "x".repeat(CONSUMER_CONFIG_BYTES_MAX)
        );
        assert!(ConsumerSettings::parse(big.as_bytes()).is_err());
    }

    #[test]
    fn consumer_names_are_one_plain_segment() {
        for good in ["workers", "a", "billing.v2", "ünï", &"x".repeat(128)] {
            assert!(valid_consumer_name(good), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a:b", "tab\t", &"x".repeat(129)] {
            assert!(!valid_consumer_name(bad), "{bad}");
        }
    }
}
