//! The HTTP API (docs/http-api.md): `POST /v1/check`,
//! `GET /v1/rules`, `/healthz`, `/readyz`, `/metrics`, `/openapi.json`.
//!
//! How it answers where a client could expect otherwise (docs/http-api.md
//! says the same for clients):
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
//! no whitespace or escapes) is read by a byte scan; every other body by
//! one streaming serde reader that borrows its strings and names the
//! offending field (`json_read.rs`). A unit test and a proptest hold both to
//! the `serde_json::Value` reader they replaced, error text included. The
//! answer is written with `itoa` into one buffer (a unit test compares its
//! bytes with the `serde_json` map answer it replaced).

//! The folder: this file routes requests and answers checks ([`Api`]);
//! `json_read.rs` reads a check body; `json_write.rs` writes a check's
//! JSON answer; the tests are in `tests.rs`, the reader they hold it to in
//! `tests/value_reader.rs`. A body is read within its bounds
//! ([`read_body`]), and the body type and the JSON error answers are
//! written, by [`super::json`], which the admin API shares.

use std::sync::Arc;

use tollgate::resilient::Refusal;

use crate::config::{ConfigInfo, ReloadStatus};
use crate::gate::Gate;
use crate::telemetry::spans;
use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body::Body;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Value, json};
use tollgate::{Check, DecidedBy, Decision, Error};
use tollgate_http::decide::{Basis, insert_verdict_headers};
use tollgate_http::headers::{Deciding, HeaderOptions, Policy, PolicyCache};
use tracing::Instrument as _;

mod json_read;
mod json_usage;
mod json_write;
mod usage;

pub use super::json::{ApiBody, BODY_TIMEOUT, MAX_BODY, read_body};
pub use json_read::MAX_CHECKS;

use super::json::{
    bytes_response, error, get_only, head_only, is_json, json_response, method_not_allowed,
};
use super::ops::Probes;
use json_read::{CheckRequest, Pair, parse_check};
use json_write::{Decided, Tail, answer_body};

/// The OpenAPI 3.1 document of the HTTP API and the admin API, served at
/// `GET /openapi.json` (docs/http-api.md); `scripts/api-fuzz.sh` holds a
/// live server to it with schemathesis.
pub const OPENAPI: &str = include_str!("../../../openapi.json");

/// The check-body readers, for the fuzz targets (`fuzz/`): not an API.
#[doc(hidden)]
pub mod fuzzing {
    /// One pair read from a check body: rule, key, cost.
    pub type Pair = (String, String, u64);

    /// What each reader makes of `body`: the byte scan's pairs (`None`
    /// for a body it leaves to the serde reader), and the serde reader's
    /// pairs and whether they came in the `checks` form, or the problem
    /// it names.
    #[allow(clippy::type_complexity)] // two readers' flattened answers
    pub fn read_check(body: &[u8]) -> (Option<Vec<Pair>>, Result<(Vec<Pair>, bool), String>) {
        let pairs = |r: super::CheckRequest<'_>| {
            r.pairs
                .into_iter()
                .map(|p| (p.rule.into_owned(), p.key.into_owned(), p.cost))
                .collect::<Vec<_>>()
        };
        let plain = super::json_read::parse_check_plain(body).map(pairs);
        let json = super::json_read::parse_check_json(body).map(|r| {
            let multi = r.multi;
            (pairs(r), multi)
        });
        (plain, json)
    }
}

/// The endpoints that decide (or give back), each traced with a span.
const DECIDING: &[&str] = &[
    "/v1/check",
    "/v1/charge",
    "/v1/reserve",
    "/v1/settle",
    "/v1/cancel",
    "/v1/acquire",
    "/v1/release",
    "/v1/renew",
];

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
    /// `/healthz`, `/readyz` and `/metrics`, as the ops listener answers
    /// them.
    probes: Probes,
}

impl Api {
    /// The API over `gate`, writing the RateLimit headers `headers` asks
    /// for and rendering `/metrics` with `metrics`.
    #[must_use]
    pub fn new(gate: Arc<Gate>, headers: HeaderOptions, metrics: PrometheusHandle) -> Self {
        let policies = Arc::new(PolicyCache::new(gate.rules().len()));
        // the latency series at 0 from the start
        let _ = crate::metrics::decision_latency(crate::metrics::Door::Api);
        let probes = Probes::new(Arc::clone(&gate), metrics.clone());
        Self {
            gate,
            headers,
            metrics,
            policies,
            probes,
        }
    }

    /// The same API showing `info` (the config it serves) and `status`
    /// (the last reload's problem) in `/v1/rules`, `/readyz` and
    /// `/metrics`.
    #[must_use]
    pub fn with_config(mut self, info: Arc<ConfigInfo>, status: Arc<ReloadStatus>) -> Self {
        self.probes = self.probes.with_config(info, status);
        self
    }

