//! The one resolution of a check's pairs: each to its configured rule (by
//! the position the check carries, else by name), then to the limit that
//! decides it (the check's own, a runtime override, a config override, the
//! rule), once, before the store is asked. The answer carries it
//! ([`DecidedBy`]); nothing looks it up again.

use super::{Check, Limiter, MAX_KEY_LEN};
use crate::decided::{DecidedBy, Deciders, LimitSource};
use crate::error::Error;
use crate::live::LiveTable;
use crate::op::Op;
use crate::rule::Rule;
use crate::store::KeyCheck;

impl<S> Limiter<S> {
    /// The index of `check`'s rule, once its key is known not too long:
    /// the position the check carries ([`Check::at_index`]) when the rule
    /// there has its name, else the name looked up.
    ///
    /// # Errors
    /// Key too long, or unknown rule (in that order, as [`Limiter::check_all`]).
    pub(super) fn resolve_index(&self, check: &Check<'_>) -> Result<usize, Error> {
        if check.key.len() > MAX_KEY_LEN {
            return Err(Error::KeyTooLong {
                len: check.key.len(),
            });
        }
        if let Some(i) = check.index
            && self.rules.get(i).is_some_and(|r| r.name() == check.rule)
        {
            return Ok(i);
        }
        self.rule_index(check.rule)
            .ok_or_else(|| Error::UnknownRule(check.rule.to_owned()))
    }

    /// The limit that decides `key` under rule `i` (by position in
    /// [`Limiter::rules`]) and where it came from: a runtime override in
    /// `runtime` (docs/admin.md) before a config one, before the rule. A
    /// runtime override built for another algorithm (a reload changed the
    /// rule) is passed over.
    ///
    /// # Panics
    /// When `i` is not a rule's position.
    pub(crate) fn deciding_rule<'c>(
        &'c self,
        i: usize,
        key: &[u8],
        runtime: Option<&'c LiveTable>,
    ) -> (&'c Rule, LimitSource) {
        let rule = &self.rules[i];
        if let Some(own) = runtime
            .and_then(|t| t.override_for(rule.name(), key))
            .filter(|own| own.algorithm() == rule.algorithm())
        {
            return (own, LimitSource::RuntimeOverride);
        }
        let config = self.overrides.get(i).and_then(Option::as_ref);
        match config.and_then(|o| o.find(key)) {
            Some(own) => (own, LimitSource::ConfigOverride),
            None => (rule, LimitSource::Rule),
        }
    }

    /// The limit `c` is decided under: its per-call limit
    /// ([`Check::under`]) when it has one that fits rule `i`, else
    /// [`Limiter::deciding_rule`]'s.
    ///
    /// # Errors
    /// [`Error::Mismatch`] for a per-call limit with another name,
    /// algorithm or period than rule `i`'s.
    fn rule_of<'c>(
        &'c self,
        c: &Check<'c>,
        i: usize,
        runtime: Option<&'c LiveTable>,
    ) -> Result<(&'c Rule, LimitSource), Error> {
        let Some(limit) = c.limit else {
            return Ok(self.deciding_rule(i, c.key, runtime));
        };
        let rule = &self.rules[i];
        if limit.name() != rule.name()
            || limit.algorithm() != rule.algorithm()
            || limit.period_micros() != rule.period_micros()
        {
            return Err(Error::Mismatch(format!(
                "a per-call limit of rule {:?} must keep its name, algorithm ({}) and period \
                 ({} µs); got {:?}, {}, {} µs",
                rule.name(),
                rule.algorithm(),
                rule.period_micros(),
                limit.name(),
                limit.algorithm(),
                limit.period_micros()
            )));
        }
        Ok((limit, LimitSource::PerCall))
    }

    /// One pair resolved: its rule's index, and the limit deciding it,
    /// which `op` must apply to.
    fn resolve_one<'c>(
        &'c self,
        c: &Check<'c>,
        op: Op,
        runtime: Option<&'c LiveTable>,
    ) -> Result<(KeyCheck<'c>, usize, LimitSource), Error> {
        let i = self.resolve_index(c)?;
        let (rule, source) = self.rule_of(c, i, runtime)?;
        op.applies(rule, c.cost)?;
        let pair = KeyCheck {
            rule,
            key: c.key,
            cost: c.cost,
        };
        Ok((pair, i, source))
    }

    /// Each pair's rule, looked up once: the one place a check's rules are
    /// resolved, for this limiter and [`crate::resilient`]'s (which
    /// passes its `runtime` table of overrides). One pair, the common case,
    /// needs no vector.
    ///
    /// # Errors
    /// No pairs, then per pair a key too long, an unknown rule, a per-call
    /// limit that does not fit, or an `op` that does not apply.
    pub(crate) fn resolve_all<'c>(
        &'c self,
        checks: &[Check<'c>],
        op: Op,
        runtime: Option<&'c LiveTable>,
    ) -> Result<Resolved<'c>, Error> {
        match checks {
            [] => Err(Error::NoChecks),
            [c] => {
                let (pair, i, source) = self.resolve_one(c, op, runtime)?;
                Ok(Resolved::One([pair], [i], source))
            }
            _ => {
                let mut pairs = Vec::with_capacity(checks.len());
                let mut index = Vec::with_capacity(checks.len());
                let mut sources = Vec::with_capacity(checks.len());
                for c in checks {
                    let (pair, i, source) = self.resolve_one(c, op, runtime)?;
                    pairs.push(pair);
                    index.push(i);
                    sources.push(source);
                }
                Ok(Resolved::Many(pairs, index, sources))
            }
        }
    }
}

