//! Operators' calls (docs/admin.md): inspect a key, reset it, block and
//! unblock it, give units back or take them, and set, list and delete
//! runtime overrides. The server's admin API calls these; a Rust service
//! can expose them its own way. Every change is counted
//! ([`metric::ADMIN_OPERATIONS`]); logging who made it is the caller's.
//!
//! Blocks and runtime overrides live in the live table (`live.rs`):
//! on Redis shared by every replica (each sees a change within about
//! [`super::RUNTIME_REFRESH`]) and kept across restarts; on the memory
//! store, in this process.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::resilient::ResilientLimiter;
//! use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec, RuntimeOverride};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let rule = RuleSpec::new("api", Algorithm::FixedWindow, 2, Duration::from_secs(60)).build()?;
//! let limiter = ResilientLimiter::builder(Limiter::new(MemoryStore::new(), [rule])?).build()?;
//!
//! // A customer upgrades: 5 a minute for tenant:acme, from now on.
//! limiter
//!     .set_override(RuntimeOverride {
//!         rule: "api".into(),
//!         key: b"tenant:acme".to_vec(),
//!         limit: 5,
//!         period: None,
//!         burst: None,
//!         ends_ms: None,
//!     })
//!     .await?;
//! assert_eq!(limiter.check("api", "tenant:acme", 1).await?.decision().limit, 5);
//!
//! // An abusive key: denied for ten minutes, whatever it has left.
//! limiter.block("*", b"tenant:evil", Duration::from_secs(600)).await?;
//! let denied = limiter.check("api", "tenant:evil", 1).await?;
//! assert!(!denied.multi.allowed);
//! assert!(denied.decision().retry_after > Some(Duration::from_secs(599)));
//!
//! // Inspect without consuming, then start the key over.
//! assert_eq!(limiter.inspect("api", b"tenant:acme").await?.decision.remaining, 4);
//! limiter.reset("api", b"tenant:acme").await?;
//! assert_eq!(limiter.inspect("api", b"tenant:acme").await?.decision.remaining, 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::time::Duration;

use super::{ChargeVerdict, Refusal, ResilientLimiter, metric};
use crate::decision::Decision;
use crate::error::Error;
use crate::limiter::{Check, MAX_KEY_LEN};
use crate::live::{
    Block, EVERY_RULE, Entry, RuntimeOverride, block_field, override_field, override_rule,
};
use crate::rule::{Algorithm, Rule};
use crate::store::Store;

/// A key's state under one rule, read without consuming
/// ([`ResilientLimiter::inspect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The rule that decides the key: a runtime override, a config
    /// override or the rule itself (see `source`).
    pub rule: Rule,
    /// Which: `"runtime_override"`, `"config_override"` or `"rule"`
    /// ([`crate::LimitSource::as_str`]).
    pub source: &'static str,
    /// A peek (a check of cost 0): `remaining`, `reset_after`, and
    /// `retry_after` when a check of cost 1 would be denied.
    pub decision: Decision,
    /// Units over the limit a charge left (0 for a `concurrency` rule).
    pub debt: u64,
    /// Slots held by live leases (`concurrency` rules only).
    pub held: Option<u64>,
    /// When a block of the key (this rule's or every rule's) ends, in ms
    /// since the Unix epoch.
    pub blocked_until_ms: Option<u64>,
}

fn count(op: &'static str) {
    ::metrics::counter!(metric::ADMIN_OPERATIONS, "op" => op).increment(1);
}

fn invalid(message: impl Into<String>) -> Refusal {
    Refusal::Invalid(Error::Mismatch(message.into()))
}

impl<S: Store> ResilientLimiter<S> {
    /// The key must fit, the rule must exist (or be `*` where `every`).
    fn admin_target(&self, rule: &str, key: &[u8], every: bool) -> Result<(), Refusal> {
        if key.len() > MAX_KEY_LEN {
            return Err(Refusal::Invalid(Error::KeyTooLong { len: key.len() }));
        }
        if key.is_empty() {
            return Err(invalid("the key is empty"));
        }
        if (every && rule == EVERY_RULE) || self.rule(rule).is_some() {
            Ok(())
        } else {
            Err(Refusal::Invalid(Error::UnknownRule(rule.to_owned())))
        }
    }

    /// The limit deciding `key` under `rule` now, as a check resolves it
    /// (a runtime override, a config override, or the rule itself), with
    /// no store call; `None` for an unknown rule. For a caller that sizes
    /// what it asks for by the limit (RLQS shares, docs/rlqs.md).
    #[must_use]
    pub fn deciding_limit(&self, rule: &str, key: &[u8]) -> Option<u64> {
        self.deciding(rule, key, Rule::limit)
    }

