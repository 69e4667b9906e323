//! The `[rlqs]` table: Envoy's rate limit quota service, served on the
//! gRPC listener when the table is present (docs/rlqs.md). It maps bucket
//! ids to rules and keys, and bounds what the streams may hold.

use std::collections::BTreeMap;
use std::time::Duration;

use toml::de::{DeTable, DeValue};

use super::checker::{Checker, join};

const RLQS_FIELDS: &[&str] = &[
    "rule_entry",
    "key_entries",
    "unmatched",
    "report_period",
    "assignment_ttl",
    "abandon_after",
    "max_streams",
    "max_buckets_per_stream",
    "domains",
];
const DOMAIN_FIELDS: &[&str] = &["rule", "key_entries"];

/// Most streams `max_streams` may allow: each holds a task and its buckets.
pub(super) const MAX_RLQS_STREAMS: u64 = 65_536;
/// Most buckets `max_buckets_per_stream` may allow.
pub(super) const MAX_RLQS_BUCKETS: u64 = 1_000_000;

/// What a bucket whose rule is unknown is assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unmatched {
    /// `ALLOW_ALL` (the default).
    #[default]
    Allow,
    /// `DENY_ALL`.
    Deny,
}

/// How one RLQS domain's buckets map to a rule: from an entry of the
/// bucket id, or one rule for all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlqsDomain {
    /// `rule`: every bucket of the domain is of this rule.
    pub rule: String,
    /// `key_entries`: the entries that make the key (`None`: all of them).
    pub key_entries: Option<Vec<String>>,
}

/// `[rlqs]` (docs/rlqs.md, "Config").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlqsConfig {
    /// `rule_entry`: the bucket id's entry that names the rule.
    pub rule_entry: String,
    /// `key_entries`: the entries that make the key (`None`: every entry
    /// but `rule_entry`).
    pub key_entries: Option<Vec<String>>,
    /// `unmatched`: what a bucket of no known rule is assigned.
    pub unmatched: Unmatched,
    /// `report_period`: how often Envoy reports (5 s in Envoy 1.40,
    /// whatever its filter config says).
    pub report_period: Duration,
    /// `assignment_ttl`: every assignment's time to live, whole seconds.
    pub assignment_ttl: Duration,
    /// `abandon_after`: a bucket reported idle this long is abandoned.
    pub abandon_after: Duration,
    /// `max_streams`: open streams at once; more are refused.
    pub max_streams: u64,
    /// `max_buckets_per_stream`: a stream reporting more is cut.
    pub max_buckets_per_stream: u64,
    /// `[rlqs.domains.NAME]`: a fixed rule per RLQS domain.
    pub domains: BTreeMap<String, RlqsDomain>,
}

impl Default for RlqsConfig {
    fn default() -> Self {
        Self {
            rule_entry: "name".to_owned(),
            key_entries: None,
            unmatched: Unmatched::Allow,
            report_period: Duration::from_secs(5),
            assignment_ttl: Duration::from_secs(15),
            abandon_after: Duration::from_secs(60),
            max_streams: 1024,
            max_buckets_per_stream: 10_000,
            domains: BTreeMap::new(),
        }
    }
}

