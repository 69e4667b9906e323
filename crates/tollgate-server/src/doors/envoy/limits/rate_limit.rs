//! One node's `rate_limit`: its fields, `replaces`, tollgate's
//! extensions (`algorithm`, `burst`, `charge`), and the tollgate rule it
//! becomes.

use std::time::Duration;

use tollgate::{Algorithm, RuleSpec};

use super::loader::{Fields, Loader, join};
use super::naming::rule_name;
use super::tree::{Limit, Unit};
use super::yaml::{Value, Yaml};

const RATE_LIMIT_FIELDS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "charge",
];
const REPLACES_FIELDS: &[&str] = &["name"];

/// The descriptor's switches that its limit carries.
#[derive(Debug, Clone, Copy)]
pub(super) struct Modes {
    /// `shadow_mode`.
    pub(super) shadow_mode: bool,
    /// `quota_mode`.
    pub(super) quota_mode: bool,
    /// `detailed_metric`.
    pub(super) detailed_metric: bool,
    /// Whether its metrics name runtime values: `detailed_metric`, or
    /// `value_to_metric` on it or a node above.
    pub(super) runtime_metric: bool,
}

impl Loader {
    /// The node's limit, or `None` when it has none or it is invalid
    /// (reported). Builds its rule when it needs one.
    pub(super) fn rate_limit(
        &mut self,
        node: &Yaml,
        field: &str,
        path: &str,
        modes: Modes,
    ) -> Option<Limit> {
        if matches!(&*node.value, Value::Null) {
            return None;
        }
        let before = self.errors.len();
        let fields = self.fields(node, field, RATE_LIMIT_FIELDS, "a rate_limit mapping")?;
        let line_of = |name: &str| {
            fields
                .entries
                .iter()
                .find(|(n, _, _)| n == name)
                .map_or(node.line, |(_, _, v)| v.line)
        };
        let unlimited = self.flag(&fields, field, "unlimited");
        let requests_per_unit = fields
            .get("requests_per_unit")
            .and_then(|n| {
                self.integer(
                    n,
                    &join(field, "requests_per_unit"),
                    0,
                    i128::from(u32::MAX),
                )
            })
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0);
        let name = fields
            .get("name")
            .and_then(|n| self.string(n, &join(field, "name")))
            .unwrap_or_default();
        let unit_field = join(field, "unit");
        let unit_text = match fields.get("unit") {
            None => Some(String::new()),
            // A wrong type is reported; the unit is not checked further.
            Some(n) => self.string(n, &unit_field),
        };
        let unit = if let Some(unit_text) = unit_text {
            self.unit(&unit_text, unlimited, &fields, node, &unit_field)
        } else {
            None
        };
        let replaces = self.replaces(fields.get("replaces"), &join(field, "replaces"), &name);
        let algorithm_field = join(field, "algorithm");
        let algorithm = match fields.get("algorithm") {
            None => Algorithm::FixedWindow,
            Some(n) => match self.string(n, &algorithm_field) {
                None => Algorithm::FixedWindow,
                Some(text) => match text.parse() {
                    // A descriptor's limit is a rate; in-flight limits are
                    // acquired and released, which ShouldRateLimit cannot.
                    Ok(Algorithm::Concurrency) => {
                        self.error(
                            n.line,
                            &algorithm_field,
                            "concurrency is not a rate: Envoy's ShouldRateLimit has no release; \
                             expected one of gcra, token_bucket, fixed_window, sliding_window, \
                             sliding_log"
                                .to_owned(),
                        );
                        Algorithm::FixedWindow
                    }
                    Ok(a) => a,
                    Err(e) => {
                        let e: tollgate::RuleError = e;
                        self.error(n.line, &algorithm_field, e.message);
                        Algorithm::FixedWindow
                    }
                },
            },
        };
        let burst_field = join(field, "burst");
        let burst = fields.get("burst").and_then(|n| {
            if algorithm.has_burst() {
                self.integer(n, &burst_field, 1, i128::from(u64::MAX))
                    .and_then(|b| u64::try_from(b).ok())
            } else {
                self.error(
                    n.line,
                    &burst_field,
                    format!("burst applies to gcra and token_bucket only, not {algorithm}"),
                );
                None
            }
        });
        let charge = self.charge(&fields, field, unlimited, requests_per_unit);
        if self.errors.len() > before {
            return None;
        }
        let mut limit = Limit {
            rule: None,
            name,
            path: path.to_owned(),
            requests_per_unit,
            unit,
            unlimited,
            shadow_mode: modes.shadow_mode,
            quota_mode: modes.quota_mode,
            detailed_metric: modes.detailed_metric,
            runtime_metric: modes.runtime_metric,
            replaces,
            charge,
            metadata: None,
        };
        if let (Some(unit), false, true) = (unit, unlimited, requests_per_unit >= 1) {
            let mut spec = RuleSpec::new(
                rule_name(&mut self.used, path),
                algorithm,
                u64::from(requests_per_unit),
                Duration::from_secs(unit.seconds()),
            );
            if let Some(burst) = burst {
                spec = spec.burst(burst);
            }
            match spec.build() {
                Ok(rule) => {
                    limit.rule = Some(self.out.rules.len());
                    self.out.rules.push(rule);
                    self.rule_paths.push(path.to_owned());
                }
                Err(e) => {
                    let name = match e.field {
                        "limit" => "requests_per_unit",
                        "period" => "unit",
                        other => other,
                    };
                    self.error(line_of(name), join(field, name), e.message);
                    return None;
                }
            }
        }
        Some(limit)
    }

    /// `rate_limit.charge` (tollgate's, docs/envoy.md "Charging usage"):
    /// only a limit the store counts can be charged.
    fn charge(&mut self, fields: &Fields, field: &str, unlimited: bool, per_unit: u32) -> bool {
        let charge = self.flag(fields, field, "charge");
        let why = if unlimited {
            "an unlimited limit counts nothing"
        } else if per_unit == 0 {
            "requests_per_unit 0 denies every request and counts nothing"
        } else {
            return charge;
        };
        if let (true, Some(node)) = (charge, fields.get("charge")) {
            let message = format!("charge needs a counted limit: {why}");
            self.error(node.line, join(field, "charge"), message);
        }
        false
    }

    /// `rate_limit.unit` (its text, `""` when absent or null) checked
    /// against `unlimited`.
    fn unit(
        &mut self,
        text: &str,
        unlimited: bool,
        fields: &Fields,
        rate_limit: &Yaml,
        field: &str,
    ) -> Option<Unit> {
        const EXPECTED: &str = "expected second, minute, hour, day, week, month or year";
        let given = fields.get("unit");
        let line = given.map_or(rate_limit.line, |n| n.line);
        match (text, unlimited) {
            ("", true) => None,
            ("", false) if given.is_none() => {
                self.error(
                    line,
                    field,
                    "missing required field: a rate limit needs a unit (second, minute, hour, \
                     day, week, month or year) unless it is unlimited",
                );
                None
            }
            (_, true) => {
                self.error(
                    line,
                    field,
                    "should not specify rate limit unit when unlimited",
                );
                None
            }
            (text, false) => {
                let unit = Unit::parse(text);
                if unit.is_none() {
                    self.error(
                        line,
                        field,
                        format!("invalid rate limit unit '{text}'; {EXPECTED}"),
                    );
                }
                unit
            }
        }
    }

    /// `replaces`: a list of `{name: X}`, each name non-empty and not the
    /// limit's own.
    fn replaces(&mut self, node: Option<&Yaml>, field: &str, own: &str) -> Vec<String> {
        let mut names = Vec::new();
        let Some(node) = node else { return names };
        let items = match &*node.value {
            Value::Null => return names,
            Value::Seq(items) => items,
            _ => {
                self.wrong_type(node, field, "a list of {name: ...}");
                return names;
            }
        };
        for (i, item) in items.iter().enumerate() {
            let item_field = format!("{field}[{i}]");
            let Some(fields) =
                self.fields(item, &item_field, REPLACES_FIELDS, "a mapping {name: ...}")
            else {
                continue;
            };
            let name_field = join(&item_field, "name");
            let (name, line) = match fields.get("name") {
                None => (Some(String::new()), item.line),
                Some(n) => (self.string(n, &name_field), n.line),
            };
            match name {
                None => {}
                Some(name) if name.is_empty() => {
                    self.error(line, name_field, "should not have an empty replaces entry");
                }
                Some(name) if name == own => {
                    self.error(
                        line,
                        name_field,
                        format!("replaces should not contain name of same descriptor ('{name}')"),
                    );
                }
                Some(name) => names.push(name),
            }
        }
        names
    }
}
