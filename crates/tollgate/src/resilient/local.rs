//! The `local` failure policy: an in-process limiter holding each rule's
//! quota divided by the live replicas.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::rule::Rule;
use crate::store::memory::MemoryStore;

/// The `local` fallback: an in-process store and the rules at the current
/// share. The store keeps its state by rule *name*, so when the live count
/// changes the same state is read against the new share (a GCRA key keeps
/// its debt, a window its count): nothing is forgotten.
pub(super) struct Local {
    pub(super) store: MemoryStore,
    /// (replicas, every rule with its quota divided by them).
    shares: RwLock<(u64, Arc<Vec<Rule>>)>,
}

impl Local {
    /// A fallback holding at most `max_keys` keys, its shares not yet made.
    pub(super) fn new(max_keys: usize) -> Self {
        Self {
            store: MemoryStore::builder().max_keys(max_keys).build(),
            shares: RwLock::new((0, Arc::new(Vec::new()))),
        }
    }

    pub(super) fn shares(&self, replicas: u64, rules: &[Rule]) -> Arc<Vec<Rule>> {
        {
            let current = self.shares.read();
            if current.0 == replicas {
                return Arc::clone(&current.1);
            }
        }
        let scaled: Arc<Vec<Rule>> =
            Arc::new(rules.iter().map(|r| local_share(r, replicas)).collect());
        *self.shares.write() = (replicas, Arc::clone(&scaled));
        scaled
    }
}

/// `rule` with its quota (limit and burst) divided among `replicas`, at
/// least 1 unit each. A share the library refuses (it cannot happen for a
/// valid rule: the emission interval only grows) keeps the rule whole.
#[must_use]
pub fn local_share(rule: &Rule, replicas: u64) -> Rule {
    let replicas = replicas.max(1);
    if replicas == 1 {
        return rule.clone();
    }
    let mut spec = rule.spec();
    spec.limit = (spec.limit / replicas).max(1);
    spec.burst = spec.burst.map(|b| (b / replicas).max(1));
    spec.build().unwrap_or_else(|_| rule.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::rule::{Algorithm, RuleSpec};
    #[test]
    fn local_share_divides_quota() {
        let rule = RuleSpec::new("r", Algorithm::Gcra, 100, Duration::from_secs(1))
            .burst(30)
            .build()
            .expect("rule");
        let local = local_share(&rule, 3);
        assert_eq!((local.limit(), local.burst()), (33, 10));
        let tiny = local_share(&rule, 1000);
        assert_eq!((tiny.limit(), tiny.burst()), (1, 1));
        assert_eq!(local_share(&rule, 0).limit(), 100);
    }
}
