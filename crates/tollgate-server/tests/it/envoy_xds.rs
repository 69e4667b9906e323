//! Envoy limits from xDS `RateLimitConfig` resources
//! ([`EnvoyLimits::from_xds`]) against the same configs as YAML files: Envoy
//! Gateway's rendered shapes (`tests/data/envoy_gateway/`, with their
//! top-level `name`) and one with every field the message carries give the
//! same domains, limits, rules, metadata and `validate` summary either
//! way; and a bad resource's errors name its domain and descriptor chain.
//!
//! Each YAML document becomes its message by a small reader here
//! ([`to_proto`]), written against the reference's YAML structs, not the
//! loader's code.

use std::collections::HashMap;
use std::path::PathBuf;

use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};
use tollgate_server::cmd::validate::envoy_summary;
use tollgate_server::doors::envoy::limits::{EnvoyLimits, Unit};
use tollgate_server::rls_conf::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitReplace, RateLimitUnit,
};
use yaml_rust2::{Yaml, YamlLoader};

const FIXTURES: &[&str] = &[
    "distinct-match.yaml",
    "distinct-remote-address-match.yaml",
    "global-shadow-mode.yaml",
    "header-and-cidr-matches.yaml",
    "multiple-shared-and-unshared.yaml",
    "all-fields.yaml",
];

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/envoy_gateway")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The documents of a fixture, as the YAML loader reads one per source.
fn documents(text: &str) -> Vec<String> {
    text.split("\n---\n").map(str::to_owned).collect()
}

fn string(y: &Yaml) -> String {
    match y {
        Yaml::String(s) | Yaml::Real(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Null | Yaml::BadValue => String::new(),
        other => panic!("expected a string, found {other:?}"),
    }
}

fn flag(y: &Yaml) -> bool {
    match y {
        Yaml::Boolean(b) => *b,
        Yaml::BadValue | Yaml::Null => false,
        other => panic!("expected a boolean, found {other:?}"),
    }
}

/// One YAML document as the `RateLimitConfig` Envoy Gateway would send.
fn to_proto(doc: &Yaml) -> RateLimitConfig {
    RateLimitConfig {
        name: string(&doc["name"]),
        domain: string(&doc["domain"]),
        descriptors: descriptors(&doc["descriptors"]),
    }
}

fn descriptors(y: &Yaml) -> Vec<RateLimitDescriptor> {
    let Some(items) = y.as_vec() else {
        return Vec::new();
    };
    items
        .iter()
        .map(|d| {
            // Not in the message: a fixture setting them cannot be sent.
            assert!(!flag(&d["value_to_metric"]) && !flag(&d["share_threshold"]));
            RateLimitDescriptor {
                key: string(&d["key"]),
                value: string(&d["value"]),
                rate_limit: policy(&d["rate_limit"]),
                descriptors: descriptors(&d["descriptors"]),
                shadow_mode: flag(&d["shadow_mode"]),
                detailed_metric: flag(&d["detailed_metric"]),
                quota_mode: flag(&d["quota_mode"]),
                metadata: d["metadata"].as_hash().map(|_| structure(&d["metadata"])),
            }
        })
        .collect()
}

fn policy(y: &Yaml) -> Option<RateLimitPolicy> {
    y.as_hash()?;
    let unit = string(&y["unit"]).to_ascii_uppercase();
    let unit = if unit.is_empty() {
        RateLimitUnit::Unknown
    } else {
        RateLimitUnit::from_str_name(&unit).expect("a unit")
    };
    Some(RateLimitPolicy {
        unit: unit.into(),
        requests_per_unit: y["requests_per_unit"]
            .as_i64()
            .map_or(0, |n| u32::try_from(n).expect("a u32")),
        unlimited: flag(&y["unlimited"]),
        name: string(&y["name"]),
        replaces: y["replaces"].as_vec().map_or_else(Vec::new, |r| {
            r.iter()
                .map(|r| RateLimitReplace {
                    name: string(&r["name"]),
                })
                .collect()
        }),
    })
}

fn structure(y: &Yaml) -> Struct {
    let fields = y
        .as_hash()
        .expect("a mapping")
        .iter()
        .map(|(k, v)| (string(k), value(v)))
        .collect();
    Struct { fields }
}

fn value(y: &Yaml) -> Value {
    let kind = match y {
        Yaml::Null => Kind::NullValue(0),
        Yaml::Boolean(b) => Kind::BoolValue(*b),
        Yaml::Integer(i) => Kind::NumberValue(*i as f64),
        Yaml::Real(r) => Kind::NumberValue(r.parse().expect("a real")),
        Yaml::String(s) => Kind::StringValue(s.clone()),
        Yaml::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(value).collect(),
        }),
        Yaml::Hash(_) => Kind::StructValue(structure(y)),
        other => panic!("unexpected metadata {other:?}"),
    };
    Value { kind: Some(kind) }
}