impl Checker<'_> {
    pub(super) fn rlqs(&mut self, t: &DeTable<'_>) -> Option<RlqsConfig> {
        let path = "rlqs";
        let before = self.errors.len();
        self.unknown_fields(t, path, RLQS_FIELDS);
        let mut rlqs = RlqsConfig::default();
        if let Some((s, span)) = self.string(t, path, "rule_entry") {
            if s.is_empty() {
                self.error(&span, "rlqs.rule_entry", "rule_entry must not be empty");
            }
            rlqs.rule_entry = s.to_owned();
        }
        rlqs.key_entries = self.entry_names(t, path);
        if let Some((s, span)) = self.string(t, path, "unmatched") {
            match s {
                "allow" => rlqs.unmatched = Unmatched::Allow,
                "deny" => rlqs.unmatched = Unmatched::Deny,
                _ => self.error(
                    &span,
                    "rlqs.unmatched",
                    format!("unmatched must be \"allow\" or \"deny\", got {s:?}"),
                ),
            }
        }
        for (key, slot) in [
            ("report_period", &mut rlqs.report_period),
            ("assignment_ttl", &mut rlqs.assignment_ttl),
            ("abandon_after", &mut rlqs.abandon_after),
        ] {
            if let Some(d) = self.duration(t, path, key) {
                *slot = d;
            }
        }
        self.rlqs_times(t, &rlqs);
        for (key, most, slot) in [
            ("max_streams", MAX_RLQS_STREAMS, &mut rlqs.max_streams),
            (
                "max_buckets_per_stream",
                MAX_RLQS_BUCKETS,
                &mut rlqs.max_buckets_per_stream,
            ),
        ] {
            if let Some((n, span)) = self.positive(t, path, key) {
                if n > most {
                    self.error(
                        &span,
                        join(path, key),
                        format!("{key} is at most {most}, got {n}"),
                    );
                }
                *slot = n;
            }
        }
        if let Some(value) = t.get("domains") {
            match value.get_ref() {
                DeValue::Table(domains) => {
                    for (name, d) in domains {
                        let field = format!("rlqs.domains.{}", name.get_ref());
                        let DeValue::Table(d) = d.get_ref() else {
                            self.wrong_type(d, &field, "a table ([rlqs.domains.NAME])");
                            continue;
                        };
                        self.unknown_fields(d, &field, DOMAIN_FIELDS);
                        self.required(d, &name.span(), &field, "rule");
                        let key_entries = self.entry_names(d, &field);
                        if let Some((rule, _)) = self.string(d, &field, "rule") {
                            rlqs.domains.insert(
                                name.get_ref().to_string(),
                                RlqsDomain {
                                    rule: rule.to_owned(),
                                    key_entries,
                                },
                            );
                        }
                    }
                }
                _ => self.wrong_type(value, "rlqs.domains", "a table ([rlqs.domains.NAME])"),
            }
        }
        (self.errors.len() == before).then_some(rlqs)
    }

    /// Envoy reads whole seconds of a time to live, and a report period
    /// missed must not let an assignment lapse.
    fn rlqs_times(&mut self, t: &DeTable<'_>, rlqs: &RlqsConfig) {
        let ttl = rlqs.assignment_ttl;
        let span = |key: &str| t.get(key).map(toml::Spanned::span).unwrap_or_default();
        if ttl.subsec_nanos() != 0 {
            self.error(
                &span("assignment_ttl"),
                "rlqs.assignment_ttl",
                "assignment_ttl must be whole seconds: Envoy reads only the seconds",
            );
        } else if ttl < rlqs.report_period + Duration::from_secs(1) {
            self.error(
                &span("assignment_ttl"),
                "rlqs.assignment_ttl",
                format!(
                    "assignment_ttl must be at least report_period + 1s ({}), or every \
                     assignment lapses before the next report renews it",
                    super::format_duration(rlqs.report_period + Duration::from_secs(1))
                ),
            );
        }
        if rlqs.report_period < Duration::from_secs(1) {
            self.error(
                &span("report_period"),
                "rlqs.report_period",
                "report_period must be at least 1s: Envoy reports in whole seconds",
            );
        }
        if rlqs.abandon_after < rlqs.report_period {
            self.error(
                &span("abandon_after"),
                "rlqs.abandon_after",
                "abandon_after must be at least report_period: a bucket is idle only \
                 after a report says so",
            );
        }
    }

    /// `key_entries` of `t`: an array of non-empty, distinct strings.
    fn entry_names(&mut self, t: &DeTable<'_>, path: &str) -> Option<Vec<String>> {
        let value = t.get("key_entries")?;
        let field = join(path, "key_entries");
        let DeValue::Array(items) = value.get_ref() else {
            self.wrong_type(value, &field, "an array of strings");
            return None;
        };
        let mut names: Vec<String> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item.get_ref().as_str() {
                Some("") => self.error(&item.span(), format!("{field}[{i}]"), "empty entry name"),
                Some(s) if names.iter().any(|n| n == s) => {
                    self.error(
                        &item.span(),
                        format!("{field}[{i}]"),
                        format!("{s:?} twice"),
                    );
                }
                Some(s) => names.push(s.to_owned()),
                None => self.wrong_type(item, &format!("{field}[{i}]"), "a string"),
            }
        }
        Some(names)
    }
}
