//! The `[rlqs]` table: Envoy's rate limit quota service, served on the
//! gRPC listener when the table is present (docs/rlqs.md). It maps bucket
//! ids to rules and keys, and bounds what the streams may hold.

use std::collections::BTreeMap;
use std::time::Duration;

use toml::de::{DeTable, DeValue};

use tollgate::Algorithm;

use super::checker::{Checker, join};
use super::model::RuleConfig;

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
    /// `[rlqs]`; a domain's fixed `rule` must be one of `rules` (when they
    /// parsed) and not a concurrency rule.
    pub(super) fn rlqs(
        &mut self,
        t: &DeTable<'_>,
        rules: Option<&[RuleConfig]>,
    ) -> Option<RlqsConfig> {
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
                        if let Some((rule, span)) = self.string(d, &field, "rule") {
                            let found = rules.map(|r| r.iter().find(|r| r.rule.name() == rule));
                            match found {
                                Some(None) => self.error(
                                    &span,
                                    format!("{field}.rule"),
                                    format!("no [[rules]] entry is named {rule:?}"),
                                ),
                                Some(Some(r)) if r.rule.algorithm() == Algorithm::Concurrency => {
                                    self.error(
                                        &span,
                                        format!("{field}.rule"),
                                        format!(
                                            "{rule:?} is a concurrency rule: RLQS leases \
                                             count requests, not slots"
                                        ),
                                    );
                                }
                                _ => {}
                            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const RULE: &str =
        "[[rules]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n";

    fn errors(src: &str) -> Vec<String> {
        match Config::parse(src, "t.toml") {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn absent_is_off_and_empty_is_every_default() {
        assert_eq!(Config::parse(RULE, "t.toml").expect("ok").rlqs, None);
        let on = Config::parse(&format!("{RULE}[rlqs]\n"), "t.toml").expect("ok");
        assert_eq!(on.rlqs, Some(RlqsConfig::default()));
    }

    #[test]
    fn every_field_is_read() {
        let src = format!(
            "{RULE}[rlqs]\nrule_entry = \"limit\"\nkey_entries = [\"tenant\", \"env\"]\n\
             unmatched = \"deny\"\nreport_period = \"10s\"\nassignment_ttl = \"30s\"\n\
             abandon_after = \"2m\"\nmax_streams = 8\nmax_buckets_per_stream = 100\n\
             [rlqs.domains.checkout]\nrule = \"a\"\nkey_entries = [\"tenant\"]\n"
        );
        let rlqs = Config::parse(&src, "t.toml").expect("ok").rlqs.expect("on");
        assert_eq!(rlqs.rule_entry, "limit");
        assert_eq!(rlqs.key_entries, Some(vec!["tenant".into(), "env".into()]));
        assert_eq!(rlqs.unmatched, Unmatched::Deny);
        assert_eq!(rlqs.report_period, Duration::from_secs(10));
        assert_eq!(rlqs.assignment_ttl, Duration::from_secs(30));
        assert_eq!(rlqs.abandon_after, Duration::from_secs(120));
        assert_eq!((rlqs.max_streams, rlqs.max_buckets_per_stream), (8, 100));
        assert_eq!(
            rlqs.domains["checkout"],
            RlqsDomain {
                rule: "a".into(),
                key_entries: Some(vec!["tenant".into()])
            }
        );
    }

    #[test]
    fn each_bad_value_is_named_on_its_line() {
        for (bad, want) in [
            (
                "unmatched = \"maybe\"",
                "rlqs.unmatched: unmatched must be \"allow\" or \"deny\", got \"maybe\"",
            ),
            (
                "assignment_ttl = \"1500ms\"",
                "rlqs.assignment_ttl: assignment_ttl must be whole seconds",
            ),
            (
                "assignment_ttl = \"5s\"",
                "rlqs.assignment_ttl: assignment_ttl must be at least report_period + 1s (6s)",
            ),
            (
                "report_period = \"500ms\"",
                "rlqs.report_period: report_period must be at least 1s",
            ),
            (
                "abandon_after = \"1s\"",
                "rlqs.abandon_after: abandon_after must be at least report_period",
            ),
            (
                "max_streams = 0",
                "rlqs.max_streams: max_streams must be at least 1",
            ),
            (
                "max_streams = 100000",
                "rlqs.max_streams: max_streams is at most 65536, got 100000",
            ),
            (
                "key_entries = [\"a\", \"a\"]",
                "rlqs.key_entries[1]: \"a\" twice",
            ),
            (
                "key_entries = [\"\"]",
                "rlqs.key_entries[0]: empty entry name",
            ),
            (
                "rule_entry = \"\"",
                "rlqs.rule_entry: rule_entry must not be empty",
            ),
            (
                "ttl = \"15s\"",
                "rlqs.ttl: unknown field; expected one of rule_entry",
            ),
        ] {
            let got = errors(&format!("{RULE}[rlqs]\n{bad}\n"));
            assert_eq!(got.len(), 1, "{bad}: {got:?}");
            assert!(got[0].starts_with("t.toml:7: "), "{bad}: {got:?}");
            assert!(got[0].contains(want), "{bad}: {got:?}");
        }
        let got = errors(&format!("{RULE}[rlqs.domains.d]\nkey_entries = []\n"));
        assert!(
            got.iter()
                .any(|e| e.contains("rlqs.domains.d.rule: missing required field")),
            "{got:?}"
        );
        let got = errors(&format!("{RULE}[rlqs.domains.d]\nrule = \"b\"\n"));
        assert_eq!(
            got,
            ["t.toml:7: rlqs.domains.d.rule: no [[rules]] entry is named \"b\""]
        );
        let slots =
            "[[rules]]\nname = \"s\"\nalgorithm = \"concurrency\"\nlimit = 2\nlease = \"1m\"\n";
        let got = errors(&format!("{RULE}{slots}[rlqs.domains.d]\nrule = \"s\"\n"));
        assert!(got[0].contains("\"s\" is a concurrency rule"), "{got:?}");
        let got = errors(&format!("rlqs = 1\n{RULE}"));
        assert_eq!(
            got,
            ["t.toml:1: rlqs: expected a table ([rlqs]), found integer"]
        );
    }
}
