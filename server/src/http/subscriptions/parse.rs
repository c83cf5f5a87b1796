//! Request bodies of the `__ds` API, parsed into the service's typed requests.
//!
//! Owns the JSON parsing of every body and its validation messages (each a
//! [`BadRequest`], answered `400 INVALID_REQUEST`). Bodies are read as JSON
//! values first, so a body that is not JSON is refused with serde_json's own
//! message, as it always was. Paths are normalised (no outer `/`). What only
//! the service can judge (a stale wake, an ack for an unlinked stream) passes
//! through as typed data (docs/ARCHITECTURE.md, §2: `http/` parses, the
//! service decides).

use serde_json::Value;

use super::errors::BadRequest;
use crate::ds::offsets::Offset;
use crate::service::subscriptions::{
    normalise_path, AckEntry, AckRequest, AddStreamsRequest, ClaimRequest, Kind, SubConfig,
    WakeRef, EXPLICIT_STREAMS_MAX, LEASE_MS_DEFAULT, LEASE_MS_MAX, LEASE_MS_MIN,
};

fn json_body(body: &[u8]) -> Result<Value, BadRequest> {
    serde_json::from_slice(body).map_err(|e| BadRequest(e.to_string()))
}

/// A list of stream paths: each a non-empty string once normalised.
fn paths(list: &[Value]) -> Result<Vec<String>, BadRequest> {
    list.iter()
        .map(|s| {
            s.as_str()
                .map(normalise_path)
                .filter(|p| !p.is_empty())
                .ok_or_else(|| BadRequest::new("streams must be non-empty strings"))
        })
        .collect()
}

