//! The reference the check-body reader is held to: the `serde_json::Value`
//! reader the HTTP API used before it had one streaming reader. It builds
//! the whole JSON tree, then judges it; the streaming reader must give the
//! same answer, error text included, on every body (`tests.rs`).

use std::borrow::Cow;
use std::fmt;

use serde_json::{Map, Value};
use tollgate::limits::MAX_KEY_LEN;

use crate::doors::api::json_read::{CheckRequest, MAX_CHECKS, Pair};

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_cost(v: &Value, name: &str) -> Result<u64, String> {
    let Value::Number(n) = v else {
        return Err(format!(
            "{name}: expected a non-negative integer, found {}",
            type_name(v)
        ));
    };
    if let Some(c) = n.as_u64() {
        return Ok(c);
    }
    if n.is_i64() {
        return Err(format!("{name}: must not be negative, got {n}"));
    }
    // A float: a fraction, an exponent, or an integer past u64.
    let text = n.to_string();
    let f = n.as_f64().unwrap_or(f64::NAN);
    if f.is_finite() && f.fract() == 0.0 && f >= 1.8e19 {
        return Err(format!("{name}: too large; at most {}", u64::MAX));
    }
    if f < 0.0 || (f == 0.0 && f.is_sign_negative()) {
        // -0 too: JSON reads it as a float, and a sign has no place in a cost.
        return Err(format!(
            "{name}: must not be negative or signed, got {}",
            if f == 0.0 { "-0" } else { &text }
        ));
    }
    // The reader keeps the value, not its spelling: `1e2` reads as 100.0.
    Err(format!(
        "{name}: expected a whole number written without a fraction or exponent, read as {text}"
    ))
}

/// A `rule` or `key` field: a string, and for keys non-empty and at most
/// [`MAX_KEY_LEN`] bytes.
fn parse_str(
    obj: &Map<String, Value>,
    field: &str,
    path: &str,
) -> Result<Cow<'static, str>, String> {
    let name = if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    };
    match obj.get(field) {
        None => Err(format!("{name}: missing")),
        Some(Value::String(s)) if s.is_empty() => Err(format!("{name}: must not be empty")),
        Some(Value::String(s)) if field == "key" && s.len() > MAX_KEY_LEN => Err(format!(
            "{name}: {} bytes, longer than the limit of {MAX_KEY_LEN} bytes",
            s.len()
        )),
        Some(Value::String(s)) => Ok(Cow::Owned(s.clone())),
        Some(v) => Err(format!("{name}: expected a string, found {}", type_name(v))),
    }
}

fn unknown_fields(obj: &Map<String, Value>, path: &str, allowed: &[&str]) -> Result<(), String> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => {
            let name = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            Err(format!(
                "{name}: unknown field; expected {}",
                allowed.join(", ")
            ))
        }
        None => Ok(()),
    }
}

/// The `serde_json::Value` reader the API once used: slower, and it
/// names every problem.
pub(in crate::doors::api) fn value_reader(body: &[u8]) -> Result<CheckRequest<'static>, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("malformed JSON: {e}"))?;
    // `Value` keeps the last of a repeated field; a check must not be
    // decided on a value that another copy of the field contradicts.
    serde_json::from_slice::<UniqueFields>(body).map_err(|e| {
        let e = e.to_string();
        // serde_json appends " at line L column C"; the field says enough.
        e.split(" at line ").next().unwrap_or(&e).to_owned()
    })?;
    let Value::Object(obj) = value else {
        return Err(format!(
            "expected a JSON object such as {{\"rule\": \"per_user\", \"key\": \"alice\"}}, found {}",
            type_name(&value)
        ));
    };
    let cost = obj.get("cost").map_or(Ok(1), |c| parse_cost(c, "cost"))?;
    match obj.get("checks") {
        None => {
            unknown_fields(&obj, "", &["rule", "key", "cost"])?;
            let rule = parse_str(&obj, "rule", "")?;
            let key = parse_str(&obj, "key", "")?;
            Ok(CheckRequest {
                pairs: vec![Pair { rule, key, cost }],
                multi: false,
            })
        }
        Some(checks) => {
            if obj.contains_key("rule") || obj.contains_key("key") {
                return Err("give either \"rule\" and \"key\" or \"checks\", not both".to_owned());
            }
            unknown_fields(&obj, "", &["checks", "cost"])?;
            let Value::Array(items) = checks else {
                return Err(format!(
                    "checks: expected an array of {{\"rule\", \"key\"}} objects, found {}",
                    type_name(checks)
                ));
            };
            if items.is_empty() {
                return Err("checks: must not be empty".to_owned());
            }
            if items.len() > MAX_CHECKS {
                return Err(format!(
                    "checks: {} pairs, more than the limit of {MAX_CHECKS}",
                    items.len()
                ));
            }
            let mut pairs = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let path = format!("checks[{i}]");
                let Value::Object(o) = item else {
                    return Err(format!(
                        "{path}: expected an object {{\"rule\", \"key\"}}, found {}",
                        type_name(item)
                    ));
                };
                unknown_fields(o, &path, &["rule", "key", "cost"])?;
                pairs.push(Pair {
                    rule: parse_str(o, "rule", &path)?,
                    key: parse_str(o, "key", &path)?,
                    cost: match o.get("cost") {
                        Some(c) => parse_cost(c, &format!("{path}.cost"))?,
                        None => cost,
                    },
                });
            }
            Ok(CheckRequest { pairs, multi: true })
        }
    }
}

/// A JSON value read only to find an object with a field named twice (at
/// any depth): deserializing fails with `duplicate field "NAME"`.
struct UniqueFields;

impl<'de> serde::Deserialize<'de> for UniqueFields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueFieldsVisitor)
    }
}

struct UniqueFieldsVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueFieldsVisitor {
    type Value = UniqueFields;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueFields, E> {
        Ok(UniqueFields)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueFields, E> {
        Ok(UniqueFields)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueFields, E> {
        Ok(UniqueFields)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueFields, E> {
        Ok(UniqueFields)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueFields, E> {
        Ok(UniqueFields)
    }
    fn visit_unit<E>(self) -> Result<UniqueFields, E> {
        Ok(UniqueFields)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueFields, A::Error> {
        while seq.next_element::<UniqueFields>()?.is_some() {}
        Ok(UniqueFields)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueFields, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(name) = map.next_key::<Cow<'de, str>>()? {
            if seen.contains(&name) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate field {name:?}"
                )));
            }
            seen.insert(name);
            map.next_value::<UniqueFields>()?;
        }
        Ok(UniqueFields)
    }
}
