//! The live table (docs/admin.md): blocks and runtime overrides set by
//! an operator while the limiter runs, as entries (field → value) a store
//! can share between replicas ([`crate::Store::runtime_read`]), and the
//! [`LiveTable`] built from them that checks consult.
//!
//! Entries are text: `o:<rule>:<key>` → `v1 <limit> <period µs|-> <burst|->
//! <ends, ms since the Unix epoch|->` for an override (a key ending in `*`
//! is a prefix, as [`KeyPattern::parse`] reads it), `b:<rule>:<key>` →
//! `v1 <ends ms>` for a block (`rule` `*`: every rule). Rule names hold no
//! `:`, so the field splits unambiguously whatever bytes the key has. The
//! period and burst left out stay out: each replica builds the override
//! from its own rule, as a config override is built.

use std::collections::HashMap;
use std::time::Duration;

use crate::overrides::{KeyPattern, Overrides};
use crate::rule::{Rule, RuleError};
use crate::time::Micros;

/// The rule name of a block of every rule.
pub const EVERY_RULE: &str = "*";

/// A runtime override: `key` (an exact key, or a prefix ending in `*`) of
/// rule `rule` decided under another limit, period or burst, on the rule's
/// counter, until `ends_ms` (ms since the Unix epoch) when given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeOverride {
    /// The rule's name.
    pub rule: String,
    /// The key, or a prefix ending in `*`.
    pub key: Vec<u8>,
    /// Units per period.
    pub limit: u64,
    /// The period; the rule's when `None`.
    pub period: Option<Duration>,
    /// The burst (GCRA and token bucket); when `None`, the rule's own burst
    /// if it set one, else the override's limit.
    pub burst: Option<u64>,
    /// When it ends (ms since the Unix epoch); `None`: never.
    pub ends_ms: Option<u64>,
}

impl RuntimeOverride {
    /// The rule it makes of `base` (its rule): what decides the keys it
    /// covers, with the period and burst it leaves out filled in as a
    /// check sees them.
    ///
    /// # Errors
    /// The values make `base` invalid (a burst on an algorithm without
    /// one, say): such an override is not in force.
    pub fn applied_to(&self, base: &Rule) -> Result<Rule, RuleError> {
        override_rule(base, self.limit, self.period, self.burst)
    }
}

/// A block: every check of `key` under `rule` (every rule when `rule` is
/// [`EVERY_RULE`]) denied until `ends_ms` (ms since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The rule's name, or `*`.
    pub rule: String,
    /// The key.
    pub key: Vec<u8>,
    /// When it ends (ms since the Unix epoch).
    pub ends_ms: u64,
}

/// One entry of the live table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    Override(RuntimeOverride),
    Block(Block),
}

fn field(kind: u8, rule: &str, key: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(rule.len() + key.len() + 3);
    f.push(kind);
    f.push(b':');
    f.extend_from_slice(rule.as_bytes());
    f.push(b':');
    f.extend_from_slice(key);
    f
}

/// The field of the override of (rule, key).
pub(crate) fn override_field(rule: &str, key: &[u8]) -> Vec<u8> {
    field(b'o', rule, key)
}

