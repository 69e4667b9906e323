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
//! * A `Content-Type` other than JSON (`application/json`, `*/*+json`) is
//!   415; none at all is read as JSON.
//! * The body must arrive within [`BODY_TIMEOUT`] (408) and hold at most
//!   [`MAX_BODY`] bytes (413).
//! * When the store fails and the policy answers, the answer carries
//!   `"degraded": true`. Under `allow` it is a 200 with
//!   `tollgate-degraded: store-unavailable` and no RateLimit headers
//!   (nothing was decided, as in the tower layer); its body reads as for an
//!   untouched key (`remaining` = capacity - cost, `reset_after_ms` 0).
//!   Under `local` the in-process fallback decides, with RateLimit headers
//!   and `tollgate-degraded: local`.
//! * A multi-rule answer always has `"checks"`, one object per pair, in
//!   request order; the top-level fields are the deciding pair's.
//! * Unknown paths are 404 and wrong methods 405 (with `Allow`), both with
//!   a JSON `{"error"}` body.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::routing::any;
use bytes::Bytes;
use http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Map, Value, json};
use tollgate::{Check, Decision, Error, MAX_KEY_LEN};
use tollgate_tower::headers::{HeaderOptions, insert_headers};
use tollgate_tower::response::{DEGRADED_STORE_UNAVAILABLE, TOLLGATE_DEGRADED};

use crate::config::OnError;
use crate::gate::{Gate, Refusal, Verdict};

/// The largest request body accepted, in bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// The longest a client may take to send a request body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// The most (rule, key) pairs in one multi-rule check.
pub const MAX_CHECKS: usize = 64;

/// What the API's handlers share.
#[derive(Debug, Clone)]
pub struct Api {
    /// The limiter with its failure policy.
    pub gate: Arc<Gate>,
    /// Which RateLimit headers to write.
    pub headers: HeaderOptions,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
}

/// The API's routes.
pub fn router(api: Api) -> Router {
    Router::new()
        .route("/v1/check", any(check))
        .route("/v1/rules", any(rules))
        .route("/healthz", any(healthz))
        .route("/readyz", any(readyz))
        .route("/metrics", any(metrics))
        .fallback(not_found)
        .with_state(Arc::new(api))
}

/// The `tollgate-degraded` value when the in-process fallback decided
/// (`on_error = "local"`).
pub const DEGRADED_LOCAL: &str = "local";

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    let mut res = Response::new(Body::from(bytes));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

/// `{"error": message}` with `status`.
fn error(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    json_response(status, &json!({ "error": message.into() }))
}

fn method_not_allowed(method: &Method, path: &str, allow: &'static str) -> Response<Body> {
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

async fn not_found(req: Request) -> Response<Body> {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no such endpoint: {} {}; try POST /v1/check or GET /v1/rules",
            req.method(),
            req.uri().path()
        ),
    )
}

async fn healthz(req: Request) -> Response<Body> {
    if !is_get(req.method()) {
        return method_not_allowed(req.method(), "/healthz", "GET, HEAD");
    }
    json_response(StatusCode::OK, &json!({ "status": "ok" }))
}

