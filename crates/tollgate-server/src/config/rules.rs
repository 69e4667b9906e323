//! Checking `[[rules]]`: each rule field by field, built with the
//! library's [`RuleSpec::build`] so its bounds apply, names unique across
//! the file, and the door-side fields (`key`, `on_error`, `cost`,
//! `estimate`).

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use tollgate::{Algorithm, OnError, RuleSpec};
use toml::de::DeValue;

use super::checker::{Checker, Value};
use super::model::RuleConfig;
use crate::key::KeyExtractor;
use tollgate_http::cost::{ResponseCost, UsageSource};
use tollgate_http::estimate::RequestEstimate;

const RULE_FIELDS: &[&str] = &[
    "name",
    "algorithm",
    "limit",
    "period",
    "lease",
    "burst",
    "key",
    "on_error",
    "cost",
    "estimate",
    "estimate_default",
    "overrides",
];

impl Checker<'_> {
    pub(super) fn rules(&mut self, value: Option<&Value<'_>>) -> Option<Vec<RuleConfig>> {
        let Some(value) = value else {
            if self.rules_optional {
                return Some(Vec::new());
            }
            self.error(
                &(0..0),
                "rules",
                "no rules; add at least one [[rules]] table",
            );
            return None;
        };
        let DeValue::Array(items) = value.get_ref() else {
            self.wrong_type(value, "rules", "an array of tables ([[rules]])");
            return None;
        };
        if items.is_empty() {
            if self.rules_optional {
                return Some(Vec::new());
            }
            self.error(
                &value.span(),
                "rules",
                "no rules; add at least one [[rules]] table",
            );
            return None;
        }
        let mut rules = Vec::with_capacity(items.len());
        let mut seen = HashMap::with_capacity(items.len());
        let mut all_ok = true;
        for (i, item) in items.iter().enumerate() {
            all_ok &= self.rule_entry(i, item, &mut seen, &mut rules);
        }
        all_ok.then_some(rules)
    }

    /// Checks `rules[i]`, `item`, and its name against the names `seen`
    /// (each with its index and line); pushes it onto `rules` if good.
    /// Whether it was.
    pub(super) fn rule_entry(
        &mut self,
        i: usize,
        item: &Value<'_>,
        seen: &mut HashMap<String, (usize, usize)>,
        rules: &mut Vec<RuleConfig>,
    ) -> bool {
        let rule = self.rule(i, item);
        let mut ok = true;
        // Duplicate names are checked on every rule whose name is a
        // valid string, even when another field of it is wrong.
        let name = item
            .get_ref()
            .as_table()
            .and_then(|t| t.get("name"))
            .and_then(|v| Some((v.get_ref().as_str()?, v.span())));
        if let Some((name, span)) = name {
            if let Some(&(first, line)) = seen.get(name) {
                self.error(
                    &span,
                    format!("rules[{i}].name"),
                    format!("rule name {name:?} is already used by rules[{first}] (line {line})"),
                );
                ok = false;
            } else {
                let line = self.line(item.span().start);
                seen.insert(name.to_owned(), (i, line));
            }
        }
        match rule {
            Some(r) => rules.push(r),
            None => ok = false,
        }
        ok
    }

    /// `key = text` parsed, shared with every earlier rule of the same
    /// text: a config of many rules keyed alike holds one extractor.
    fn key_extractor(&mut self, text: &str) -> Result<KeyExtractor, String> {
        if let Some(k) = self.keys.get(text) {
            return Ok(k.clone());
        }
        let k: KeyExtractor = text.parse()?;
        self.keys.insert(text.to_owned(), k.clone());
        Ok(k)
    }

    fn rule(&mut self, index: usize, item: &Value<'_>) -> Option<RuleConfig> {
        let path = format!("rules[{index}]");
        let header = item.span();
        let DeValue::Table(t) = item.get_ref() else {
            self.wrong_type(item, &path, "a table ([[rules]])");
            return None;
        };
        let before = self.errors.len();
        self.unknown_fields(t, &path, RULE_FIELDS);
        for key in ["name", "algorithm", "limit"] {
            self.required(t, &header, &path, key);
        }
        // A concurrency rule has a lease instead of a period.
        let concurrency = self
            .string(t, &path, "algorithm")
            .is_some_and(|(s, _)| s == Algorithm::Concurrency.as_str());
        if !concurrency {
            self.required(t, &header, &path, "period");
        }
        // Fields with a problem of their own; the library is not asked about
        // them again (each gets a stand-in value so the others are checked).
        let mut bad: Vec<&'static str> = Vec::new();
        let mut spans: HashMap<&'static str, Range<usize>> = HashMap::new();

        let name = self.string(t, &path, "name").map(|(s, span)| {
            spans.insert("name", span);
            s.to_owned()
        });
        if name.is_none() {
            bad.push("name");
        }
        let algorithm = match self.string(t, &path, "algorithm") {
            Some((s, span)) => match s.parse::<Algorithm>() {
                Ok(a) => Some(a),
                Err(e) => {
                    self.error(&span, format!("{path}.algorithm"), e.message);
                    None
                }
            },
            None => None,
        };
        let limit = self.positive(t, &path, "limit").map(|(n, span)| {
            spans.insert("limit", span);
            n
        });
        if limit.is_none() {
            bad.push("limit");
        }
        let duration = |this: &mut Self, field: &'static str| match this.string(t, &path, field) {
            Some((s, span)) => match tollgate::time::parse_duration(s) {
                Ok(d) => Some((d, span)),
                Err(e) => {
                    this.error(&span, format!("{path}.{field}"), e);
                    None
                }
            },
            None => None,
        };
        let period = if concurrency {
            if let Some(v) = t.get("period") {
                self.error(
                    &v.span(),
                    format!("{path}.period"),
                    "a concurrency rule has no period: its `lease` (default 30s) is how long \
                     an unreleased lease holds its slots",
                );
                bad.push("period");
            }
            match t.get("lease") {
                Some(_) => duration(self, "lease"),
                None => Some((tollgate::limits::DEFAULT_LEASE, header.clone())),
            }
        } else {
            if let Some(v) = t.get("lease") {
                self.error(
                    &v.span(),
                    format!("{path}.lease"),
                    "lease applies to concurrency rules only; this one limits a rate over its period",
                );
            }
            duration(self, "period")
        };
        let period = period.map(|(d, span)| {
            spans.insert("period", span);
            d
        });
        if period.is_none() {
            bad.push("period");
        }
        let burst_given = t.contains_key("burst");
        let burst = self.positive(t, &path, "burst").map(|(n, span)| {
            spans.insert("burst", span);
            n
        });
        if burst_given && burst.is_none() {
            bad.push("burst");
        }
        let key = match self.string(t, &path, "key") {
            Some((s, span)) => match self.key_extractor(s) {
                Ok(k) => Some(k),
                Err(e) => {
                    self.error(&span, format!("{path}.key"), e);
                    None
                }
            },
            None => None,
        };
        let on_error = match self.string(t, &path, "on_error") {
            Some((s, span)) => match s.parse::<OnError>() {
                Ok(p) => Some(p),
                Err(e) => {
                    self.error(&span, format!("{path}.on_error"), e);
                    None
                }
            },
            None => None,
        };

        let mut spec = RuleSpec {
            name: name.unwrap_or_else(|| "rule".to_owned()),
            // an unknown algorithm stands in as one that accepts the burst given
            algorithm: algorithm.unwrap_or(if burst_given {
                Algorithm::Gcra
            } else {
                Algorithm::FixedWindow
            }),
            limit: limit.unwrap_or(1),
            period: period.unwrap_or(Duration::from_secs(1)),
            burst,
        };
        let mut built = None;
        for _ in 0..8 {
            match spec.build() {
                Ok(rule) => {
                    built = Some(rule);
                    break;
                }
                Err(e) => {
                    if !bad.contains(&e.field) {
                        let span = spans.get(e.field).unwrap_or(&header).clone();
                        // A concurrency rule's period is its lease.
                        let field = match e.field {
                            "period" if concurrency => "lease",
                            other => other,
                        };
                        self.error(&span, format!("{path}.{field}"), e.message);
                        bad.push(e.field);
                    }
                    match e.field {
                        "name" => "rule".clone_into(&mut spec.name),
                        "limit" => spec.limit = 1,
                        "period" => spec.period = Duration::from_secs(1),
                        "burst" => spec.burst = None,
                        _ => break,
                    }
                }
            }
        }
        let cost = self.cost(t, &path, &header, concurrency, built.as_ref());
        let overrides = self.overrides(t, &path, built.as_ref());
        if self.errors.len() != before {
            return None;
        }
        Some(RuleConfig {
            rule: built?,
            key,
            on_error,
            cost,
            overrides: overrides?,
            line: self.line(header.start),
        })
    }

    /// `cost = "response_header:NAME"` (or a body source: `"openai"`,
    /// `"anthropic:output"`, `"response_json:POINTER"`, ...) with
    /// `estimate = N`: the rule is
    /// charged the usage the response reports (docs/config.md, "Cost from
    /// the response"). Both or neither; never on a `concurrency` rule; an
    /// estimate the rule can admit.
    fn cost(
        &mut self,
        t: &toml::de::DeTable<'_>,
        path: &str,
        header: &Range<usize>,
        concurrency: bool,
        rule: Option<&tollgate::Rule>,
    ) -> Option<ResponseCost> {
        let source = match self.string(t, path, "cost") {
            Some((s, span)) => match s.parse::<UsageSource>() {
                Ok(source) => Some((source, span)),
                Err(e) => {
                    self.error(&span, format!("{path}.cost"), e);
                    None
                }
            },
            None => None,
        };
        let estimate = self.estimate(t, path);
        if concurrency && let Some(v) = t.get("cost") {
            self.error(
                &v.span(),
                format!("{path}.cost"),
                "a concurrency rule holds one slot per request for its whole life; \
                 its cost is not read from the response",
            );
            return None;
        }
        match (t.get("cost"), t.get("estimate")) {
            (Some(_), None) => {
                self.error(
                    header,
                    format!("{path}.estimate"),
                    "missing required field: a cost read from the response needs the estimate \
                     reserved when the request arrives",
                );
                return None;
            }
            (None, Some(v)) => {
                self.error(
                    &v.span(),
                    format!("{path}.estimate"),
                    "estimate applies only with cost (a usage read from the response: \
                     \"response_header:NAME\", \"response_json:POINTER\", \"openai\", ...)",
                );
                return None;
            }
            _ => {}
        }
        let ((source, _), (estimate, from_request, span)) = (source?, estimate?);
        let field = if from_request.is_some() {
            "estimate_default"
        } else {
            "estimate"
        };
        if let Some(rule) = rule
            && estimate > rule.capacity()
        {
            self.error(
                &span,
                format!("{path}.{field}"),
                format!(
                    "estimate {estimate} is more than the rule admits at once ({}): \
                     no request could ever be admitted",
                    rule.capacity()
                ),
            );
            return None;
        }
        match ResponseCost::new(source, estimate) {
            Ok(cost) => Some(match from_request {
                Some(from) => cost.with_request_estimate(from),
                None => cost,
            }),
            Err(e) => {
                self.error(&span, format!("{path}.{field}"), e);
                None
            }
        }
    }

    /// An `estimate_default` where no estimate is read from the request
    /// is an error; says whether there was one.
    fn estimate_default_unread(&mut self, t: &toml::de::DeTable<'_>, path: &str) -> bool {
        let Some(v) = t.get("estimate_default") else {
            return false;
        };
        self.error(
            &v.span(),
            format!("{path}.estimate_default"),
            "estimate_default applies only with an estimate read from the request \
             (estimate = \"max_tokens\", \"prompt\" or \"prompt+max_tokens\")",
        );
        true
    }

    /// `estimate = N`, or `estimate = "max_tokens"` (or `"prompt"`,
    /// `"prompt+max_tokens"`: read from the request) with its required
    /// `estimate_default = N`: the units reserved (the default for one
    /// read from the request), what reads them, and the span of the
    /// number. A string estimate is clamped to the rule's capacity per
    /// request, so only the number is checked against it.
    fn estimate(
        &mut self,
        t: &toml::de::DeTable<'_>,
        path: &str,
    ) -> Option<(u64, Option<RequestEstimate>, Range<usize>)> {
        let Some(value) = t.get("estimate") else {
            self.estimate_default_unread(t, path);
            return None;
        };
        let Some(text) = value.get_ref().as_str() else {
            if self.estimate_default_unread(t, path) {
                return None;
            }
            let (n, span) = self.positive(t, path, "estimate")?;
            return Some((n, None, span));
        };
        let from = match text.parse::<RequestEstimate>() {
            Ok(from) => from,
            Err(e) => {
                self.error(&value.span(), format!("{path}.estimate"), e);
                return None;
            }
        };
        if !t.contains_key("estimate_default") {
            self.error(
                &value.span(),
                format!("{path}.estimate_default"),
                format!(
                    "missing required field: estimate = {text:?} needs estimate_default, the \
                     units reserved when the request does not say (no such field, no JSON body)"
                ),
            );
            return None;
        }
        let (n, span) = self.positive(t, path, "estimate_default")?;
        Some((n, Some(from), span))
    }
}
