//! The limiter's copy of the live table (docs/admin.md): blocks and
//! runtime overrides, consulted by every check, written through by the
//! operator calls (`admin.rs`), and on a shared store (Redis) refreshed by
//! a background task every [`RUNTIME_REFRESH`] (one `GET` of the table's
//! version when nothing changed), so a change made on one replica applies
//! on every replica within about [`RUNTIME_REFRESH`] plus one store call.
//!
//! A check pays one atomic load and an `is_empty` branch while the table is
//! empty.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::Weak;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::{Inner, ResilientLimiter, Throttle, Verdict, untouched};
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::live::{Entry, LiveTable};
use crate::rule::Rule;
use crate::store::{KeyCheck, Store};
use crate::time::{Clock, Micros};

/// How often a replica reads the shared live table's version (and, when
/// it moved, the table); also how often ended overrides are dropped.
pub const RUNTIME_REFRESH: Duration = Duration::from_millis(250);

/// The live table as this limiter holds it.
pub(super) struct Live {
    /// What this limiter's checks read.
    pub(super) view: Arc<View>,
    /// The entries, shared with the limiter's predecessor and successors.
    shared: Arc<Shared>,
    trouble: Throttle,
}

/// The table one limiter's checks read, built against its own rules.
pub(super) struct View {
    /// What checks read.
    pub(super) table: ArcSwap<LiveTable>,
    rules: Vec<Rule>,
    clock: Arc<dyn Clock>,
}

impl View {
    /// Builds the table from `entries` against this limiter's rules and
    /// installs it.
    fn install(&self, entries: &BTreeMap<Vec<u8>, Entry>) {
        let table = LiveTable::build(entries.values().cloned(), &self.rules, self.clock.now());
        self.table.store(Arc::new(table));
    }
}

/// The live table's entries, one set for a limiter and every successor
/// a reload builds from it ([`super::ResilientLimiterBuilder::succeeding`]):
/// a write answered by either, before or after the swap, is in both,
/// whichever serves the next check (docs/admin.md).
pub(super) struct Shared {
    state: Mutex<State>,
    /// Serializes writes and refreshes, so a refresh never installs a
    /// table older than one a write just installed.
    writing: tokio::sync::Mutex<()>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

struct State {
    /// Every entry by field: for a store that shares no table, the table
    /// itself; for a shared one, the last read.
    entries: BTreeMap<Vec<u8>, Entry>,
    /// The shared table's version last read (`None`: read it whole next).
    version: Option<u64>,
    /// The limiters' views; a gone limiter's is dropped at the next
    /// install or registration.
    views: Vec<Weak<View>>,
}

impl State {
    /// Installs the entries in every live view (under the lock: two
    /// installs never cross).
    fn install(&mut self) {
        let entries = &self.entries;
        self.views
            .retain(|v| v.upgrade().inspect(|v| v.install(entries)).is_some());
    }
}

impl Live {
    /// A limiter's live table over `rules`: its predecessor's entries
    /// (`shared`) when a reload builds it, else empty ones of its own.
    pub(super) fn new(rules: &[Rule], clock: Arc<dyn Clock>, shared: Option<Arc<Shared>>) -> Self {
        let shared = shared.unwrap_or_else(|| {
            Arc::new(Shared {
                state: Mutex::new(State {
                    entries: BTreeMap::new(),
                    version: None,
                    views: Vec::new(),
                }),
                writing: tokio::sync::Mutex::new(()),
            })
        });
        let view = Arc::new(View {
            table: ArcSwap::from_pointee(LiveTable::default()),
            rules: rules.to_vec(),
            clock,
        });
        {
            // Under the lock: no write falls between the read and the
            // registration.
            let mut state = shared.state.lock();
            view.install(&state.entries);
            // Reloads without writes leave no gone views behind either.
            state.views.retain(|v| v.strong_count() > 0);
            state.views.push(Arc::downgrade(&view));
        }
        Self {
            view,
            shared,
            trouble: Throttle::new(Duration::from_secs(10)),
        }
    }

    /// The entries, for a successor to share.
    pub(super) fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }
}

impl<S: Store> Inner<S> {
    /// The live table, when it holds anything.
    #[inline]
    pub(super) fn live_table(&self) -> Option<Arc<LiveTable>> {
        let table = self.live.view.table.load();
        (!table.is_empty()).then(|| Arc::clone(&table))
    }