/// A check's pairs with their rules looked up ([`Limiter::resolve_all`]):
/// per pair the deciding limit (in its [`KeyCheck`]), the configured
/// rule's position, and where the limit came from.
#[derive(Debug)]
pub(crate) enum Resolved<'c> {
    /// One pair, held inline.
    One([KeyCheck<'c>; 1], [usize; 1], LimitSource),
    /// Several pairs.
    Many(Vec<KeyCheck<'c>>, Vec<usize>, Vec<LimitSource>),
}

impl<'c> Resolved<'c> {
    /// The pairs, each with its deciding limit.
    pub(crate) fn pairs(&self) -> &[KeyCheck<'c>] {
        match self {
            Resolved::One(pairs, ..) => pairs,
            Resolved::Many(pairs, ..) => pairs,
        }
    }

    /// Each pair's rule's position in [`Limiter::rules`].
    pub(crate) fn index(&self) -> &[usize] {
        match self {
            Resolved::One(_, index, _) => index,
            Resolved::Many(_, index, _) => index,
        }
    }

    /// Where each pair's limit came from.
    pub(crate) fn sources(&self) -> &[LimitSource] {
        match self {
            Resolved::One(.., source) => std::slice::from_ref(source),
            Resolved::Many(.., sources) => sources,
        }
    }

    /// What decided each pair, for the answer to carry.
    pub(crate) fn deciders(&self) -> Deciders {
        self.pairs()
            .iter()
            .zip(self.index())
            .zip(self.sources())
            .map(|((c, &i), &source)| DecidedBy::new(i, c.rule, source))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::decided::LimitSource;
    use crate::overrides::{KeyPattern, Overrides};
    use crate::rule::{Algorithm, Rule, RuleSpec};
    use crate::store::memory::MemoryStore;
    use crate::{Check, Limiter, Op};

    fn rule(name: &str, limit: u64) -> Rule {
        RuleSpec::new(name, Algorithm::FixedWindow, limit, Duration::from_secs(60))
            .build()
            .expect("rule")
    }

    /// Rules `a` (10) and `b` (20); key `vip` of `b` overridden to 50.
    fn limiter() -> Limiter<MemoryStore> {
        let mut vip = Overrides::new();
        vip.insert(KeyPattern::parse("vip"), rule("b", 50))
            .expect("override");
        Limiter::with_overrides(
            MemoryStore::new(),
            [rule("a", 10), rule("b", 20)],
            vec![("b".to_owned(), vip)],
        )
        .expect("limiter")
    }

    #[test]
    fn a_position_is_taken_when_its_rule_has_the_name() {
        let l = limiter();
        let at = |c: Check<'_>| l.resolve_index(&c).expect("resolved");
        assert_eq!(at(Check::new("b", "k").at_index(1)), 1);
        // A position whose rule has another name (or none) is passed over.
        assert_eq!(at(Check::new("b", "k").at_index(0)), 1);
        assert_eq!(at(Check::new("b", "k").at_index(7)), 1);
        assert!(l.resolve_index(&Check::new("c", "k").at_index(0)).is_err());
    }

    #[test]
    fn each_pair_carries_what_decided_it() {
        let l = limiter();
        let under = rule("b", 3);
        let checks = [
            Check::new("a", "k"),
            Check::new("b", "vip").at_index(1),
            Check::new("b", "k"),
            Check::new("b", "vip").under(&under),
        ];
        let resolved = l.resolve_all(&checks, Op::Check, None).expect("resolved");
        let by = resolved.deciders();
        let got: Vec<(usize, LimitSource, u64)> =
            by.iter().map(|b| (b.index, b.source, b.limit)).collect();
        assert_eq!(
            got,
            [
                (0, LimitSource::Rule, 10),
                (1, LimitSource::ConfigOverride, 50),
                (1, LimitSource::Rule, 20),
                (1, LimitSource::PerCall, 3),
            ]
        );
    }
}
