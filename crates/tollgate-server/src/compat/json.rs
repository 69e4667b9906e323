//! The reference's `POST /json`: a `RateLimitRequest` in protobuf's JSON
//! mapping ([`request`]: field names in lowerCamelCase or as in the
//! `.proto`, 64-bit integers as numbers or strings, enums by name or
//! number, an unknown field refused) and the `RateLimitResponse` back in
//! it ([`response`]: default values left out, enums by name, durations as
//! `"1.5s"`), as Go's `protojson` reads and writes them.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::{Struct, UInt64Value, value::Kind};
use serde_json::{Map, Value, json};

use crate::doors::envoy::wire::{Entry, RateLimitDescriptor, RateLimitRequest};

/// The unit names of `RateLimitResponse.RateLimit.Unit`, by number.
const UNITS: [&str; 8] = [
    "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK",
];
/// The names of `RateLimitResponse.Code`, by number.
const CODES: [&str; 3] = ["UNKNOWN", "OK", "OVER_LIMIT"];

/// A `RateLimitRequest` from its JSON.
///
/// # Errors
/// Not JSON, an unknown field, a value of the wrong type.
pub fn request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut req = RateLimitRequest::default();
    for (name, v) in object(&value, "RateLimitRequest")? {
        match name.as_str() {
            "domain" => req.domain = string(v, name)?.into_bytes(),
            "descriptors" => {
                for d in list(v, name)? {
                    req.descriptors.push(descriptor(d)?);
                }
            }
            "hitsAddend" | "hits_addend" => {
                req.hits_addend = u32::try_from(integer(v, name)?)
                    .map_err(|_| format!("{name}: out of range"))?;
            }
            other => return Err(format!("unknown field {other:?}")),
        }
    }
    Ok(req)
}

fn descriptor(value: &Value) -> Result<RateLimitDescriptor, String> {
    let mut d = RateLimitDescriptor::default();
    for (name, v) in object(value, "RateLimitDescriptor")? {
        match name.as_str() {
            "entries" => {
                for e in list(v, name)? {
                    let mut entry = Entry::default();
                    for (field, x) in object(e, "Entry")? {
                        match field.as_str() {
                            "key" => entry.key = string(x, field)?.into_bytes(),
                            "value" => entry.value = string(x, field)?.into_bytes(),
                            other => return Err(format!("unknown field {other:?}")),
                        }
                    }
                    d.entries.push(entry);
                }
            }
            "limit" => {
                let mut limit = RateLimitOverride::default();
                for (field, x) in object(v, "RateLimitOverride")? {
                    match field.as_str() {
                        "requestsPerUnit" | "requests_per_unit" => {
                            limit.requests_per_unit = u32::try_from(integer(x, field)?)
                                .map_err(|_| format!("{field}: out of range"))?;
                        }
                        "unit" => limit.unit = unit(x)?,
                        other => return Err(format!("unknown field {other:?}")),
                    }
                }
                d.limit = Some(limit);
            }
            "hitsAddend" | "hits_addend" => {
                d.hits_addend = Some(UInt64Value {
                    value: integer(v, name)?,
                });
            }
            "isNegativeHits" | "is_negative_hits" => {
                d.is_negative_hits = v.as_bool().ok_or(format!("{name}: not a boolean"))?;
            }
            other => return Err(format!("unknown field {other:?}")),
        }
    }
    Ok(d)
}

fn object<'v>(value: &'v Value, what: &str) -> Result<&'v Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{what}: not an object"))
}

fn list<'v>(value: &'v Value, what: &str) -> Result<&'v [Value], String> {
    match value {
        Value::Array(a) => Ok(a),
        Value::Null => Ok(&[]),
        _ => Err(format!("{what}: not a list")),
    }
}

fn string(value: &Value, what: &str) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        _ => Err(format!("{what}: not a string")),
    }
}

/// A non-negative integer, as a number or a decimal string.
fn integer(value: &Value, what: &str) -> Result<u64, String> {
    let bad = || format!("{what}: not a non-negative integer");
    match value {
        Value::Number(n) => n.as_u64().ok_or_else(bad),
        Value::String(s) => s.parse().map_err(|_| bad()),
        Value::Null => Ok(0),
        _ => Err(bad()),
    }
}

fn unit(value: &Value) -> Result<i32, String> {
    match value {
        Value::String(s) => UNITS
            .iter()
            .position(|u| u == s)
            .and_then(|i| i32::try_from(i).ok())
            .ok_or_else(|| format!("unit: {s:?} is not a unit")),
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| "unit: not a unit".to_owned()),
        _ => Err("unit: not a unit".to_owned()),
    }
}

