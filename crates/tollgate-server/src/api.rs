//! The HTTP API (CONTRACT.md, "HTTP API"): `POST /v1/check`,
//! `GET /v1/rules`, `/healthz`, `/readyz`, `/metrics`.
//!
//! Choices CONTRACT.md leaves open:
//!
//! * The check body is strict: unknown fields are 400 (as in the config
//!   file), `rule`+`key` and `checks` are exclusive, `checks` holds 1 to
//!   [`MAX_CHECKS`] `{"rule","key"}` objects, `cost` is a JSON integer from 0
//!   to 2^64-1 (a cost above a rule's capacity is a 429 that can never be
//!   admitted: `retry_after_ms` null, no `Retry-After`).
//! * The body is read as JSON whatever its `Content-Type` (`curl -d`
//!   labels it a form); a body that does not parse under a non-JSON type
//!   gets a 400 that names the type.
//! * The body must arrive within [`BODY_TIMEOUT`] (408) and hold at most
//!   [`MAX_BODY`] bytes (413).
//! * When the store fails and the policy answers, the answer carries
//!   `"degraded": true`. Under `allow` it is a 200 with
//!   `tollgate-degraded: store-unavailable` and `RateLimit-Policy` but no
//!   `RateLimit` (nothing was decided, as in the tower layer: the quota is
//!   known, what remains is not); its body reads as for an untouched key
//!   (`remaining` = capacity - cost, `reset_after_ms` 0).
//!   Under `local` the in-process fallback decides, with RateLimit headers
//!   and `tollgate-degraded: local`.
//! * A multi-rule answer always has `"checks"`, one object per pair, in
//!   request order; the top-level fields are the deciding pair's.
//! * Unknown paths are 404 and wrong methods 405 (with `Allow`), both with
//!   a JSON `{"error"}` body.
//!
//! The hot path, `POST /v1/check`, is served without a router or a JSON
//! tree. The plain body clients send (`{"rule":"..","key":"..","cost":N}`,
//! no whitespace or escapes) is read by a byte scan; other well-formed
//! bodies by serde into borrowed fields (`FastCheck`); anything either of
//! them does not take as it is (an error, a duplicate field) by the
//! `serde_json::Value` reader, which names the problem. A unit test checks
//! that the three agree on every body the first two accept. The answer is
//! written with `itoa` into one buffer (a unit test compares its bytes with
//! the `serde_json` map answer it replaced).

use std::borrow::Cow;
use std::fmt;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};
use tollgate::{Check, Decision, Error, MAX_KEY_LEN, MultiDecision};
use tollgate_tower::headers::{HeaderOptions, PolicyCache, insert_headers, insert_policy};
use tollgate_tower::response::{DEGRADED_LOCAL, DEGRADED_STORE_UNAVAILABLE, TOLLGATE_DEGRADED};

use crate::config::OnError;
use crate::gate::{Gate, Refusal, Verdict};

/// The largest request body accepted, in bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// The longest a client may take to send a request body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// The most (rule, key) pairs in one multi-rule check.
pub const MAX_CHECKS: usize = 64;

/// The body of every API answer.
pub type ApiBody = Full<Bytes>;

/// What the API's handlers share.
#[derive(Debug, Clone)]
pub struct Api {
    /// The limiter with its failure policy.
    pub gate: Arc<Gate>,
    /// Which RateLimit headers to write.
    pub headers: HeaderOptions,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// Each rule's `RateLimit-Policy` value for one-rule answers.
    policies: Arc<PolicyCache>,
}

impl Api {
    /// The API over `gate`, writing the RateLimit headers `headers` asks
    /// for and rendering `/metrics` with `metrics`.
    #[must_use]
    pub fn new(gate: Arc<Gate>, headers: HeaderOptions, metrics: PrometheusHandle) -> Self {
        let policies = Arc::new(PolicyCache::new(gate.rules().len()));
        Self {
            gate,
            headers,
            metrics,
            policies,
        }
    }

