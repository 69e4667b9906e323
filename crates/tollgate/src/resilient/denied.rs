//! The most denied keys of a rule lately, as this replica saw them:
//! [`ResilientLimiter::top_denied`] over the [`TopDenied`] sketch that
//! [`Inner::count`](super::Inner) fills with every denied pair
//! (docs/semantics.md, "Top denied keys").

use std::time::Duration;

use super::ResilientLimiter;
use crate::error::Error;
use crate::top::{DeniedKey, TopDenied};

impl<S> ResilientLimiter<S> {
    /// The `n` keys the rule named `rule` denied most on this replica
    /// lately (the current and the previous epoch of
    /// [`ResilientLimiter::top_denied_epoch`]), most denied first; each
    /// with its count (never below the truth) and error bound (the key was
    /// denied at least `count − error` times). Counted per (rule, key)
    /// pair the rule itself denied, whatever answered (the store or the
    /// `local` fallback); a pair admitted by its rule but refused because
    /// another pair of the check denied is not counted against it, nor is
    /// a check refused by the `deny` policy. Empty when the rule denied
    /// nothing lately, or the sketch is off
    /// ([`ResilientLimiterBuilder::top_denied`](super::ResilientLimiterBuilder::top_denied)`(0)`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Limiter, MemoryStore, ResilientLimiter, RuleSpec};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let limiter = Limiter::new(MemoryStore::new(), [
    ///     RuleSpec::new("login", Algorithm::Gcra, 1, Duration::from_secs(60)).build()?,
    /// ])?;
    /// let limiter = ResilientLimiter::builder(limiter).top_denied(100).build()?;
    /// for key in ["mallory", "mallory", "mallory", "alice", "alice"] {
    ///     limiter.check("login", key, 1).await?;
    /// }
    /// let top = limiter.top_denied("login", 10)?;
    /// assert_eq!(top[0].key, b"mallory");
    /// assert_eq!((top[0].count, top[0].error), (2, 0)); // her first was admitted
    /// assert_eq!(top[1].key, b"alice");
    /// assert_eq!(top.len(), 2);
    /// assert!(limiter.top_denied("nope", 10).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::UnknownRule`] when no rule is named `rule`.
    pub fn top_denied(&self, rule: &str, n: usize) -> Result<Vec<DeniedKey>, Error> {
        let i = self
            .inner
            .limiter
            .rule_index(rule)
            .ok_or_else(|| Error::UnknownRule(rule.to_owned()))?;
        Ok(self.inner.top.top(i, n, self.inner.clock.now()))
    }

    /// The denials the rule named `rule` made lately (the horizon of
    /// [`ResilientLimiter::top_denied`]), every key together: what the
    /// counts' bounds are relative to.
    ///
    /// # Errors
    /// [`Error::UnknownRule`] when no rule is named `rule`.
    pub fn denied_lately(&self, rule: &str) -> Result<u64, Error> {
        let i = self
            .inner
            .limiter
            .rule_index(rule)
            .ok_or_else(|| Error::UnknownRule(rule.to_owned()))?;
        Ok(self.inner.top.denials(i, self.inner.clock.now()))
    }

    /// The epoch of the top denied keys: a report covers the current one
    /// and the previous one.
    #[must_use]
    pub fn top_denied_epoch(&self) -> Duration {
        self.inner.top.epoch()
    }

    /// The sketch behind [`ResilientLimiter::top_denied`] (its capacity,
    /// memory held and bound).
    #[must_use]
    pub fn top_denied_sketch(&self) -> &TopDenied {
        &self.inner.top
    }
}
