//! The GCRA rules a shard's keys were written under, numbered by shape:
//! a key's class.

use std::collections::HashMap;

use crate::algorithm::{GcraState, Usage, gcra};
use crate::rule::Rule;
use crate::time::Micros;

/// The class of a GCRA key whose rule is not recorded (the shard already
/// records [`MAX_CLASSES`] rules): it counts as exhausted, so it is kept
/// as long as any key known to hold less is held.
pub(super) const UNKNOWN_CLASS: u16 = u16::MAX;

/// The most distinct GCRA rule shapes a shard records: a bound on memory
/// when rules come and go (reloads, rules built per request); they are
/// forgotten when no key names them.
pub(super) const MAX_CLASSES: usize = 256;

/// The GCRA rules a shard's keys were written under, numbered by shape:
/// the table's slots hold the number (their class), not the rule, so a
/// slot stays 24 bytes. GCRA usage depends only on `tau` and `T`, so rules
/// of one shape share a class.
#[derive(Debug, Default)]
pub(super) struct GcraRules {
    pub(super) rules: Vec<Rule>,
    by_shape: HashMap<(Micros, Micros), u16>,
}

impl GcraRules {
    /// How many classes are recorded.
    pub(super) fn len(&self) -> usize {
        self.rules.len()
    }

    /// `rule`'s class, recorded if new (or [`UNKNOWN_CLASS`] when full).
    pub(super) fn class_of(&mut self, rule: &Rule) -> u16 {
        // The usual case, a few configured rules: a pointer comparison each
        // is cheaper than hashing the shape (multi-rule checks come here).
        if let Some(class) = self.rules.iter().take(4).position(|r| r.same(rule)) {
            return u16::try_from(class).unwrap_or(UNKNOWN_CLASS);
        }
        let shape = (rule.tau_micros(), rule.interval_micros());
        if let Some(&class) = self.by_shape.get(&shape) {
            return class;
        }
        if self.rules.len() >= MAX_CLASSES {
            return UNKNOWN_CLASS;
        }
        let class = u16::try_from(self.rules.len()).unwrap_or(UNKNOWN_CLASS);
        self.rules.push(rule.clone());
        self.by_shape.insert(shape, class);
        class
    }

    /// The stake of a GCRA key of `class` with `tat`, at `t`.
    pub(super) fn usage(&self, class: u16, tat: Micros, t: Micros) -> Usage {
        match self.rules.get(usize::from(class)) {
            Some(rule) => gcra::usage(rule, GcraState { tat }, t),
            None => Usage {
                exhausted: true,
                share: u64::MAX,
            },
        }
    }

    /// Keeps the classes marked in `used`; returns the new number of every
    /// old class ([`UNKNOWN_CLASS`] for those dropped) if any was dropped.
    pub(super) fn retain(&mut self, used: &[bool]) -> Option<Vec<u16>> {
        if used.iter().all(|&u| u) {
            return None;
        }
        let mut renumber = Vec::with_capacity(self.rules.len());
        let mut kept = Vec::new();
        for (rule, &u) in std::mem::take(&mut self.rules).into_iter().zip(used) {
            if u {
                renumber.push(u16::try_from(kept.len()).unwrap_or(UNKNOWN_CLASS));
                kept.push(rule);
            } else {
                renumber.push(UNKNOWN_CLASS);
            }
        }
        self.by_shape = kept
            .iter()
            .zip(0..)
            .map(|(r, class)| ((r.tau_micros(), r.interval_micros()), class))
            .collect();
        self.rules = kept;
        Some(renumber)
    }
}
