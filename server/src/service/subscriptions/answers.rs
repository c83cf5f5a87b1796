//! What the subscription service answers, as typed values.
//!
//! Owns the serialisable answers of the `__ds` API (a subscription's
//! description, a claim, an acknowledgement) and the two payloads the service
//! itself sends: the webhook wake body and the pull-wake event.
//!
//! Invariant (docs/ARCHITECTURE.md, "Subscriptions"): these are wire formats.
//! Fields are declared in lexicographic order, the order the answers were
//! written in before they were typed, so the bytes on the wire are unchanged;
//! `None` is written as `null`, never left out.

use serde::Serialize;

use super::store::{Kind, Link};
use crate::ds::offsets::Offset;

/// A subscription's state as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SubStatus {
    Active,
    /// The last webhook delivery failed.
    Failed,
}

/// Why a stream is linked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkType {
    Explicit,
    Glob,
}

impl LinkType {
    pub fn of(link: &Link) -> LinkType {
        if link.explicit {
            LinkType::Explicit
        } else {
            LinkType::Glob
        }
    }
}

/// An acknowledged position as written: an offset, or `-1` for nothing yet.
pub fn acked_text(acked: Option<u64>) -> String {
    acked.map_or_else(|| "-1".to_string(), |a| Offset(a).to_string())
}

/// `GET subscriptions/{id}` (and the answer of a PUT).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Description {
    pub created_at: String,
    pub description: Option<String>,
    pub id: String,
    pub lease_ttl_ms: u64,
    pub pattern: Option<String>,
    pub status: SubStatus,
    pub streams: Vec<LinkedStream>,
    pub subscription_id: String,
    #[serde(rename = "type")]
    pub kind: Kind,
    pub wake_stream: Option<String>,
    pub webhook: Option<WebhookDescription>,
}

/// A linked stream in a description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkedStream {
    pub acked_offset: String,
    pub link_type: LinkType,
    pub path: String,
}

/// A webhook subscription's target and how its deliveries are signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebhookDescription {
    pub signing: Signing,
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Signing {
    pub alg: &'static str,
    pub jwks_url: String,
    pub kid: String,
}

/// A PUT's outcome: whether it created the subscription, and its description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutAnswer {
    pub created: bool,
    pub subscription: Description,
}

/// A linked stream with its tail, in a claim and a webhook wake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamState {
    pub acked_offset: String,
    pub has_pending: bool,
    pub link_type: LinkType,
    pub path: String,
    pub tail_offset: String,
}

/// A linked stream's tail as read at a wake or claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkedTail {
    pub path: String,
    pub link: Link,
    pub tail: u64,
    pub pending: bool,
}

impl StreamState {
    pub fn of(tails: &[LinkedTail]) -> Vec<StreamState> {
        tails
            .iter()
            .map(|t| StreamState {
                acked_offset: acked_text(t.link.acked),
                has_pending: t.pending,
                link_type: LinkType::of(&t.link),
                path: t.path.clone(),
                tail_offset: Offset(t.tail).to_string(),
            })
            .collect()
    }
}

/// `POST …/claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClaimAnswer {
    pub generation: u64,
    pub lease_ttl_ms: u64,
    pub streams: Vec<StreamState>,
    pub token: String,
    pub wake_id: String,
}

/// `POST …/callback` and `POST …/ack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AckAnswer {
    pub next_wake: bool,
    pub ok: bool,
}

/// The body POSTed to a webhook at a wake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WakeBody {
    pub callback_token: String,
    pub callback_url: String,
    pub generation: u64,
    pub streams: Vec<StreamState>,
    pub subscription_id: String,
    pub wake_id: String,
}

/// The event appended to a pull-wake subscription's wake stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WakeEvent {
    pub generation: u64,
    pub stream: String,
    pub subscription_id: String,
    pub ts: u64,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

#[cfg(test)]
mod tests {
    //! Each typed answer is written byte for byte as the `json!` value it
    //! replaced (serde_json's map writes keys in lexicographic order).
    use super::*;
    use serde_json::json;

    fn link(explicit: bool, acked: Option<u64>) -> Link {
        Link {
            glob: !explicit,
            explicit,
            acked,
        }
    }

    fn tails() -> Vec<LinkedTail> {
        vec![
            LinkedTail {
                path: "a".into(),
                link: link(true, Some(3)),
                tail: 9,
                pending: true,
            },
            LinkedTail {
                path: "b/c".into(),
                link: link(false, None),
                tail: 0,
                pending: false,
            },
        ]
    }

