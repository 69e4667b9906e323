//! Limits from xDS: a set of `ratelimit.config.ratelimit.v3.RateLimitConfig`
//! resources (one per domain, as Envoy Gateway sends them) loaded into the
//! same [`EnvoyLimits`] as the YAML files.
//!
//! The message is our own ([`crate::rls_conf`], generated from
//! `proto/ratelimit/config/ratelimit/v3/rls_conf.proto`, which has the
//! reference's names and field numbers, 7 `quota_mode` and 8 `metadata`
//! included); a test checks it against envoy-types' copy on the wire.
//!
//! As the reference does (`config_xds.go`), each resource is turned into
//! the tree a YAML file would give and checked by the very same loader, so
//! every rule and every default is the files' own: `shadow_mode`,
//! `quota_mode`, `detailed_metric`, `metadata`, `replaces`, `unlimited`,
//! all seven units. What YAML has and the message does not
//! (`value_to_metric`, `share_threshold`, tollgate's `algorithm`, `burst`,
//! `charge`) takes its default. A unit is given by its enum name
//! (`SECOND` … `YEAR`), which the loader reads case-insensitively;
//! `UNKNOWN` (0) is an absent unit, as the reference reads it.
//!
//! An error names the resource's domain and the descriptor by its chain of
//! `key=value` (`key` alone when it has no value), as a NACK must:
//! `domain first-listener: descriptor first-route=first-route >
//! rule-0-match-0, rate_limit.unit: …`. Two resources with one domain are
//! an error unless `merge_domains` (the reference's `MERGE_DOMAIN_CONFIG`).

use std::collections::HashMap;
use std::rc::Rc;

use crate::rls_conf::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit};
use envoy_types::pb::google::protobuf::{Struct, Value as ProtoValue, value::Kind};

use super::loader::Loader;
use super::tree::EnvoyLimits;
use super::yaml::{Value, Yaml};
use crate::config::file::ConfigErrors;

impl EnvoyLimits {
    /// No limits, and no config yet: what the Envoy service has under
    /// `[envoy.xds]` before the first response is applied; it answers
    /// every call with an error until then ([`EnvoyLimits::awaiting`]).
    #[must_use]
    pub fn awaiting_xds() -> Self {
        EnvoyLimits {
            awaiting: true,
            ..EnvoyLimits::default()
        }
    }

    /// Whether these are [`EnvoyLimits::awaiting_xds`]'s.
    #[must_use]
    pub fn awaiting(&self) -> bool {
        self.awaiting
    }

    /// Loads a whole xDS snapshot: every resource, through the checks
    /// [`EnvoyLimits::parse_with`] applies to a file; `taken` and
    /// `merge_domains` as there.
    ///
    /// # Errors
    /// Every problem in every resource, each naming its domain (and the
    /// resource's name when it differs) and descriptor chain, without a
    /// line.
    pub fn from_xds(
        resources: &[RateLimitConfig],
        taken: &[&str],
        merge_domains: bool,
    ) -> Result<Self, ConfigErrors> {
        let mut loader = Loader::new(taken, merge_domains);
        for (i, resource) in resources.iter().enumerate() {
            let label = label(resource, i);
            let start = loader.errors.len();
            let mut chains = HashMap::new();
            let root = config(resource, &mut chains);
            label.clone_into(&mut loader.file);
            loader.root(Some(&root));
            for error in &mut loader.errors[start..] {
                // Lines are the conversion's, not the sender's.
                error.line = None;
                if let Some(field) = &error.field {
                    error.field = Some(rename(field, &chains));
                }
            }
        }
        loader.finish()
    }
}

/// How errors name a resource: by domain, and by name when that differs.
fn label(resource: &RateLimitConfig, index: usize) -> String {
    let (name, domain) = (&resource.name, &resource.domain);
    if !domain.is_empty() && (name.is_empty() || name == domain) {
        format!("domain {domain}")
    } else if !domain.is_empty() {
        format!("domain {domain} (resource {name})")
    } else if !name.is_empty() {
        format!("resource {name}")
    } else {
        format!("resource #{index}")
    }
}

