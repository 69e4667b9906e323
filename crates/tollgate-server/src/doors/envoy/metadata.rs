//! The dynamic metadata an answer carries when `[envoy]
//! response_dynamic_metadata` is on (the reference's
//! `RESPONSE_DYNAMIC_METADATA`; docs/envoy.md, "Metadata"): the request's
//! domain, descriptors and `hits_addend`, and the `metadata` of every limit
//! that passed, merged.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};

use crate::doors::envoy::limits::{EnvoyLimits, Unit};
use crate::doors::envoy::plan::Plan;
use crate::doors::envoy::wire::{RateLimitDescriptor, RateLimitRequest};

/// The answer's dynamic metadata, in the reference's shape:
/// `{domain, descriptors: [{entries: ["k=v", …], limit?, hitsAddend?}],
/// hitsAddend?, metadata?}`. `metadata` merges, in descriptor order, the
/// `metadata` of each limit whose descriptor is not over (an unlimited one
/// has none): a key already there keeps its value, two mappings under one
/// key merge.
pub(crate) fn dynamic_metadata(
    req: &RateLimitRequest,
    limits: &EnvoyLimits,
    plans: &[Plan<'_>],
    statuses: &[DescriptorStatus],
) -> Struct {
    let mut out = Struct::default();
    let field = |out: &mut Struct, key: &str, kind: Kind| {
        out.fields
            .insert(key.to_owned(), Value { kind: Some(kind) });
    };
    field(
        &mut out,
        "domain",
        Kind::StringValue(String::from_utf8_lossy(&req.domain).into_owned()),
    );
    let descriptors = req.descriptors.iter().map(descriptor).collect();
    field(
        &mut out,
        "descriptors",
        Kind::ListValue(ListValue {
            values: descriptors,
        }),
    );
    if req.hits_addend != 0 {
        field(
            &mut out,
            "hitsAddend",
            Kind::NumberValue(f64::from(req.hits_addend)),
        );
    }
    let mut passed = Struct::default();
    for (plan, status) in plans.iter().zip(statuses) {
        if status.code == i32::from(Code::OverLimit) {
            continue;
        }
        if let Some(metadata) = plan.limit().and_then(|l| limits.metadata(l)) {
            merge(&mut passed, metadata);
        }
    }
    if !passed.fields.is_empty() {
        field(&mut out, "metadata", Kind::StructValue(passed));
    }
    out
}

/// One request descriptor as the reference writes it.
fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut out = Struct::default();
    let entries = d
        .entries
        .iter()
        .map(|e| Value {
            kind: Some(Kind::StringValue(format!(
                "{}={}",
                String::from_utf8_lossy(&e.key),
                String::from_utf8_lossy(&e.value)
            ))),
        })
        .collect();
    out.fields.insert(
        "entries".to_owned(),
        Value {
            kind: Some(Kind::ListValue(ListValue { values: entries })),
        },
    );
    if let Some(limit) = &d.limit {
        let unit = Unit::from_proto(limit.unit).map_or_else(
            || limit.unit.to_string(),
            |u| u.as_str().to_ascii_uppercase(),
        );
        out.fields.insert(
            "limit".to_owned(),
            Value {
                kind: Some(Kind::StringValue(format!(
                    "requests_per_unit:{} unit:{unit}",
                    limit.requests_per_unit
                ))),
            },
        );
    }
    if let Some(h) = &d.hits_addend {
        #[allow(clippy::cast_precision_loss)]
        let n = h.value as f64;
        out.fields.insert(
            "hitsAddend".to_owned(),
            Value {
                kind: Some(Kind::NumberValue(n)),
            },
        );
    }
    Value {
        kind: Some(Kind::StructValue(out)),
    }
}

/// `src` merged into `dest`: new keys added, two mappings under one key
/// merged, any other key already in `dest` kept.
fn merge(dest: &mut Struct, src: &Struct) {
    for (key, value) in &src.fields {
        match (dest.fields.get_mut(key), &value.kind) {
            (None, _) => {
                dest.fields.insert(key.clone(), value.clone());
            }
            (
                Some(Value {
                    kind: Some(Kind::StructValue(d)),
                }),
                Some(Kind::StructValue(s)),
            ) => merge(d, s),
            (Some(_), _) => {}
        }
    }
}
