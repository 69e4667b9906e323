//! Which master serves each Cluster slot, as `CLUSTER SLOTS` last said:
//! the store's failure domains ([`crate::Store::failure_domain`]), so the
//! resilient limiter keeps one circuit breaker per master and a dead one
//! does not send the keys of the others to the failure policy.
//!
//! Read when the store connects, then again in the background (one read at
//! a time): at once when none was read yet, within [`AFTER_FAILURE`] of a
//! failed call, and every [`STALE`] anyway, since a failover or a
//! resharding moves slots. A key whose slot the map does not know yet has
//! no domain: the store-wide breaker guards it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use super::RedisStore;
use super::conn::io_now;
use super::resp::Value;

/// Slots in a Redis Cluster.
const SLOTS: usize = 16_384;
/// A failed call has the map read again, at most this often.
pub(super) const AFTER_FAILURE: Duration = Duration::from_secs(1);
/// The map is read again when older than this, failures or not.
pub(super) const STALE: Duration = Duration::from_secs(10);
/// No owner.
const NONE: u16 = u16::MAX;

/// The slot map and when it was last asked for.
pub(super) struct Slots {
    map: ArcSwapOption<SlotMap>,
    start: Instant,
    /// When the map was last asked for, ms since `start`, plus 1 (0: never).
    asked: AtomicU64,
    /// A read is under way.
    reading: AtomicBool,
}

/// Per slot, the index of its master in `nodes` ([`NONE`]: none).
struct SlotMap {
    owner: Box<[u16]>,
    nodes: Vec<Arc<str>>,
}

impl Slots {
    pub(super) fn new() -> Self {
        Self {
            map: ArcSwapOption::empty(),
            start: io_now(),
            asked: AtomicU64::new(0),
            reading: AtomicBool::new(false),
        }
    }

    /// The master serving `slot` (`host:port`), if the map knows it.
    pub(super) fn owner(&self, slot: u16) -> Option<Arc<str>> {
        let map = self.map.load();
        let map = map.as_ref()?;
        let i = *map.owner.get(usize::from(slot))?;
        map.nodes.get(usize::from(i)).cloned()
    }

    fn now_ms(&self) -> u64 {
        let since = io_now().saturating_duration_since(self.start);
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    }

    /// Claims the next read when one is due (`failed`: a call just
    /// failed); the caller then reads and calls [`Self::done`].
    fn claim(&self, failed: bool) -> bool {
        let asked = self.asked.load(Ordering::Acquire);
        let now = self.now_ms();
        let since = now.saturating_sub(asked.saturating_sub(1));
        let wait = if failed || self.map.load().is_none() {
            AFTER_FAILURE
        } else {
            STALE
        };
        let due = asked == 0 || u128::from(since) >= wait.as_millis();
        due && self
            .reading
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// A read ended: installs its map, if it made one.
    fn done(&self, map: Option<SlotMap>) {
        if let Some(map) = map {
            self.map.store(Some(Arc::new(map)));
        }
        self.asked.store(self.now_ms() + 1, Ordering::Release);
        self.reading.store(false, Ordering::Release);
    }
}

/// The map a `CLUSTER SLOTS` reply gives: per range, `[start, end,
/// [host, port, …], replicas…]`; `None` when it is not one.
fn parse(reply: &Value) -> Option<SlotMap> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut map = SlotMap {
        owner: vec![NONE; SLOTS].into_boxed_slice(),
        nodes: Vec::new(),
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return None;
        };
        let (Some(Value::Text(host)), Some(Value::Int(port))) = (master.first(), master.get(1))
        else {
            return None;
        };
        let name = format!("{}:{port}", String::from_utf8_lossy(host));
        let index = match map.nodes.iter().position(|n| **n == *name) {
            Some(i) => i,
            None => {
                map.nodes.push(name.into());
                map.nodes.len() - 1
            }
        };
        let index = u16::try_from(index).ok()?;
        let (start, end) = (usize::try_from(*start).ok()?, usize::try_from(*end).ok()?);
        map.owner.get_mut(start..=end)?.fill(index);
    }
    Some(map)
}

impl RedisStore {
    /// Reads the slot map in the background when a read is due (`failed`:
    /// a call just failed). Off Cluster, or outside a tokio runtime,
    /// nothing.
    pub(super) fn read_slots_soon(&self, failed: bool) {
        let Some(slots) = self.slots() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if slots.claim(failed) {
            let store = self.clone();
            runtime.spawn(async move { store.read_slots_claimed().await });
        }
    }

    /// Reads the slot map now (the store connecting), unless a read is
    /// under way.
    pub(super) async fn read_slots(&self) {
        if self.slots().is_some_and(|s| s.claim(false)) {
            self.read_slots_claimed().await;
        }
    }

    async fn read_slots_claimed(&self) {
        let read = self.command(&[b"CLUSTER", b"SLOTS"]).await;
        let map = match &read {
            Ok(reply) => parse(reply),
            Err(_) => None,
        };
        if let (Ok(reply), None) = (&read, &map) {
            tracing::debug!("CLUSTER SLOTS answered {reply:?}: not a slot map");
        }
        if let Some(slots) = self.slots() {
            slots.done(map);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Text(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::Text(b"id".to_vec()),
        ])
    }

    #[test]
    fn a_reply_maps_each_slot_to_its_master() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(99),
                node("10.0.0.1", 7000),
                node("10.0.0.9", 7009),
            ]),
            Value::Array(vec![
                Value::Int(100),
                Value::Int(16_383),
                node("10.0.0.2", 7001),
            ]),
            Value::Array(vec![Value::Int(5), Value::Int(6), node("10.0.0.1", 7000)]),
        ]);
        let slots = Slots::new();
        slots.done(parse(&reply));
        assert_eq!(slots.owner(0).as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(slots.owner(99).as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(slots.owner(100).as_deref(), Some("10.0.0.2:7001"));
        assert_eq!(slots.owner(16_383).as_deref(), Some("10.0.0.2:7001"));
        assert!(parse(&Value::Int(1)).is_none());
        let out_of_range = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16_384),
            node("h", 1),
        ])]);
        assert!(parse(&out_of_range).is_none(), "a slot past 16383");
    }
}
