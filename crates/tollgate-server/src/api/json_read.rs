//! Reading a `POST /v1/check` body into a [`CheckRequest`]: three
//! readers, from the plainest byte scan to `serde_json::Value`, which agree
//! on every body the faster ones take (see the module doc of `api`).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use tollgate::MAX_KEY_LEN;

/// The most (rule, key) pairs in one multi-rule check.
pub const MAX_CHECKS: usize = 64;

/// A parsed `POST /v1/check` body, its strings borrowed from the body
/// where they hold no escapes.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct CheckRequest<'a> {
    /// (rule, key) pairs.
    pub(super) pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub(super) cost: u64,
    /// The `checks` form (the answer lists every pair).
    pub(super) multi: bool,
}

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

fn parse_cost(v: &Value) -> Result<u64, String> {
    let Value::Number(n) = v else {
        return Err(format!(
            "cost: expected a non-negative integer, found {}",
            type_name(v)
        ));
    };
    if let Some(c) = n.as_u64() {
        return Ok(c);
    }
    if n.is_i64() {
        return Err(format!("cost: must not be negative, got {n}"));
    }
    // A float: a fraction, an exponent, or an integer past u64.
    let text = n.to_string();
    let f = n.as_f64().unwrap_or(f64::NAN);
    if f.is_finite() && f.fract() == 0.0 && f >= 1.8e19 {
        return Err(format!("cost: too large; at most {}", u64::MAX));
    }
    if f < 0.0 || (f == 0.0 && f.is_sign_negative()) {
        // -0 too: JSON reads it as a float, and a sign has no place in a cost.
        return Err(format!(
            "cost: must not be negative or signed, got {}",
            if f == 0.0 { "-0" } else { &text }
        ));
    }
    // The reader keeps the value, not its spelling: `1e2` reads as 100.0.
    Err(format!(
        "cost: expected a whole number written without a fraction or exponent, read as {text}"
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

/// The `serde_json::Value` reader: slower, and names every problem.
pub(super) fn parse_check_slow(body: &[u8]) -> Result<CheckRequest<'static>, String> {
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
    let cost = obj.get("cost").map_or(Ok(1), parse_cost)?;
    match obj.get("checks") {
        None => {
            unknown_fields(&obj, "", &["rule", "key", "cost"])?;
            let rule = parse_str(&obj, "rule", "")?;
            let key = parse_str(&obj, "key", "")?;
            Ok(CheckRequest {
                pairs: vec![(rule, key)],
                cost,
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
                unknown_fields(o, &path, &["rule", "key"])?;
                pairs.push((parse_str(o, "rule", &path)?, parse_str(o, "key", &path)?));
            }
            Ok(CheckRequest {
                pairs,
                cost,
                multi: true,
            })
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

/// Reads a check body: the plain or the fast reader when one takes the
/// body as it is, else the `Value` reader (which also names the problem).
#[inline]
pub(super) fn parse_check(body: &[u8]) -> Result<CheckRequest<'_>, String> {
    if let Some(parsed) = parse_check_plain(body) {
        return Ok(parsed);
    }
    match parse_check_fast(body) {
        Some(parsed) => Ok(parsed),
        None => parse_check_slow(body),
    }
}

/// The plainest reader, for the body clients send most: one object of
/// `"rule"`, `"key"` and optionally `"cost"`, each once, in any order, with
/// no whitespace, strings without escapes or control characters, and the
/// cost as plain digits. A byte scan, a fraction of serde's cost; `None`
/// for anything else, which the other readers take.
pub(super) fn parse_check_plain(body: &[u8]) -> Option<CheckRequest<'_>> {
    let mut rest = body.strip_prefix(b"{")?;
    let (mut rule, mut key, mut cost) = (None, None, None);
    loop {
        rest = if let Some(r) = rest.strip_prefix(b"\"rule\":") {
            let (v, r) = plain_str(r)?;
            if rule.replace(v).is_some() {
                return None;
            }
            r
        } else if let Some(r) = rest.strip_prefix(b"\"key\":") {
            let (v, r) = plain_str(r)?;
            if key.replace(v).is_some() {
                return None;
            }
            r
        } else if let Some(r) = rest.strip_prefix(b"\"cost\":") {
            let (v, r) = plain_u64(r)?;
            if cost.replace(v).is_some() {
                return None;
            }
            r
        } else {
            return None;
        };
        match rest {
            [b',', more @ ..] => rest = more,
            b"}" => break,
            _ => return None,
        }
    }
    let (rule, key) = (rule?, key?);
    (!rule.is_empty() && !key.is_empty() && key.len() <= MAX_KEY_LEN).then(|| CheckRequest {
        pairs: vec![(Cow::Borrowed(rule), Cow::Borrowed(key))],
        cost: cost.unwrap_or(1),
        multi: false,
    })
}

/// A JSON string with no escapes or control characters at the start of
/// `s` (its value is its bytes), and what follows it.
fn plain_str(s: &[u8]) -> Option<(&str, &[u8])> {
    let s = s.strip_prefix(b"\"")?;
    let end = s
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    if s[end] != b'"' {
        return None;
    }
    Some((std::str::from_utf8(&s[..end]).ok()?, &s[end + 1..]))
}

/// A JSON integer of plain digits (no sign, no leading zero, no fraction)
/// that fits a `u64`, at the start of `s`, and what follows it.
fn plain_u64(s: &[u8]) -> Option<(u64, &[u8])> {
    let len = s.iter().take_while(|b| b.is_ascii_digit()).count();
    let digits = &s[..len];
    if len == 0 || (len > 1 && digits[0] == b'0') {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some((n, &s[len..]))
}

/// The fast reader: `Some` only for a body the `Value` reader would read
/// to the same request (an object with known, unique fields of the right
/// types and values within bounds); `None` for anything else.
pub(super) fn parse_check_fast(body: &[u8]) -> Option<CheckRequest<'_>> {
    let fast: FastCheck<'_> = serde_json::from_slice(body).ok()?;
    let valid_pair =
        |rule: &str, key: &str| !rule.is_empty() && !key.is_empty() && key.len() <= MAX_KEY_LEN;
    let cost = fast.cost.unwrap_or(1);
    match (fast.rule, fast.key, fast.checks) {
        (Some(rule), Some(key), None) if valid_pair(&rule, &key) => Some(CheckRequest {
            pairs: vec![(rule, key)],
            cost,
            multi: false,
        }),
        (None, None, Some(pairs))
            if (1..=MAX_CHECKS).contains(&pairs.len())
                && pairs.iter().all(|(rule, key)| valid_pair(rule, key)) =>
        {
            Some(CheckRequest {
                pairs,
                cost,
                multi: true,
            })
        }
        _ => None,
    }
}

/// A check body as the fast reader sees it: only a JSON object (never an
/// array, which serde's derived readers would also take), each known field
/// at most once, no unknown fields, strings borrowed when they hold no
/// escapes.
#[derive(Debug, Default)]
struct FastCheck<'a> {
    rule: Option<Cow<'a, str>>,
    key: Option<Cow<'a, str>>,
    cost: Option<u64>,
    checks: Option<Vec<(Cow<'a, str>, Cow<'a, str>)>>,
}

/// The fields of a check body (`rule`, `key`, `cost`, `checks`).
enum Field {
    Rule,
    Key,
    Cost,
    Checks,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("rule, key, cost or checks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                match v {
                    "rule" => Ok(Field::Rule),
                    "key" => Ok(Field::Key),
                    "cost" => Ok(Field::Cost),
                    "checks" => Ok(Field::Checks),
                    other => Err(E::unknown_field(other, &[])),
                }
            }
        }
        d.deserialize_identifier(V)
    }
}

