//! The answers of `/healthz`, `/readyz` and `/metrics` ([`Probes`]),
//! for the ops listener and the HTTP API: readiness is decided here once
//! ([`Probes::readiness`]), and `/metrics` is rendered here once.

use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Value, json};

use super::Health;
use crate::config::{ConfigInfo, Readiness, ReloadStatus};
use crate::doors::json::{ApiBody, get_only, is_get, json_response, method_not_allowed};
use crate::gate::Gate;
use crate::metrics::config_info_lines;
use crate::metrics::reference::ReferenceMetrics;

/// What the probes of one generation answer from: its gate (the store),
/// the recorder, the config it serves, and what outlives it ([`Health`]).
#[derive(Debug, Clone)]
pub struct Probes {
    gate: Arc<Gate>,
    metrics: PrometheusHandle,
    /// The serving config's version and load time, and the last reload's
    /// problem (`serve`; docs/operations.md).
    config: Option<(Arc<ConfigInfo>, Arc<ReloadStatus>)>,
    health: Arc<Health>,
    readiness: Readiness,
    /// The reference service's series, when `/metrics` shows them.
    reference: Option<Arc<ReferenceMetrics>>,
    /// Waiting for the first xDS config before serving (docs/xds.md):
    /// not ready until it comes.
    awaiting_config: bool,
}

impl Probes {
    /// The probes of `gate`, rendering `/metrics` with `metrics`; never
    /// draining, readiness `serving`, no config shown.
    #[must_use]
    pub fn new(gate: Arc<Gate>, metrics: PrometheusHandle) -> Self {
        Self {
            gate,
            metrics,
            config: None,
            health: Arc::new(Health::new()),
            readiness: Readiness::default(),
            reference: None,
            awaiting_config: false,
        }
    }

    /// The same, showing `info` (the config served) and `status` (the
    /// last reload's problem) in `/readyz` and `/metrics`.
    #[must_use]
    pub fn with_config(mut self, info: Arc<ConfigInfo>, status: Arc<ReloadStatus>) -> Self {
        self.config = Some((info, status));
        self
    }

    /// The same, with the server's `health` (draining, the store probe)
    /// and what readiness waits for (`[ops] readiness`).
    #[must_use]
    pub fn with_health(mut self, health: Arc<Health>, readiness: Readiness) -> Self {
        self.health = health;
        self.readiness = readiness;
        self
    }

    /// The same, `/metrics` showing `reference`'s series too (`[metrics]
    /// reference_names`).
    #[must_use]
    pub fn with_reference(mut self, reference: Option<Arc<ReferenceMetrics>>) -> Self {
        self.reference = reference;
        self
    }

    /// The same, not ready while `awaiting` (the first xDS config, which
    /// the server waits for before opening its doors).
    #[must_use]
    pub fn awaiting_config(mut self, awaiting: bool) -> Self {
        self.awaiting_config = awaiting;
        self
    }

    /// The config's version, load time and last reload problem, into
    /// `body` (nothing without [`Probes::with_config`]).
    pub(crate) fn describe_config(&self, body: &mut Value) {
        if let (Some((info, status)), Value::Object(map)) = (&self.config, body) {
            status.describe(info, map);
        }
    }

    /// `/healthz`: 200 while the process answers at all (liveness).
    pub(crate) fn healthz<B>(&self, req: &Request<B>) -> Response<ApiBody> {
        get_only(req, "/healthz", || {
            json_response(StatusCode::OK, &json!({ "status": "ok" }))
        })
    }

    /// `/readyz`: [`Probes::readiness`], with the config served.
    pub(crate) async fn readyz<B>(&self, req: &Request<B>) -> Response<ApiBody> {
        if !is_get(req.method()) {
            return method_not_allowed(req.method(), "/readyz", "GET, HEAD");
        }
        let (status, mut body) = self.readiness().await;
        self.describe_config(&mut body);
        json_response(status, &body)
    }