/// Everything a load gives but metadata, as comparable text: the
/// `validate` summary, then each limit with its fields, then each rule.
fn picture(limits: &EnvoyLimits) -> String {
    let mut out = envoy_summary(limits, "x");
    for limit in limits.limits() {
        out += &format!("{limit:?}\n");
    }
    for rule in limits.all_rules() {
        out += &format!("{rule:?}\n");
    }
    out
}

fn from_yaml(name: &str) -> EnvoyLimits {
    let sources: Vec<(String, String)> = documents(&fixture(name))
        .into_iter()
        .map(|doc| (name.to_owned(), doc))
        .collect();
    EnvoyLimits::parse(&sources, &[]).unwrap_or_else(|e| panic!("{name} as YAML:\n{e}"))
}

fn resources(name: &str) -> Vec<RateLimitConfig> {
    YamlLoader::load_from_str(&fixture(name))
        .expect("YAML")
        .iter()
        .map(to_proto)
        .collect()
}

#[test]
fn envoy_gateway_shapes_load_the_same_from_yaml_and_from_xds() {
    for name in FIXTURES {
        let yaml = from_yaml(name);
        let resources = resources(name);
        let xds = EnvoyLimits::from_xds(&resources, &[], false)
            .unwrap_or_else(|e| panic!("{name} over xDS:\n{e}"));
        assert_eq!(picture(&xds), picture(&yaml), "{name}");
        // Compared as values: a `Struct`'s map prints in no set order.
        let metadata = |l: &EnvoyLimits| -> Vec<Option<Struct>> {
            l.limits().map(|limit| l.metadata(limit).cloned()).collect()
        };
        assert_eq!(metadata(&xds), metadata(&yaml), "{name}");
        assert!(yaml.limits().count() > 0, "{name}");
    }
}

#[test]
fn every_field_the_message_carries_means_the_same() {
    let limits = EnvoyLimits::from_xds(&resources("all-fields.yaml"), &[], false).expect("valid");
    let by_path: HashMap<&str, _> = limits.limits().map(|l| (l.path.as_str(), l)).collect();
    let gold = by_path["all-fields.route_r1.tier_gold"];
    assert!(gold.quota_mode && gold.detailed_metric && !gold.shadow_mode);
    assert_eq!(gold.name, "weekly");
    assert_eq!(gold.unit, Some(Unit::Week));
    let metadata = limits.metadata(gold).expect("metadata");
    let field = |k: &str| metadata.fields[k].kind.clone();
    assert_eq!(field("flag"), Some(Kind::StringValue("true".into())));
    assert_eq!(field("count"), Some(Kind::NumberValue(3.0)));
    assert_eq!(field("weight"), Some(Kind::NumberValue(2.5)));
    assert_eq!(field("nothing"), Some(Kind::NullValue(0)));
    let silver = by_path["all-fields.route_r1.tier_silver"];
    assert!(silver.shadow_mode);
    assert_eq!(silver.replaces, ["weekly"]);
    assert_eq!(silver.unit, Some(Unit::Month));
    let bronze = by_path["all-fields.route_r1.tier_bronze"];
    assert_eq!((bronze.requests_per_unit, bronze.rule), (0, None));
    assert_eq!(bronze.unit, Some(Unit::Year));
    let any = by_path["all-fields.route_r1.tier"];
    assert!(any.unlimited && any.unit.is_none());
    assert_eq!(
        limits
            .find("all-fields", &[("route", "r1"), ("user", "ann")])
            .map(|l| l.path.as_str()),
        Some("all-fields.route_r1.user_*")
    );
}

