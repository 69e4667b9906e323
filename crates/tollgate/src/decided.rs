//! What decided a check, carried in its answer ([`DecidedBy`], one per
//! pair, in a [`Deciders`]).
//!
//! A check's pairs are resolved once, before the store is asked: each to
//! its rule, or to the key's runtime override, config override, or the
//! check's own per-call limit. The answer carries that resolution, so what
//! is made of it afterwards (RateLimit headers, an Envoy status) describes
//! the limit that decided, never one found by a second lookup: an admin
//! override written between the decision and that lookup would be found by
//! it (docs/semantics.md, "Per-key overrides").

use std::time::Duration;

use crate::rule::{Algorithm, Rule};
use crate::time::Micros;

/// Where the limit a pair was decided under came from, in the order the
/// limiter looks (the first that applies decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitSource {
    /// The check's own limit ([`crate::Check::under`]).
    PerCall,
    /// A runtime override of the key (docs/admin.md).
    RuntimeOverride,
    /// A per-key override of the configuration ([`crate::Overrides`]).
    ConfigOverride,
    /// The rule itself.
    Rule,
}

impl LimitSource {
    /// Its name: `per_call`, `runtime_override`, `config_override` or
    /// `rule` (as the admin API's inspection says it).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LimitSource::PerCall => "per_call",
            LimitSource::RuntimeOverride => "runtime_override",
            LimitSource::ConfigOverride => "config_override",
            LimitSource::Rule => "rule",
        }
    }
}

/// The limit one pair of a check was decided under, as the limiter
/// resolved it before asking the store. Small and `Copy`: what an answer's
/// headers and statuses read, not the rule itself (whose name is its
/// configured rule's, at [`DecidedBy::index`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DecidedBy {
    /// The configured rule the pair named: its position in the limiter's
    /// rules. The deciding limit has that rule's name, and counts on its
    /// counter.
    pub index: usize,
    /// Where the limit came from.
    pub source: LimitSource,
    /// Its algorithm (the configured rule's: an override keeps it).
    pub algorithm: Algorithm,
    /// Its units per period.
    pub limit: u64,
    /// Its burst (`limit` for the window algorithms).
    pub burst: u64,
    /// Its period, in µs.
    pub period_micros: Micros,
}

impl DecidedBy {
    /// `rule`, from `source`, deciding a pair of configured rule `index`.
    pub(crate) fn new(index: usize, rule: &Rule, source: LimitSource) -> Self {
        Self {
            index,
            source,
            algorithm: rule.algorithm(),
            limit: rule.limit(),
            burst: rule.burst(),
            period_micros: rule.period_micros(),
        }
    }

    /// Its period (a RateLimit field's window).
    #[must_use]
    pub fn period(&self) -> Duration {
        Duration::from_micros(self.period_micros)
    }

    /// The most units one check can take ([`Rule::capacity`]): `burst` for
    /// GCRA and token bucket, `limit` otherwise.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        if self.algorithm.has_burst() {
            self.burst
        } else {
            self.limit
        }
    }
}

/// What decided each pair of a check, in the check's order: one
/// [`DecidedBy`] per pair. Read it as a slice. One pair, the common case,
/// is held inline (no allocation).
#[derive(Debug, Clone, Default)]
pub struct Deciders(Held);

#[derive(Debug, Clone)]
enum Held {
    One(DecidedBy),
    Many(Vec<DecidedBy>),
}

impl Default for Held {
    fn default() -> Self {
        Held::Many(Vec::new())
    }
}

impl std::ops::Deref for Deciders {
    type Target = [DecidedBy];

    fn deref(&self) -> &[DecidedBy] {
        match &self.0 {
            Held::One(one) => std::slice::from_ref(one),
            Held::Many(many) => many,
        }
    }
}

impl PartialEq for Deciders {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Deciders {}

impl From<Vec<DecidedBy>> for Deciders {
    fn from(many: Vec<DecidedBy>) -> Self {
        match many.as_slice() {
            [one] => Self(Held::One(*one)),
            _ => Self(Held::Many(many)),
        }
    }
}

impl FromIterator<DecidedBy> for Deciders {
    fn from_iter<I: IntoIterator<Item = DecidedBy>>(iter: I) -> Self {
        let mut iter = iter.into_iter();
        let Some(first) = iter.next() else {
            return Self::default();
        };
        match iter.next() {
            None => Self(Held::One(first)),
            Some(second) => {
                let mut many = Vec::with_capacity(2 + iter.size_hint().0);
                many.extend([first, second]);
                many.extend(iter);
                Self(Held::Many(many))
            }
        }
    }
}

impl<'a> IntoIterator for &'a Deciders {
    type Item = &'a DecidedBy;
    type IntoIter = std::slice::Iter<'a, DecidedBy>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::RuleSpec;

    #[test]
    fn deciders_read_as_a_slice_of_any_length() {
        let rule = RuleSpec::new("r", Algorithm::Gcra, 10, Duration::from_secs(2))
            .burst(20)
            .build()
            .expect("rule");
        let by = |i| DecidedBy::new(i, &rule, LimitSource::Rule);
        assert!(Deciders::default().is_empty());
        let one: Deciders = [by(0)].into_iter().collect();
        assert_eq!(&*one, &[by(0)]);
        assert_eq!(one, Deciders::from(vec![by(0)]));
        let three: Deciders = (0..3).map(by).collect();
        assert_eq!(three, Deciders::from((0..3).map(by).collect::<Vec<_>>()));
        assert_eq!(three.iter().map(|d| d.index).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(by(0).capacity(), 20);
        assert_eq!(by(0).period(), Duration::from_secs(2));
    }
}
