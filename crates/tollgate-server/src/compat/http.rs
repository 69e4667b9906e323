//! The answers of the reference's HTTP port ([`ReferenceHttp`]:
//! `/healthcheck` and `/json`) and of its debug port (`debug`:
//! `/rlconfig` and the `/` listing), over the generation current at each
//! request.
//!
//! `/healthcheck` is the reference's component check: 200 `OK` while
//! every component is healthy, else 500 with an empty body, whatever the
//! method. Its components: Redis (healthy once it has answered since
//! start; with `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`, while it answers),
//! not draining (SIGTERM fails it at once, before the doors stop), with
//! `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` at least one domain loaded,
//! and under xDS without `FORCE_START_WITHOUT_INITIAL_CONFIG` a first
//! config applied.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use tokio::sync::watch;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::json;
use super::settings::HealthRules;
use crate::doors::Generation;
use crate::doors::ops::Health;

/// The longest `/json` body read.
pub const MAX_JSON_BODY: usize = 1024 * 1024;

/// The debug port's `/` listing (the reference lists its pprof and
/// `/stats` endpoints too, which tollgate does not serve).
pub const DEBUG_LISTING: &str =
    "/rlconfig: print out the currently loaded configuration for debugging\n";

/// The reference's `grpc.health.v1` service name, which mirrors
/// `/healthcheck`.
pub const GRPC_HEALTH_NAME: &str = "ratelimit";

/// The HTTP port's state across requests, and the gRPC health reporter
/// that mirrors it.
pub struct ReferenceHttp {
    rules: HealthRules,
    /// Redis has answered once since start.
    store_seen: AtomicBool,
    /// The xDS client's "a response was applied" (its version may be
    /// empty: Envoy Gateway's snapshot with no config is version `""`).
    xds_applied: OnceLock<watch::Receiver<bool>>,
    grpc_health: HealthReporter,
}

impl std::fmt::Debug for ReferenceHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceHttp")
            .field("rules", &self.rules)
            .field("store_seen", &self.store_seen)
            .finish_non_exhaustive()
    }
}

impl ReferenceHttp {
    /// A port answering `/healthcheck` by `rules`.
    #[must_use]
    pub fn new(rules: HealthRules) -> Self {
        Self {
            rules,
            store_seen: AtomicBool::new(false),
            xds_applied: OnceLock::new(),
            grpc_health: HealthReporter::new(),
        }
    }

    /// Follows the xDS client's first-applied signal (what
    /// [`crate::xds`]'s start returns) for the first-config check.
    pub(crate) fn follow_xds(&self, applied: watch::Receiver<bool>) {
        let _ = self.xds_applied.set(applied);
    }

    /// The `grpc.health.v1` reporter the gRPC port serves, whose
    /// [`GRPC_HEALTH_NAME`] the reference ports keep current.
    #[must_use]
    pub fn grpc_health(&self) -> HealthReporter {
        self.grpc_health.clone()
    }

    /// Sets the gRPC health of [`GRPC_HEALTH_NAME`] to what
    /// `/healthcheck` answers now.
    pub(crate) async fn mirror(&self, generation: &Generation, health: &Health) {
        let status = if self.healthy(generation, health) {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.grpc_health
            .set_service_status(GRPC_HEALTH_NAME, status)
            .await;
    }

    /// Whether every component is healthy.
    pub(crate) fn healthy(&self, generation: &Generation, health: &Health) -> bool {
        if health.draining() {
            return false;
        }
        let answers = matches!(health.last(), Some(Ok(())));
        if answers {
            self.store_seen.store(true, Ordering::Release);
        }
        let store = if self.rules.store_now {
            answers
        } else {
            self.store_seen.load(Ordering::Acquire)
        };
        let config = !self.rules.first_config
            || self
                .xds_applied
                .get()
                .is_some_and(|applied| *applied.borrow());
        store && config && (!self.rules.needs_config || !generation.plan.envoy.domains().is_empty())
    }

    /// Answers one request of the HTTP port.
    pub(crate) async fn handle<B>(
        &self,
        generation: &Generation,
        health: &Health,
        req: Request<B>,
    ) -> Response<Full<Bytes>>
    where
        B: http_body::Body,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        match req.uri().path() {
            "/healthcheck" => {
                if self.healthy(generation, health) {
                    text(StatusCode::OK, "OK")
                } else {
                    text(StatusCode::INTERNAL_SERVER_ERROR, "")
                }
            }
            "/json" => json_call(generation, req).await,
            _ => plain_error(StatusCode::NOT_FOUND),
        }
    }
}

/// `/json`: the body's `RateLimitRequest` decided as a gRPC call is; 200
/// (429 when over the limit, 500 when the overall code is `UNKNOWN`) with
/// the response's JSON, 400 for a body that does not parse or a call that
/// fails, as the reference answers.
async fn json_call<B>(generation: &Generation, req: Request<B>) -> Response<Full<Bytes>>
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let body = match Limited::new(req.into_body(), MAX_JSON_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            tracing::warn!("/json: {e}");
            return plain_error(StatusCode::BAD_REQUEST);
        }
    };
    let request = match json::request(&body) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("/json: {e}");
            return plain_error(StatusCode::BAD_REQUEST);
        }
    };
    let answer = match generation.envoy.decide(&request).await {
        Ok(a) => a,
        Err(e) => {
            // Counted as the reference's service counts a failed call,
            // whichever door it came through.
            if let Some(reference) = generation.envoy.reference_metrics() {
                reference.error(e.kind);
            }
            tracing::warn!("/json: {}", e.status.message());
            return plain_error(StatusCode::BAD_REQUEST);
        }
    };
    let status = match answer.overall_code {
        0 => StatusCode::INTERNAL_SERVER_ERROR,
        2 => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::OK,
    };
    let mut res = Response::new(Full::new(Bytes::from(json::response(&answer).to_string())));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// The debug port: `/rlconfig` (the loaded limits in the reference's
/// text, empty before any) and `/` (what it serves).
pub(crate) fn debug<B>(generation: &Generation, req: &Request<B>) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/rlconfig" => text(StatusCode::OK, &generation.plan.envoy.dump()),
        "/" => text(StatusCode::OK, DEBUG_LISTING),
        _ => plain_error(StatusCode::NOT_FOUND),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(body.to_owned())));
    *res.status_mut() = status;
    if !body.is_empty() {
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    res
}

/// Go's `http.Error(w, StatusText(code), code)`.
fn plain_error(status: StatusCode) -> Response<Full<Bytes>> {
    let reason = status.canonical_reason().unwrap_or("Error");
    let mut res = text(status, &format!("{reason}\n"));
    res.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    res
}
