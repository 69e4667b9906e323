//! `[[rules.overrides]]`: per-key overrides of a rule (docs/config.md,
//! "Per-key overrides"): an exact key or a prefix (`tenant:*`) decided
//! under another `limit`, `period` or `burst`, on the rule's counter.

use std::ops::Range;

use tollgate::{KeyPattern, Rule};
use toml::de::DeValue;

use super::checker::Checker;
use super::model::KeyOverride;

const OVERRIDE_FIELDS: &[&str] = &["key", "limit", "period", "burst"];

impl Checker<'_> {
    /// `rules[i].overrides`, each built from `base` with its own fields;
    /// `None` (reported) when any is wrong.
    pub(super) fn overrides(
        &mut self,
        t: &toml::de::DeTable<'_>,
        path: &str,
        base: Option<&Rule>,
    ) -> Option<Vec<KeyOverride>> {
        let Some(value) = t.get("overrides") else {
            return Some(Vec::new());
        };
        let path = format!("{path}.overrides");
        let DeValue::Array(items) = value.get_ref() else {
            self.wrong_type(value, &path, "an array of tables ([[rules.overrides]])");
            return None;
        };
        let before = self.errors.len();
        let mut out: Vec<KeyOverride> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let path = format!("{path}[{i}]");
            let DeValue::Table(o) = item.get_ref() else {
                self.wrong_type(item, &path, "a table ([[rules.overrides]])");
                continue;
            };
            self.unknown_fields(o, &path, OVERRIDE_FIELDS);
            let header = item.span();
            self.required(o, &header, &path, "key");
            let Some((key, key_span)) = self.string(o, &path, "key") else {
                continue;
            };
            if key.is_empty() {
                self.error(&key_span, format!("{path}.key"), "an override needs a key");
                continue;
            }
            if out.iter().any(|(k, ..)| k == key) {
                self.error(
                    &key_span,
                    format!("{path}.key"),
                    format!("{key:?} has an override already"),
                );
                continue;
            }
            let Some(base) = base else { continue };
            if let Some(rule) = self.override_rule(o, &path, &header, base) {
                out.push((key.to_owned(), KeyPattern::parse(key), rule));
            }
        }
        (self.errors.len() == before).then_some(out)
    }

    /// `base` with the override's `limit`, `period` and `burst`.
    fn override_rule(
        &mut self,
        o: &toml::de::DeTable<'_>,
        path: &str,
        header: &Range<usize>,
        base: &Rule,
    ) -> Option<Rule> {
        let mut spec = base.spec();
        let mut span_of = header.clone();
        if let Some((n, span)) = self.positive(o, path, "limit") {
            spec.limit = n;
            span_of = span;
        }
        if let Some((s, span)) = self.string(o, path, "period") {
            match tollgate::time::parse_duration(s) {
                Ok(d) => spec.period = d,
                Err(e) => {
                    self.error(&span, format!("{path}.period"), e);
                    return None;
                }
            }
        }
        if let Some(v) = o.get("burst") {
            if !base.algorithm().has_burst() {
                self.error(
                    &v.span(),
                    format!("{path}.burst"),
                    format!(
                        "burst applies to gcra and token_bucket only, not {}",
                        base.algorithm()
                    ),
                );
                return None;
            }
            spec.burst = Some(self.positive(o, path, "burst")?.0);
        } else if base.algorithm().has_burst() && o.contains_key("limit") {
            // A burst left out follows the override's limit, as a rule's
            // does, unless the rule set one of its own.
            spec.burst = (base.burst() != base.limit()).then(|| base.burst());
        }
        match spec.build() {
            Ok(rule) => Some(rule),
            Err(e) => {
                self.error(&span_of, format!("{path}.{}", e.field), e.message);
                None
            }
        }
    }
}