    /// Answers one request. Never fails: every problem is an HTTP answer.
    ///
    /// Every answer carries `Content-Length`; a `HEAD` answer has it and no
    /// body.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<ApiBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let head = req.method() == Method::HEAD;
        let mut res = match req.uri().path() {
            "/v1/check" => self.check(req).await,
            "/v1/rules" => get_only(&req, "/v1/rules", || {
                json_response(StatusCode::OK, &rules_json(self))
            }),
            "/healthz" => get_only(&req, "/healthz", || {
                json_response(StatusCode::OK, &json!({ "status": "ok" }))
            }),
            "/readyz" => {
                if is_get(req.method()) {
                    match self.gate.ready().await {
                        Ok(()) => json_response(StatusCode::OK, &json!({ "status": "ready" })),
                        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e),
                    }
                } else {
                    method_not_allowed(req.method(), "/readyz", "GET, HEAD")
                }
            }
            "/metrics" => get_only(&req, "/metrics", || self.render_metrics()),
            path => error(
                StatusCode::NOT_FOUND,
                format!(
                    "no such endpoint: {} {path}; try POST /v1/check or GET /v1/rules",
                    req.method()
                ),
            ),
        };
        // hyper writes `Content-Length` from the body's exact size itself;
        // only a HEAD answer, whose body goes, needs the field set here.
        if head {
            if !res.headers().contains_key(CONTENT_LENGTH) {
                let len = res.body().size_hint().exact().unwrap_or(0);
                res.headers_mut()
                    .insert(CONTENT_LENGTH, HeaderValue::from(len));
            }
            *res.body_mut() = Full::default();
        }
        res
    }

    fn render_metrics(&self) -> Response<ApiBody> {
        if let Some(keys) = self.gate.memory_keys() {
            #[allow(clippy::cast_precision_loss)] // a key count far below 2^52
            ::metrics::gauge!(crate::metrics::MEMORY_KEYS).set(keys as f64);
        }
        self.metrics.run_upkeep();
        let mut res = Response::new(Full::new(Bytes::from(self.metrics.render())));
        res.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        res
    }

    async fn check<B>(&self, req: Request<B>) -> Response<ApiBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if req.method() != Method::POST {
            return method_not_allowed(req.method(), "/v1/check", "POST");
        }
        // Read as JSON whatever the Content-Type says (`curl -d` sends a
        // form type); a body that does not parse names the type it came as.
        // Kept only when not JSON: the usual check copies nothing.
        let other_type = req
            .headers()
            .get(CONTENT_TYPE)
            .filter(|ct| !is_json(ct))
            .cloned();
        let body = match read_body(req).await {
            Ok(b) => b,
            Err(res) => return res,
        };
        let parsed = match parse_check(&body) {
            Ok(p) => p,
            Err(e) => {
                let e = match other_type {
                    Some(ct) => format!(
                        "{e} (the body is read as JSON; it came as Content-Type {:?})",
                        String::from_utf8_lossy(ct.as_bytes())
                    ),
                    None => e,
                };
                return error(StatusCode::BAD_REQUEST, e);
            }
        };
        let result = if let [(rule, key)] = parsed.pairs.as_slice() {
            let one = Check::new(rule, key.as_bytes()).cost(parsed.cost);
            self.gate.check_all(std::slice::from_ref(&one)).await
        } else {
            let checks: Vec<Check<'_>> = parsed
                .pairs
                .iter()
                .map(|(rule, key)| Check::new(rule, key.as_bytes()).cost(parsed.cost))
                .collect();
            self.gate.check_all(&checks).await
        };
        match result {
            Ok(verdict) => answer(self, &parsed, &verdict),
            Err(Refusal::Invalid(Error::UnknownRule(name))) => error(
                StatusCode::NOT_FOUND,
                format!("unknown rule {name:?}; GET /v1/rules lists the rules"),
            ),
            Err(Refusal::Invalid(e)) => error(StatusCode::BAD_REQUEST, e.to_string()),
            Err(Refusal::Unavailable(e)) => {
                let mut res = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("store unavailable and the rule's on_error is deny: {e}"),
                );
                res.headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static("1"));
                res
            }
        }
    }
}