    /// The capacity (the most one request may take: the burst, or the
    /// limit) of the limit deciding `key` under `rule` now, resolved as
    /// [`ResilientLimiter::deciding_limit`] resolves it; `None` for an
    /// unknown rule. For a caller that sizes a reservation from an
    /// estimate: one above the deciding limit's capacity could never be
    /// admitted, and one capped at the rule's own capacity under a larger
    /// override would reserve too little.
    #[must_use]
    pub fn deciding_capacity(&self, rule: &str, key: &[u8]) -> Option<u64> {
        self.deciding(rule, key, Rule::capacity)
    }

    /// `read` of the rule deciding `key` under `rule` now.
    fn deciding<T>(&self, rule: &str, key: &[u8], read: impl Fn(&Rule) -> T) -> Option<T> {
        let i = self.rule_index(rule)?;
        let table = self.inner.live.view.table.load_full();
        Some(read(
            self.inner.limiter.deciding_rule(i, key, Some(&table)).0,
        ))
    }

    /// `key`'s state under `rule` as its algorithm sees it, nothing
    /// consumed: the deciding rule, remaining, reset, debt, slots held, and
    /// the block if one is on.
    ///
    /// # Errors
    /// An unknown rule or a key too long ([`Refusal::Invalid`]); the store
    /// failed ([`Refusal::Unavailable`]).
    pub async fn inspect(&self, rule: &str, key: &[u8]) -> Result<Inspection, Refusal> {
        self.admin_target(rule, key, false)?;
        let i = self
            .rule_index(rule)
            .ok_or_else(|| Refusal::Invalid(Error::UnknownRule(rule.to_owned())))?;
        let inner = &self.inner;
        let table = inner.live.view.table.load_full();
        // As a check resolves it: the same one resolution.
        let (deciding, source) = inner.limiter.deciding_rule(i, key, Some(&table));
        let store = inner.limiter.store();
        let decision = inner
            .guard
            .within("check", store.check(deciding, key, 0, None))
            .await
            .map_err(Refusal::Unavailable)?;
        let concurrency = deciding.algorithm() == Algorithm::Concurrency;
        let debt = if concurrency {
            0
        } else {
            let pair = [crate::store::KeyCheck {
                rule: deciding,
                key,
                cost: 0,
            }];
            let read = inner
                .guard
                .within("charge", store.charge_all(&pair, None))
                .await
                .map_err(Refusal::Unavailable)?;
            read.first().map_or(0, |c| c.debt)
        };
        let blocked_until_ms = table
            .blocked(rule, key, inner.wall_now())
            .map(|us| us.div_ceil(1000));
        Ok(Inspection {
            rule: deciding.clone(),
            source: source.as_str(),
            held: concurrency.then(|| decision.limit.saturating_sub(decision.remaining)),
            decision,
            debt,
            blocked_until_ms,
        })
    }

    /// Forgets `key`'s state under `rule` (every rule when `rule` is `*`):
    /// it reads as never checked. Answers the rules that held state for
    /// it. On the hybrid store, units other replicas already took in
    /// batches of the key stay theirs until each batch ends (within
    /// `batch_life`, docs/hybrid.md).
    ///
    /// # Errors
    /// As [`ResilientLimiter::inspect`].
    pub async fn reset(&self, rule: &str, key: &[u8]) -> Result<Vec<String>, Refusal> {
        self.admin_target(rule, key, true)?;
        let rules: Vec<&Rule> = if rule == EVERY_RULE {
            self.rules().iter().collect()
        } else {
            self.rule(rule).into_iter().collect()
        };
        let mut held = Vec::new();
        for r in rules {
            let reset = self.inner.limiter.store().reset(r, key);
            if self
                .inner
                .guard
                .within("reset", reset)
                .await
                .map_err(Refusal::Unavailable)?
            {
                held.push(r.name().to_owned());
            }
        }
        count("reset");
        Ok(held)
    }

    /// Denies every check, reservation and acquire of `key` under `rule`
    /// (every rule when `rule` is `*`) for `duration`, with `retry_after`
    /// the block's end; charges, refunds, settles and releases still count.
    /// Answers when it ends (ms since the Unix epoch). A block set again
    /// replaces the earlier one.
    ///
    /// # Errors
    /// As [`ResilientLimiter::inspect`], and a zero `duration`.
    pub async fn block(&self, rule: &str, key: &[u8], duration: Duration) -> Result<u64, Refusal> {
        self.admin_target(rule, key, true)?;
        if duration.is_zero() {
            return Err(invalid("a block needs a duration above 0"));
        }
        let now_ms = self.inner.wall_now() / 1000;
        let for_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let ends_ms = now_ms.saturating_add(for_ms);
        let entry = Entry::Block(Block {
            rule: rule.to_owned(),
            key: key.to_vec(),
            ends_ms,
        });
        self.inner
            .write_live(block_field(rule, key), Some(entry))
            .await
            .map_err(Refusal::Unavailable)?;
        count("block");
        Ok(ends_ms)
    }

