//! Per-request `limit` overrides (docs/envoy.md, "Limit overrides"): the
//! rules that count them and the per-call rule each one is decided under.
//!
//! The reference service counts a descriptor in a cache key made of the
//! domain, the entries and the window of the unit, whatever the limit: an
//! override with the unit of the limit the config gives the descriptor
//! shares that limit's counter, and one with another unit (or on a
//! descriptor the config does not list) has a counter per unit. So a
//! domain gets one rule per unit ([`EnvoyLimits::override_rule`]) for the
//! second case, and an override is decided as a per-call limit
//! ([`tollgate::Check::under`]) on the configured rule or on its domain's
//! rule for the unit. Nothing is kept per override value: each call builds
//! its own limit, so no request can grow memory by sending new ones.

use std::collections::BTreeMap;
use std::time::Duration;

use tollgate::{Algorithm, Rule, RuleSpec};

use super::loader::Loader;
use super::naming::rule_name;
use super::tree::{EnvoyLimits, Unit};

/// The limit every override rule is built with; never decided on its own
/// (every override is a per-call limit).
const PLACEHOLDER_LIMIT: u64 = 1;

impl Loader {
    /// One fixed-window rule per unit for each domain, named
    /// `envoy.DOMAIN.limit_override.UNIT`, after every configured rule (so
    /// those keep their names).
    pub(super) fn override_rules(&mut self) {
        self.out.configured = self.out.rules.len();
        let domains: Vec<String> = self.out.domains.keys().cloned().collect();
        let mut rules = BTreeMap::new();
        for domain in domains {
            let mut by_unit = [0; Unit::ALL.len()];
            for (slot, unit) in by_unit.iter_mut().zip(Unit::ALL) {
                let path = format!("{domain}.limit_override.{}", unit.as_str());
                let name = rule_name(&mut self.used, &path);
                let spec = RuleSpec::new(
                    name,
                    Algorithm::FixedWindow,
                    PLACEHOLDER_LIMIT,
                    Duration::from_secs(unit.seconds()),
                );
                // A valid name, limit and period: it cannot fail.
                let Ok(rule) = spec.build() else { continue };
                *slot = self.out.rules.len();
                self.out.rules.push(rule);
                self.rule_paths.push(path);
            }
            rules.insert(domain, by_unit);
        }
        self.out.override_rules = rules;
    }
}

impl EnvoyLimits {
    /// Index into [`EnvoyLimits::all_rules`] of the rule counting `domain`'s
    /// overrides in `unit` on descriptors without a configured limit of
    /// that unit; `None` for an unknown domain.
    #[must_use]
    pub fn override_rule(&self, domain: &str, unit: Unit) -> Option<usize> {
        let by_unit = self.override_rules.get(domain)?;
        Unit::ALL
            .iter()
            .position(|u| *u == unit)
            .map(|i| by_unit[i])
    }
}

/// The per-call rule of an override of `requests_per_unit` (at least 1)
/// counted on `base`'s counter: `base` with that limit (and burst, for the
/// algorithms that have one).
///
/// # Errors
/// When the limit is not a valid one for `base`'s period (cannot happen for
/// a `u32` and the units' periods, but never a panic).
pub fn override_limit(base: &Rule, requests_per_unit: u32) -> Result<Rule, tollgate::RuleError> {
    let mut spec = base.spec();
    spec.limit = u64::from(requests_per_unit);
    spec.burst = spec.burst.map(|_| spec.limit);
    spec.build()
}
