//! The live consumers of this server (docs/ARCHITECTURE.md, "The
//! server"): what `consumers.rs` derives from a shard's durable consumer
//! state and `consumer_delivery.rs` serves from, one per (stream
//! incarnation, shard owner epoch, consumer name), and the lock that
//! serializes configuration changes.
//!
//! Invariant: the map holds at most `LIVE_CONSUMERS_MAX` entries beyond the
//! ones in use (idle ones are dropped first, and rebuilt from their durable
//! state when next used).

use std::collections::HashMap;
use std::sync::Arc;

use strata_engine::consumer::Consumer;
use strata_engine::StreamRef;

use super::product::consumer_config::ConsumerSettings;

/// Live consumers kept at once; beyond, idle ones are dropped (and rebuilt
/// from their durable state when next used).
const LIVE_CONSUMERS_MAX: usize = 16_384;

/// Which live consumer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct LiveKey {
    pub(super) stream: StreamRef,
    pub(super) owner_epoch: u64,
    pub(super) name: String,
}

/// A consumer as it is served now.
pub(super) struct LiveConsumer {
    pub(super) generation: u64,
    pub(super) settings: ConsumerSettings,
    pub(super) state: tokio::sync::Mutex<LiveState>,
    /// Woken when a change of this consumer became durable (a settle can
    /// free a key a waiting pull may take).
    pub(super) changed: tokio::sync::Notify,
}

pub(super) struct LiveState {
    pub(super) consumer: Consumer,
    /// A change failed or its outcome is unknown: rebuild before use.
    pub(super) broken: bool,
    /// Dead letters a restore found started and not finished.
    pub(super) resume_dead_letters: bool,
}

/// The live consumers of this server, and the lock of configuration changes.
#[derive(Default)]
pub struct LiveConsumers {
    live: parking_lot::Mutex<HashMap<LiveKey, Arc<LiveConsumer>>>,
    pub(super) config_changes: tokio::sync::Mutex<()>,
}

impl LiveConsumers {
    pub(super) fn get(&self, key: &LiveKey) -> Option<Arc<LiveConsumer>> {
        self.live.lock().get(key).cloned()
    }

    pub(super) fn insert(&self, key: LiveKey, consumer: Arc<LiveConsumer>) -> Arc<LiveConsumer> {
        let mut live = self.live.lock();
        if live.len() >= LIVE_CONSUMERS_MAX {
            live.retain(|_, c| Arc::strong_count(c) > 1);
        }
        live.entry(key).or_insert(consumer).clone()
    }

    pub(super) fn forget(&self, key: &LiveKey) {
        self.live.lock().remove(key);
    }

    /// Wakes the pulls waiting on consumer `name` of `stream` (it changed
    /// under them: they look again).
    pub(super) fn wake(&self, stream: &StreamRef, name: &str) {
        for (key, live) in self.live.lock().iter() {
            if key.stream == *stream && key.name == name {
                live.changed.notify_waiters();
            }
        }
    }
}