fn json_response(status: StatusCode, value: &Value) -> Response<ApiBody> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes_response(status, bytes)
}

fn bytes_response(status: StatusCode, bytes: Vec<u8>) -> Response<ApiBody> {
    // Through a boxed slice: `Bytes::from` a `Vec` with spare capacity
    // allocates a second, shared header; shrinking in place does not.
    let mut res = Response::new(Full::new(Bytes::from(bytes.into_boxed_slice())));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

/// `{"error": message}` with `status`.
fn error(status: StatusCode, message: impl Into<String>) -> Response<ApiBody> {
    json_response(status, &json!({ "error": message.into() }))
}

fn method_not_allowed(method: &Method, path: &str, allow: &'static str) -> Response<ApiBody> {
    let mut res = error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} is not allowed on {path}; use {allow}"),
    );
    res.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    res
}

fn is_get(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// `answer()` for GET and HEAD, 405 otherwise.
fn get_only<B>(
    req: &Request<B>,
    path: &str,
    answer: impl FnOnce() -> Response<ApiBody>,
) -> Response<ApiBody> {
    if is_get(req.method()) {
        answer()
    } else {
        method_not_allowed(req.method(), path, "GET, HEAD")
    }
}

fn rules_json(api: &Api) -> Value {
    let rules: Vec<Value> = api
        .gate
        .rules()
        .iter()
        .map(|r| {
            json!({
                "name": r.name(),
                "algorithm": r.algorithm().as_str(),
                "limit": r.limit(),
                "period_ms": u64::try_from(r.period().as_millis()).unwrap_or(u64::MAX),
                "burst": r.algorithm().has_burst().then_some(r.burst()),
                "key": api.gate.key_of(r.name()).map(ToString::to_string),
                "on_error": api.gate.policy(r.name()).as_str(),
            })
        })
        .collect();
    json!({ "rules": rules })
}

/// A parsed `POST /v1/check` body, its strings borrowed from the body
/// where they hold no escapes.
#[derive(Debug, PartialEq, Eq)]
struct CheckRequest<'a> {
    /// (rule, key) pairs.
    pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    cost: u64,
    /// The `checks` form (the answer lists every pair).
    multi: bool,
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
fn parse_check_slow(body: &[u8]) -> Result<CheckRequest<'static>, String> {
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
fn parse_check(body: &[u8]) -> Result<CheckRequest<'_>, String> {
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
fn parse_check_plain(body: &[u8]) -> Option<CheckRequest<'_>> {
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
fn parse_check_fast(body: &[u8]) -> Option<CheckRequest<'_>> {
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

fn is_json(content_type: &HeaderValue) -> bool {
    // What clients send, matched at once (this runs on every check).
    if content_type.as_bytes() == b"application/json" {
        return true;
    }
    let Ok(text) = content_type.to_str() else {
        return false;
    };
    let essence = text.split(';').next().unwrap_or("").trim();
    // Compared without lowercasing a copy (this runs on every check).
    let ends_with_json = essence
        .len()
        .checked_sub(5)
        .and_then(|start| essence.get(start..))
        .is_some_and(|end| end.eq_ignore_ascii_case("+json"));
    essence.eq_ignore_ascii_case("application/json") || (essence.contains('/') && ends_with_json)
}

/// Reads a request's body as `POST /v1/check` does: at most [`MAX_BODY`]
/// bytes (else 413), within [`BODY_TIMEOUT`] (else 408); an error is the
/// API's JSON answer.
///
/// A body that has already arrived (hyper hands over the bytes it read
/// with the head at once) is taken without arming a timer or collecting:
/// the first poll returns it whole. Only a body still on its way is
/// awaited under the timeout.
///
/// # Errors
/// The answer to send instead: 413, 408, or 400 when the body broke off.
pub async fn read_body<B>(req: Request<B>) -> Result<Bytes, Response<ApiBody>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // A body not read to its end leaves the connection mid-request: say it
    // closes (RFC 9110 §15.5.14; hyper then closes it after the answer).
    let closing = |mut res: Response<ApiBody>| {
        res.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        res
    };
    let too_large = || {
        closing(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body is larger than {MAX_BODY} bytes"),
        ))
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let mut body = pin!(Limited::new(req.into_body(), MAX_BODY));
    let first = std::future::poll_fn(|cx| Poll::Ready(body.as_mut().poll_frame(cx))).await;
    let collected = match first {
        // The usual case: the whole body is one frame that came with the
        // head; taken as it is (no collecting buffer, no timer).
        Poll::Ready(None) => Ok(Bytes::new()),
        Poll::Ready(Some(Ok(frame))) if frame.is_data() && body.is_end_stream() => {
            Ok(frame.into_data().unwrap_or_default())
        }
        Poll::Ready(Some(Err(e))) => Err(e),
        more => {
            let head = match more {
                Poll::Ready(Some(Ok(frame))) => frame.into_data().ok(),
                _ => None,
            };
            // Boxed: the timer and the collector would otherwise make
            // every check's future (moved a few times per request) larger
            // by their size, fast path or not.
            match Box::pin(tokio::time::timeout(BODY_TIMEOUT, body.as_mut().collect())).await {
                Ok(rest) => rest.map(|rest| match head {
                    None => rest.to_bytes(),
                    Some(head) => {
                        let rest = rest.to_bytes();
                        let mut all = Vec::with_capacity(head.len() + rest.len());
                        all.extend_from_slice(&head);
                        all.extend_from_slice(&rest);
                        Bytes::from(all)
                    }
                }),
                Err(_) => {
                    return Err(closing(error(
                        StatusCode::REQUEST_TIMEOUT,
                        format!("request body not received within {BODY_TIMEOUT:?}"),
                    )));
                }
            }
        }
    };
    match collected {
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(e) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("could not read the request body: {e}"),
        )),
        Ok(bytes) => Ok(bytes),
    }
}

