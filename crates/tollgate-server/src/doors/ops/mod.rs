//! The ops listener (`--ops ADDR`, `[ops] listen`; docs/operations.md,
//! "Probes"): `GET`/`HEAD` `/healthz`, `/readyz` and `/metrics`, and
//! nothing else (404 naming the three). It is served whatever doors are
//! (a proxy-only or gRPC-only replica has no HTTP API to probe), and it
//! answers until every door has drained, so a probe during the drain
//! reads `draining` rather than a refused connection.
//!
//! The folder: this file routes the listener's requests; `probes.rs`
//! answers the three paths ([`Probes`]), for this listener and the HTTP
//! API alike: one readiness decision, one metrics rendering; `health.rs`
//! is what outlives a config ([`Health`]: draining, the store probe and
//! `tollgate_store_up`).

use http::{Method, Request, Response, StatusCode};

use super::json::{ApiBody, error, head_only};

mod health;
mod probes;

pub use health::{Health, STORE_PROBE_EVERY};
pub use probes::Probes;

/// Answers one request of the ops listener with `probes` (those of the
/// generation current at the request's start). Never fails: every problem
/// is an HTTP answer.
pub async fn handle<B>(probes: &Probes, req: Request<B>) -> Response<ApiBody> {
    let head = req.method() == Method::HEAD;
    let mut res = match req.uri().path() {
        "/healthz" => probes.healthz(&req),
        "/readyz" => probes.readyz(&req).await,
        "/metrics" => probes.metrics(&req),
        path => error(
            StatusCode::NOT_FOUND,
            format!(
                "no such endpoint: {} {path}; the ops listener serves GET /healthz, \
                 /readyz and /metrics",
                req.method()
            ),
        ),
    };
    head_only(head, &mut res);
    res
}
