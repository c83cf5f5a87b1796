//! How subscriptions hear about appends.
//!
//! Owns [`SubscriptionObserver`], the stream service's observer that hands
//! every append to the default project to [`Subscriptions::on_append`] on a
//! task of its own. It holds the service weakly: the stream service outlives
//! nothing through it (docs/ARCHITECTURE.md, "Subscriptions").

use std::sync::Weak;

use super::service::Subscriptions;
use crate::service::{StreamObserver, DEFAULT_PROJECT};

/// Subscriptions watch the stream service.
pub struct SubscriptionObserver(pub Weak<Subscriptions>);

impl StreamObserver for SubscriptionObserver {
    fn appended(&self, project: &str, name: &str) {
        if project != DEFAULT_PROJECT {
            return;
        }
        if let Some(subs) = self.0.upgrade() {
            let name = name.to_string();
            tokio::spawn(async move { subs.on_append(name).await });
        }
    }

    fn deleted(&self, _project: &str, _name: &str) {}
}
