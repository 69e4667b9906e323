//! Per-key overrides of a rule (docs/semantics.md, "Per-key overrides"): a
//! key, or every key with a prefix, decided under another limit, period
//! and burst of the same rule, on the rule's counter. The most specific
//! pattern wins: an exact key, then the longest prefix.

use std::collections::HashMap;

use crate::error::Error;
use crate::rule::Rule;

/// Which keys an override applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyPattern {
    /// This key only.
    Exact(Vec<u8>),
    /// Every key starting with these bytes (the empty prefix: every key).
    Prefix(Vec<u8>),
}

impl KeyPattern {
    /// `text` as a pattern: a trailing `*` makes it a prefix (`tenant:*`),
    /// anything else is an exact key (a `*` elsewhere is a plain byte).
    ///
    /// ```
    /// use tollgate::KeyPattern;
    /// assert_eq!(KeyPattern::parse("tenant:acme"), KeyPattern::Exact(b"tenant:acme".to_vec()));
    /// assert_eq!(KeyPattern::parse("tenant:*"), KeyPattern::Prefix(b"tenant:".to_vec()));
    /// ```
    #[must_use]
    pub fn parse(text: &str) -> Self {
        match text.strip_suffix('*') {
            Some(prefix) => KeyPattern::Prefix(prefix.as_bytes().to_vec()),
            None => KeyPattern::Exact(text.as_bytes().to_vec()),
        }
    }
}

/// One rule's overrides.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    exact: HashMap<Box<[u8]>, Rule, foldhash::fast::RandomState>,
    /// Longest first, so the first match is the most specific.
    prefixes: Vec<(Box<[u8]>, Rule)>,
}

impl Overrides {
    /// No overrides.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `rule` for the keys `pattern` names.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when `pattern` already has an override.
    pub fn insert(&mut self, pattern: KeyPattern, rule: Rule) -> Result<(), Error> {
        let taken = match &pattern {
            KeyPattern::Exact(k) => self.exact.contains_key(k.as_slice()),
            KeyPattern::Prefix(p) => self.prefixes.iter().any(|(q, _)| **q == **p),
        };
        if taken {
            return Err(Error::Mismatch(format!(
                "two overrides of rule {:?} for the same keys ({pattern:?})",
                rule.name()
            )));
        }
        match pattern {
            KeyPattern::Exact(k) => {
                self.exact.insert(k.into_boxed_slice(), rule);
            }
            KeyPattern::Prefix(p) => {
                let at = self.prefixes.partition_point(|(q, _)| q.len() >= p.len());
                self.prefixes.insert(at, (p.into_boxed_slice(), rule));
            }
        }
        Ok(())
    }

    /// The override for `key`: its exact one, else the longest prefix
    /// that starts it.
    #[must_use]
    pub fn find(&self, key: &[u8]) -> Option<&Rule> {
        self.exact.get(key).or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| key.starts_with(p))
                .map(|(_, r)| r)
        })
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty()
    }

    /// Every override's rule.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.exact
            .values()
            .chain(self.prefixes.iter().map(|(_, r)| r))
    }
}
