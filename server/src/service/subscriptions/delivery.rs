//! One webhook wake being delivered: the delivery loop's view of a wake.
//!
//! Owns [`WakeDelivery`], the [`DeliveryTarget`] the webhook client drives:
//! it answers the URL while the wake is current, signs each attempt, and
//! settles the wake by the receiver's answer. A wake that is no longer
//! current (answered, lapsed, retired) stops its delivery.

use std::sync::Arc;

use tracing::Instrument;

use super::answers::SubStatus;
use super::service::{Sub, Subscriptions};
use super::webhook::{Attempt, DeliveryEnd, DeliveryTarget, Flow};

/// One webhook wake being delivered.
pub(super) struct WakeDelivery {
    pub subs: Arc<Subscriptions>,
    pub sub: Arc<Sub>,
    pub generation: u64,
}

impl WakeDelivery {
    pub async fn run(self, body: String) {
        let span = tracing::debug_span!("webhook", subscription = %self.sub.key.id, generation = self.generation);
        match self
            .subs
            .webhooks
            .deliver(&self, &body)
            .instrument(span)
            .await
        {
            DeliveryEnd::GaveUp { attempts } => tracing::info!(
                subscription = %self.sub.key.id,
                attempts,
                "webhook delivery gave up; the wake's lease will re-wake"
            ),
            DeliveryEnd::Stopped { .. } => {}
        }
    }
}

impl DeliveryTarget for WakeDelivery {
    async fn url(&self) -> Option<String> {
        let st = self.sub.state.lock().await;
        if !st.is_current(self.generation) {
            return None;
        }
        st.record.config.webhook_url.clone()
    }

    fn signature(&self, body: &str) -> String {
        let t = self.subs.streams.now_ms() / 1000;
        self.subs.signer.signature_header(t, body)
    }

    async fn settle(&self, attempt: Attempt) -> Flow {
        let mut st = self.sub.state.lock().await;
        if !st.is_current(self.generation) {
            return Flow::Stop;
        }
        match attempt {
            Attempt::Done => {
                st.status = SubStatus::Active;
                Subscriptions::ack_snapshot(&mut st);
                let _ = self.subs.save(&self.sub.key, &mut st).await;
                self.subs.maybe_wake(&self.sub, &mut st).await;
                Flow::Stop
            }
            Attempt::Accepted => {
                st.status = SubStatus::Active;
                Flow::Stop
            }
            Attempt::Failed => {
                st.status = SubStatus::Failed;
                Flow::Retry
            }
        }
    }

    fn random_u64(&self) -> u64 {
        let bytes = self.subs.streams.random_bytes16();
        let mut low = [0u8; 8];
        low.copy_from_slice(&bytes[..8]);
        u64::from_le_bytes(low)
    }
}
