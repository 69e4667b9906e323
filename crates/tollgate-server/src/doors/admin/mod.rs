//! The admin API (docs/admin.md), on its own listener (`--admin ADDR`,
//! `[admin] listen`; off by default): inspect, reset, block and unblock a
//! key, give units back or take them, and set, list and delete runtime
//! overrides, through the library's operator calls on the gate's limiter.
//!
//! Every request needs a configured token (`auth.rs`) when any is
//! configured: 401 without one or with a wrong one, before anything is
//! read or changed. Every change is logged with the token's name, the
//! operation, the rule and the key, and counted
//! (`tollgate_admin_operations_total{op}`, by the library).
//!
//! The folder: this file routes and answers; `auth.rs` holds the tokens;
//! `top.rs` answers the most denied keys. Bodies are read and answers
//! written by [`super::json`], as the HTTP API reads and writes its own.

// A failed step's error is the answer to send: an operator's rare call,
// where moving a response is no cost worth boxing for.
#![allow(clippy::result_large_err)]

use crate::telemetry::spans;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;

use bytes::Bytes;
use http::header::{ALLOW, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body::Body;
use serde_json::{Map, Value, json};
use tollgate::resilient::{Inspection, Refusal};
use tollgate::{Error, RuntimeOverride};

use crate::doors::json::{ApiBody, error, json_response, read_body};
use crate::gate::Gate;

mod auth;
mod top;

pub use auth::{TOKEN_ENV, TOKEN_FILE_ENV, Tokens};

/// Where every admin path starts.
const PREFIX: &str = "/admin/v1/";
/// Each section's route, as its spans name it (docs/tracing.md).
const ROUTES: &[(&str, &str)] = &[
    ("keys", "/admin/v1/keys"),
    ("blocks", "/admin/v1/blocks"),
    ("refunds", "/admin/v1/refunds"),
    ("overrides", "/admin/v1/overrides"),
    ("top", "/admin/v1/top"),
];

/// Where the admin API finds the gate in use (a reload swaps it).
pub type GateSource = Arc<dyn Fn() -> Arc<Gate> + Send + Sync>;

/// The admin API's handler.
#[derive(Clone)]
pub struct Admin {
    current: GateSource,
    tokens: Tokens,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("gate", &(self.current)())
            .field("tokens", &self.tokens)
            .finish()
    }
}

/// A refusal of the library as an answer: a bad request 400 (an unknown
/// rule 404), a store failure 503.
fn refused(r: &Refusal) -> Response<ApiBody> {
    match r {
        Refusal::Invalid(Error::UnknownRule(name)) => {
            error(StatusCode::NOT_FOUND, format!("unknown rule {name:?}"))
        }
        Refusal::Invalid(e) => error(StatusCode::BAD_REQUEST, e.to_string()),
        other => error(StatusCode::SERVICE_UNAVAILABLE, other.to_string()),
    }
}

/// `%XX` escapes decoded (a `+` stays a `+`); `None` for a bad escape.
fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            // from_str_radix alone would take a sign (`%+5`)
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// `{rule}/{key}` of a path, each percent-decoded (the key may hold `/`).
fn rule_and_key(rest: &str) -> Result<(String, Vec<u8>), Response<ApiBody>> {
    let bad = |m: &str| error(StatusCode::BAD_REQUEST, m.to_owned());
    let (rule, key) = rest
        .split_once('/')
        .ok_or_else(|| bad("the path needs /{rule}/{key}"))?;
    let rule = percent_decode(rule)
        .and_then(|r| String::from_utf8(r).ok())
        .ok_or_else(|| bad("the rule is not percent-encoded UTF-8"))?;
    let key = percent_decode(key).ok_or_else(|| bad("the key has a bad %-escape"))?;
    if rule.is_empty() || key.is_empty() {
        return Err(bad("the path needs a rule and a key"));
    }
    Ok((rule, key))
}

