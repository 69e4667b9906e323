//! RateLimit header fields (draft-ietf-httpapi-ratelimit-headers, as
//! docs/headers.md fixes them) and `Retry-After`.
//!
//! ```text
//! RateLimit-Policy: "per_user";q=100;w=1
//! RateLimit: "per_user";r=99;t=1
//! Retry-After: 1            (denials only: whole seconds, rounded up, at least 1)
//! ```
//!
//! Both fields are structured-field Lists with one member per rule: the
//! member is the rule's name as an sf-string, `q` its quota (the decision's
//! `limit`), `w` its window in seconds rounded up, `r` what remains and `t`
//! the seconds until reset, rounded up. Rule names (`[A-Za-z0-9_.-]+`) need
//! no escaping inside an sf-string.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate::{DecidedBy, Decision, MultiDecision, Rule};

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit` (legacy, opt-in).
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining` (legacy, opt-in).
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset` (legacy, opt-in): seconds until reset, rounded up.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// What a RateLimit member says of the limit behind it, besides its
/// decision: its name and its window. A [`Rule`] says its own; a check's
/// answer says the window of the limit that decided under the rule's name
/// (a per-key override may have its own): a [`Deciding`].
pub trait Policy {
    /// The member's name: the rule's.
    fn name(&self) -> &str;
    /// The period, written as `w` (whole seconds, rounded up).
    fn period(&self) -> Duration;
}

impl Policy for Rule {
    fn name(&self) -> &str {
        Rule::name(self)
    }

    fn period(&self) -> Duration {
        Rule::period(self)
    }
}

/// The limit that decided a pair, as its RateLimit members describe it:
/// the checked rule's name and the deciding limit's period
/// ([`tollgate::resilient::Verdict::decided_by`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deciding<'a> {
    /// The rule's name.
    pub name: &'a str,
    /// The deciding limit's period.
    pub period: Duration,
}

impl<'a> Deciding<'a> {
    /// Checked rule `rule` decided by `by` (its own period when the answer
    /// carries none, as a verdict built by hand may not).
    #[must_use]
    pub fn new(rule: &'a Rule, by: Option<&DecidedBy>) -> Self {
        Self {
            name: rule.name(),
            period: by.map_or_else(|| rule.period(), DecidedBy::period),
        }
    }
}

impl Policy for Deciding<'_> {
    fn name(&self) -> &str {
        self.name
    }

    fn period(&self) -> Duration {
        self.period
    }
}

/// Which headers to write besides the standard ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeaderOptions {
    /// Also write `X-RateLimit-Limit`, `-Remaining` and `-Reset` for the
    /// deciding rule.
    pub legacy: bool,
}

/// Whole seconds, rounded up.
#[must_use]
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The `Retry-After` value for a wait: whole seconds, rounded up, at least 1.
#[must_use]
pub fn retry_after_secs(wait: Duration) -> u64 {
    ceil_secs(wait).max(1)
}

/// A structured-field List with one member per `(name, a, b)`: the name
/// as an sf-string, then `;A=a;B=b` (`params` is `[";A=", ";B="]`). Names
/// must need no escaping (rule names, `[A-Za-z0-9_.-]+`, never do).
/// Written with `push_str` and `itoa`, not `write!`: this runs on every
/// answered check and proxied request, and the formatting machinery cost
/// more than the rest of the header work.
fn list<'a>(members: impl IntoIterator<Item = (&'a str, u64, u64)>, params: [&str; 2]) -> String {
    let mut out = String::with_capacity(48);
    for (name, a, b) in members {
        push_member(&mut out, name, params, a, b);
    }
    out
}

/// Appends the member `"name";A=a;B=b` to a list (see [`list`]).
fn push_member(out: &mut String, name: &str, params: [&str; 2], a: u64, b: u64) {
    if !out.is_empty() {
        out.push_str(", ");
    }
    out.push('"');
    out.push_str(name);
    out.push('"');
    push_param(out, params[0], a);
    push_param(out, params[1], b);
}

/// Appends `;NAME=n` (`param` is `";NAME="`).
fn push_param(out: &mut String, param: &str, n: u64) {
    out.push_str(param);
    out.push_str(itoa::Buffer::new().format(n));
}

/// A `RateLimit-Policy` value of members `(name, quota, window in
/// seconds)`: `"name";q=QUOTA;w=WINDOW, …`. For a door whose answers are
/// not tollgate decisions (the Envoy service's statuses); names as for
/// rules, needing no escaping.
#[must_use]
pub fn policy_list<'a>(members: impl IntoIterator<Item = (&'a str, u64, u64)>) -> String {
    list(members, [";q=", ";w="])
}

