//! Reading a `POST /v1/check` body into a [`CheckRequest`]: one serde
//! reader that names the offending field, plus a byte scan for the plain
//! body clients send most (see [`parse_check`] for why it stays).
//!
//! The reader makes one pass over the body and keeps each field as it
//! found it ([`Raw`]): strings borrowed when they hold no escapes, numbers
//! as JSON read them, anything else as the name of its type. Only when the
//! whole body has parsed does [`RawCheck::check`] judge the fields, so a
//! syntax error anywhere wins over a problem with a field, and a field
//! named twice anywhere (which a JSON tree would settle silently by keeping
//! the last copy) wins over the rest. The order of the other problems is
//! the order the checks below are written in (docs/http-api.md).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use tollgate::limits::MAX_KEY_LEN;

/// The most (rule, key) pairs in one multi-rule check.
pub const MAX_CHECKS: usize = 64;

/// A parsed `POST /v1/check` (or `/v1/charge`) body, its strings borrowed
/// from the body where they hold no escapes.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct CheckRequest<'a> {
    /// The (rule, key, cost) pairs, in request order.
    pub(super) pairs: Vec<Pair<'a>>,
    /// The `checks` form (the answer lists every pair).
    pub(super) multi: bool,
}

/// One pair of a check body: its cost is its own `cost`, else the body's,
/// else 1.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Pair<'a> {
    pub(super) rule: Cow<'a, str>,
    pub(super) key: Cow<'a, str>,
    pub(super) cost: u64,
}

/// Reads a check body, or says what is wrong with it, naming the field.
///
/// The byte scan ([`parse_check_plain`]) takes the plain body first. It
/// stays because it saves more than a tenth of a whole check's work:
/// `bench/http-instructions.sh check-open` counted 17,208 instructions per
/// request with it and 19,660 with the serde reader alone, 12.5% fewer
/// (bench/README.md, "One check-body reader").
#[inline]
pub(super) fn parse_check(body: &[u8]) -> Result<CheckRequest<'_>, String> {
    if let Some(parsed) = parse_check_plain(body) {
        return Ok(parsed);
    }
    parse_check_json(body)
}

/// The serde reader: every body, every problem named.
pub(super) fn parse_check_json(body: &[u8]) -> Result<CheckRequest<'_>, String> {
    read_raw(body)?.check()
}

/// Reads a body into its fields: a syntax error anywhere, then a field
/// named twice anywhere, is the error.
pub(super) fn read_raw(body: &[u8]) -> Result<RawCheck<'_>, String> {
    let mut dup = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    let raw = RawSeed { dup: &mut dup }
        .deserialize(&mut de)
        .and_then(|raw| de.end().map(|()| raw))
        .map_err(|e| format!("malformed JSON: {e}"))?;
    if let Some(name) = dup {
        return Err(format!("duplicate field {name:?}"));
    }
    Ok(raw)
}

/// The plainest reader, for the body clients send most: one object of
/// `"rule"`, `"key"` and optionally `"cost"`, each once, in any order, with
/// no whitespace, strings without escapes or control characters, and the
/// cost as plain digits. A byte scan; `None` for anything else, which
/// [`parse_check_json`] takes.
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
        pairs: vec![Pair {
            rule: Cow::Borrowed(rule),
            key: Cow::Borrowed(key),
            cost: cost.unwrap_or(1),
        }],
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