/// Appends `s` as a JSON string, escaped as `serde_json` escapes it.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Rule names never need this ([A-Za-z0-9_.-]+), but stay exact.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends one decision object, fields in CONTRACT.md's order; `allowed`
/// is given apart (the top level shows the combined answer).
fn push_decision(out: &mut Vec<u8>, allowed: bool, rule: &str, d: &Decision) {
    out.extend_from_slice(if allowed {
        b"{\"allowed\":true,\"rule\":"
    } else {
        b"{\"allowed\":false,\"rule\":"
    });
    push_json_str(out, rule);
    out.extend_from_slice(b",\"limit\":");
    push_u64(out, d.limit);
    out.extend_from_slice(b",\"remaining\":");
    push_u64(out, d.remaining);
    out.extend_from_slice(b",\"reset_after_ms\":");
    push_u64(out, d.reset_after_ms());
    out.extend_from_slice(b",\"retry_after_ms\":");
    match d.retry_after_ms() {
        Some(ms) if !d.allowed => push_u64(out, ms),
        _ => out.extend_from_slice(b"null"),
    }
}

/// The answer's JSON body (with its trailing newline).
fn answer_body(req: &CheckRequest<'_>, multi: &MultiDecision, degraded: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(if req.multi {
        160 * (1 + req.pairs.len())
    } else {
        160
    });
    let deciding = multi.decision();
    push_decision(
        &mut out,
        multi.allowed,
        &req.pairs[multi.deciding].0,
        deciding,
    );
    if req.multi {
        out.extend_from_slice(b",\"checks\":[");
        for (i, ((rule, _), d)) in req.pairs.iter().zip(&multi.decisions).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_decision(&mut out, d.allowed, rule, d);
            out.push(b'}');
        }
        out.push(b']');
    }
    if degraded {
        out.extend_from_slice(b",\"degraded\":true");
    }
    out.extend_from_slice(b"}\n");
    out
}

