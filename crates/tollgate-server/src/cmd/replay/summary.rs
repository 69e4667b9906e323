//! The per-rule counts a replay prints on stderr.

use std::fmt;

/// Checks, admissions and denials of one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCounts {
    /// The rule's name.
    pub rule: String,
    /// Rows checked under this rule.
    pub checks: u64,
    /// Rows admitted.
    pub admitted: u64,
    /// Rows denied (including those that can never be admitted).
    pub denied: u64,
}

/// Counts per rule, in config order, for the rules the trace named.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    /// One entry per rule that had at least one check.
    pub rules: Vec<RuleCounts>,
}

impl fmt::Display for Summary {
    /// A table: `rule checks admitted denied`, then one line per rule and a
    /// `total` line, columns aligned.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = RuleCounts {
            rule: "total".to_owned(),
            checks: self.rules.iter().map(|r| r.checks).sum(),
            admitted: self.rules.iter().map(|r| r.admitted).sum(),
            denied: self.rules.iter().map(|r| r.denied).sum(),
        };
        let width = self
            .rules
            .iter()
            .map(|r| r.rule.len())
            .chain([5])
            .max()
            .unwrap_or(5);
        writeln!(
            f,
            "{:<width$}  {:>8}  {:>8}  {:>8}",
            "rule", "checks", "admitted", "denied"
        )?;
        for r in self.rules.iter().chain([&total]) {
            writeln!(
                f,
                "{:<width$}  {:>8}  {:>8}  {:>8}",
                r.rule, r.checks, r.admitted, r.denied
            )?;
        }
        Ok(())
    }
}