/// A field as the loader names it (`descriptors[0].descriptors[1].rate_limit.unit`)
/// with its descriptor part as a `key=value` chain.
fn rename(field: &str, chains: &HashMap<String, String>) -> String {
    // The longest descriptor path that prefixes the field: the field
    // itself, then each prefix ending before a `.`, looked up in turn (a
    // scan of every path per error made a domain's errors quadratic).
    let mut end = field.len();
    loop {
        let path = &field[..end];
        if let Some(chain) = chains.get(path) {
            return match field[end..].strip_prefix('.') {
                None => format!("descriptor {chain}"),
                Some(rest) => format!("descriptor {chain}, {rest}"),
            };
        }
        match path.rfind('.') {
            Some(dot) => end = dot,
            None => return field.to_owned(),
        }
    }
}

/// A node of the tree the loader reads; no line.
fn node(value: Value) -> Yaml {
    Yaml {
        line: 0,
        value: Rc::new(value),
    }
}

/// A string: quoted, so it is never read as a number, boolean or null.
fn text(s: &str) -> Yaml {
    node(Value::Scalar {
        text: s.to_owned(),
        plain: false,
    })
}

/// A plain scalar: numbers and booleans.
fn plain(s: String) -> Yaml {
    node(Value::Scalar {
        text: s,
        plain: true,
    })
}

fn entry(name: &str, value: Yaml) -> (Yaml, Yaml) {
    (text(name), value)
}

fn config(resource: &RateLimitConfig, chains: &mut HashMap<String, String>) -> Yaml {
    let mut fields = vec![entry("domain", text(&resource.domain))];
    if !resource.descriptors.is_empty() {
        let list = descriptors(&resource.descriptors, "descriptors", "", chains);
        fields.push(entry("descriptors", list));
    }
    node(Value::Map(fields))
}

/// A list of descriptors at `field`, under the chain `parent`; records each
/// one's chain in `chains`.
fn descriptors(
    list: &[RateLimitDescriptor],
    field: &str,
    parent: &str,
    chains: &mut HashMap<String, String>,
) -> Yaml {
    let mut items = Vec::with_capacity(list.len());
    for (i, d) in list.iter().enumerate() {
        let field = format!("{field}[{i}]");
        let step = match (d.key.is_empty(), d.value.is_empty()) {
            (true, _) => format!("#{i}"),
            (false, true) => d.key.clone(),
            (false, false) => format!("{}={}", d.key, d.value),
        };
        let chain = if parent.is_empty() {
            step
        } else {
            format!("{parent} > {step}")
        };
        let mut fields = vec![entry("key", text(&d.key))];
        if !d.value.is_empty() {
            fields.push(entry("value", text(&d.value)));
        }
        if let Some(policy) = &d.rate_limit {
            fields.push(entry("rate_limit", rate_limit(policy)));
        }
        for (name, on) in [
            ("shadow_mode", d.shadow_mode),
            ("detailed_metric", d.detailed_metric),
            ("quota_mode", d.quota_mode),
        ] {
            if on {
                fields.push(entry(name, plain("true".to_owned())));
            }
        }
        if let Some(metadata) = &d.metadata {
            fields.push(entry("metadata", structure(metadata)));
        }
        if !d.descriptors.is_empty() {
            let children = descriptors(
                &d.descriptors,
                &format!("{field}.descriptors"),
                &chain,
                chains,
            );
            fields.push(entry("descriptors", children));
        }
        chains.insert(field, chain);
        items.push(node(Value::Map(fields)));
    }
    node(Value::Seq(items))
}