/// The body of `PUT subscriptions/{id}`.
pub fn parse_config(body: &[u8]) -> Result<SubConfig, BadRequest> {
    let v = json_body(body)?;
    let kind = match v.get("type").and_then(Value::as_str) {
        Some("webhook") => Kind::Webhook,
        Some("pull-wake") => Kind::PullWake,
        _ => return Err(BadRequest::new("type must be \"webhook\" or \"pull-wake\"")),
    };
    let pattern = v
        .get("pattern")
        .and_then(Value::as_str)
        .map(normalise_path)
        .filter(|p| !p.is_empty());
    let mut streams = std::collections::BTreeSet::new();
    if let Some(list) = v.get("streams") {
        let list = list
            .as_array()
            .ok_or_else(|| BadRequest::new("streams must be an array of paths"))?;
        streams.extend(paths(list)?);
    }
    if streams.len() > EXPLICIT_STREAMS_MAX {
        return Err(BadRequest::new("too many streams"));
    }
    if pattern.is_none() && streams.is_empty() {
        return Err(BadRequest::new("give a pattern or streams"));
    }
    let webhook_url = v
        .get("webhook")
        .and_then(|w| w.get("url"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let wake_stream = v
        .get("wake_stream")
        .and_then(Value::as_str)
        .map(normalise_path);
    match kind {
        Kind::Webhook if webhook_url.is_none() => {
            return Err(BadRequest::new("a webhook subscription needs webhook.url"))
        }
        Kind::PullWake if wake_stream.is_none() => {
            return Err(BadRequest::new(
                "a pull-wake subscription needs wake_stream",
            ))
        }
        _ => {}
    }
    let lease_ttl_ms = match v.get("lease_ttl_ms") {
        None | Some(Value::Null) => LEASE_MS_DEFAULT,
        Some(n) => n
            .as_u64()
            .filter(|n| (LEASE_MS_MIN..=LEASE_MS_MAX).contains(n))
            .ok_or_else(|| BadRequest::new("lease_ttl_ms must be 1000 to 600000"))?,
    };
    let description = v
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(SubConfig {
        kind,
        pattern,
        streams,
        webhook_url,
        wake_stream,
        lease_ttl_ms,
        description,
    })
}

/// The body of `POST …/streams`.
pub fn parse_add_streams(body: &[u8]) -> Result<AddStreamsRequest, BadRequest> {
    let v = json_body(body)?;
    let list = v
        .get("streams")
        .and_then(Value::as_array)
        .ok_or_else(|| BadRequest::new("body must be {\"streams\": [paths]}"))?;
    Ok(AddStreamsRequest {
        streams: paths(list)?,
    })
}

/// The body of `POST …/claim`.
pub fn parse_claim(body: &[u8]) -> Result<ClaimRequest, BadRequest> {
    let v = json_body(body)?;
    let worker = v
        .get("worker")
        .and_then(Value::as_str)
        .filter(|w| !w.is_empty())
        .ok_or_else(|| BadRequest::new("worker must be a non-empty string"))?;
    Ok(ClaimRequest {
        worker: worker.to_string(),
    })
}

fn wake_ref(v: &Value) -> WakeRef {
    WakeRef {
        generation: v.get("generation").and_then(Value::as_u64),
        wake_id: v.get("wake_id").and_then(Value::as_str).map(str::to_string),
    }
}

/// The body of `POST …/release`: the wake it gives up.
pub fn parse_release(body: &[u8]) -> Result<WakeRef, BadRequest> {
    Ok(wake_ref(&json_body(body)?))
}

/// The body of `POST …/callback` and `POST …/ack`. A malformed entry of
/// `acks` is kept as such: the service refuses it only after the fence.
pub fn parse_ack(body: &[u8]) -> Result<AckRequest, BadRequest> {
    let v = json_body(body)?;
    let acks = v
        .get("acks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|ack| {
            let stream = ack
                .get("stream")
                .or_else(|| ack.get("path"))
                .and_then(Value::as_str)
                .map(normalise_path);
            let offset = ack
                .get("offset")
                .and_then(Value::as_str)
                .and_then(|o| Offset::parse(o).ok());
            match (stream, offset) {
                (None, _) => AckEntry::NoStream,
                (Some(stream), None) => AckEntry::BadOffset { stream },
                (Some(stream), Some(offset)) => AckEntry::Ack {
                    stream,
                    offset: offset.0,
                },
            }
        })
        .collect();
    Ok(AckRequest {
        wake: wake_ref(&v),
        acks,
        done: v.get("done").and_then(Value::as_bool) == Some(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(result: Result<impl std::fmt::Debug, BadRequest>) -> String {
        result.unwrap_err().0
    }

    #[test]
    fn configs_are_parsed_and_checked() {
        let config = parse_config(
            br#"{"type":"pull-wake","pattern":"/events/*/","streams":["/a/","b"],"wake_stream":"/w/","description":"d"}"#,
        )
        .unwrap();
        assert_eq!(config.kind, Kind::PullWake);
        assert_eq!(config.pattern.as_deref(), Some("events/*"));
        assert_eq!(config.streams.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(config.wake_stream.as_deref(), Some("w"));
        assert_eq!(config.lease_ttl_ms, LEASE_MS_DEFAULT);
        assert_eq!(config.description.as_deref(), Some("d"));
        let webhook =
            parse_config(br#"{"type":"webhook","streams":["a"],"webhook":{"url":"https://x"},"lease_ttl_ms":1000}"#)
                .unwrap();
        assert_eq!(webhook.webhook_url.as_deref(), Some("https://x"));
        assert_eq!(webhook.lease_ttl_ms, 1_000);

        for (body, message) in [
            (
                &br#"{"type":"other"}"#[..],
                "type must be \"webhook\" or \"pull-wake\"",
            ),
            (
                br#"{"type":"webhook","streams":"a"}"#,
                "streams must be an array of paths",
            ),
            (
                br#"{"type":"webhook","streams":["/"]}"#,
                "streams must be non-empty strings",
            ),
            (
                br#"{"type":"webhook","streams":[1]}"#,
                "streams must be non-empty strings",
            ),
            (
                br#"{"type":"webhook","pattern":"/"}"#,
                "give a pattern or streams",
            ),
            (
                br#"{"type":"webhook","streams":["a"]}"#,
                "a webhook subscription needs webhook.url",
            ),
            (
                br#"{"type":"pull-wake","streams":["a"]}"#,
                "a pull-wake subscription needs wake_stream",
            ),
            (
                br#"{"type":"pull-wake","streams":["a"],"wake_stream":"w","lease_ttl_ms":999}"#,
                "lease_ttl_ms must be 1000 to 600000",
            ),
            (
                br#"{"type":"pull-wake","streams":["a"],"wake_stream":"w","lease_ttl_ms":600001}"#,
                "lease_ttl_ms must be 1000 to 600000",
            ),
        ] {
            assert_eq!(refused(parse_config(body)), message);
        }
        let too_many: Vec<String> = (0..=EXPLICIT_STREAMS_MAX)
            .map(|i| format!("s{i}"))
            .collect();
        let body = json!({"type": "webhook", "streams": too_many}).to_string();
        assert_eq!(refused(parse_config(body.as_bytes())), "too many streams");
        // Not JSON: serde_json's own message.
        let not_json = serde_json::from_slice::<Value>(b"{")
            .unwrap_err()
            .to_string();
        assert_eq!(refused(parse_config(b"{")), not_json);
    }

    #[test]
    fn other_bodies_are_parsed_and_checked() {
        assert_eq!(
            parse_add_streams(br#"{"streams":["/a/"]}"#)
                .unwrap()
                .streams,
            ["a"]
        );
        assert_eq!(
            refused(parse_add_streams(br#"{"streams":"a"}"#)),
            "body must be {\"streams\": [paths]}"
        );
        assert_eq!(parse_claim(br#"{"worker":"w"}"#).unwrap().worker, "w");
        assert_eq!(
            refused(parse_claim(br#"{"worker":""}"#)),
            "worker must be a non-empty string"
        );
        assert_eq!(
            parse_release(br#"{"generation":2,"wake_id":"w_1"}"#).unwrap(),
            WakeRef {
                generation: Some(2),
                wake_id: Some("w_1".into())
            }
        );
        assert_eq!(parse_release(b"[]").unwrap(), WakeRef::default());
        let offset = Offset(5).to_string();
        let body = json!({
            "generation": 2,
            "wake_id": "w_1",
            "done": true,
            "acks": [
                {"stream": "/a/", "offset": offset},
                {"path": "b", "offset": "nonsense"},
                {"offset": offset},
                {"stream": 1, "path": "c", "offset": offset},
            ],
        })
        .to_string();
        let ack = parse_ack(body.as_bytes()).unwrap();
        assert!(ack.done);
        assert_eq!(ack.wake.generation, Some(2));
        assert_eq!(
            ack.acks,
            vec![
                AckEntry::Ack {
                    stream: "a".into(),
                    offset: 5
                },
                AckEntry::BadOffset { stream: "b".into() },
                AckEntry::NoStream,
                AckEntry::NoStream,
            ]
        );
        assert_eq!(parse_ack(br#"{"acks":{}}"#).unwrap(), AckRequest::default());
        assert!(parse_ack(b"").is_err());
    }
}