async fn readyz(State(api): State<Arc<Api>>, req: Request) -> Response<Body> {
    if !is_get(req.method()) {
        return method_not_allowed(req.method(), "/readyz", "GET, HEAD");
    }
    match api.gate.ready().await {
        Ok(()) => json_response(StatusCode::OK, &json!({ "status": "ready" })),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

async fn metrics(State(api): State<Arc<Api>>, req: Request) -> Response<Body> {
    if !is_get(req.method()) {
        return method_not_allowed(req.method(), "/metrics", "GET, HEAD");
    }
    if let Some(keys) = api.gate.memory_keys() {
        #[allow(clippy::cast_precision_loss)] // a key count far below 2^52
        ::metrics::gauge!(crate::metrics::MEMORY_KEYS).set(keys as f64);
    }
    api.metrics.run_upkeep();
    let mut res = Response::new(Body::from(api.metrics.render()));
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    res
}

async fn rules(State(api): State<Arc<Api>>, req: Request) -> Response<Body> {
    if !is_get(req.method()) {
        return method_not_allowed(req.method(), "/v1/rules", "GET, HEAD");
    }
    json_response(StatusCode::OK, &rules_json(&api))
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

/// A parsed `POST /v1/check` body.
#[derive(Debug, PartialEq, Eq)]
struct CheckRequest {
    /// (rule, key) pairs.
    pairs: Vec<(String, String)>,
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
    if f < 0.0 {
        return Err(format!("cost: must not be negative, got {text}"));
    }
    Err(format!(
        "cost: expected a whole number (no fraction or exponent), got {text}"
    ))
}

/// A `rule` or `key` field: a string, and for keys non-empty and at most
/// [`MAX_KEY_LEN`] bytes.
fn parse_str(obj: &Map<String, Value>, field: &str, path: &str) -> Result<String, String> {
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
        Some(Value::String(s)) => Ok(s.clone()),
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

fn parse_check(body: &[u8]) -> Result<CheckRequest, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("malformed JSON: {e}"))?;
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

fn is_json(content_type: &HeaderValue) -> bool {
    let Ok(text) = content_type.to_str() else {
        return false;
    };
    let essence = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || (essence.contains('/') && essence.ends_with("+json"))
}

/// Reads a body of at most [`MAX_BODY`] bytes within [`BODY_TIMEOUT`].
async fn read_body(req: Request) -> Result<Bytes, Response<Body>> {
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body is larger than {MAX_BODY} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let body = Limited::new(req.into_body(), MAX_BODY);
    match tokio::time::timeout(BODY_TIMEOUT, body.collect()).await {
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            format!("request body not received within {BODY_TIMEOUT:?}"),
        )),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(e)) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("could not read the request body: {e}"),
        )),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

async fn check(State(api): State<Arc<Api>>, req: Request) -> Response<Body> {
    if req.method() != Method::POST {
        return method_not_allowed(req.method(), "/v1/check", "POST");
    }
    if let Some(ct) = req.headers().get(CONTENT_TYPE)
        && !is_json(ct)
    {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Type {:?} is not JSON; send application/json",
                String::from_utf8_lossy(ct.as_bytes())
            ),
        );
    }
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(res) => return res,
    };
    let parsed = match parse_check(&body) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let checks: Vec<Check<'_>> = parsed
        .pairs
        .iter()
        .map(|(rule, key)| Check::new(rule, key).cost(parsed.cost))
        .collect();
    match api.gate.check_all(&checks).await {
        Ok(verdict) => answer(&api, &parsed, &verdict),
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

fn answer(api: &Api, req: &CheckRequest, verdict: &Verdict) -> Response<Body> {
    let multi = &verdict.multi;
    let deciding = multi.decision();
    let mut body = decision_json(&req.pairs[multi.deciding].0, deciding);
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
    if verdict.degraded.is_some() {
        body.insert("degraded".into(), true.into());
    }
    let status = if multi.allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut res = json_response(status, &Value::Object(body));
    match verdict.degraded {
        // Nothing was decided: no RateLimit headers (as the tower layer).
        Some(OnError::Allow) => {
            res.headers_mut()
                .insert(TOLLGATE_DEGRADED, DEGRADED_STORE_UNAVAILABLE);
        }
        degraded => {
            let pairs: Vec<_> = req
                .pairs
                .iter()
                .zip(&multi.decisions)
                .filter_map(|((rule, _), d)| api.gate.rule(rule).map(|r| (r, d)))
                .collect();
            let retry = if multi.allowed {
                None
            } else {
                deciding.retry_after
            };
            insert_headers(res.headers_mut(), &pairs, retry, api.headers);
            if degraded.is_some() {
                res.headers_mut()
                    .insert(TOLLGATE_DEGRADED, HeaderValue::from_static(DEGRADED_LOCAL));
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
}