    /// Lifts the block of `key` under `rule` (`*`: the block of every
    /// rule, which is apart from each rule's own). Answers whether one was
    /// on.
    ///
    /// # Errors
    /// As [`ResilientLimiter::inspect`].
    pub async fn unblock(&self, rule: &str, key: &[u8]) -> Result<bool, Refusal> {
        let was = !self
            .in_force(|e| match e {
                Entry::Block(b) if b.rule == rule && b.key == key => Some(()),
                _ => None,
            })
            .is_empty();
        // (a block of a rule a reload removed is still deleted by its name)
        if !was {
            self.admin_target(rule, key, true)?;
        }
        self.inner
            .write_live(block_field(rule, key), None)
            .await
            .map_err(Refusal::Unavailable)?;
        count("unblock");
        Ok(was)
    }

    /// The blocks on now.
    #[must_use]
    pub fn blocks(&self) -> Vec<Block> {
        self.in_force(|e| match e {
            Entry::Block(b) => Some(b.clone()),
            Entry::Override(_) => None,
        })
    }

    /// The live table's entries in force now (ended ones left out), as
    /// `pick` takes them.
    fn in_force<T>(&self, pick: impl Fn(&Entry) -> Option<T>) -> Vec<T> {
        let now_ms = self.inner.wall_now() / 1000;
        let table = self.inner.live.view.table.load();
        table
            .entries
            .iter()
            .filter(|e| !e.ended(now_ms))
            .filter_map(pick)
            .collect()
    }

    /// Gives `cost` units back to `key` under `rule` (a refund,
    /// docs/semantics.md), or, for a negative `cost`, takes them (a
    /// charge: never denied, past the limit as debt).
    ///
    /// # Errors
    /// As [`ResilientLimiter::refund_all`], and a cost of 0.
    pub async fn adjust(
        &self,
        rule: &str,
        key: &[u8],
        cost: i64,
    ) -> Result<ChargeVerdict, Refusal> {
        self.admin_target(rule, key, false)?;
        let units = cost.unsigned_abs();
        if units == 0 {
            return Err(invalid("a cost of 0 changes nothing"));
        }
        let pair = [Check::new(rule, key).cost(units)];
        let verdict = if cost > 0 {
            self.refund_all(&pair).await?
        } else {
            self.charge_all(&pair).await?
        };
        count(if cost > 0 { "refund" } else { "charge" });
        Ok(verdict)
    }

    /// Sets (or replaces) a runtime override: `o.key` (a prefix when it
    /// ends in `*`) of rule `o.rule` decided under `o.limit`, `o.period`
    /// and `o.burst` on the rule's counter, until `o.ends_ms`. It comes
    /// before a config override of the key, after a check's own per-call
    /// limit. Answers the rule it makes.
    ///
    /// # Errors
    /// An unknown rule, a key too long, a rule the values make invalid
    /// ([`Refusal::Invalid`]); the store failed.
    pub async fn set_override(&self, o: RuntimeOverride) -> Result<Rule, Refusal> {
        self.admin_target(&o.rule, &o.key, false)?;
        let base = self
            .rule(&o.rule)
            .ok_or_else(|| Refusal::Invalid(Error::UnknownRule(o.rule.clone())))?;
        let rule = override_rule(base, o.limit, o.period, o.burst)
            .map_err(|e| invalid(format!("{}: {}", e.field, e.message)))?;
        let field = override_field(&o.rule, &o.key);
        self.inner
            .write_live(field, Some(Entry::Override(o)))
            .await
            .map_err(Refusal::Unavailable)?;
        count("set_override");
        Ok(rule)
    }

    /// The runtime overrides in force (ended ones left out).
    #[must_use]
    pub fn overrides(&self) -> Vec<RuntimeOverride> {
        self.in_force(|e| match e {
            Entry::Override(o) => Some(o.clone()),
            Entry::Block(_) => None,
        })
    }

    /// Deletes the runtime override of `key` (the same text it was set
    /// with) under `rule`, also one left out of force (its rule removed by
    /// a reload, or refusing it). Answers whether there was one.
    ///
    /// # Errors
    /// As [`ResilientLimiter::inspect`].
    pub async fn delete_override(&self, rule: &str, key: &[u8]) -> Result<bool, Refusal> {
        // An override left out of the table (its rule removed by a reload,
        // or refusing it) is in the store still: deleted by its rule's name.
        let was = self
            .overrides()
            .iter()
            .any(|o| o.rule == rule && o.key == key)
            || self
                .inner
                .live
                .view
                .table
                .load()
                .left_out
                .iter()
                .any(|(r, k)| r == rule && k == key);
        if !was {
            self.admin_target(rule, key, false)?;
        }
        self.inner
            .write_live(override_field(rule, key), None)
            .await
            .map_err(Refusal::Unavailable)?;
        count("delete_override");
        Ok(was)
    }
}
