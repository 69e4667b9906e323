//! Our `rls_conf.proto` ([`tollgate_server::rls_conf`]) against envoy-types'
//! copy of the reference's message: a message using every field (every
//! unit, nested descriptors, metadata of every kind, `replaces`) encodes
//! to bytes the other side decodes to the same message, both ways.

use envoy_types::pb::google::protobuf::{ListValue, NullValue, Struct, Value, value::Kind};
use envoy_types::pb::ratelimit::config::ratelimit::v3 as theirs;
use prost::Message;
use tollgate_server::rls_conf as ours;

fn metadata() -> Struct {
    let kinds = [
        ("null", Kind::NullValue(NullValue::NullValue.into())),
        ("number", Kind::NumberValue(2.5)),
        ("string", Kind::StringValue("s".into())),
        ("bool", Kind::BoolValue(true)),
        (
            "list",
            Kind::ListValue(ListValue {
                values: vec![Value {
                    kind: Some(Kind::NumberValue(1.0)),
                }],
            }),
        ),
        (
            "struct",
            Kind::StructValue(Struct {
                fields: [(
                    "inner".to_owned(),
                    Value {
                        kind: Some(Kind::StringValue("x".into())),
                    },
                )]
                .into(),
            }),
        ),
    ];
    Struct {
        fields: kinds
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value { kind: Some(v) }))
            .collect(),
    }
}

/// Every field set, every unit used (the unit numbers are not in order:
/// WEEK is 7).
fn full() -> ours::RateLimitConfig {
    let units = [
        ours::RateLimitUnit::Unknown,
        ours::RateLimitUnit::Second,
        ours::RateLimitUnit::Minute,
        ours::RateLimitUnit::Hour,
        ours::RateLimitUnit::Day,
        ours::RateLimitUnit::Week,
        ours::RateLimitUnit::Month,
        ours::RateLimitUnit::Year,
    ];
    let leaves = units
        .iter()
        .enumerate()
        .map(|(i, unit)| ours::RateLimitDescriptor {
            key: format!("k{i}"),
            value: format!("v{i}"),
            rate_limit: Some(ours::RateLimitPolicy {
                unit: (*unit).into(),
                requests_per_unit: u32::try_from(i).expect("small") * 1000 + 7,
                unlimited: i == 0,
                name: format!("p{i}"),
                replaces: vec![ours::RateLimitReplace {
                    name: format!("r{i}"),
                }],
            }),
            descriptors: vec![],
            shadow_mode: i % 2 == 0,
            detailed_metric: i % 3 == 0,
            quota_mode: i % 2 == 1,
            metadata: Some(metadata()),
        })
        .collect();
    ours::RateLimitConfig {
        name: "name".into(),
        domain: "domain".into(),
        descriptors: vec![ours::RateLimitDescriptor {
            key: "route".into(),
            value: "route".into(),
            rate_limit: None,
            descriptors: leaves,
            shadow_mode: true,
            detailed_metric: true,
            quota_mode: true,
            metadata: Some(metadata()),
        }],
    }
}

#[test]
fn our_message_and_the_references_agree_on_the_wire_both_ways() {
    let mine = full();
    let bytes = mine.encode_to_vec();
    let decoded = theirs::RateLimitConfig::decode(bytes.as_slice()).expect("theirs decodes ours");
    // Field by field where a mistake would hide: the week unit is 7.
    let leaf = &decoded.descriptors[0].descriptors[5];
    let policy = leaf.rate_limit.as_ref().expect("policy");
    assert_eq!(policy.unit, theirs::RateLimitUnit::Week as i32);
    assert_eq!(policy.unit, 7);
    assert_eq!(policy.replaces[0].name, "r5");
    assert!(decoded.descriptors[0].quota_mode);
    assert_eq!(decoded.descriptors[0].metadata, Some(metadata()));
    // The whole message: theirs encodes back to bytes that decode to ours.
    let back = ours::RateLimitConfig::decode(decoded.encode_to_vec().as_slice())
        .expect("ours decodes theirs");
    assert_eq!(back, mine);
    // Every unit name is the same on both sides.
    for n in 0..8 {
        let a = ours::RateLimitUnit::try_from(n)
            .expect("ours")
            .as_str_name();
        let b = theirs::RateLimitUnit::try_from(n)
            .expect("theirs")
            .as_str_name();
        assert_eq!(a, b, "unit {n}");
    }
    assert!(ours::RateLimitUnit::try_from(8).is_err());
}

#[test]
fn the_type_url_is_the_references() {
    assert_eq!(
        tollgate_server::rls_conf::TYPE_URL,
        "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
    );
}