fn name_of(table: &[&str], n: i32) -> Value {
    usize::try_from(n)
        .ok()
        .and_then(|i| table.get(i))
        .map_or_else(|| json!(n), |s| json!(s))
}

/// The response's JSON, default values left out.
#[must_use]
pub fn response(resp: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if resp.overall_code != 0 {
        out.insert("overallCode".into(), name_of(&CODES, resp.overall_code));
    }
    let statuses: Vec<Value> = resp
        .statuses
        .iter()
        .map(|s| {
            let mut o = Map::new();
            if s.code != 0 {
                o.insert("code".into(), name_of(&CODES, s.code));
            }
            if let Some(l) = &s.current_limit {
                let mut limit = Map::new();
                if !l.name.is_empty() {
                    limit.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    limit.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                if l.unit != 0 {
                    limit.insert("unit".into(), name_of(&UNITS, l.unit));
                }
                o.insert("currentLimit".into(), Value::Object(limit));
            }
            if s.limit_remaining != 0 {
                o.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                o.insert(
                    "durationUntilReset".into(),
                    json!(duration(d.seconds, d.nanos)),
                );
            }
            Value::Object(o)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    for (field, headers) in [
        ("responseHeadersToAdd", &resp.response_headers_to_add),
        ("requestHeadersToAdd", &resp.request_headers_to_add),
    ] {
        if !headers.is_empty() {
            let list = headers
                .iter()
                .map(|h| json!({"key": h.key, "value": h.value}))
                .collect();
            out.insert(field.into(), Value::Array(list));
        }
    }
    if let Some(m) = &resp.dynamic_metadata {
        out.insert("dynamicMetadata".into(), structure(m));
    }
    Value::Object(out)
}

/// `google.protobuf.Duration` as protojson writes it: `"3s"`, `"1.500s"`.
fn duration(seconds: i64, nanos: i32) -> String {
    if nanos == 0 {
        format!("{seconds}s")
    } else if nanos % 1_000_000 == 0 {
        format!("{seconds}.{:03}s", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!("{seconds}.{:06}s", nanos / 1_000)
    } else {
        format!("{seconds}.{nanos:09}s")
    }
}

fn structure(s: &Struct) -> Value {
    let mut keys: Vec<&String> = s.fields.keys().collect();
    keys.sort();
    let map = keys
        .into_iter()
        .map(|k| (k.clone(), kind(s.fields[k].kind.as_ref())))
        .collect();
    Value::Object(map)
}

fn kind(k: Option<&Kind>) -> Value {
    match k {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(l)) => {
            Value::Array(l.values.iter().map(|v| kind(v.kind.as_ref())).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
        DescriptorStatus, RateLimit,
    };

    #[test]
    fn requests_in_either_spelling() {
        let r = request(
            br#"{"domain":"d","hitsAddend":"2","descriptors":[{"entries":[{"key":"k","value":"v"}],
                "limit":{"requests_per_unit":5,"unit":"MINUTE"},"hits_addend":3}]}"#,
        )
        .expect("parses");
        assert_eq!(r.domain, b"d");
        assert_eq!(r.hits_addend, 2);
        let d = &r.descriptors[0];
        assert_eq!(d.pairs(), vec![(&b"k"[..], &b"v"[..])]);
        assert_eq!(
            d.limit.as_ref().map(|l| (l.requests_per_unit, l.unit)),
            Some((5, 2))
        );
        assert_eq!(d.hits_addend.as_ref().map(|h| h.value), Some(3));
        for bad in [
            &b"{"[..],
            br#"{"domian":"d"}"#,
            br#"{"descriptors":{}}"#,
            br#"{"hitsAddend":-1}"#,
        ] {
            assert!(request(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn responses_as_protojson_writes_them() {
        let resp = RateLimitResponse {
            overall_code: 2,
            statuses: vec![
                DescriptorStatus {
                    code: 2,
                    current_limit: Some(RateLimit {
                        name: String::new(),
                        requests_per_unit: 1,
                        unit: 2,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(envoy_types::pb::google::protobuf::Duration {
                        seconds: 42,
                        nanos: 0,
                    }),
                    ..DescriptorStatus::default()
                },
                DescriptorStatus {
                    code: 1,
                    ..DescriptorStatus::default()
                },
            ],
            ..RateLimitResponse::default()
        };
        assert_eq!(
            response(&resp).to_string(),
            r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":1,"unit":"MINUTE"},"durationUntilReset":"42s"},{"code":"OK"}]}"#
        );
        assert_eq!(duration(1, 500_000_000), "1.500s");
    }
}