    /// The same API answering `/healthz`, `/readyz` and `/metrics` with
    /// `probes` (`serve` gives the ops listener the same ones).
    #[must_use]
    pub fn with_probes(mut self, probes: Probes) -> Self {
        self.probes = probes;
        self
    }

    /// What answers `/healthz`, `/readyz` and `/metrics`.
    #[must_use]
    pub fn probes(&self) -> &Probes {
        &self.probes
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
        // A span for the deciding endpoints only, not for probes.
        let Some(route) = DECIDING.iter().find(|r| **r == req.uri().path()) else {
            return self.route(req).await;
        };
        let span = spans::http("api", req.method(), route, req.headers());
        let res = self.route(req).instrument(span.clone()).await;
        spans::http_answer(&span, res.status());
        res
    }

    /// Answers one request, as [`Api::handle`] says.
    async fn route<B>(&self, req: Request<B>) -> Response<ApiBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let head = req.method() == Method::HEAD;
        let mut res = match req.uri().path() {
            "/v1/check" => self.check(req).await,
            "/v1/charge" => self.charge(req).await,
            "/v1/reserve" => self.reserve(req).await,
            "/v1/settle" => self.settle(req, false).await,
            "/v1/cancel" => self.settle(req, true).await,
            "/v1/acquire" => self.acquire(req).await,
            "/v1/release" => self.release(req, false).await,
            "/v1/renew" => self.release(req, true).await,
            "/v1/rules" => get_only(&req, "/v1/rules", || {
                json_response(StatusCode::OK, &rules_json(self))
            }),
            "/healthz" => self.probes.healthz(&req),
            "/readyz" => self.probes.readyz(&req).await,
            "/metrics" => self.probes.metrics(&req),
            "/openapi.json" => get_only(&req, "/openapi.json", || {
                bytes_response(StatusCode::OK, OPENAPI.as_bytes().to_vec())
            }),
            path => error(
                StatusCode::NOT_FOUND,
                format!(
                    "no such endpoint: {} {path}; try POST /v1/check or GET /v1/rules",
                    req.method()
                ),
            ),
        };
        head_only(head, &mut res);
        res
    }

    async fn check<B>(&self, req: Request<B>) -> Response<ApiBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (body, other_type) = match post_body(req, "/v1/check").await {
            Ok(read) => read,
            Err(res) => return res,
        };
        let parsed = match parse_or_400(&body, other_type) {
            Ok(p) => p,
            Err(res) => return *res,
        };
        let started = std::time::Instant::now();
        let result = if let [pair] = parsed.pairs.as_slice() {
            let one = Check::new(&pair.rule, pair.key.as_bytes()).cost(pair.cost);
            self.gate.check_all(std::slice::from_ref(&one)).await
        } else {
            self.gate.check_all(&checks_of(&parsed)).await
        };
        crate::metrics::decision_latency(crate::metrics::Door::Api)
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(verdict) => answer(
                self,
                &parsed,
                Decided::Checked(&verdict.multi),
                verdict.degraded,
                &verdict.decided_by,
                &[],
            ),
            Err(e) => refused(e),
        }
    }
}

/// Reads a `POST` body for `path` as `POST /v1/check` does, with the
/// request's `Content-Type` when it is not JSON; or the answer instead
/// (405, 408, 413).
async fn post_body<B>(
    req: Request<B>,
    path: &str,
) -> Result<(Bytes, Option<HeaderValue>), Response<ApiBody>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if req.method() != Method::POST {
        return Err(method_not_allowed(req.method(), path, "POST"));
    }
    // Read as JSON whatever the Content-Type says (`curl -d` sends a
    // form type); a body that does not parse names the type it came as.
    // Kept only when not JSON: the usual check copies nothing.
    let other_type = req
        .headers()
        .get(CONTENT_TYPE)
        .filter(|ct| !is_json(ct))
        .cloned();
    Ok((read_body(req).await?, other_type))
}

/// A check body read, or the 400 naming its problem (boxed: large, and
/// off the admitting path) (and the
/// `Content-Type` it came as, when not JSON).
fn parse_or_400(
    body: &[u8],
    other_type: Option<HeaderValue>,
) -> Result<CheckRequest<'_>, Box<Response<ApiBody>>> {
    parse_check(body).map_err(|e| bad_body(e, other_type))
}

/// The 400 of a body that does not read: `e`, and the `Content-Type` it
/// came as when that is not JSON (boxed: large, and off the admitting
/// path).
fn bad_body(e: String, other_type: Option<HeaderValue>) -> Box<Response<ApiBody>> {
    let e = match other_type {
        Some(ct) => format!(
            "{e} (the body is read as JSON; it came as Content-Type {:?})",
            String::from_utf8_lossy(ct.as_bytes())
        ),
        None => e,
    };
    Box::new(error(StatusCode::BAD_REQUEST, e))
}