/// A JSON value as the reader keeps it until the body has parsed.
#[derive(Debug)]
pub(super) enum Raw<'a> {
    Str(Cow<'a, str>),
    /// A non-negative integer that fits a `u64`.
    U64(u64),
    /// A negative integer.
    I64(i64),
    /// A number with a fraction or exponent, `-0`, or an integer past u64.
    F64(f64),
    /// An object: its fields, when it is where a field list is expected.
    Object(Fields<'a>),
    /// An array: its items, when it is `checks`.
    Array(Items<'a>),
    /// Anything else, by the name of its type.
    Other(&'static str),
}

impl Raw<'_> {
    pub(super) fn type_name(&self) -> &'static str {
        match self {
            Raw::Str(_) => "a string",
            Raw::U64(_) | Raw::I64(_) | Raw::F64(_) => "a number",
            Raw::Object(_) => "an object",
            Raw::Array(_) => "an array",
            Raw::Other(name) => name,
        }
    }
}

/// An object's fields of a check body.
#[derive(Debug, Default)]
pub(super) struct Fields<'a> {
    pub(super) rule: Option<Box<Raw<'a>>>,
    pub(super) key: Option<Box<Raw<'a>>>,
    pub(super) cost: Option<Box<Raw<'a>>>,
    pub(super) checks: Option<Box<Raw<'a>>>,
    pub(super) ttl_ms: Option<Box<Raw<'a>>>,
    pub(super) reservation: Option<Box<Raw<'a>>>,
    pub(super) lease: Option<Box<Raw<'a>>>,
    /// Where each of the seven came, counted in fields from the first, in
    /// [`KNOWN`]'s order.
    at: [usize; 7],
    /// The first field that is none of those, in body order, and where.
    unknown: Option<(usize, String)>,
}

/// The fields any usage body knows; each endpoint allows some of them.
const KNOWN: [&str; 7] = [
    "rule",
    "key",
    "cost",
    "checks",
    "ttl_ms",
    "reservation",
    "lease",
];

/// `checks`' items: the first [`MAX_CHECKS`] kept, the rest counted.
#[derive(Debug, Default)]
pub(super) struct Items<'a> {
    pub(super) kept: Vec<Raw<'a>>,
    pub(super) len: usize,
}

/// The whole body, read.
pub(super) struct RawCheck<'a>(pub(super) Raw<'a>);

impl<'a> RawCheck<'a> {
    /// Judges the fields, in the order `docs/http-api.md` gives.
    fn check(self) -> Result<CheckRequest<'a>, String> {
        self.check_allowing(&[])
    }

    /// [`RawCheck::check`], with `extra` top-level fields allowed (taken
    /// out of the body by the caller).
    pub(super) fn check_allowing(self, extra: &[&str]) -> Result<CheckRequest<'a>, String> {
        let one: Vec<&str> = ["rule", "key", "cost"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let many: Vec<&str> = ["checks", "cost"].iter().chain(extra).copied().collect();
        let Raw::Object(mut obj) = self.0 else {
            return Err(format!(
                "expected a JSON object such as {{\"rule\": \"per_user\", \"key\": \"alice\"}}, found {}",
                self.0.type_name()
            ));
        };
        let cost = obj.cost.take().map_or(Ok(1), |c| cost(&c, "cost"))?;
        let Some(checks) = obj.checks.take() else {
            unknown(&obj, "", &one)?;
            let rule = string(obj.rule, "rule", "")?;
            let key = string(obj.key, "key", "")?;
            return Ok(CheckRequest {
                pairs: vec![Pair { rule, key, cost }],
                multi: false,
            });
        };
        if obj.rule.is_some() || obj.key.is_some() {
            return Err("give either \"rule\" and \"key\" or \"checks\", not both".to_owned());
        }
        unknown(&obj, "", &many)?;
        let items = items_of(*checks)?;
        let mut pairs = Vec::with_capacity(items.len);
        for (i, item) in items.kept.into_iter().enumerate() {
            let path = format!("checks[{i}]");
            let o = item_object(item, &path)?;
            unknown(&o, &path, &["rule", "key", "cost"])?;
            pairs.push(Pair {
                rule: string(o.rule, "rule", &path)?,
                key: string(o.key, "key", &path)?,
                cost: match o.cost {
                    Some(c) => self::cost(&c, &format!("{path}.cost"))?,
                    None => cost,
                },
            });
        }
        Ok(CheckRequest { pairs, multi: true })
    }
}

/// `checks`: an array of 1 to [`MAX_CHECKS`] items.
pub(super) fn items_of(checks: Raw<'_>) -> Result<Items<'_>, String> {
    let Raw::Array(items) = checks else {
        return Err(format!(
            "checks: expected an array of {{\"rule\", \"key\"}} objects, found {}",
            checks.type_name()
        ));
    };
    if items.len == 0 {
        return Err("checks: must not be empty".to_owned());
    }
    if items.len > MAX_CHECKS {
        return Err(format!(
            "checks: {} pairs, more than the limit of {MAX_CHECKS}",
            items.len
        ));
    }
    Ok(items)
}

/// One item of `checks` (at `path`): an object.
pub(super) fn item_object<'a>(item: Raw<'a>, path: &str) -> Result<Fields<'a>, String> {
    match item {
        Raw::Object(o) => Ok(o),
        other => Err(format!(
            "{path}: expected an object {{\"rule\", \"key\"}}, found {}",
            other.type_name()
        )),
    }
}