    /// Whether this replica should get traffic, and the body saying so
    /// (docs/operations.md, "Probes"):
    ///
    /// * draining after SIGTERM: 503 `{"status":"draining"}`;
    /// * waiting for the first xDS config (without `start_without_config`):
    ///   503 `{"status":"unready","config":"awaiting xDS"}`, as no door
    ///   serves yet;
    /// * under readiness `serving`, 200 `{"status":"ready","store":"up"}`,
    ///   or with `"store":"down","store_error":"..."`: a replica that
    ///   answers by its failure policy is ready, or an outage of the store
    ///   would take every replica out of its Service at once and the
    ///   policy would never act. The store's state is the last probe's
    ///   (`serve` probes every second): a hung store never makes this
    ///   wait, so a store timeout longer than the probe's cannot fail it;
    /// * under readiness `store`, the store is asked now
    ///   ([`Health::probe`]), and one that does not answer is a 503
    ///   `{"status":"unready","store":"down",...,"error":"..."}`.
    ///
    /// A refused reload leaves the replica serving its old config: still
    /// ready (docs/operations.md).
    pub async fn readiness(&self) -> (StatusCode, Value) {
        if self.health.draining() {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "status": "draining",
                    "error": "draining: shutting down, in-flight requests finish",
                }),
            );
        }
        if self.awaiting_config {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "status": "unready",
                    "config": "awaiting xDS",
                    "error": "waiting for the first xDS config",
                }),
            );
        }
        let store = match (self.readiness, self.health.last()) {
            (Readiness::Serving, Some(last)) => last,
            // The opt-in asks each time, as before `[ops]`: a store that
            // takes writes again is ready at once (and before the first
            // probe there is nothing to report).
            _ => self.health.probe(&self.gate).await,
        };
        match (store, self.readiness) {
            (Ok(()), _) => (StatusCode::OK, json!({ "status": "ready", "store": "up" })),
            (Err(e), Readiness::Serving) => (
                StatusCode::OK,
                json!({ "status": "ready", "store": "down", "store_error": e }),
            ),
            (Err(e), Readiness::Store) => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "status": "unready", "store": "down", "store_error": e, "error": e }),
            ),
        }
    }

    /// `/metrics`: the recorder's series and those rendered at each
    /// scrape (the memory store's keys, utilization, the config version,
    /// build info, the process), sorted by family, every family of
    /// [`crate::metrics::catalog::FAMILIES`] listed even before its first
    /// series ([`crate::metrics::text::stable`]).
    pub(crate) fn metrics<B>(&self, req: &Request<B>) -> Response<ApiBody> {
        get_only(req, "/metrics", || self.render_metrics())
    }

    fn render_metrics(&self) -> Response<ApiBody> {
        if let Some(keys) = self.gate.memory_keys() {
            #[allow(clippy::cast_precision_loss)] // a key count far below 2^52
            ::metrics::gauge!(crate::metrics::MEMORY_KEYS).set(keys as f64);
        }
        // reservations and leases whose time ran out: expired, off the gauges
        self.gate.limiter().sweep_open();
        let utilization = self.gate.limiter().take_utilization();
        self.metrics.run_upkeep();
        let mut text = self.metrics.render();
        text.push_str(&crate::metrics::utilization_lines(&utilization));
        if let Some((info, _)) = &self.config {
            text.push_str(&config_info_lines(info));
        }
        text.push_str(&crate::metrics::build_info_line());
        text.push_str(&crate::metrics::process::lines());
        if let Some(reference) = &self.reference {
            let loads = self.config.as_ref().map(|(_, s)| s.loads());
            text.push_str(&reference.render(loads.unwrap_or_default()));
        }
        // sorted, every family listed with its help from the first scrape
        let text = crate::metrics::text::stable(&text);
        let mut res = Response::new(Full::new(Bytes::from(text)));
        res.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        res
    }
}
