//! A bucket id, as Envoy sends it (a map of entries), turned into what
//! tollgate limits: the rule and key under the `[rlqs]` mapping
//! (docs/rlqs.md, "From bucket to rule"). Pure: no store, no stream.

use std::collections::HashMap;

use crate::config::RlqsConfig;

/// A bucket id's entries, sorted by name: the same bucket however Envoy
/// ordered its map (Envoy keys buckets by the message's hash, which does
/// not depend on the order either).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketName(Vec<(String, String)>);

impl BucketName {
    /// The sorted entries of `bucket`.
    #[must_use]
    pub fn new(bucket: &HashMap<String, String>) -> Self {
        let mut entries: Vec<(String, String)> =
            bucket.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        entries.sort();
        Self(entries)
    }

    /// The entries back as the map Envoy sent (to name the bucket in an
    /// answer).
    #[must_use]
    pub fn to_map(&self) -> HashMap<String, String> {
        self.0.iter().cloned().collect()
    }

    /// The entry `name`'s value.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// How many bytes the entries hold (for the stream's memory bound).
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// What a bucket is limited by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `rule`'s counter for `key`.
    Rule {
        /// The rule's name.
        rule: String,
        /// The key: the key entries, `k=v` joined by `,`, escaped.
        key: String,
    },
    /// No rule: the bucket gets `[rlqs] unmatched`. Says why, for the log.
    Unmatched(String),
}

/// The rule and key of bucket `name` of RLQS domain `domain` under
/// `config`: the domain's fixed rule, else the `rule_entry` entry's value;
/// the key from `key_entries` (every other entry by default), sorted. The
/// rule's existence is the caller's to check.
#[must_use]
pub fn target(config: &RlqsConfig, domain: &str, name: &BucketName) -> Target {
    let (rule, key_entries, rule_entry) = match config.domains.get(domain) {
        Some(d) => (d.rule.clone(), d.key_entries.as_deref(), None),
        None => {
            let Some(rule) = name.get(&config.rule_entry) else {
                return Target::Unmatched(format!(
                    "the bucket has no {:?} entry to name its rule",
                    config.rule_entry
                ));
            };
            (
                rule.to_owned(),
                config.key_entries.as_deref(),
                Some(config.rule_entry.as_str()),
            )
        }
    };
    let mut key = String::new();
    for (k, v) in &name.0 {
        let wanted = match key_entries {
            Some(list) => list.iter().any(|e| e == k),
            None => Some(k.as_str()) != rule_entry,
        };
        if !wanted {
            continue;
        }
        if !key.is_empty() {
            key.push(',');
        }
        escape_into(&mut key, k);
        key.push('=');
        escape_into(&mut key, v);
    }
    if key.len() > tollgate::limits::MAX_KEY_LEN {
        // Counted under its digest, as the rate limit service does: a
        // bucket must not escape its limit by a long header value. No
        // short key starts with `,` (escaped inside entries).
        key = tollgate_http::extract::digest_key(",sha256=", key.as_bytes());
    }
    Target::Rule { rule, key }
}

/// Writes `s` with `%`, `,` and `=` percent-encoded, so that no two
/// buckets share a key (`{a: "1,b=2"}` is not `{a: "1", b: "2"}`).
fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '%' => out.push_str("%25"),
            ',' => out.push_str("%2C"),
            '=' => out.push_str("%3D"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RlqsDomain;

    fn name(pairs: &[(&str, &str)]) -> BucketName {
        BucketName::new(
            &pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    fn rule(rule: &str, key: &str) -> Target {
        Target::Rule {
            rule: rule.to_owned(),
            key: key.to_owned(),
        }
    }

    #[test]
    fn the_default_mapping_names_the_rule_and_sorts_the_rest_into_the_key() {
        let c = RlqsConfig::default();
        let b = name(&[("tenant", "acme"), ("name", "api"), ("env", "prod")]);
        assert_eq!(target(&c, "d", &b), rule("api", "env=prod,tenant=acme"));
        assert_eq!(target(&c, "d", &name(&[("name", "api")])), rule("api", ""));
        assert!(matches!(
            target(&c, "d", &name(&[("tenant", "acme")])),
            Target::Unmatched(why) if why.contains("\"name\"")
        ));
    }

    #[test]
    fn separators_inside_entries_are_escaped_so_keys_never_collide() {
        let c = RlqsConfig::default();
        let one = target(&c, "d", &name(&[("name", "r"), ("a", "1,b=2")]));
        let two = target(&c, "d", &name(&[("name", "r"), ("a", "1"), ("b", "2")]));
        assert_eq!(one, rule("r", "a=1%2Cb%3D2"));
        assert_eq!(two, rule("r", "a=1,b=2"));
        assert_eq!(
            target(&c, "d", &name(&[("name", "r"), ("a%", "x")])),
            rule("r", "a%25=x")
        );
    }

    #[test]
    fn key_entries_and_a_domains_fixed_rule_choose_what_counts() {
        let mut c = RlqsConfig {
            key_entries: Some(vec!["tenant".to_owned()]),
            rule_entry: "limit".to_owned(),
            ..RlqsConfig::default()
        };
        let b = name(&[("limit", "api"), ("tenant", "acme"), ("path", "/x")]);
        assert_eq!(target(&c, "d", &b), rule("api", "tenant=acme"));
        c.domains.insert(
            "fixed".to_owned(),
            RlqsDomain {
                rule: "per-tenant".to_owned(),
                key_entries: None,
            },
        );
        assert_eq!(
            target(&c, "fixed", &b),
            rule("per-tenant", "limit=api,path=/x,tenant=acme")
        );
    }

    #[test]
    fn a_key_too_long_to_store_is_counted_under_its_digest() {
        let c = RlqsConfig::default();
        let long = "v".repeat(tollgate::limits::MAX_KEY_LEN);
        let Target::Rule { key, .. } = target(&c, "d", &name(&[("name", "r"), ("t", &long)]))
        else {
            panic!("unmatched")
        };
        assert!(key.starts_with(",sha256=") && key.len() == 8 + 64, "{key}");
        let Target::Rule { key: other, .. } =
            target(&c, "d", &name(&[("name", "r"), ("t", &format!("{long}w"))]))
        else {
            panic!("unmatched")
        };
        assert_ne!(key, other, "two long keys share a counter");
    }

    #[test]
    fn the_order_envoy_sent_does_not_matter() {
        let a = name(&[("x", "1"), ("y", "2")]);
        let b = name(&[("y", "2"), ("x", "1")]);
        assert_eq!(a, b);
        assert_eq!(a.to_map(), b.to_map());
    }
}
