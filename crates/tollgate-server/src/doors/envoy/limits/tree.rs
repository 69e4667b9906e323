//! The descriptor trees and their lookup: [`EnvoyLimits`], built by the
//! loader (`loader.rs` and the files beside it), and
//! [`EnvoyLimits::find`], the reference service's `GetLimit`.

use std::collections::{BTreeMap, HashMap};

use envoy_types::pb::google::protobuf::Struct;
use tollgate::Rule;

/// An envoyproxy/ratelimit time unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3600 seconds.
    Hour,
    /// 86400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// Its length in seconds, as the reference service divides time: 1, 60,
    /// 3600, 86400, 604800, 30*86400, 365*86400.
    #[must_use]
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// Its number in `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`:
    /// SECOND=1, MINUTE=2, HOUR=3, DAY=4, MONTH=5, YEAR=6, WEEK=7.
    #[must_use]
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit numbered `n` in the proto enum ([`Unit::proto`]).
    #[must_use]
    pub fn from_proto(n: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.proto() == n)
    }

    /// `"second"`, `"minute"`, ...: the name used in config files.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The unit named `s`, case-insensitively (the reference upper-cases
    /// it and looks it up in the proto enum).
    pub(super) fn parse(s: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.as_str().eq_ignore_ascii_case(s))
    }
}

/// One descriptor node's `rate_limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// Index into [`EnvoyLimits::rules`] of the tollgate rule that counts
    /// it; `None` when unlimited or `requests_per_unit == 0`.
    pub rule: Option<usize>,
    /// `rate_limit.name`, `""` when not given.
    pub name: String,
    /// The node's full dotted key, as the reference service names it:
    /// `domain.key_value.key2` (the key, plus `_value` when a value is
    /// given), e.g. `mongo_cps.database_users`.
    pub path: String,
    /// `rate_limit.requests_per_unit` (0 when not given: every request is
    /// over the limit).
    pub requests_per_unit: u32,
    /// `rate_limit.unit`; `None` iff unlimited.
    pub unit: Option<Unit>,
    /// `rate_limit.unlimited`.
    pub unlimited: bool,
    /// The node's `shadow_mode`: over-limit answers are reported as OK.
    pub shadow_mode: bool,
    /// The node's `quota_mode`: over its limit, it fails the request only
    /// when every quota limit of the request is over (docs/envoy.md,
    /// "Quota mode").
    pub quota_mode: bool,
    /// The node's `detailed_metric`: its metrics name the request's own
    /// entries (docs/envoy.md, "Metrics").
    pub detailed_metric: bool,
    /// Whether its metrics name the request's values
    /// ([`EnvoyLimits::metric_key`]): `detailed_metric`, or
    /// `value_to_metric` on its node or one above.
    pub runtime_metric: bool,
    /// Names of the limits this one replaces (`rate_limit.replaces`).
    pub replaces: Vec<String>,
    /// `rate_limit.charge` (tollgate's extension): a call with a cost
    /// above 0 records it in full, even past the limit, and is never
    /// refused; a cost of 0 still peeks (docs/envoy.md, "Charging usage").
    pub charge: bool,
    /// The node's `metadata`: index into [`EnvoyLimits::metadata`].
    pub metadata: Option<usize>,
}

/// One level of a descriptor tree: the nodes, by composite key.
#[derive(Debug, Clone, Default)]
pub(super) struct Level {
    pub(super) nodes: Vec<Node>,
    /// `key` or `key_value` -> index into `nodes`. Bytes, so a request's
    /// entries need not be UTF-8 to be looked up.
    pub(super) by_composite: HashMap<Box<[u8]>, usize>,
    /// Wildcard nodes (a value with a `*` anywhere), in config order.
    pub(super) wildcards: Vec<Wildcard>,
}

/// How a request entry found its node at a level.
#[derive(Debug, Clone, Copy)]
pub(super) enum Step<'l> {
    /// By its `key_value`.
    Value,
    /// By this wildcard's pattern.
    Wildcard(&'l Wildcard),
    /// By its key alone.
    Key,
}