fn rate_limit(policy: &RateLimitPolicy) -> Yaml {
    let mut fields = vec![entry(
        "requests_per_unit",
        plain(policy.requests_per_unit.to_string()),
    )];
    // UNKNOWN is no unit; a number outside the enum is shown as given.
    match RateLimitUnit::try_from(policy.unit) {
        Ok(RateLimitUnit::Unknown) => {}
        Ok(unit) => fields.push(entry("unit", text(unit.as_str_name()))),
        Err(_) => fields.push(entry("unit", text(&policy.unit.to_string()))),
    }
    if policy.unlimited {
        fields.push(entry("unlimited", plain("true".to_owned())));
    }
    if !policy.name.is_empty() {
        fields.push(entry("name", text(&policy.name)));
    }
    if !policy.replaces.is_empty() {
        let items = policy
            .replaces
            .iter()
            .map(|r| node(Value::Map(vec![entry("name", text(&r.name))])))
            .collect();
        fields.push(entry("replaces", node(Value::Seq(items))));
    }
    node(Value::Map(fields))
}

/// A `Struct` as the YAML mapping the loader turns back into it; keys
/// sorted, so the tree does not depend on the map's order.
fn structure(s: &Struct) -> Yaml {
    let mut keys: Vec<&String> = s.fields.keys().collect();
    keys.sort();
    let entries = keys
        .into_iter()
        .map(|k| entry(k, value(&s.fields[k])))
        .collect();
    node(Value::Map(entries))
}

fn value(v: &ProtoValue) -> Yaml {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => node(Value::Null),
        Some(Kind::BoolValue(b)) => plain(b.to_string()),
        // `{:?}` keeps every bit (`1e300`, `3.0`) and reads back as the
        // same number; a non-finite one (no JSON form) becomes its text.
        Some(Kind::NumberValue(n)) if n.is_finite() => plain(format!("{n:?}")),
        Some(Kind::NumberValue(n)) => text(&n.to_string()),
        Some(Kind::StringValue(s)) => text(s),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(l)) => node(Value::Seq(l.values.iter().map(value).collect())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_renamed_by_its_own_descriptor_not_a_prefix_of_its_index() {
        let chains = HashMap::from([
            ("descriptors[1]".to_owned(), "a=1".to_owned()),
            ("descriptors[10]".to_owned(), "b".to_owned()),
            (
                "descriptors[10].descriptors[0]".to_owned(),
                "b > c".to_owned(),
            ),
        ]);
        assert_eq!(rename("descriptors[10].key", &chains), "descriptor b, key");
        assert_eq!(
            rename("descriptors[10].descriptors[0].rate_limit.unit", &chains),
            "descriptor b > c, rate_limit.unit"
        );
        assert_eq!(rename("descriptors[1]", &chains), "descriptor a=1");
        assert_eq!(rename("domain", &chains), "domain");
    }

    #[test]
    fn metadata_numbers_keep_every_bit() {
        let numbers = [1e300, 3.0, -0.0, 0.1, 2f64.powi(60) + 2048.0, 5e-324];
        let fields = numbers
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let v = ProtoValue {
                    kind: Some(Kind::NumberValue(n)),
                };
                (format!("n{i}"), v)
            })
            .collect();
        let metadata = Struct { fields };
        let descriptor = RateLimitDescriptor {
            key: "k".into(),
            metadata: Some(metadata.clone()),
            rate_limit: Some(RateLimitPolicy {
                unit: RateLimitUnit::Second.into(),
                requests_per_unit: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        let resource = RateLimitConfig {
            name: String::new(),
            domain: "d".into(),
            descriptors: vec![descriptor],
        };
        let limits = EnvoyLimits::from_xds(&[resource], &[], false).expect("valid");
        let limit = limits.limits().next().expect("a limit");
        let got = limits.metadata(limit).expect("metadata");
        for (i, n) in numbers.iter().enumerate() {
            let Some(Kind::NumberValue(m)) = got.fields[&format!("n{i}")].kind else {
                panic!("n{i} is not a number: {got:?}");
            };
            assert_eq!(m.to_bits(), n.to_bits(), "{n}");
        }
    }
}
