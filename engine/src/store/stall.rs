//! A store that can be frozen: while stalled, every call waits before it
//! reaches the inner store, until released (then the held calls go on, as
//! against an object store that stopped answering and came back). Tests of
//! how the layers above bound their answers use it.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use object_store::path::Path;
use object_store::Result;
use tokio::sync::watch;

use super::layer::{StoreLayer, StoreOp};

#[derive(Debug)]
pub struct Stall {
    stalled: watch::Sender<bool>,
    /// Calls waiting right now.
    held: AtomicUsize,
}

impl Default for Stall {
    fn default() -> Self {
        Stall {
            stalled: watch::Sender::new(false),
            held: AtomicUsize::new(0),
        }
    }
}

impl Stall {
    /// Every call from now on waits until [`Stall::release`].
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Lets the held calls and every later one through.
    pub fn release(&self) {
        self.stalled.send_replace(false);
    }

    pub fn is_stalled(&self) -> bool {
        *self.stalled.borrow()
    }

    /// Calls held at this moment.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

/// Counts a held call for as long as it waits (also when its future is dropped).
struct Holding<'a>(&'a AtomicUsize);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl StoreLayer for Stall {
    async fn before(&self, _op: StoreOp, _location: Option<&Path>) -> Result<()> {
        let mut stalled = self.stalled.subscribe();
        if !*stalled.borrow_and_update() {
            return Ok(());
        }
        self.held.fetch_add(1, Ordering::SeqCst);
        let _holding = Holding(&self.held);
        // The sender lives in `self`, so the channel cannot close under us.
        let _ = stalled.wait_for(|stalled| !*stalled).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use object_store::memory::InMemory;
    use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

    use super::*;
    use crate::store::Layered;

    #[tokio::test]
    async fn a_stalled_store_holds_every_call_until_released() {
        let layered = Arc::new(Layered::new(Arc::new(InMemory::new()), Stall::default()));
        let store: Arc<dyn ObjectStore> = layered.clone();
        let path = Path::from("a");
        store
            .put(&path, PutPayload::from_static(b"1"))
            .await
            .unwrap();
        layered.layer().stall();
        let get = {
            let store = store.clone();
            let path = path.clone();
            tokio::spawn(async move { store.get(&path).await?.bytes().await })
        };
        while layered.layer().held() == 0 {
            tokio::task::yield_now().await;
        }
        let timed_out = tokio::time::timeout(
            Duration::from_millis(20),
            store.put(&path, PutPayload::from_static(b"2")),
        )
        .await;
        assert!(timed_out.is_err(), "a put waits while stalled");
        assert_eq!(
            layered.layer().held(),
            1,
            "a dropped call is no longer held"
        );
        assert!(!get.is_finished());
        layered.layer().release();
        assert_eq!(get.await.unwrap().unwrap(), Bytes::from_static(b"1"));
        assert_eq!(layered.layer().held(), 0);
    }
}