/// A key as JSON shows it.
fn shown(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The methods an admin path takes (its section, and whether it ends
/// there or goes on with `{rule}/{key}`), for a 405's `Allow`: RFC 9110
/// wants it, and `openapi.json` declares it. `None` for no such path.
fn allowed(section: &str, bare: bool) -> Option<&'static str> {
    Some(match (section, bare) {
        ("keys", false) => "GET, DELETE",
        ("blocks", true) => "GET, POST",
        ("blocks", false) => "DELETE",
        ("refunds", true) => "POST",
        ("overrides", true) => "GET",
        ("overrides", false) => "PUT, DELETE",
        ("top", false) => "GET",
        _ => return None,
    })
}

/// The JSON object of a body with exactly `allowed` fields (`required`
/// among them).
fn object(
    body: &[u8],
    allowed: &[&str],
    required: &[&str],
) -> Result<Map<String, Value>, Response<ApiBody>> {
    let bad = |m: String| error(StatusCode::BAD_REQUEST, m);
    let map = match serde_json::from_slice::<Fields>(body) {
        Ok(Fields(map)) => map,
        Err(e) if e.to_string().starts_with("duplicate field") => return Err(bad(e.to_string())),
        Err(_) => return Err(bad("the body must be a JSON object".to_owned())),
    };
    if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!(
            "unknown field {k:?}; expected {}",
            allowed.join(", ")
        )));
    }
    if let Some(k) = required.iter().find(|k| !map.contains_key(**k)) {
        return Err(bad(format!("missing field {k:?}")));
    }
    Ok(map)
}

/// A JSON object's fields, each named once: a field named twice is an
/// error (as in `/v1/check`), not the last one winning.
struct Fields(Map<String, Value>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Fields, A::Error> {
                let mut map = Map::new();
                while let Some((k, v)) = a.next_entry::<String, Value>()? {
                    if map.contains_key(&k) {
                        return Err(serde::de::Error::custom(format!("duplicate field {k:?}")));
                    }
                    map.insert(k, v);
                }
                Ok(Fields(map))
            }
        }
        d.deserialize_map(Visit)
    }
}

fn string_field(map: &Map<String, Value>, name: &str) -> Result<String, Response<ApiBody>> {
    match map.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            format!("{name} must be a non-empty string"),
        )),
    }
}

fn u64_field(map: &Map<String, Value>, name: &str) -> Result<Option<u64>, Response<ApiBody>> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().filter(|&n| n > 0).map(Some).ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                format!("{name} must be an integer above 0"),
            )
        }),
    }
}

/// The longest block or override ttl, ms: a rule's longest period (366
/// days). Anything longer reads as "forever", which a DELETE says better.
const MAX_FOR_MS: u64 = 366 * 86_400 * 1_000;

/// `n` (field `name`), refused above [`MAX_FOR_MS`].
fn at_most_a_year(n: Option<u64>, name: &str) -> Result<Option<u64>, Response<ApiBody>> {
    match n {
        Some(n) if n > MAX_FOR_MS => Err(error(
            StatusCode::BAD_REQUEST,
            format!("{name} must be at most {MAX_FOR_MS} (366 days), got {n}"),
        )),
        n => Ok(n),
    }
}

/// The admin API for `listener`: its tokens from `config` and
/// [`TOKEN_ENV`] or [`TOKEN_FILE_ENV`], refused beyond loopback without one, a warning at start
/// when open on loopback. Logs where it listens.
///
/// # Errors
/// A listener beyond loopback without a token, or a bad [`TOKEN_ENV`] or
/// [`TOKEN_FILE_ENV`].
pub fn open(
    listener: tokio::net::TcpListener,
    config: &crate::config::Config,
    current: GateSource,
) -> Result<(tokio::net::TcpListener, Arc<Admin>), String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let token_file = std::env::var_os(TOKEN_FILE_ENV).map(std::path::PathBuf::from);
    let tokens = Tokens::from_env(
        &config.admin.tokens,
        std::env::var(TOKEN_ENV).ok(),
        token_file.as_deref(),
    )?;
    tokens.check_listener(addr)?;
    if tokens.is_empty() {
        tracing::warn!(
            "admin API on http://{addr} has no token: open to every local caller \
             (add [[admin.tokens]] or set {TOKEN_ENV})"
        );
    }
    tracing::info!("admin API listening on http://{addr}");
    Ok((listener, Arc::new(Admin::new(current, tokens))))
}