/// Each pair's rule with its decision, in request order.
fn rule_pairs<'a>(
    api: &'a Api,
    req: &CheckRequest<'_>,
    multi: &'a MultiDecision,
) -> Vec<(&'a tollgate::Rule, &'a Decision)> {
    req.pairs
        .iter()
        .zip(&multi.decisions)
        .filter_map(|((rule, _), d)| api.gate.rule(rule).map(|r| (r, d)))
        .collect()
}

fn answer(api: &Api, req: &CheckRequest<'_>, verdict: &Verdict) -> Response<ApiBody> {
    let multi = &verdict.multi;
    let deciding = multi.decision();
    let status = if multi.allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut res = bytes_response(status, answer_body(req, multi, verdict.degraded.is_some()));
    match verdict.degraded {
        // Nothing was decided: the rules' policies, no `RateLimit` (what
        // remains is unknown), as the tower layer and the proxy.
        Some(OnError::Allow) => {
            let headers = res.headers_mut();
            insert_policy(headers, &rule_pairs(api, req, multi));
            headers.insert(TOLLGATE_DEGRADED, DEGRADED_STORE_UNAVAILABLE);
        }
        degraded => {
            let retry = if multi.allowed {
                None
            } else {
                deciding.retry_after
            };
            // One pair (the usual check): on the stack, not in a `Vec`, and
            // its rule's `RateLimit-Policy` value from the cache.
            if let ([(name, _)], [d]) = (req.pairs.as_slice(), multi.decisions.as_slice()) {
                if let Some(i) = api.gate.rule_index(name) {
                    let rule = &api.gate.rules()[i];
                    let headers = res.headers_mut();
                    api.policies
                        .insert_headers(headers, i, rule, d, retry, api.headers);
                }
            } else {
                insert_headers(
                    res.headers_mut(),
                    &rule_pairs(api, req, multi),
                    retry,
                    api.headers,
                );
            }
            if degraded.is_some() {
                res.headers_mut().insert(TOLLGATE_DEGRADED, DEGRADED_LOCAL);
            }
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_multi() {
        assert_eq!(
            parse_check(br#"{"rule":"a","key":"k"}"#),
            Ok(CheckRequest {
                pairs: vec![("a".into(), "k".into())],
                cost: 1,
                multi: false
            })
        );
        assert_eq!(
            parse_check(br#"{"checks":[{"rule":"a","key":"k"},{"rule":"b","key":"j"}],"cost":0}"#),
            Ok(CheckRequest {
                pairs: vec![("a".into(), "k".into()), ("b".into(), "j".into())],
                cost: 0,
                multi: true
            })
        );
    }

    #[test]
    fn names_every_problem() {
        for (body, want) in [
            (&b"{"[..], "malformed JSON"),
            (b"[1]", "expected a JSON object"),
            (br#"{"rule":"a"}"#, "key: missing"),
            (br#"{"rule":"a","key":""}"#, "key: must not be empty"),
            (
                br#"{"rule":"a","key":7}"#,
                "key: expected a string, found a number",
            ),
            (br#"{"key":"k"}"#, "rule: missing"),
            (
                br#"{"rule":"a","key":"k","cost":-1}"#,
                "cost: must not be negative",
            ),
            (
                br#"{"rule":"a","key":"k","cost":1.5}"#,
                "cost: expected a whole number",
            ),
            (
                br#"{"rule":"a","key":"k","cost":-0}"#,
                "cost: must not be negative or signed, got -0",
            ),
            (
                br#"{"rule":"a","key":"k","cost":1e2}"#,
                "without a fraction or exponent, read as 100",
            ),
            (
                br#"{"rule":"a","key":"k","cost":"1"}"#,
                "cost: expected a non-negative integer, found a string",
            ),
            (
                br#"{"rule":"a","key":"k","cost":18446744073709551616}"#,
                "cost: too large; at most 18446744073709551615",
            ),
            (
                br#"{"rule":"a","key":"k","colour":1}"#,
                "colour: unknown field",
            ),
            (br#"{"checks":[]}"#, "checks: must not be empty"),
            (br#"{"checks":{}}"#, "checks: expected an array"),
            (br#"{"checks":[{"rule":"a"}]}"#, "checks[0].key: missing"),
            (
                br#"{"checks":[{"rule":"a","key":"k","cost":2}]}"#,
                "checks[0].cost: unknown field",
            ),
            (br#"{"checks":[1]}"#, "checks[0]: expected an object"),
            (br#"{"rule":"a","key":"k","checks":[]}"#, "not both"),
            // A repeated field is refused whatever its copies hold (the
            // last one would otherwise win silently).
            (
                br#"{"rule":"a","key":"k","cost":-5,"cost":0}"#,
                r#"duplicate field "cost""#,
            ),
            (
                br#"{"rule":1,"rule":"a","key":"k"}"#,
                r#"duplicate field "rule""#,
            ),
            (
                br#"{"rule":"a","key":"","key":"x"}"#,
                r#"duplicate field "key""#,
            ),
            (
                br#"{"rule":"a","key":"k","key":"k"}"#,
                r#"duplicate field "key""#,
            ),
            (
                br#"{"rule" : "a", "key":"k","rule":"a"}"#,
                r#"duplicate field "rule""#,
            ),
            (
                br#"{"checks":[{"rule":"nope","rule":"a","key":"k"}]}"#,
                r#"duplicate field "rule""#,
            ),
            (
                br#"{"checks":[{"rule":"a","key":"k"}],"checks":[{"rule":"a","key":"k"}]}"#,
                r#"duplicate field "checks""#,
            ),
        ] {
            let got = parse_check(body).expect_err(&String::from_utf8_lossy(body));
            assert!(
                got.contains(want),
                "{}: {got}",
                String::from_utf8_lossy(body)
            );
        }
        let long = format!(r#"{{"rule":"a","key":"{}"}}"#, "k".repeat(MAX_KEY_LEN + 1));
        let got = parse_check(long.as_bytes()).expect_err("too long");
        assert!(got.contains("longer than the limit of 4096 bytes"), "{got}");
    }

    #[test]
    fn json_content_types() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/problem+json",
        ] {
            assert!(is_json(&HeaderValue::from_static(ok)), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "json",
            "+json",
        ] {
            assert!(!is_json(&HeaderValue::from_static(bad)), "{bad}");
        }
    }

    /// Every body the fast reader takes reads the same through the `Value`
    /// reader; the usual bodies do take the fast path.
    #[test]
    fn fast_reader_agrees_with_the_value_reader() {
        let long_ok = format!("\"{}\"", "k".repeat(MAX_KEY_LEN));
        let long_bad = format!("\"{}\"", "k".repeat(MAX_KEY_LEN + 1));
        let strings = [
            r#""per_user""#,
            r#""""#,
            r#""a\u0062c""#,
            r#""tab\there""#,
            r#""\u00e9t\u00e9""#,
            "\"été\"",
            "7",
            "null",
            "true",
            "[]",
            "{}",
            long_ok.as_str(),
            long_bad.as_str(),
        ];
        let costs = [
            "0",
            "1",
            "42",
            "-1",
            "-0",
            "1.0",
            "1.5",
            "1e2",
            "\"1\"",
            "null",
            "18446744073709551615",
            "18446744073709551616",
        ];
        let pair = |r: &str, k: &str| format!(r#"{{"rule":{r},"key":{k}}}"#);
        let many = |n: usize| {
            let items: Vec<String> = (0..n)
                .map(|i| pair("\"a\"", &format!("\"k{i}\"")))
                .collect();
            format!("[{}]", items.join(","))
        };
        let mut checks = vec![
            "[]".to_owned(),
            "{}".to_owned(),
            "\"x\"".to_owned(),
            "null".to_owned(),
            "[1]".to_owned(),
            r#"[["a","k"]]"#.to_owned(),
            r#"[{"rule":"a"}]"#.to_owned(),
            r#"[{"rule":"a","key":"k","cost":1}]"#.to_owned(),
            r#"[{"rule":"a","key":"k","rule":"b"}]"#.to_owned(),
            r#"[{"key":"k","rule":"a"}]"#.to_owned(),
            many(1),
            many(2),
            many(MAX_CHECKS),
            many(MAX_CHECKS + 1),
        ];
        for r in &strings {
            for k in &strings {
                checks.push(format!("[{}]", pair(r, k)));
            }
        }
        let mut bodies: Vec<String> = vec![
            String::new(),
            "{".to_owned(),
            "[]".to_owned(),
            r#"["a","k",1]"#.to_owned(),
            "null".to_owned(),
            "{}".to_owned(),
            r#"{"rule":"a","key":"k"} x"#.to_owned(),
            " \n{\"rule\" : \"a\" , \"key\":\"k\"}\n ".to_owned(),
            r#"{"rule":"a","key":"k","rule":"b"}"#.to_owned(),
            r#"{"rule":"a","key":"k","cost":1,"cost":2}"#.to_owned(),
            r#"{"r\u0075le":"a","key":"k"}"#.to_owned(),
            r#"{"rule":"a","key":"k","colour":1}"#.to_owned(),
            r#"{"rule":"a","key":"k","checks":[]}"#.to_owned(),
            r#"{"key":"k","checks":[{"rule":"a","key":"k"}]}"#.to_owned(),
        ];
        for r in &strings {
            for k in &strings {
                bodies.push(format!(r#"{{"rule":{r},"key":{k}}}"#));
                bodies.push(format!(r#"{{"key":{k},"rule":{r},"cost":1}}"#));
            }
            bodies.push(format!(r#"{{"rule":{r}}}"#));
            bodies.push(format!(r#"{{"key":{r}}}"#));
        }
        for c in &costs {
            bodies.push(format!(r#"{{"rule":"a","key":"k","cost":{c}}}"#));
            bodies.push(format!(
                r#"{{"cost":{c},"checks":[{{"rule":"a","key":"k"}}]}}"#
            ));
        }
        for c in &checks {
            bodies.push(format!(r#"{{"checks":{c}}}"#));
            bodies.push(format!(r#"{{"cost":3,"checks":{c}}}"#));
        }
        let (mut fast, mut plain) = (0, 0);
        for body in &bodies {
            let slow = parse_check_slow(body.as_bytes());
            if let Some(parsed) = parse_check_fast(body.as_bytes()) {
                fast += 1;
                assert_eq!(Ok(&parsed), slow.as_ref(), "{body}");
            }
            if let Some(parsed) = parse_check_plain(body.as_bytes()) {
                plain += 1;
                assert_eq!(Ok(&parsed), slow.as_ref(), "{body}");
            }
            assert_eq!(parse_check(body.as_bytes()), slow, "{body}");
        }
        assert!(
            fast > 100,
            "only {fast} of {} bodies read fast",
            bodies.len()
        );
        assert!(
            plain > 20,
            "only {plain} of {} bodies read plain",
            bodies.len()
        );
        for usual in [
            r#"{"rule":"open","key":"k17","cost":1}"#,
            r#"{"key":"k","rule":"per_user"}"#,
            "{\"cost\":18446744073709551615,\"rule\":\"r\",\"key\":\"\u{e9}t\u{e9}\"}",
        ] {
            assert!(parse_check_plain(usual.as_bytes()).is_some(), "{usual}");
        }
        for usual in [
            r#"{"rule":"open","key":"k17","cost":1}"#,
            r#"{"rule":"per_user","key":"alice"}"#,
            r#"{"checks":[{"rule":"a","key":"k"},{"rule":"b","key":"j"}],"cost":0}"#,
        ] {
            let parsed = parse_check_fast(usual.as_bytes()).expect(usual);
            assert!(
                parsed
                    .pairs
                    .iter()
                    .all(|(r, k)| matches!((r, k), (Cow::Borrowed(_), Cow::Borrowed(_)))),
                "{usual}: copied"
            );
        }
    }

    /// The answer as it was first written: a `serde_json` map.
    fn decision_json(rule: &str, d: &Decision) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("allowed".into(), d.allowed.into());
        m.insert("rule".into(), rule.into());
        m.insert("limit".into(), d.limit.into());
        m.insert("remaining".into(), d.remaining.into());
        m.insert("reset_after_ms".into(), d.reset_after_ms().into());
        m.insert(
            "retry_after_ms".into(),
            if d.allowed {
                Value::Null
            } else {
                d.retry_after_ms().into()
            },
        );
        m
    }

    fn answer_oracle(req: &CheckRequest<'_>, multi: &MultiDecision, degraded: bool) -> Vec<u8> {
        let mut body = decision_json(&req.pairs[multi.deciding].0, multi.decision());
        body.insert("allowed".into(), multi.allowed.into());
        if req.multi {
            let checks: Vec<Value> = req
                .pairs
                .iter()
                .zip(&multi.decisions)
                .map(|((rule, _), d)| Value::Object(decision_json(rule, d)))
                .collect();
            body.insert("checks".into(), checks.into());
        }
        if degraded {
            body.insert("degraded".into(), true.into());
        }
        let mut bytes = serde_json::to_vec(&Value::Object(body)).expect("json");
        bytes.push(b'\n');
        bytes
    }

    #[test]
    fn answers_are_byte_identical_to_the_map_answers() {
        let ms = Duration::from_micros;
        let decisions: Vec<Decision> = [
            (true, 100, 99, ms(1), None),
            (true, 1_000_000, 999_999, ms(999), None),
            (true, u64::MAX, u64::MAX - 1, ms(u64::MAX / 4), None),
            (false, 100, 0, ms(950_001), Some(ms(10_000))),
            (false, 2, 0, Duration::from_secs(86_400 * 2), Some(ms(1))),
            (false, 5, 5, Duration::ZERO, None),
            (true, 3, 0, ms(0), Some(ms(5))),
            (false, 0, 0, ms(1_500), Some(Duration::ZERO)),
        ]
        .into_iter()
        .map(
            |(allowed, limit, remaining, reset_after, retry_after)| Decision {
                allowed,
                limit,
                remaining,
                reset_after,
                retry_after,
            },
        )
        .collect();
        let names = [
            "per_user",
            "a.b-c_9",
            "q\"uote",
            "back\\slash",
            "nl\n\u{1}",
            "été",
        ];
        let mut n = 0;
        for (i, first) in decisions.iter().enumerate() {
            for second in &decisions {
                for (multi_form, picked) in [
                    (false, vec![*first]),
                    (true, vec![*first]),
                    (true, vec![*first, *second]),
                    (true, vec![*second, *first, *second]),
                ] {
                    let pairs: Vec<(Cow<'_, str>, Cow<'_, str>)> = (0..picked.len())
                        .map(|j| {
                            (
                                Cow::Borrowed(names[(i + j) % names.len()]),
                                Cow::Borrowed("k"),
                            )
                        })
                        .collect();
                    let req = CheckRequest {
                        pairs,
                        cost: 1,
                        multi: multi_form,
                    };
                    let multi = MultiDecision::from_decisions(picked);
                    for degraded in [false, true] {
                        let got = answer_body(&req, &multi, degraded);
                        let want = answer_oracle(&req, &multi, degraded);
                        assert_eq!(
                            String::from_utf8_lossy(&got),
                            String::from_utf8_lossy(&want)
                        );
                        n += 1;
                    }
                }
            }
        }
        assert!(n > 400);
    }
}