pub(super) fn field_name(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// The first field of `obj`, in body order, that is not `allowed`.
pub(super) fn unknown(obj: &Fields<'_>, path: &str, allowed: &[&str]) -> Result<(), String> {
    let present = [
        obj.rule.is_some(),
        obj.key.is_some(),
        obj.cost.is_some(),
        obj.checks.is_some(),
        obj.ttl_ms.is_some(),
        obj.reservation.is_some(),
        obj.lease.is_some(),
    ];
    let out_of_place = KNOWN
        .iter()
        .zip(present)
        .zip(obj.at)
        .filter(|((name, present), _)| *present && !allowed.contains(name))
        .map(|((name, _), at)| (at, *name));
    let first = out_of_place
        .chain(obj.unknown.as_ref().map(|(at, name)| (*at, name.as_str())))
        .min_by_key(|(at, _)| *at);
    match first {
        Some((_, name)) => Err(format!(
            "{}: unknown field; expected {}",
            field_name(path, name),
            allowed.join(", ")
        )),
        None => Ok(()),
    }
}

/// A `rule` or `key` field: a string, and for keys non-empty and at most
/// [`MAX_KEY_LEN`] bytes.
pub(super) fn string<'a>(
    value: Option<Box<Raw<'a>>>,
    field: &str,
    path: &str,
) -> Result<Cow<'a, str>, String> {
    let name = || field_name(path, field);
    match value.map(|v| *v) {
        None => Err(format!("{}: missing", name())),
        Some(Raw::Str(s)) if s.is_empty() => Err(format!("{}: must not be empty", name())),
        Some(Raw::Str(s)) if field == "key" && s.len() > MAX_KEY_LEN => Err(format!(
            "{}: {} bytes, longer than the limit of {MAX_KEY_LEN} bytes",
            name(),
            s.len()
        )),
        Some(Raw::Str(s)) => Ok(s),
        Some(v) => Err(format!(
            "{}: expected a string, found {}",
            name(),
            v.type_name()
        )),
    }
}

/// A `cost` field (`name`, its path): a JSON integer from 0 to 2^64 - 1.
pub(super) fn cost(v: &Raw<'_>, name: &str) -> Result<u64, String> {
    match *v {
        Raw::U64(c) => Ok(c),
        Raw::I64(n) => Err(format!("{name}: must not be negative, got {n}")),
        Raw::F64(f) => Err(float_cost(f, name)),
        _ => Err(format!(
            "{name}: expected a non-negative integer, found {}",
            v.type_name()
        )),
    }
}

/// Why a cost JSON read as a float (a fraction, an exponent, `-0`, or an
/// integer past u64) is refused.
fn float_cost(f: f64, name: &str) -> String {
    if f.is_finite() && f.fract() == 0.0 && f >= 1.8e19 {
        return format!("{name}: too large; at most {}", u64::MAX);
    }
    if f < 0.0 || (f == 0.0 && f.is_sign_negative()) {
        // -0 too: JSON reads it as a float, and a sign has no place in a cost.
        return if f == 0.0 {
            format!("{name}: must not be negative or signed, got -0")
        } else {
            format!(
                "{name}: must not be negative or signed, got {}",
                json_float(f)
            )
        };
    }
    // The reader keeps the value, not its spelling: `1e2` reads as 100.0.
    format!(
        "{name}: expected a whole number written without a fraction or exponent, read as {}",
        json_float(f)
    )
}

/// A float as serde_json writes it (`100.0`, `1.5`).
fn json_float(f: f64) -> String {
    serde_json::Number::from_f64(f).map_or_else(|| f.to_string(), |n| n.to_string())
}

