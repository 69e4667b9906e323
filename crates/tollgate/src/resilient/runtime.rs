//! The limiter's copy of the runtime table (docs/admin.md): blocks and
//! runtime overrides, consulted by every check, written through by the
//! operator calls (`admin.rs`), and on a shared store (Redis) refreshed by
//! a background task every [`RUNTIME_REFRESH`] (one `GET` of the table's
//! version when nothing changed), so a change made on one replica applies
//! on every replica within about [`RUNTIME_REFRESH`] plus one store call.
//!
//! A check pays one atomic load and an `is_empty` branch while the table is
//! empty.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Weak;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::{Inner, ResilientLimiter, Throttle, Verdict, untouched};
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::runtime::{Entry, Table};
use crate::store::{KeyCheck, Store};
use crate::time::Micros;

/// How often a replica reads the shared runtime table's version (and, when
/// it moved, the table); also how often ended overrides are dropped.
pub const RUNTIME_REFRESH: Duration = Duration::from_millis(250);

/// The runtime table as this limiter holds it.
pub(super) struct Runtime {
    /// What checks read.
    pub(super) table: ArcSwap<Table>,
    /// Every entry by field: for a store that shares no table, the table
    /// itself; for a shared one, the last read.
    entries: Mutex<BTreeMap<Vec<u8>, Entry>>,
    /// The shared table's version last read (`None`: read it whole next).
    version: Mutex<Option<u64>>,
    /// Serializes writes and refreshes, so a refresh never installs a
    /// table older than one a write just installed.
    writing: tokio::sync::Mutex<()>,
    trouble: Throttle,
}

impl Runtime {
    pub(super) fn new() -> Self {
        Self {
            table: ArcSwap::from_pointee(Table::default()),
            entries: Mutex::new(BTreeMap::new()),
            version: Mutex::new(None),
            writing: tokio::sync::Mutex::new(()),
            trouble: Throttle::new(Duration::from_secs(10)),
        }
    }
}

impl<S: Store> Inner<S> {
    /// The runtime table, when it holds anything.
    #[inline]
    pub(super) fn runtime_table(&self) -> Option<Arc<Table>> {
        let table = self.runtime.table.load();
        (!table.is_empty()).then(|| Arc::clone(&table))
    }

    /// Now, in µs since the Unix epoch (the limiter's clock is the real
    /// one: `MonotonicClock`).
    pub(super) fn wall_now(&self) -> Micros {
        self.clock.now()
    }

    /// The runtime table's entries, for a successor ([`Self::adopt_runtime`]).
    pub(super) fn runtime_entries(&self) -> BTreeMap<Vec<u8>, Entry> {
        self.runtime.entries.lock().clone()
    }

    /// Takes a predecessor's entries (a reload) and installs them against
    /// this limiter's rules.
    pub(super) fn adopt_runtime(&self, entries: BTreeMap<Vec<u8>, Entry>) {
        self.install(&entries);
        *self.runtime.entries.lock() = entries;
    }

    /// Builds the table from `entries` and installs it.
    fn install(&self, entries: &BTreeMap<Vec<u8>, Entry>) {
        let table = Table::build(
            entries.values().cloned(),
            self.limiter.rules(),
            self.wall_now(),
        );
        self.runtime.table.store(Arc::new(table));
    }

    /// Reads the shared table when it changed (or, `whole`, in any case),
    /// and drops ended entries; the table checks read follows.
    ///
    /// # Errors
    /// The store failed; the table in use stays.
    pub(super) async fn refresh_runtime(&self, whole: bool) -> Result<(), StoreError> {
        let _writing = self.runtime.writing.lock().await;
        let since = if whole {
            None
        } else {
            *self.runtime.version.lock()
        };
        let read = self
            .within("runtime table", self.limiter.store().runtime_read(since))
            .await?;
        if let Some((version, raw)) = read {
            let mut entries = BTreeMap::new();
            for (field, value) in raw {
                match Entry::decode(&field, &value) {
                    Some(e) => {
                        entries.insert(field, e);
                    }
                    None => tracing::debug!(
                        "runtime table: entry {:?} not understood; left out",
                        String::from_utf8_lossy(&field)
                    ),
                }
            }
            self.install(&entries);
            *self.runtime.entries.lock() = entries;
            *self.runtime.version.lock() = Some(version);
        } else if self.runtime.table.load().next_end <= self.wall_now() {
            let entries = self.runtime.entries.lock().clone();
            self.install(&entries);
        }
        Ok(())
    }