impl Level {
    /// The node entry `key` (with `composite`, its `key_value`) finds here,
    /// as the reference's `GetLimit` looks: the exact `key_value`, else the
    /// first wildcard (config order) matching it, else the key alone.
    pub(super) fn step(&self, key: &[u8], composite: &[u8]) -> Option<(usize, Step<'_>)> {
        if let Some(&n) = self.by_composite.get(composite) {
            return Some((n, Step::Value));
        }
        if let Some(w) = self.wildcards.iter().find(|w| w.matches(composite)) {
            return Some((w.node, Step::Wildcard(w)));
        }
        self.by_composite.get(key).map(|&n| (n, Step::Key))
    }
}

/// A wildcard node: `key_value` split at each `*`, each `*` matching any
/// run of bytes, the empty one included (as the reference's
/// `wildcardMatch`).
#[derive(Debug, Clone)]
pub(super) struct Wildcard {
    pub(super) parts: Vec<Box<[u8]>>,
    /// Index into the level's `nodes`.
    pub(super) node: usize,
}

impl Wildcard {
    /// Whether `composite` (`key_value`) matches: it starts with the first
    /// part, ends with the last, and holds the middle ones in order
    /// between them.
    pub(super) fn matches(&self, composite: &[u8]) -> bool {
        let parts = &self.parts;
        let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
            return false;
        };
        if parts.len() == 1 {
            return **first == *composite;
        }
        let fixed: usize = parts.iter().map(|p| p.len()).sum();
        if composite.len() < fixed || !composite.starts_with(first) || !composite.ends_with(last) {
            return false;
        }
        let mut rest = &composite[first.len()..composite.len() - last.len()];
        for part in &parts[1..parts.len() - 1] {
            match find(rest, part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// Where `needle` first stands in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One descriptor node.
#[derive(Debug, Clone, Default)]
pub(super) struct Node {
    /// Index into `EnvoyLimits::limits`.
    pub(super) limit: Option<usize>,
    /// `share_threshold` on a wildcard node: its `key_value` pattern
    /// (`files_tmp*`); less the request's `key_`, it stands for every value
    /// it matches in the counter's key, so they share one counter.
    pub(super) share: Option<Box<[u8]>>,
    /// `value_to_metric`: the metrics name the request's value here.
    pub(super) value_to_metric: bool,
    pub(super) children: Level,
}

/// Every loaded domain: the descriptor trees, their limits and the tollgate
/// rules that count them.
#[derive(Debug, Clone, Default)]
pub struct EnvoyLimits {
    pub(super) domains: BTreeMap<String, Level>,
    pub(super) limits: Vec<Limit>,
    pub(super) rules: Vec<Rule>,
    pub(super) metadata: Vec<Struct>,
    /// Per domain, the rule (index into `rules`) counting overrides in
    /// each unit (in [`Unit::ALL`] order): `overrides.rs`.
    pub(super) override_rules: BTreeMap<String, [usize; 7]>,
    /// How many of `rules` the config's limits made (the rest count
    /// overrides).
    pub(super) configured: usize,
    /// No config yet: the limits of xDS before its first response
    /// (`xds.rs`).
    pub(super) awaiting: bool,
}

impl EnvoyLimits {
    /// The tollgate rules, one per node that has a limit with a unit and
    /// `requests_per_unit >= 1`, in file then document order. A rule is
    /// named `envoy.` + the node's [`Limit::path`] with every character
    /// outside `[A-Za-z0-9_.-]` replaced by `_`; one longer than
    /// [`tollgate::limits::MAX_NAME_LEN`] bytes keeps its start and end
    /// around `--` + 12 hex digits of its SHA-256 + `--`; then made unique
    /// (against the names given to `load` and each other) by a `.2`, `.3`,
    /// ... suffix.
    /// Not the rules counting limit overrides: see
    /// [`EnvoyLimits::all_rules`].
    #[must_use]
    pub fn rules(&self) -> &[Rule] {
        &self.rules[..self.configured]
    }

    /// [`EnvoyLimits::rules`], then the rules counting each domain's limit
    /// overrides ([`EnvoyLimits::override_rule`]): the rules a server
    /// enforces, in that order.
    #[must_use]
    pub fn all_rules(&self) -> &[Rule] {
        &self.rules
    }

    /// A limit's `metadata` ([`Limit::metadata`]).
    #[must_use]
    pub fn metadata(&self, limit: &Limit) -> Option<&Struct> {
        limit.metadata.and_then(|i| self.metadata.get(i))
    }

    /// Whether `domain` is loaded.
    #[must_use]
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The domains loaded, sorted.
    #[must_use]
    pub fn domains(&self) -> Vec<&str> {
        self.domains.keys().map(String::as_str).collect()
    }

    /// Every limit, in file then document order (so in rule order where
    /// they have one).
    pub fn limits(&self) -> impl Iterator<Item = &Limit> {
        self.limits.iter()
    }

    /// The limit that applies to one request descriptor, as the reference
    /// service's `GetLimit` finds it. `None` for an unknown domain.
    ///
    /// From the domain's top level, for each entry `(k, v)` in turn: the
    /// node `k_v`; else the first wildcard node at this level (config
    /// order) whose `k_` + value pattern matches `k_v` (each `*` any run
    /// of bytes, the empty one included); else the node with key `k` and
    /// no value. No node ends the walk. A node's limit
    /// is the answer only when its entry is the request's last; the walk
    /// goes on among the node's children, and ends at a node without any.
    /// So a request deeper than the config, or one that stops above a
    /// limited leaf, gets no limit.
    ///
    /// Keys and values are compared as bytes (as the reference service's Go
    /// strings are), so entries that are not UTF-8 (header values Envoy
    /// copied) are matched too: such a value never equals a configured
    /// value (those are UTF-8), but a wildcard prefix or a key-only node
    /// can match it; such a key matches nothing.
    #[must_use]
    pub fn find<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        domain: &str,
        entries: &[(K, V)],
    ) -> Option<&Limit> {
        self.walk(domain, entries, |_, _| {})
    }

    /// [`EnvoyLimits::find`], and in `entries` the value of each entry a
    /// `share_threshold` wildcard matched replaced by that wildcard's value
    /// pattern: the counter's key ([`super::store_key`]) of every value it
    /// matches is then the same, as the reference's cache key is.
    pub fn find_shared<'s: 'e, 'e>(
        &'s self,
        domain: &str,
        entries: &mut [(&'e [u8], &'e [u8])],
    ) -> Option<&'s Limit> {
        let mut shared: Vec<(usize, &'s [u8])> = Vec::new();
        let limit = self.walk(domain, entries, |i, pattern| shared.push((i, pattern)));
        for (i, pattern) in shared {
            entries[i].1 = pattern;
        }
        limit
    }

    /// The walk of [`EnvoyLimits::find`], telling `on_shared` each entry a
    /// `share_threshold` wildcard matched, with its value pattern.
    fn walk<'s, K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &'s self,
        domain: &str,
        entries: &[(K, V)],
        mut on_shared: impl FnMut(usize, &'s [u8]),
    ) -> Option<&'s Limit> {
        let mut level = self.domains.get(domain)?;
        let mut answer = None;
        let mut composite = Vec::new();
        for (i, (key, value)) in entries.iter().enumerate() {
            let key = key.as_ref();
            composite.clear();
            composite.extend_from_slice(key);
            composite.push(b'_');
            composite.extend_from_slice(value.as_ref());
            let Some((index, step)) = level.step(key, &composite) else {
                break;
            };
            let by_wildcard = matches!(step, Step::Wildcard(_));
            let Some(node) = level.nodes.get(index) else {
                break;
            };
            if by_wildcard && let Some(pattern) = &node.share {
                // The reference's TrimPrefix(pattern, key + "_").
                let value = pattern
                    .strip_prefix(key)
                    .and_then(|p| p.strip_prefix(b"_"))
                    .unwrap_or(pattern);
                on_shared(i, value);
            }
            if i + 1 == entries.len() {
                answer = node.limit.and_then(|l| self.limits.get(l));
            }
            if node.children.nodes.is_empty() {
                break;
            }
            level = &node.children;
        }
        answer
    }
}
