//! `metadata` on descriptors, returned to Envoy as response dynamic
//! metadata when `[envoy] response_dynamic_metadata` is on (off by default,
//! as the reference's `RESPONSE_DYNAMIC_METADATA`), against the real
//! binary over gRPC.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};

use crate::support::rls::{Rls, desc, toml};

const YAML: &str = "\
domain: meta
descriptors:
  - key: tier
    value: gold
    metadata:
      plan: gold
      owner: {team: payments, oncall: true}
      weight: 3
      tags: [a, b]
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: region
    metadata:
      owner: {region: eu}
      plan: not-this-one
    rate_limit: {unit: hour, requests_per_unit: 5}
";

fn get<'a>(s: &'a Struct, key: &str) -> &'a Kind {
    s.fields
        .get(key)
        .and_then(|v| v.kind.as_ref())
        .unwrap_or_else(|| panic!("no {key} in {s:?}"))
}

fn structure<'a>(s: &'a Struct, key: &str) -> &'a Struct {
    match get(s, key) {
        Kind::StructValue(s) => s,
        other => panic!("{key} is {other:?}"),
    }
}

fn string(s: &Struct, key: &str) -> String {
    match get(s, key) {
        Kind::StringValue(v) => v.clone(),
        other => panic!("{key} is {other:?}"),
    }
}

fn request() -> RateLimitRequest {
    let mut region = desc(&[("region", "eu")]);
    region.limit = Some(RateLimitOverride {
        requests_per_unit: 7,
        unit: 2,
    });
    RateLimitRequest {
        domain: "meta".to_owned(),
        descriptors: vec![desc(&[("tier", "gold")]), desc(&[("region", "eu")]), region],
        hits_addend: 2,
    }
}

#[test]
fn passed_limits_metadata_is_merged_into_the_answer() {
    let config = format!(
        "{}\n[envoy]\nresponse_dynamic_metadata = true\n",
        toml("memory")
    );
    let mut rls = Rls::start_with(&config, YAML, &[]);
    let mut req = request();
    req.hits_addend = 1;
    let r = rls.ok(req);
    let m = r.dynamic_metadata.expect("dynamic metadata");
    assert_eq!(string(&m, "domain"), "meta");
    assert_eq!(get(&m, "hitsAddend"), &Kind::NumberValue(1.0));
    let Kind::ListValue(list) = get(&m, "descriptors") else {
        panic!("descriptors")
    };
    assert_eq!(list.values.len(), 3);
    let Some(Kind::StructValue(third)) = &list.values[2].kind else {
        panic!("a struct")
    };
    assert_eq!(string(third, "limit"), "requests_per_unit:7 unit:MINUTE");
    let Kind::ListValue(entries) = get(third, "entries") else {
        panic!("entries")
    };
    assert_eq!(
        entries.values,
        vec![Value {
            kind: Some(Kind::StringValue("region=eu".to_owned()))
        }]
    );
    // both passed: gold's keys first, region's added where new, the two
    // owner mappings merged
    let passed = structure(&m, "metadata");
    assert_eq!(string(passed, "plan"), "gold");
    assert_eq!(get(passed, "weight"), &Kind::NumberValue(3.0));
    let owner = structure(passed, "owner");
    assert_eq!(string(owner, "team"), "payments");
    assert_eq!(string(owner, "region"), "eu");
    assert_eq!(get(owner, "oncall"), &Kind::BoolValue(true));

    // gold (1 an hour) is over now: only region's metadata passes
    let r = rls.ok(request());
    let m = r.dynamic_metadata.expect("dynamic metadata");
    let passed = structure(&m, "metadata");
    assert_eq!(string(passed, "plan"), "not-this-one");
    assert!(!structure(passed, "owner").fields.contains_key("team"));
}

#[test]
fn off_by_default() {
    let mut rls = Rls::start("memory", YAML);
    assert_eq!(rls.ok(request()).dynamic_metadata, None);
}

/// The deepest `metadata` a config may have (32 levels, a list at the
/// bottom included) still makes an answer a protobuf reader takes (one
/// past 100 levels is refused: tonic's, as Envoy's); deeper is a config
/// error (`limits/tests/errors.rs`).
#[test]
fn the_deepest_metadata_allowed_is_still_a_readable_answer() {
    for list in [false, true] {
        let mut yaml = String::from(
            "domain: deep\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n    metadata:\n",
        );
        for i in 0..31 {
            yaml.push_str(&" ".repeat(6 + i));
            yaml.push_str(if list && i == 30 { "a: [1]\n" } else { "a:\n" });
        }
        if !list {
            yaml.push_str(&" ".repeat(37));
            yaml.push_str("x: 1\n");
        }
        let config = format!(
            "{}\n[envoy]\nresponse_dynamic_metadata = true\n",
            toml("memory")
        );
        let mut rls = Rls::start_with(&config, &yaml, &[]);
        let r = rls.ok(RateLimitRequest {
            domain: "deep".to_owned(),
            descriptors: vec![desc(&[("a", "1")])],
            hits_addend: 0,
        });
        let m = r.dynamic_metadata.expect("dynamic metadata");
        let mut level = structure(&m, "metadata");
        for _ in 0..30 {
            level = structure(level, "a");
        }
        if list {
            assert!(matches!(get(level, "a"), Kind::ListValue(_)), "{level:?}");
        } else {
            assert_eq!(get(structure(level, "a"), "x"), &Kind::NumberValue(1.0));
        }
    }
}