fn descriptor(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.into(),
        value: value.into(),
        ..Default::default()
    }
}

fn limited(key: &str, value: &str, unit: i32, per_unit: u32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        rate_limit: Some(RateLimitPolicy {
            unit,
            requests_per_unit: per_unit,
            ..Default::default()
        }),
        ..descriptor(key, value)
    }
}

fn resource(name: &str, domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
    RateLimitConfig {
        name: name.into(),
        domain: domain.into(),
        descriptors,
    }
}

fn errors(resources: &[RateLimitConfig]) -> String {
    EnvoyLimits::from_xds(resources, &[], false)
        .expect_err("invalid")
        .to_string()
}

#[test]
fn a_bad_descriptor_is_named_by_domain_and_key_value_chain() {
    let second = RateLimitUnit::Second as i32;
    let mut route = descriptor("first-route", "first-route");
    route.descriptors = vec![
        limited("rule-0-match-0", "rule-0-match-0", second, 5),
        // No unit, and a unit number the enum does not have.
        limited("rule-1-match-0", "", 0, 5),
        limited("masked_remote_address", "10.0.0.0/8", 42, 5),
        // The same key and value twice at one level.
        limited("rule-0-match-0", "rule-0-match-0", second, 1),
    ];
    let got = errors(&[resource(
        "first-listener",
        "first-listener",
        vec![route, descriptor("", "v")],
    )]);
    assert_eq!(
        got,
        "domain first-listener: descriptor first-route=first-route > rule-1-match-0, \
         rate_limit.unit: missing required field: a rate limit needs a unit (second, minute, \
         hour, day, week, month or year) unless it is unlimited\n\
         domain first-listener: descriptor first-route=first-route > \
         masked_remote_address=10.0.0.0/8, rate_limit.unit: invalid rate limit unit '42'; \
         expected second, minute, hour, day, week, month or year\n\
         domain first-listener: descriptor first-route=first-route > \
         rule-0-match-0=rule-0-match-0: duplicate descriptor composite key \
         'first-listener.first-route_first-route.rule-0-match-0_rule-0-match-0'\n\
         domain first-listener: descriptor #1, key: descriptor has empty key"
    );
}

#[test]
fn a_resource_is_named_when_its_name_is_not_its_domain() {
    let mut unlimited = limited("k", "", RateLimitUnit::Week as i32, 0);
    if let Some(p) = &mut unlimited.rate_limit {
        p.unlimited = true;
        p.name = "self".into();
        p.replaces = vec![RateLimitReplace {
            name: "self".into(),
        }];
    }
    let got = errors(&[
        resource("r1", "d", vec![unlimited]),
        resource("", "", Vec::new()),
    ]);
    assert_eq!(
        got,
        "domain d (resource r1): descriptor k, rate_limit.unit: should not specify rate limit \
         unit when unlimited\n\
         domain d (resource r1): descriptor k, rate_limit.replaces[0].name: replaces should not \
         contain name of same descriptor ('self')\n\
         resource #1: domain: config file cannot have empty domain"
    );
}

#[test]
fn two_resources_with_one_domain_are_an_error_unless_merged() {
    let one = resource(
        "a",
        "shared",
        vec![limited("x", "", RateLimitUnit::Hour as i32, 1)],
    );
    let two = resource(
        "b",
        "shared",
        vec![limited("y", "", RateLimitUnit::Hour as i32, 2)],
    );
    let got = errors(&[one.clone(), two.clone()]);
    assert!(
        got.starts_with(
            "domain shared (resource b): domain: duplicate domain 'shared': also in domain \
             shared (resource a)"
        ),
        "{got}"
    );
    let merged = EnvoyLimits::from_xds(&[one, two], &[], true).expect("merged");
    let paths: Vec<&str> = merged.limits().map(|l| l.path.as_str()).collect();
    assert_eq!(paths, ["shared.x", "shared.y"]);
}