/// A `RateLimit` value of members `(name, remaining, seconds to reset)`:
/// `"name";r=REMAINING;t=RESET, …`; see [`policy_list`].
#[must_use]
pub fn ratelimit_list<'a>(members: impl IntoIterator<Item = (&'a str, u64, u64)>) -> String {
    list(members, [";r=", ";t="])
}

/// `RateLimit-Policy` for these rules, one list member each.
#[must_use]
pub fn policy_value<'a>(rules: impl IntoIterator<Item = (&'a dyn Policy, &'a Decision)>) -> String {
    let mut out = String::with_capacity(48);
    for (rule, d) in rules {
        let window = ceil_secs(rule.period());
        push_member(&mut out, rule.name(), [";q=", ";w="], d.limit, window);
    }
    out
}

/// `RateLimit` for these decisions, one list member each.
#[must_use]
pub fn ratelimit_value<'a>(
    rules: impl IntoIterator<Item = (&'a dyn Policy, &'a Decision)>,
) -> String {
    let mut out = String::with_capacity(48);
    for (rule, d) in rules {
        let reset = ceil_secs(d.reset_after);
        push_member(&mut out, rule.name(), [";r=", ";t="], d.remaining, reset);
    }
    out
}

fn value(text: String) -> HeaderValue {
    // Only ASCII digits, punctuation and rule names: always a valid value.
    // The bytes are taken over, not copied; through a boxed slice because
    // `Bytes` from a `String` with spare capacity allocates a second,
    // shared header (shrinking in place does not).
    HeaderValue::from_maybe_shared(Bytes::from(text.into_bytes().into_boxed_slice()))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Writes `RateLimit-Policy` and `RateLimit` for every (rule, decision),
/// `Retry-After` when `retry_after` is given (a denial that a wait can
/// cure), and the legacy fields for `deciding` when asked.
pub fn insert_headers(
    headers: &mut HeaderMap,
    rules: &[(&dyn Policy, &Decision)],
    retry_after: Option<Duration>,
    options: HeaderOptions,
) {
    if rules.is_empty() {
        return;
    }
    headers.insert(RATELIMIT_POLICY, value(policy_value(rules.iter().copied())));
    insert_rest(headers, rules, retry_after, options);
}

/// Writes `RateLimit-Policy` alone, for an answer nothing decided (the store
/// failed and the `allow` policy let it through): each rule's quota is
/// still known, what remains is not, so there is no `RateLimit`.
pub fn insert_policy(headers: &mut HeaderMap, rules: &[(&dyn Policy, &Decision)]) {
    if rules.is_empty() {
        return;
    }
    headers.insert(RATELIMIT_POLICY, value(policy_value(rules.iter().copied())));
}

/// Whether `name` is one of the two list fields (`RateLimit-Policy`,
/// `RateLimit`) that a second field line continues (RFC 9110 §5.3): a
/// response that has them gets a check's members appended, not replaced.
#[must_use]
pub fn is_list_field(name: &HeaderName) -> bool {
    name == RATELIMIT || name == RATELIMIT_POLICY
}

/// Adds a check's fields (`ours`) to a response's `headers`. The two list
/// fields, `RateLimit-Policy` and `RateLimit`, get our members after the
/// response's own (a second field line is the same list continued, RFC
/// 9110 §5.3): behind a second layer, or an application that sets its own,
/// every policy shows. Any other field the response already has is kept:
/// an inner layer's `Retry-After` and legacy fields on its 429 speak for
/// the rule that denied.
pub fn merge_into(headers: &mut HeaderMap, ours: HeaderMap) {
    let mut last: Option<HeaderName> = None;
    for (name, value) in ours {
        // `None`: another value of the field before it.
        if let Some(name) = name {
            last = Some(name);
        }
        let Some(name) = &last else { continue };
        if is_list_field(name) {
            headers.append(name.clone(), value);
        } else if !headers.contains_key(name) {
            headers.insert(name.clone(), value);
        }
    }
}

/// Each rule's `RateLimit-Policy` value for answers about that rule alone,
/// made once instead of on every answer.
///
/// The value depends only on the rule and the decision's `limit`. The first
/// answer for a rule fixes the cached value; an answer whose `limit`
/// differs (the `local` fallback shrinks it while the store is down) gets
/// a value made for it, as [`insert_headers`] would.
#[derive(Debug, Default)]
pub struct PolicyCache {
    /// Per rule: the limit and period the value was made for, and it;
    /// boxed, so a rule never answered holds 16 bytes, not 72.
    slots: Box<[OnceLock<Box<Made>>]>,
}

/// A cached `RateLimit-Policy` value: the limit and period it was made
/// for, and it.
type Made = (u64, Duration, HeaderValue);

impl PolicyCache {
    /// A cache for rules at positions `0..rules`.
    #[must_use]
    pub fn new(rules: usize) -> Self {
        Self {
            slots: (0..rules).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The `RateLimit-Policy` value for `rule` (at position `index`)
    /// deciding `d`.
    #[must_use]
    pub fn value(&self, index: usize, rule: &dyn Policy, d: &Decision) -> HeaderValue {
        let make = || value(policy_value([(rule, d)]));
        match self.slots.get(index) {
            Some(slot) => {
                let period = rule.period();
                let (limit, made_for, cached) =
                    &**slot.get_or_init(|| Box::new((d.limit, period, make())));
                // A per-key override may change the limit or the period.
                if *limit == d.limit && *made_for == period {
                    cached.clone()
                } else {
                    make()
                }
            }
            None => make(),
        }
    }

    /// What [`insert_headers`] writes for `rule` (at position `index`)
    /// alone, its policy value from the cache.
    pub fn insert_headers(
        &self,
        headers: &mut HeaderMap,
        index: usize,
        rule: &dyn Policy,
        d: &Decision,
        retry_after: Option<Duration>,
        options: HeaderOptions,
    ) {
        headers.insert(RATELIMIT_POLICY, self.value(index, rule, d));
        insert_rest(headers, &[(rule, d)], retry_after, options);
    }
}

/// What [`insert_headers`] writes after `RateLimit-Policy`.
fn insert_rest(
    headers: &mut HeaderMap,
    rules: &[(&dyn Policy, &Decision)],
    retry_after: Option<Duration>,
    options: HeaderOptions,
) {
    headers.insert(RATELIMIT, value(ratelimit_value(rules.iter().copied())));
    if let Some(wait) = retry_after {
        headers.insert(
            http::header::RETRY_AFTER,
            HeaderValue::from(retry_after_secs(wait)),
        );
    }
    if options.legacy {
        // The deciding pair speaks for all (docs/semantics.md, "Several
        // rules in one check": on a denial, the denying one with the
        // longest wait).
        let deciding = MultiDecision::deciding_index(rules.iter().map(|(_, d)| *d));
        if let Some((_, d)) = rules.get(deciding) {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(d.limit));
            headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(d.remaining));
            headers.insert(
                X_RATELIMIT_RESET,
                HeaderValue::from(ceil_secs(d.reset_after)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, RuleSpec};

    fn rule(name: &str, period_ms: u64) -> Rule {
        RuleSpec::new(
            name,
            Algorithm::FixedWindow,
            100,
            Duration::from_millis(period_ms),
        )
        .build()
        .expect("valid rule")
    }

    fn decision(remaining: u64, reset_ms: u64) -> Decision {
        Decision {
            allowed: remaining > 0,
            limit: 100,
            remaining,
            reset_after: Duration::from_millis(reset_ms),
            retry_after: None,
        }
    }

    #[test]
    fn seconds_round_up_and_retry_after_is_at_least_one() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_micros(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(2500)), 3);
    }

    #[test]
    fn one_member_per_rule() {
        let (a, b) = (rule("per_user", 1000), rule("per_ip", 90_000));
        let (da, db) = (decision(99, 950), decision(0, 60_001));
        let mut h = HeaderMap::new();
        insert_headers(
            &mut h,
            &[(&a, &da), (&b, &db)],
            Some(Duration::from_millis(10)),
            HeaderOptions { legacy: true },
        );
        assert_eq!(
            h[RATELIMIT_POLICY],
            "\"per_user\";q=100;w=1, \"per_ip\";q=100;w=90"
        );
        assert_eq!(h[RATELIMIT], "\"per_user\";r=99;t=1, \"per_ip\";r=0;t=61");
        assert_eq!(h[http::header::RETRY_AFTER], "1");
        assert_eq!(h[X_RATELIMIT_REMAINING], "0");
        assert_eq!(h[X_RATELIMIT_RESET], "61");
    }

    #[test]
    fn legacy_fields_follow_the_denying_pair_with_the_longest_wait() {
        let (a, b) = (rule("short", 10_000), rule("long", 1_000_000));
        let denied = |wait_ms: u64| Decision {
            retry_after: Some(Duration::from_millis(wait_ms)),
            ..decision(0, wait_ms)
        };
        let (da, db) = (denied(10_000), denied(1_000_000));
        let mut h = HeaderMap::new();
        let wait = Some(Duration::from_millis(1_000_000));
        insert_headers(
            &mut h,
            &[(&a, &da), (&b, &db)],
            wait,
            HeaderOptions { legacy: true },
        );
        assert_eq!(h[http::header::RETRY_AFTER], "1000");
        assert_eq!(
            h[X_RATELIMIT_RESET], "1000",
            "the rule the client waits for"
        );
        // A pair that admits does not speak for a denial, even with fewer
        // remaining than the denying pair reports.
        let admits = Decision {
            allowed: true,
            ..decision(0, 5)
        };
        let mut h = HeaderMap::new();
        let wait = Some(Duration::from_millis(10_000));
        insert_headers(
            &mut h,
            &[(&b, &admits), (&a, &da)],
            wait,
            HeaderOptions { legacy: true },
        );
        assert_eq!(h[X_RATELIMIT_RESET], "10");
    }

    #[test]
    fn the_policy_cache_writes_what_insert_headers_writes() {
        let (a, b) = (rule("per_user", 1000), rule("per_ip", 90_000));
        let cache = PolicyCache::new(2);
        let fresh = |r: &Rule, d: &Decision, retry| {
            let mut h = HeaderMap::new();
            insert_headers(&mut h, &[(r, d)], retry, HeaderOptions { legacy: true });
            h
        };
        let cached = |i, r: &Rule, d: &Decision, retry| {
            let mut h = HeaderMap::new();
            cache.insert_headers(&mut h, i, r, d, retry, HeaderOptions { legacy: true });
            h
        };
        let retry = Some(Duration::from_millis(1500));
        for (i, r) in [(0, &a), (1, &b)] {
            for d in [decision(99, 950), decision(0, 60_001), decision(42, 1)] {
                assert_eq!(cached(i, r, &d, None), fresh(r, &d, None));
                assert_eq!(cached(i, r, &d, retry), fresh(r, &d, retry));
            }
        }
        // A shrunk limit (the local fallback) gets its own value, and does
        // not replace the cached one.
        let shrunk = Decision {
            limit: 10,
            ..decision(5, 950)
        };
        assert_eq!(cache.value(0, &a, &shrunk), "\"per_user\";q=10;w=1");
        assert_eq!(
            cache.value(0, &a, &decision(1, 1)),
            "\"per_user\";q=100;w=1"
        );
        // A position past the cache's rules is still answered.
        assert_eq!(cached(7, &b, &shrunk, None), fresh(&b, &shrunk, None));
    }

    #[test]
    fn nothing_without_rules_and_no_legacy_unless_asked() {
        let mut h = HeaderMap::new();
        insert_headers(&mut h, &[], None, HeaderOptions::default());
        assert!(h.is_empty());
        let a = rule("r", 250);
        let d = decision(1, 250);
        insert_headers(&mut h, &[(&a, &d)], None, HeaderOptions::default());
        assert_eq!(h[RATELIMIT_POLICY], "\"r\";q=100;w=1");
        assert!(!h.contains_key(X_RATELIMIT_LIMIT));
        assert!(!h.contains_key(http::header::RETRY_AFTER));
    }
}
