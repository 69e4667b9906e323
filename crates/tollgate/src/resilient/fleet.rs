//! This replica among those sharing the store: its id, the live count the
//! heartbeat learns, the heartbeat's interval, and the `local` fallback
//! sized by that count.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::local::Local;

/// This replica, the live replicas, and the `local` fallback.
pub(super) struct Fleet {
    /// This replica's random id (its member in the heartbeat set).
    pub(super) id: String,
    /// Live replicas, last known.
    pub(super) live: AtomicU64,
    /// The heartbeat's interval (`None`: no heartbeat).
    pub(super) heartbeat: Option<Duration>,
    /// The `local` fallback, made at its first use.
    local: OnceLock<Local>,
    local_max_keys: usize,
}

impl Fleet {
    pub(super) fn new(
        id: String,
        live: u64,
        heartbeat: Option<Duration>,
        local_max_keys: usize,
    ) -> Self {
        Self {
            id,
            live: AtomicU64::new(live),
            heartbeat,
            local: OnceLock::new(),
            local_max_keys,
        }
    }

    /// The live replicas, at least 1.
    pub(super) fn replicas(&self) -> u64 {
        self.live.load(Ordering::Acquire).max(1)
    }

    /// The `local` fallback, made now if it was not.
    pub(super) fn local(&self) -> &Local {
        self.local.get_or_init(|| Local::new(self.local_max_keys))
    }

    /// The `local` fallback, if it was ever used.
    pub(super) fn local_if_used(&self) -> Option<&Local> {
        self.local.get()
    }
}
