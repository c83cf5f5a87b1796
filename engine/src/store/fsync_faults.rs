//! Test-only fault injection for the local store (feature `fault-hooks`,
//! which only the engine's own tests enable): fails chosen `fsync` calls of
//! create-only puts and compare-and-swap replaces with `EIO`, as a failing
//! disk would.

use parking_lot::Mutex;

use super::sync_point::{SyncPoint, SyncWrite};

#[derive(Debug, Clone, Copy)]
struct Armed {
    write: SyncWrite,
    point: SyncPoint,
    /// Matching fsyncs still to let through before failing.
    skip: u64,
    /// Matching fsyncs still to fail.
    fail: u64,
}

/// Which fsyncs of a local store fail.
#[derive(Debug, Default)]
pub struct FsyncFaults {
    armed: Mutex<Vec<Armed>>,
    injected: Mutex<u64>,
}

impl FsyncFaults {
    /// Fails the `nth` (1-based, counted from now) fsync at `point` of a
    /// `write`, and the `count - 1` matching fsyncs after it.
    pub fn fail(&self, write: SyncWrite, point: SyncPoint, nth: u64, count: u64) {
        self.armed.lock().push(Armed {
            write,
            point,
            skip: nth.saturating_sub(1),
            fail: count,
        });
    }

    /// Drops every armed failure.
    pub fn clear(&self) {
        self.armed.lock().clear();
    }

    /// How many fsyncs were failed so far.
    pub fn injected(&self) -> u64 {
        *self.injected.lock()
    }

    /// Whether every armed failure has been used up.
    pub fn spent(&self) -> bool {
        self.armed.lock().iter().all(|a| a.fail == 0)
    }

    /// Called before every hooked fsync: `Err` (EIO) when it must fail.
    pub(crate) fn check(&self, write: SyncWrite, point: SyncPoint) -> std::io::Result<()> {
        let mut armed = self.armed.lock();
        let mut fail = false;
        for a in armed
            .iter_mut()
            .filter(|a| a.write == write && a.point == point && a.fail > 0)
        {
            if a.skip > 0 {
                a.skip -= 1;
            } else {
                a.fail -= 1;
                fail = true;
            }
        }
        drop(armed);
        if fail {
            *self.injected.lock() += 1;
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }
}
