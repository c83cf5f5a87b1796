//! The body of `POST /v1/streams/{name}:seal`: `{}` (seal only) or
//! `{"final": value, "routingKey"?: string}` (seal with a final record), its
//! value kept as the client wrote it.

use bytes::Bytes;

use super::super::common::ApiError;
use super::errors::bad;
use super::parse::routing_key_bytes;
use crate::ds::json;

/// The body of `:seal`: `{}` or `{"final": value, "routingKey"?: string}`.
pub struct SealBody {
    pub final_record: Option<Bytes>,
    pub routing_key: Bytes,
}

pub fn seal_body(body: &[u8]) -> Result<SealBody, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(SealBody {
            final_record: None,
            routing_key: Bytes::new(),
        });
    }
    // The final value's exact text is kept (a raw-value parse); `null` is a
    // record too, so presence is judged by the key, not the value.
    let fields: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_slice(body).map_err(|_| {
            bad(
                "invalid_body",
                "the seal body is {} or {\"final\": value, \"routingKey\"?: string}",
            )
        })?;
    if let Some(unknown) = fields.keys().find(|k| *k != "final" && *k != "routingKey") {
        return Err(bad(
            "invalid_body",
            format!("the seal body has an unknown field {unknown:?}"),
        ));
    }
    let routing_key = match fields.get("routingKey") {
        None => Bytes::new(),
        Some(raw) => {
            let text: String = serde_json::from_str(raw.get())
                .map_err(|_| bad("invalid_routing_key", "routingKey must be a string"))?;
            routing_key_bytes(text.as_bytes())?
        }
    };
    let final_record = match fields.get("final") {
        Some(raw) => Some(
            json::one_record(raw.get().as_bytes())
                .map_err(|e| bad("invalid_body", e.to_string()))?,
        ),
        None => None,
    };
    Ok(SealBody {
        final_record,
        routing_key,
    })
}