/// The field of the block of (rule, key).
pub(crate) fn block_field(rule: &str, key: &[u8]) -> Vec<u8> {
    field(b'b', rule, key)
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

impl Entry {
    /// Its (field, value).
    pub(crate) fn encode(&self) -> (Vec<u8>, Vec<u8>) {
        match self {
            Entry::Override(o) => {
                let period = o
                    .period
                    .map(|p| u64::try_from(p.as_micros()).unwrap_or(u64::MAX));
                let value = format!(
                    "v1 {} {} {} {}",
                    o.limit,
                    opt(period),
                    opt(o.burst),
                    opt(o.ends_ms)
                );
                (override_field(&o.rule, &o.key), value.into_bytes())
            }
            Entry::Block(b) => (
                block_field(&b.rule, &b.key),
                format!("v1 {}", b.ends_ms).into_bytes(),
            ),
        }
    }

    /// The entry of (field, value); `None` for one this version cannot
    /// read.
    pub(crate) fn decode(field: &[u8], value: &[u8]) -> Option<Self> {
        let (&kind, rest) = field.split_first()?;
        let rest = rest.strip_prefix(b":")?;
        let colon = rest.iter().position(|&b| b == b':')?;
        let rule = std::str::from_utf8(&rest[..colon]).ok()?.to_owned();
        let key = rest[colon + 1..].to_vec();
        let value = std::str::from_utf8(value).ok()?;
        let mut words = value.split(' ');
        if words.next()? != "v1" {
            return None;
        }
        let mut num = |optional: bool| -> Option<Option<u64>> {
            let w = words.next()?;
            if optional && w == "-" {
                return Some(None);
            }
            w.parse().ok().map(Some)
        };
        match kind {
            b'o' => Some(Entry::Override(RuntimeOverride {
                rule,
                key,
                limit: num(false)??,
                period: num(true)?.map(Duration::from_micros),
                burst: num(true)?,
                ends_ms: num(true)?,
            })),
            b'b' => Some(Entry::Block(Block {
                rule,
                key,
                ends_ms: num(false)??,
            })),
            _ => None,
        }
    }

    /// When it ends (ms since the Unix epoch), if it does.
    pub(crate) fn ends_ms(&self) -> Option<u64> {
        match self {
            Entry::Override(o) => o.ends_ms,
            Entry::Block(b) => Some(b.ends_ms),
        }
    }

    /// Whether it has ended by `now_ms` (ms since the Unix epoch).
    pub(crate) fn ended(&self, now_ms: u64) -> bool {
        self.ends_ms().is_some_and(|end| end <= now_ms)
    }
}

/// `base` under an override's limit, period and burst (as a config
/// override is built: a burst left out follows the limit unless the rule
/// set one of its own).
///
/// # Errors
/// The rule the three make is not valid (a limit of 0, a burst on an
/// algorithm without one, a period out of range…).
pub(crate) fn override_rule(
    base: &Rule,
    limit: u64,
    period: Option<Duration>,
    burst: Option<u64>,
) -> Result<Rule, RuleError> {
    let mut spec = base.spec();
    spec.limit = limit;
    if let Some(p) = period {
        spec.period = p;
    }
    if let Some(b) = burst {
        if !base.algorithm().has_burst() {
            return Err(RuleError {
                field: "burst",
                message: format!(
                    "burst applies to gcra and token_bucket only, not {}",
                    base.algorithm()
                ),
            });
        }
        spec.burst = Some(b);
    } else if base.algorithm().has_burst() {
        spec.burst = (base.burst() != base.limit()).then(|| base.burst());
    }
    spec.build()
}

/// The live table as checks read it: built from the entries once per
/// change, read without a lock.
#[derive(Debug, Default)]
pub(crate) struct LiveTable {
    /// Per rule name, its runtime overrides.
    overrides: HashMap<String, Overrides, foldhash::fast::RandomState>,
    /// Per rule name (or `*`), blocked keys and when each block ends (µs
    /// since the Unix epoch).
    blocks: HashMap<String, HashMap<Vec<u8>, Micros>, foldhash::fast::RandomState>,
    /// The entries it was built from, live ones only, for listing.
    pub(crate) entries: Vec<Entry>,
    /// The (rule, key) of live overrides left out: of a rule not among the
    /// rules (a reload removed it) or one it refuses. They stay in the
    /// store, and can be deleted by their rule's name (docs/admin.md).
    pub(crate) left_out: Vec<(String, Vec<u8>)>,
    /// The earliest end of an override in it (µs; `Micros::MAX`: none): the
    /// table is built again once it passes.
    pub(crate) next_end: Micros,
}

impl LiveTable {
    /// The table of `entries` at `now` (µs since the Unix epoch), the
    /// overrides built from `rules` (an override of a rule not among them,
    /// or one its rule refuses, is left out and logged; an ended entry is
    /// left out).
    pub(crate) fn build(
        entries: impl IntoIterator<Item = Entry>,
        rules: &[Rule],
        now: Micros,
    ) -> Self {
        let mut table = LiveTable {
            next_end: Micros::MAX,
            ..LiveTable::default()
        };
        for entry in entries {
            let ends = entry
                .ends_ms()
                .map_or(Micros::MAX, |ms| ms.saturating_mul(1000));
            if ends <= now {
                continue;
            }
            match &entry {
                Entry::Block(b) => {
                    table
                        .blocks
                        .entry(b.rule.clone())
                        .or_default()
                        .insert(b.key.clone(), ends);
                }
                Entry::Override(o) => {
                    let Some(base) = rules.iter().find(|r| r.name() == o.rule) else {
                        tracing::debug!("runtime override of rule {:?}, not a rule here", o.rule);
                        table.left_out.push((o.rule.clone(), o.key.clone()));
                        continue;
                    };
                    let rule = match override_rule(base, o.limit, o.period, o.burst) {
                        Ok(rule) => rule,
                        Err(e) => {
                            tracing::warn!(
                                "runtime override of rule {:?} left out: {}: {}",
                                o.rule,
                                e.field,
                                e.message
                            );
                            table.left_out.push((o.rule.clone(), o.key.clone()));
                            continue;
                        }
                    };
                    let pattern = pattern_of(&o.key);
                    let own = table.overrides.entry(o.rule.clone()).or_default();
                    if own.insert(pattern, rule).is_err() {
                        continue;
                    }
                    table.next_end = table.next_end.min(ends);
                }
            }
            table.entries.push(entry);
        }
        table
    }

    /// Whether it holds nothing: the check path's one branch.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The runtime override deciding `key` under the rule named `rule`.
    pub(crate) fn override_for(&self, rule: &str, key: &[u8]) -> Option<&Rule> {
        self.overrides.get(rule)?.find(key)
    }

    /// When the block of `key` under the rule named `rule` (or every rule)
    /// ends, if one is on at `now` (µs since the Unix epoch); the later of
    /// two.
    pub(crate) fn blocked(&self, rule: &str, key: &[u8], now: Micros) -> Option<Micros> {
        if self.blocks.is_empty() {
            return None;
        }
        let own = self.blocks.get(rule).and_then(|m| m.get(key));
        let every = self.blocks.get(EVERY_RULE).and_then(|m| m.get(key));
        own.into_iter()
            .chain(every)
            .copied()
            .filter(|&end| end > now)
            .max()
    }
}

/// A key as a pattern: a trailing `*` makes it a prefix.
pub(crate) fn pattern_of(key: &[u8]) -> KeyPattern {
    match key.strip_suffix(b"*") {
        Some(prefix) => KeyPattern::Prefix(prefix.to_vec()),
        None => KeyPattern::Exact(key.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::{Algorithm, RuleSpec};

    #[test]
    fn entries_round_trip_and_build() {
        let o = Entry::Override(RuntimeOverride {
            rule: "api".into(),
            key: b"a:b\0c*".to_vec(),
            limit: 7,
            period: Some(Duration::from_secs(2)),
            burst: None,
            ends_ms: None,
        });
        let b = Entry::Block(Block {
            rule: "*".into(),
            key: b"k".to_vec(),
            ends_ms: 5,
        });
        for e in [&o, &b] {
            let (f, v) = e.encode();
            assert_eq!(Entry::decode(&f, &v).as_ref(), Some(e));
        }
        assert_eq!(Entry::decode(b"o:api:k", b"v2 1"), None);
        let rule = RuleSpec::new("api", Algorithm::Gcra, 100, Duration::from_secs(1))
            .build()
            .unwrap();
        let t = LiveTable::build([o, b], std::slice::from_ref(&rule), 1000);
        assert_eq!(t.override_for("api", b"a:b\0c-x").map(Rule::limit), Some(7));
        assert_eq!(t.override_for("api", b"other"), None);
        assert_eq!(t.blocked("api", b"k", 4000), Some(5000));
        assert_eq!(t.blocked("api", b"k", 5000), None);
        assert!(!t.is_empty());
    }
}