impl Admin {
    /// The admin API over the limiter of the gate `current` gives (the one
    /// in use when each request arrives), open to callers with one of
    /// `tokens` (to every caller when there are none).
    #[must_use]
    pub fn new(current: GateSource, tokens: Tokens) -> Self {
        Self { current, tokens }
    }

    /// The gate in use now.
    fn gate(&self) -> Arc<Gate> {
        (self.current)()
    }

    /// Answers one request.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<ApiBody>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if let Err(e) = auth::one_authorization(req.headers()) {
            return error(StatusCode::BAD_REQUEST, e);
        }
        let Some(who) = self.tokens.caller(req.headers()).map(str::to_owned) else {
            let mut res = error(
                StatusCode::UNAUTHORIZED,
                "the admin API needs Authorization: Bearer <token> with a configured token",
            );
            res.headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return res;
        };
        let path = req.uri().path().to_owned();
        let query = req.uri().query().map(str::to_owned);
        let Some(rest) = path.strip_prefix(PREFIX) else {
            return error(StatusCode::NOT_FOUND, format!("no such path: {path}"));
        };
        let (section, tail) = rest.split_once('/').unwrap_or((rest, ""));
        let method = req.method().clone();
        let span = match ROUTES.iter().find(|(s, _)| *s == section) {
            Some((_, route)) => spans::http("admin", &method, route, req.headers()),
            None => tracing::Span::none(),
        };
        let res = self
            .answer(req, &who, &path, query.as_deref(), section, tail, method)
            .instrument(span.clone())
            .await;
        spans::http_answer(&span, res.status());
        res
    }

    /// Answers an authorized request for `section`/`tail`.
    #[allow(clippy::too_many_arguments)] // the parts of one request
    async fn answer<B>(
        &self,
        req: Request<B>,
        who: &str,
        path: &str,
        query: Option<&str>,
        section: &str,
        tail: &str,
        method: Method,
    ) -> Response<ApiBody>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let body = if matches!(method, Method::POST | Method::PUT) {
            match read_body(req).await {
                Ok(b) => b,
                Err(res) => return res,
            }
        } else {
            Bytes::new()
        };
        let answer = match (section, &method, tail.is_empty()) {
            ("keys", &Method::GET, false) => self.inspect(tail).await,
            ("keys", &Method::DELETE, false) => self.reset(who, tail).await,
            ("blocks", &Method::POST, true) => self.block(who, &body).await,
            ("blocks", &Method::GET, true) => Ok(self.blocks()),
            ("blocks", &Method::DELETE, false) => self.unblock(who, tail).await,
            ("refunds", &Method::POST, true) => self.refund(who, &body).await,
            ("overrides", &Method::GET, true) => Ok(self.overrides()),
            ("overrides", &Method::PUT, false) => self.set_override(who, tail, &body).await,
            ("overrides", &Method::DELETE, false) => self.delete_override(who, tail).await,
            ("top", &Method::GET, false) => {
                match percent_decode(tail).and_then(|r| String::from_utf8(r).ok()) {
                    Some(rule) => {
                        let (status, body) = top::top(&self.gate(), &rule, query);
                        Ok(json_response(status, &body))
                    }
                    None => Ok(error(
                        StatusCode::BAD_REQUEST,
                        "the rule is not percent-encoded UTF-8",
                    )),
                }
            }
            (section, _, bare) if allowed(section, bare).is_some() => {
                let allow = allowed(section, bare).unwrap_or_default();
                let mut res = error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!(
                        "method {method} is not allowed on {path}; use {allow} (docs/admin.md)"
                    ),
                );
                res.headers_mut()
                    .insert(ALLOW, HeaderValue::from_static(allow));
                Ok(res)
            }
            _ => Ok(error(
                StatusCode::NOT_FOUND,
                format!("no such path: {path}"),
            )),
        };
        answer.unwrap_or_else(|res| res)
    }

    async fn inspect(&self, tail: &str) -> Result<Response<ApiBody>, Response<ApiBody>> {
        let (rule, key) = rule_and_key(tail)?;
        let gate = self.gate();
        let limiter = gate.limiter();
        let i: Inspection = limiter
            .inspect(&rule, &key)
            .await
            .map_err(|r| refused(&r))?;
        let d = &i.decision;
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "rule": rule,
                "key": shown(&key),
                "source": i.source,
                "algorithm": i.rule.algorithm().as_str(),
                "limit": i.rule.limit(),
                "period_ms": ms(i.rule.period()),
                "burst": i.rule.algorithm().has_burst().then(|| i.rule.burst()),
                "remaining": d.remaining,
                "reset_after_ms": d.reset_after_ms(),
                "retry_after_ms": d.retry_after_ms(),
                "debt": i.debt,
                "held": i.held,
                "blocked_until_ms": i.blocked_until_ms,
            }),
        ))
    }

    async fn reset(&self, who: &str, tail: &str) -> Result<Response<ApiBody>, Response<ApiBody>> {
        let (rule, key) = rule_and_key(tail)?;
        let held = self
            .gate()
            .limiter()
            .reset(&rule, &key)
            .await
            .map_err(|r| refused(&r))?;
        tracing::info!(
            token = who,
            op = "reset",
            rule,
            key = shown(&key),
            "admin: key reset"
        );
        Ok(json_response(
            StatusCode::OK,
            &json!({ "rule": rule, "key": shown(&key), "reset": true, "had_state": held }),
        ))
    }

    async fn block(&self, who: &str, body: &[u8]) -> Result<Response<ApiBody>, Response<ApiBody>> {
        let map = object(body, &["rule", "key", "for_ms"], &["rule", "key", "for_ms"])?;
        let rule = string_field(&map, "rule")?;
        let key = string_field(&map, "key")?;
        let for_ms = at_most_a_year(u64_field(&map, "for_ms")?, "for_ms")?.unwrap_or(0);
        let until = self
            .gate()
            .limiter()
            .block(&rule, key.as_bytes(), Duration::from_millis(for_ms))
            .await
            .map_err(|r| refused(&r))?;
        tracing::info!(
            token = who,
            op = "block",
            rule,
            key,
            for_ms,
            "admin: key blocked"
        );
        Ok(json_response(
            StatusCode::OK,
            &json!({ "rule": rule, "key": key, "blocked_until_ms": until }),
        ))
    }

    fn blocks(&self) -> Response<ApiBody> {
        let list: Vec<Value> = self
            .gate()
            .limiter()
            .blocks()
            .iter()
            .map(|b| json!({ "rule": b.rule, "key": shown(&b.key), "blocked_until_ms": b.ends_ms }))
            .collect();
        json_response(StatusCode::OK, &json!({ "blocks": list }))
    }

    async fn unblock(&self, who: &str, tail: &str) -> Result<Response<ApiBody>, Response<ApiBody>> {
        let (rule, key) = rule_and_key(tail)?;
        let was = self
            .gate()
            .limiter()
            .unblock(&rule, &key)
            .await
            .map_err(|r| refused(&r))?;
        tracing::info!(
            token = who,
            op = "unblock",
            rule,
            key = shown(&key),
            "admin: key unblocked"
        );
        Ok(json_response(
            StatusCode::OK,
            &json!({ "rule": rule, "key": shown(&key), "unblocked": was }),
        ))
    }

    async fn refund(&self, who: &str, body: &[u8]) -> Result<Response<ApiBody>, Response<ApiBody>> {
        let map = object(body, &["rule", "key", "cost"], &["rule", "key", "cost"])?;
        let rule = string_field(&map, "rule")?;
        let key = string_field(&map, "key")?;
        let cost = map.get("cost").and_then(Value::as_i64).ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                "cost must be an integer (negative takes units)",
            )
        })?;
        let verdict = self
            .gate()
            .limiter()
            .adjust(&rule, key.as_bytes(), cost)
            .await
            .map_err(|r| refused(&r))?;
        let op = if cost > 0 { "refund" } else { "charge" };
        tracing::info!(token = who, op, rule, key, cost, "admin: units adjusted");
        let c = verdict.charged.first();
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "rule": rule,
                "key": key,
                "cost": cost,
                "remaining": c.map(|c| c.decision.remaining),
                "debt": c.map(|c| c.debt),
                "degraded": verdict.degraded.is_some(),
            }),
        ))
    }

    /// The overrides in force, each with the values that decide its keys,
    /// as `PUT` answers them (a period or burst left out shows the one
    /// that applies).
    fn overrides(&self) -> Response<ApiBody> {
        let gate = self.gate();
        let limiter = gate.limiter();
        let list: Vec<Value> = limiter
            .overrides()
            .iter()
            .filter_map(|o| {
                let made = o.applied_to(limiter.rule(&o.rule)?).ok()?;
                Some(json!({
                    "rule": o.rule,
                    "key": shown(&o.key),
                    "limit": made.limit(),
                    "period_ms": ms(made.period()),
                    "burst": made.algorithm().has_burst().then(|| made.burst()),
                    "expires_at_ms": o.ends_ms,
                }))
            })
            .collect();
        json_response(StatusCode::OK, &json!({ "overrides": list }))
    }

    async fn set_override(
        &self,
        who: &str,
        tail: &str,
        body: &[u8],
    ) -> Result<Response<ApiBody>, Response<ApiBody>> {
        let (rule, key) = rule_and_key(tail)?;
        let map = object(body, &["limit", "period", "burst", "ttl_ms"], &["limit"])?;
        let limit = u64_field(&map, "limit")?.unwrap_or(0);
        let period = match map.get("period") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(
                tollgate::time::parse_duration(s)
                    .map_err(|e| error(StatusCode::BAD_REQUEST, format!("period: {e}")))?,
            ),
            Some(_) => {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    "period must be a duration string such as \"1s\" or \"1m\"",
                ));
            }
        };
        let burst = u64_field(&map, "burst")?;
        let ttl_ms = at_most_a_year(u64_field(&map, "ttl_ms")?, "ttl_ms")?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, ms);
        let ends_ms = ttl_ms.map(|t| now_ms.saturating_add(t));
        let made = self
            .gate()
            .limiter()
            .set_override(RuntimeOverride {
                rule: rule.clone(),
                key: key.clone(),
                limit,
                period,
                burst,
                ends_ms,
            })
            .await
            .map_err(|r| refused(&r))?;
        tracing::info!(
            token = who,
            op = "set_override",
            rule,
            key = shown(&key),
            limit,
            ttl_ms,
            "admin: runtime override set"
        );
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "rule": rule,
                "key": shown(&key),
                "limit": made.limit(),
                "period_ms": ms(made.period()),
                "burst": made.algorithm().has_burst().then(|| made.burst()),
                "expires_at_ms": ends_ms,
            }),
        ))
    }

    async fn delete_override(
        &self,
        who: &str,
        tail: &str,
    ) -> Result<Response<ApiBody>, Response<ApiBody>> {
        let (rule, key) = rule_and_key(tail)?;
        let was = self
            .gate()
            .limiter()
            .delete_override(&rule, &key)
            .await
            .map_err(|r| refused(&r))?;
        tracing::info!(
            token = who,
            op = "delete_override",
            rule,
            key = shown(&key),
            "admin: runtime override deleted"
        );
        Ok(json_response(
            StatusCode::OK,
            &json!({ "rule": rule, "key": shown(&key), "deleted": was }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_decode() {
        assert_eq!(
            rule_and_key("api/tenant%3Aacme%2Fx").ok(),
            Some(("api".to_owned(), b"tenant:acme/x".to_vec()))
        );
        assert_eq!(
            rule_and_key("*/a/b").ok(),
            Some(("*".to_owned(), b"a/b".to_vec()))
        );
        assert!(rule_and_key("api").is_err());
        assert!(rule_and_key("api/%zz").is_err());
        // two hex digits, not a signed number: `%+5` is no escape
        assert!(rule_and_key("api/%+5").is_err());
        assert!(rule_and_key("api/").is_err());
    }
}