    fn streams_json(tails: &[LinkedTail]) -> Vec<serde_json::Value> {
        tails
            .iter()
            .map(|t| {
                json!({
                    "path": t.path,
                    "link_type": if t.link.explicit { "explicit" } else { "glob" },
                    "acked_offset": acked_text(t.link.acked),
                    "tail_offset": Offset(t.tail).to_string(),
                    "has_pending": t.pending,
                })
            })
            .collect()
    }

    fn same<T: Serialize>(typed: &T, before: serde_json::Value) {
        assert_eq!(serde_json::to_string(typed).unwrap(), before.to_string());
    }

    #[test]
    fn descriptions_keep_their_bytes() {
        for webhook in [false, true] {
            let typed = Description {
                created_at: "2024-01-02T03:04:05.678Z".into(),
                description: webhook.then(|| "d".to_string()),
                id: "s1".into(),
                lease_ttl_ms: 30_000,
                pattern: (!webhook).then(|| "events/*".to_string()),
                status: if webhook {
                    SubStatus::Failed
                } else {
                    SubStatus::Active
                },
                streams: vec![LinkedStream {
                    acked_offset: acked_text(None),
                    link_type: LinkType::Glob,
                    path: "events/x".into(),
                }],
                subscription_id: "s1".into(),
                kind: if webhook {
                    Kind::Webhook
                } else {
                    Kind::PullWake
                },
                wake_stream: (!webhook).then(|| "wakes".to_string()),
                webhook: webhook.then(|| WebhookDescription {
                    signing: Signing {
                        alg: "ed25519",
                        jwks_url: "http://h/v1/stream/__ds/jwks.json".into(),
                        kid: "ds_k".into(),
                    },
                    url: "https://example.com/hook".into(),
                }),
            };
            let webhook_json = typed.webhook.as_ref().map(|w| {
                json!({
                    "url": w.url,
                    "signing": {
                        "alg": "ed25519",
                        "kid": w.signing.kid,
                        "jwks_url": w.signing.jwks_url,
                    },
                })
            });
            same(
                &typed,
                json!({
                    "id": typed.id,
                    "subscription_id": typed.id,
                    "type": typed.kind,
                    "pattern": typed.pattern,
                    "streams": [{
                        "path": "events/x",
                        "link_type": "glob",
                        "acked_offset": "-1",
                    }],
                    "webhook": webhook_json,
                    "wake_stream": typed.wake_stream,
                    "lease_ttl_ms": typed.lease_ttl_ms,
                    "created_at": typed.created_at,
                    "status": if webhook { "failed" } else { "active" },
                    "description": typed.description,
                }),
            );
        }
    }

    #[test]
    fn claims_acks_and_wakes_keep_their_bytes() {
        let tails = tails();
        same(
            &ClaimAnswer {
                generation: 4,
                lease_ttl_ms: 1_000,
                streams: StreamState::of(&tails),
                token: "t.s".into(),
                wake_id: "w_1".into(),
            },
            json!({
                "wake_id": "w_1",
                "generation": 4,
                "token": "t.s",
                "streams": streams_json(&tails),
                "lease_ttl_ms": 1_000,
            }),
        );
        same(
            &AckAnswer {
                next_wake: true,
                ok: true,
            },
            json!({"ok": true, "next_wake": true}),
        );
        same(
            &WakeBody {
                callback_token: "t.s".into(),
                callback_url: "http://h/v1/stream/__ds/subscriptions/s1/callback".into(),
                generation: 4,
                streams: StreamState::of(&tails),
                subscription_id: "s1".into(),
                wake_id: "w_1".into(),
            },
            json!({
                "subscription_id": "s1",
                "wake_id": "w_1",
                "generation": 4,
                "streams": streams_json(&tails),
                "callback_url": "http://h/v1/stream/__ds/subscriptions/s1/callback",
                "callback_token": "t.s",
            }),
        );
        same(
            &WakeEvent {
                generation: 4,
                stream: "a".into(),
                subscription_id: "s1".into(),
                ts: 123,
                kind: "wake",
            },
            json!({
                "type": "wake",
                "subscription_id": "s1",
                "stream": "a",
                "generation": 4,
                "ts": 123,
            }),
        );
    }
}