    /// Sets (`Some`) or deletes the entry at `field`, in the shared table
    /// when the store has one, else in this process; installs the result.
    ///
    /// # Errors
    /// The store failed; nothing changed.
    pub(super) async fn write_runtime(
        &self,
        field: Vec<u8>,
        entry: Option<Entry>,
    ) -> Result<(), StoreError> {
        let now_ms = self.wall_now() / 1000;
        let expired: Vec<Vec<u8>> = self
            .runtime
            .entries
            .lock()
            .iter()
            .filter(|(f, e)| **f != field && e.ended(now_ms))
            .map(|(f, _)| f.clone())
            .collect();
        let value = entry.as_ref().map(|e| e.encode().1);
        let shared = {
            let _writing = self.runtime.writing.lock().await;
            let write = self
                .limiter
                .store()
                .runtime_write(&field, value.as_deref(), &expired);
            let shared = self.within("runtime table", write).await?;
            if !shared {
                let mut entries = self.runtime.entries.lock();
                for f in &expired {
                    entries.remove(f);
                }
                match entry {
                    Some(e) => {
                        entries.insert(field, e);
                    }
                    None => {
                        entries.remove(&field);
                    }
                }
                self.install(&entries);
            }
            shared
        };
        if shared {
            // This replica sees its own write at once.
            self.refresh_runtime(true).await?;
        }
        Ok(())
    }

    /// Counts the pairs a runtime override decides (rule `index[n]` for
    /// pair `n`) and, when a block is on for any of them, answers the check
    /// ([`Inner::blocked`]), counted; `None` (the store decides) otherwise
    /// and when there is no `table`.
    pub(super) async fn runtime_answer(
        &self,
        table: Option<&Table>,
        pairs: &[KeyCheck<'_>],
        index: &[usize],
    ) -> Option<Verdict> {
        let table = table?;
        for (c, &i) in pairs.iter().zip(index) {
            if table
                .override_for(c.rule.name(), c.key)
                .is_some_and(|r| std::ptr::eq(r, c.rule))
            {
                self.meters.overridden(i, c.rule.name());
            }
        }
        let multi = self.blocked(table, pairs).await?;
        let now = self.wall_now();
        for (n, (c, &i)) in pairs.iter().zip(index).enumerate() {
            let outcome = if table.blocked(c.rule.name(), c.key, now).is_some() {
                4
            } else {
                3
            };
            if !super::named_before(pairs, n) {
                self.meters.count(i, c.rule.name(), outcome);
            }
        }
        Some(Verdict {
            multi,
            degraded: None,
        })
    }

    /// The answer to `pairs` when a block is on for any of them at `now`
    /// (`None`: none is): every pair read by a peek (or, when the store
    /// fails, as an untouched key), the blocked ones denied until their
    /// block ends. Nothing is consumed.
    pub(super) async fn blocked(
        &self,
        table: &Table,
        pairs: &[KeyCheck<'_>],
    ) -> Option<MultiDecision> {
        let now = self.wall_now();
        let ends: Vec<Option<Micros>> = pairs
            .iter()
            .map(|c| table.blocked(c.rule.name(), c.key, now))
            .collect();
        if ends.iter().all(Option::is_none) {
            return None;
        }
        let peeks: Vec<KeyCheck<'_>> = pairs.iter().map(|c| KeyCheck { cost: 0, ..*c }).collect();
        let read = self
            .within("check", self.limiter.store().check_all(&peeks, None))
            .await;
        let mut decisions = match read {
            Ok(multi) if multi.decisions.len() == pairs.len() => multi.decisions,
            _ => peeks.iter().map(untouched).collect(),
        };
        for (d, end) in decisions.iter_mut().zip(&ends) {
            if let Some(end) = end {
                let wait = Duration::from_micros(end.saturating_sub(now));
                *d = Decision {
                    allowed: false,
                    limit: d.limit,
                    remaining: 0,
                    reset_after: d.reset_after.max(wait),
                    retry_after: Some(wait),
                };
            }
        }
        Some(MultiDecision::from_decisions(decisions))
    }
}

impl<S: Store> ResilientLimiter<S> {
    /// Starts the runtime table's refresh task if it is not running and
    /// there is a tokio runtime to run it on.
    pub(super) fn start_runtime(&self) {
        if self
            .runtime_started
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self
            .runtime_started
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let task = runtime.spawn(refresh(Arc::downgrade(&self.inner)));
        *self.runtime_task.lock() = Some(task.abort_handle());
    }

    /// Reads the shared runtime table now (a replica calls it once before
    /// it serves, so blocks and overrides apply from its first check);
    /// the background task does so every [`RUNTIME_REFRESH`].
    ///
    /// # Errors
    /// The store failed.
    pub async fn refresh_runtime(&self) -> Result<(), StoreError> {
        self.start_runtime();
        self.inner.refresh_runtime(true).await
    }
}

/// The refresh task: every [`RUNTIME_REFRESH`], the shared table if it
/// changed, and ended entries dropped. Ends when the limiter is gone.
async fn refresh<S: Store>(weak: Weak<Inner<S>>) {
    let mut tick = tokio::time::interval(RUNTIME_REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        if let Err(e) = inner.refresh_runtime(false).await {
            inner.runtime.trouble.report(|more| {
                tracing::warn!(
                    "runtime table (blocks, overrides) not refreshed: {e}; the last one read stays \
                     ({more} more failures since the last report)"
                );
            });
        }
    }
}