/// A JSON string, borrowed from the body when it holds no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// Fails on a field seen twice (the `Value` reader keeps the last one).
fn once<T, E: de::Error>(slot: &mut Option<T>, value: T, name: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(value);
    Ok(())
}

impl<'de> Deserialize<'de> for FastCheck<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FastCheck<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a check object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = FastCheck::default();
                while let Some(field) = map.next_key::<Field>()? {
                    match field {
                        Field::Rule => {
                            once(&mut out.rule, map.next_value::<Str<'de>>()?.0, "rule")?;
                        }
                        Field::Key => once(&mut out.key, map.next_value::<Str<'de>>()?.0, "key")?,
                        Field::Cost => once(&mut out.cost, map.next_value::<u64>()?, "cost")?,
                        Field::Checks => {
                            once(&mut out.checks, map.next_value::<Pairs<'de>>()?.0, "checks")?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// `checks`: an array of at most [`MAX_CHECKS`] `{"rule", "key"}` objects.
struct Pairs<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de> Deserialize<'de> for Pairs<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of {\"rule\", \"key\"} objects")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut pairs = Vec::new();
                while let Some(Pair(rule, key)) = seq.next_element::<Pair<'de>>()? {
                    if pairs.len() == MAX_CHECKS {
                        return Err(de::Error::invalid_length(MAX_CHECKS + 1, &self));
                    }
                    pairs.push((rule, key));
                }
                Ok(Pairs(pairs))
            }
        }
        d.deserialize_seq(V)
    }
}

/// One `{"rule", "key"}` object of `checks`.
struct Pair<'a>(Cow<'a, str>, Cow<'a, str>);

impl<'de> Deserialize<'de> for Pair<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pair<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a {\"rule\", \"key\"} object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut rule, mut key) = (None, None);
                while let Some(field) = map.next_key::<Field>()? {
                    match field {
                        Field::Rule => once(&mut rule, map.next_value::<Str<'de>>()?.0, "rule")?,
                        Field::Key => once(&mut key, map.next_value::<Str<'de>>()?.0, "key")?,
                        Field::Cost | Field::Checks => {
                            return Err(de::Error::custom("not a pair field"));
                        }
                    }
                }
                match (rule, key) {
                    (Some(rule), Some(key)) => Ok(Pair(rule, key)),
                    _ => Err(de::Error::custom("rule or key missing")),
                }
            }
        }
        d.deserialize_map(V)
    }
}