/// The pairs of a parsed body as the limiter takes them.
fn checks_of<'a>(parsed: &'a CheckRequest<'_>) -> Vec<Check<'a>> {
    parsed
        .pairs
        .iter()
        .map(|p| Check::new(&p.rule, p.key.as_bytes()).cost(p.cost))
        .collect()
}

/// The answer to a refused request: 404 for an unknown rule, 400 for
/// another fault of the request, 503 with `Retry-After: 1` when the store
/// failed and the policy is `deny`, or on a settle, cancel, release or
/// renew whatever the policy.
fn refused(e: Refusal) -> Response<ApiBody> {
    match e {
        Refusal::Invalid(Error::UnknownRule(name)) => error(
            StatusCode::NOT_FOUND,
            format!("unknown rule {name:?}; GET /v1/rules lists the rules"),
        ),
        Refusal::Invalid(e) => error(StatusCode::BAD_REQUEST, e.to_string()),
        // The store failed: under `deny`, or on a settle, cancel, release
        // or renew of what it holds, whatever the policy (the library may
        // name more such refusals later: they are the store's, not the
        // request's).
        e => {
            let message = match e {
                Refusal::Unavailable(e) => {
                    format!("store unavailable and the rule's on_error is deny: {e}")
                }
                Refusal::Stranded { error, policy } => format!(
                    "store unavailable, and it holds what this call changes: refused \
                     whatever the rule's on_error (here {policy}): {error}"
                ),
                other => format!("store unavailable: {other}"),
            };
            let mut res = error(StatusCode::SERVICE_UNAVAILABLE, message);
            res.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            res
        }
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
    let mut body = json!({ "rules": rules });
    api.probes.describe_config(&mut body);
    body
}

/// Pair `n` (`pair`) of an answer: its rule's position, and the limit that
/// decided it as the answer carries it (`by`, [`Verdict::decided_by`]),
/// never looked up again. An answer that carries none (a settle's, a
/// release's, which the store decides under what its ticket recorded) is
/// described by the configured rule of the pair's name.
///
/// [`Verdict::decided_by`]: tollgate::resilient::Verdict::decided_by
fn deciding<'a>(
    api: &'a Api,
    by: &[DecidedBy],
    n: usize,
    pair: &Pair<'_>,
) -> Option<(usize, Deciding<'a>)> {
    let rules = api.gate.rules();
    match by.get(n) {
        Some(by) => Some((by.index, Deciding::new(rules.get(by.index)?, Some(by)))),
        None => {
            let i = api.gate.rule_index(&pair.rule)?;
            Some((i, Deciding::new(&rules[i], None)))
        }
    }
}

/// The answer to a decided request: 200 or 429, the JSON body (with each
/// pair's `debt` for a charge), the RateLimit headers of what decided each
/// pair (`by`, one per pair; see [`deciding`]).
fn answer(
    api: &Api,
    req: &CheckRequest<'_>,
    decided: Decided<'_>,
    degraded: Option<tollgate::OnError>,
    by: &[DecidedBy],
    tail: &[Tail<'_>],
) -> Response<ApiBody> {
    let allowed = decided.allowed();
    let status = if allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let body = answer_body(req, decided, degraded.is_some(), tail);
    let mut res = bytes_response(status, body);
    let retry = if allowed {
        None
    } else {
        decided.get(decided.deciding()).and_then(|d| d.retry_after)
    };
    // Which headers an answer gets, degraded or not, is `decide`'s call,
    // as for the tower layer and the proxy; the body stays the API's JSON.
    let basis = Basis::of(degraded);
    match (req.pairs.as_slice(), decided.only()) {
        // One decided pair (the usual check): on the stack, not in a
        // `Vec`, and its rule's `RateLimit-Policy` value from the cache.
        ([pair], Some(d)) if basis.has_ratelimit() => {
            let headers = res.headers_mut();
            if let Some((i, rule)) = deciding(api, by, 0, pair) {
                api.policies
                    .insert_headers(headers, i, &rule, d, retry, api.headers);
            }
            basis.mark(headers);
        }
        _ => {
            let rules: Vec<(Deciding<'_>, &Decision)> = req
                .pairs
                .iter()
                .enumerate()
                .zip(decided.iter())
                .filter_map(|((n, pair), d)| Some((deciding(api, by, n, pair)?.1, d)))
                .collect();
            let pairs: Vec<(&dyn Policy, &Decision)> = rules
                .iter()
                .map(|(rule, d)| (rule as &dyn Policy, *d))
                .collect();
            insert_verdict_headers(res.headers_mut(), &pairs, retry, degraded, api.headers);
        }
    }
    res
}

#[cfg(test)]
mod tests;