    /// Now, in µs since the Unix epoch (the limiter's clock is the real
    /// one: `MonotonicClock`).
    pub(super) fn wall_now(&self) -> Micros {
        self.clock.now()
    }

    /// Reads the shared table when it changed (or, `whole`, in any case),
    /// and drops ended entries; the table checks read follows.
    ///
    /// # Errors
    /// The store failed; the table in use stays.
    pub(super) async fn refresh_live(&self, whole: bool) -> Result<(), StoreError> {
        let shared = &self.live.shared;
        let _writing = shared.writing.lock().await;
        let since = if whole {
            None
        } else {
            shared.state.lock().version
        };
        let read = self
            .guard
            .within("live table", self.limiter.store().runtime_read(since))
            .await?;
        if let Some((version, raw)) = read {
            let mut entries = BTreeMap::new();
            for (field, value) in raw {
                match Entry::decode(&field, &value) {
                    Some(e) => {
                        entries.insert(field, e);
                    }
                    None => tracing::debug!(
                        "live table: entry {:?} not understood; left out",
                        String::from_utf8_lossy(&field)
                    ),
                }
            }
            let mut state = shared.state.lock();
            state.entries = entries;
            state.version = Some(version);
            state.install();
        } else if self.live.view.table.load().next_end <= self.wall_now() {
            shared.state.lock().install();
        }
        Ok(())
    }

    /// Sets (`Some`) or deletes the entry at `field`, in the shared table
    /// when the store has one, else in this process; installs the result.
    ///
    /// # Errors
    /// The store failed; nothing changed.
    pub(super) async fn write_live(
        &self,
        field: Vec<u8>,
        entry: Option<Entry>,
    ) -> Result<(), StoreError> {
        let now_ms = self.wall_now() / 1000;
        let shared = &self.live.shared;
        let expired: Vec<Vec<u8>> = shared
            .state
            .lock()
            .entries
            .iter()
            .filter(|(f, e)| **f != field && e.ended(now_ms))
            .map(|(f, _)| f.clone())
            .collect();
        let value = entry.as_ref().map(|e| e.encode().1);
        let in_store = {
            let _writing = shared.writing.lock().await;
            let write = self
                .limiter
                .store()
                .runtime_write(&field, value.as_deref(), &expired);
            let in_store = self.guard.within("live table", write).await?;
            if !in_store {
                let mut state = shared.state.lock();
                for f in &expired {
                    state.entries.remove(f);
                }
                match entry {
                    Some(e) => {
                        state.entries.insert(field, e);
                    }
                    None => {
                        state.entries.remove(&field);
                    }
                }
                state.install();
            }
            in_store
        };
        if in_store {
            // This replica sees its own write at once.
            self.refresh_live(true).await?;
        }
        Ok(())
    }

    /// Counts the pairs a runtime override decides (rule `index[n]` for
    /// pair `n`) and, when a block is on for any of them, answers the check
    /// ([`Inner::blocked`]), counted; `None` (the store decides) otherwise
    /// and when there is no `table`.
    pub(super) async fn live_answer(
        &self,
        table: Option<&LiveTable>,
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
        Some(Verdict::new(multi, None))
    }

    /// The answer to `pairs` when a block is on for any of them at `now`
    /// (`None`: none is): every pair read by a peek (or, when the store
    /// fails, as an untouched key), the blocked ones denied until their
    /// block ends. Nothing is consumed.
    pub(super) async fn blocked(
        &self,
        table: &LiveTable,
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
            .guard
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
    /// Starts the live table's refresh task if it is not running and
    /// there is a tokio runtime to run it on.
    pub(super) fn start_live(&self) {
        if self.live_started.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self
            .live_started
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let task = runtime.spawn(refresh(Arc::downgrade(&self.inner)));
        *self.live_task.lock() = Some(task.abort_handle());
    }

    /// Reads the shared live table now (a replica calls it once before
    /// it serves, so blocks and overrides apply from its first check);
    /// the background task does so every [`RUNTIME_REFRESH`].
    ///
    /// # Errors
    /// The store failed.
    pub async fn refresh_runtime(&self) -> Result<(), StoreError> {
        self.start_live();
        self.inner.refresh_live(true).await
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
        if let Err(e) = inner.refresh_live(false).await {
            inner.live.trouble.report(|more| {
                tracing::warn!(
                    "live table (blocks, overrides) not refreshed: {e}; the last one read stays \
                     ({more} more failures since the last report)"
                );
            });
        }
    }
}