/// Reads one JSON value into a [`Raw`]. `depth` 0 is the body, 1 a field
/// of it, 2 an item of `checks`, 3 a field of an item; deeper values are
/// only scanned. Records in `dup` the first field named twice in any
/// object, at any depth.
struct RawSeed<'s> {
    dup: &'s mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for RawSeed<'_> {
    type Value = RawCheck<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ValueVisitor {
            dup: self.dup,
            depth: 0,
            is_checks: false,
        })
        .map(RawCheck)
    }
}

/// See [`RawSeed`].
struct ValueVisitor<'s> {
    dup: &'s mut Option<String>,
    depth: u8,
    /// This value is the body's `checks` (its items are kept).
    is_checks: bool,
}

impl<'de> DeserializeSeed<'de> for ValueVisitor<'_> {
    type Value = Raw<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueVisitor<'_> {
    type Value = Raw<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Raw<'de>, E> {
        Ok(Raw::Other("a boolean"))
    }
    fn visit_unit<E>(self) -> Result<Raw<'de>, E> {
        Ok(Raw::Other("null"))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Raw<'de>, E> {
        Ok(Raw::U64(n))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Raw<'de>, E> {
        // serde_json calls this only for negative integers.
        Ok(u64::try_from(n).map_or(Raw::I64(n), Raw::U64))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Raw<'de>, E> {
        Ok(Raw::F64(f))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Raw<'de>, E> {
        Ok(Raw::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Raw<'de>, E> {
        Ok(Raw::Str(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Raw<'de>, E> {
        Ok(Raw::Str(Cow::Owned(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw<'de>, A::Error> {
        let keep = self.is_checks && self.depth == 1;
        let mut items = Items::default();
        loop {
            let seed = ValueVisitor {
                dup: &mut *self.dup,
                depth: if keep { 2 } else { u8::MAX },
                is_checks: false,
            };
            let Some(item) = seq.next_element_seed(seed)? else {
                break;
            };
            if keep && items.len < MAX_CHECKS {
                items.kept.push(item);
            }
            items.len += 1;
        }
        Ok(if keep {
            Raw::Array(items)
        } else {
            Raw::Other("an array")
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw<'de>, A::Error> {
        let keep = self.depth == 0 || self.depth == 2;
        let mut fields = Fields::default();
        // Names outside the four, to find one named twice; most bodies
        // have none, so the set is made only when one comes.
        let mut others: Option<HashSet<Cow<'de, str>>> = None;
        let mut at = 0;
        while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
            let slot = match name.as_ref() {
                "rule" => Some((&mut fields.rule, &mut fields.at[0])),
                "key" => Some((&mut fields.key, &mut fields.at[1])),
                "cost" => Some((&mut fields.cost, &mut fields.at[2])),
                "checks" => Some((&mut fields.checks, &mut fields.at[3])),
                "ttl_ms" => Some((&mut fields.ttl_ms, &mut fields.at[4])),
                "reservation" => Some((&mut fields.reservation, &mut fields.at[5])),
                "lease" => Some((&mut fields.lease, &mut fields.at[6])),
                _ => None,
            };
            let (depth, is_checks) = (
                if keep { self.depth + 1 } else { u8::MAX },
                name == "checks",
            );
            let seed = |dup| ValueVisitor {
                dup,
                depth,
                is_checks,
            };
            // A name seen twice is noted before its value is read, so a
            // duplicate inside that value does not come first.
            match slot {
                Some((slot, slot_at)) => {
                    let seen = slot.is_some();
                    if seen {
                        note_dup(self.dup, &name);
                    }
                    let value = map.next_value_seed(seed(&mut *self.dup))?;
                    if !seen {
                        *slot = Some(Box::new(value));
                        *slot_at = at;
                    }
                }
                None => {
                    if !others.get_or_insert_with(HashSet::new).insert(name.clone()) {
                        note_dup(self.dup, &name);
                    }
                    map.next_value_seed(seed(&mut *self.dup))?;
                    if fields.unknown.is_none() {
                        fields.unknown = Some((at, name.into_owned()));
                    }
                }
            }
            at += 1;
        }
        Ok(if keep {
            Raw::Object(fields)
        } else {
            Raw::Other("an object")
        })
    }
}

fn note_dup(dup: &mut Option<String>, name: &str) {
    if dup.is_none() {
        *dup = Some(name.to_owned());
    }
}

/// A field name, borrowed from the body when it holds no escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}
