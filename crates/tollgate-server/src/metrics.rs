//! Prometheus metrics (`GET /metrics`), recorded through the `metrics`
//! facade and rendered by `metrics-exporter-prometheus`.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `tollgate_checks_total` | counter | `rule`, `outcome` (`allowed`, `denied`, `error`) | one per (rule, key) pair checked, with that pair's own answer; `error` when the store failed and the policy refused (503) |
//! | `tollgate_store_latency_seconds` | histogram | | time the shared store took per check (success or failure); not recorded for the memory store, whose checks are in-process function calls (the series is there, at 0) |
//! | `tollgate_store_errors_total` | counter | `kind` (`timeout`, `unavailable`, `protocol`, `circuit_open`) | failed store calls, and calls skipped while the circuit breaker is open |
//! | `tollgate_failure_policy_total` | counter | `policy` (`allow`, `deny`, `local`) | checks the failure policy answered instead of the store |
//! | `tollgate_circuit_breaker_opened_total` | counter | `node` (Redis Cluster masters only) | times the circuit breaker opened (after repeated store failures, or a failed probe); a Cluster master's breaker labelled `node="host:port"`, the store-wide one unlabelled |
//! | `tollgate_circuit_breaker_open` | gauge | `node` (Redis Cluster masters only) | 1 while the breaker is open (checks skip the store), else 0; labelled as above |
//! | `tollgate_live_replicas` | gauge | | replicas sharing the store, from the heartbeat (`[store] replicas` before the first one) |
//! | `tollgate_memory_store_keys` | gauge | | keys held by the in-memory store (set at each scrape) |
//! | `tollgate_store_up` | gauge | | 1 while the store answers, 0 when not (a probe every second for a shared store, [`crate::doors::ops::STORE_PROBE_EVERY`], and each `/readyz` under `[ops] readiness = "store"`; always 1 for the memory store) |
//! | `tollgate_upstream_errors_total` | counter | `kind` (`connect`, `timeout`, `other`) | proxied requests the upstream failed (502 / 504) |
//! | `tollgate_rlqs_*` | | | Envoy's rate limit quota service: streams, buckets, reports, requests, assignments, streams cut ([`rlqs`]) |
//! | `tollgate_config_reloads_total` | counter | `outcome` (`ok`, `error`) | config reloads ([`crate::reload`]) |
//! | `tollgate_config_info` | gauge | `version` | 1 for the config version serving (one series, written by the API) |
//! | `tollgate_config_loaded_timestamp_seconds` | gauge | | when the serving config was loaded |
//! | `tollgate_decision_latency_seconds` | histogram | `door` (`api`, `proxy`, `envoy`) | time a door took to decide a request, store call included ([`decision_latency`]): every decision of the HTTP API (checks and usage calls), of the proxy, of Envoy's `ShouldRateLimit` |
//! | `tollgate_build_info` | gauge | `version`, `os`, `arch` | always 1 |
//! | `process_*` | | | CPU seconds, resident and virtual bytes, open fds, start time, from `/proc` at each scrape ([`process`]) |
//!
//! Every family, with its type and help, is in [`catalog::FAMILIES`];
//! `/metrics` goes through [`text::stable`]: sorted, and each family
//! listed with `# HELP` and `# TYPE` before its first series.
//!
//! The library's [`tollgate::resilient::ResilientLimiter`] records all but
//! the memory-store, store-up and upstream series; the names are its
//! [`tollgate::resilient::metric`] constants.
//!
//! With `[metrics] reference_names`, `/metrics` also shows the Envoy
//! reference service's names ([`mod@reference`], docs/metrics.md), kept per
//! server rather than in the process's recorder.
//!
//! Rule labels come from the config only (an unknown rule is refused
//! before anything is recorded), so label sets stay bounded.

pub mod catalog;
pub mod process;
pub mod reference;
pub mod rlqs;
pub mod text;

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tollgate::resilient::metric;

use crate::config::{CONFIG_INFO, CONFIG_INFO_HELP, ConfigInfo};

/// `tollgate_checks_total{rule, outcome}`.
pub const CHECKS: &str = metric::CHECKS;
/// `tollgate_store_latency_seconds`.
pub const STORE_LATENCY: &str = metric::STORE_LATENCY;
/// `tollgate_store_errors_total{kind}`.
pub const STORE_ERRORS: &str = metric::STORE_ERRORS;
/// `tollgate_failure_policy_total{policy}`.
pub const FAILURE_POLICY: &str = metric::FAILURE_POLICY;
/// `tollgate_circuit_breaker_opened_total`.
pub const BREAKER_OPENED: &str = metric::BREAKER_OPENED;
/// `tollgate_circuit_breaker_open`.
pub const BREAKER_OPEN: &str = metric::BREAKER_OPEN;
/// `tollgate_live_replicas`.
pub const LIVE_REPLICAS: &str = metric::LIVE_REPLICAS;
/// `tollgate_memory_store_keys`.
pub const MEMORY_KEYS: &str = "tollgate_memory_store_keys";

/// `tollgate_store_up`: 1 while the store answers, 0 when not
/// ([`crate::doors::ops::Health::probe`]).
pub const STORE_UP: &str = "tollgate_store_up";

/// `tollgate_upstream_errors_total{kind}`.
pub const UPSTREAM_ERRORS: &str = "tollgate_upstream_errors_total";

/// `tollgate_envoy_unknown_domain_requests_total` (the Envoy door's,
/// named here so the catalog need not import a door).
pub const ENVOY_UNKNOWN_DOMAIN: &str = "tollgate_envoy_unknown_domain_requests_total";
/// `tollgate_envoy_descriptors_total{key, outcome}`.
pub const ENVOY_DESCRIPTORS: &str = "tollgate_envoy_descriptors_total";
/// `tollgate_envoy_metric_keys_folded_total`.
pub const ENVOY_FOLDED: &str = "tollgate_envoy_metric_keys_folded_total";
/// `tollgate_envoy_shadow_mode_answers_total`: answers `[envoy]
/// shadow_mode` turned from `OVER_LIMIT` to `OK` (the reference's
/// `global_shadow_mode`).
pub const ENVOY_SHADOW_MODE: &str = "tollgate_envoy_shadow_mode_answers_total";

/// `tollgate_build_info{version}`: always 1.
pub const BUILD_INFO: &str = "tollgate_build_info";

/// `tollgate_decision_latency_seconds{door}`: the time a door took to
/// decide a request.
pub const DECISION_LATENCY: &str = "tollgate_decision_latency_seconds";

/// A door that records [`DECISION_LATENCY`], its `door` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// The HTTP API: `POST /v1/check` and the usage calls (`/v1/charge`,
    /// `/v1/reserve`, `/v1/settle`, `/v1/cancel`, `/v1/acquire`,
    /// `/v1/release`, `/v1/renew`).
    Api,
    /// The reverse proxy.
    Proxy,
    /// Envoy's `ShouldRateLimit`.
    Envoy,
}

/// The [`DECISION_LATENCY`] series of `door`, registered at first use and
/// kept: a call records into it without building a key or allocating
/// (the recorder's lock-free bucket takes a new block once per 64
/// samples). Made at the door's start, so the series is there, at 0,
/// before the first request; install the recorder ([`handle`]) first.
pub fn decision_latency(door: Door) -> &'static metrics::Histogram {
    static SERIES: [OnceLock<metrics::Histogram>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let label = match door {
        Door::Api => "api",
        Door::Proxy => "proxy",
        Door::Envoy => "envoy",
    };
    SERIES[door as usize].get_or_init(|| metrics::histogram!(DECISION_LATENCY, "door" => label))
}

/// Runs `decision`, recording its time in [`DECISION_LATENCY`] of `door`
/// (for the doors' calls that decide one request each).
pub async fn timed<T>(door: Door, decision: impl Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let out = decision.await;
    decision_latency(door).record(started.elapsed().as_secs_f64());
    out
}

/// The help of [`metric::UTILIZATION`].
pub const UTILIZATION_HELP: &str = "The highest share of its capacity any key of the rule used \
     at a decision since the previous scrape.";

/// The `tollgate_build_info` line: the version built, the target it runs on.
#[must_use]
pub fn build_info_line() -> String {
    format!(
        "{BUILD_INFO}{{version=\"{}\",os=\"{}\",arch=\"{}\"}} 1\n",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH,
    )
}

/// The longest config version shown in the `tollgate_config_info` label:
/// an xDS server may send any `version_info`, and the label is on every
/// scrape.
pub(crate) const VERSION_LABEL_CAP: usize = 256;

/// The `tollgate_config_info` lines for `/metrics`: the version escaped
/// (an xDS version may hold `"` or a line feed, which would break the
/// whole page) and cut at 256 bytes, with `…`.
#[must_use]
pub fn config_info_lines(info: &ConfigInfo) -> String {
    let kept = crate::utf8::prefix(&info.version, VERSION_LABEL_CAP);
    let mut shown = text::label_value(kept);
    if kept.len() < info.version.len() {
        shown.push('…');
    }
    format!(
        "# HELP {CONFIG_INFO} {CONFIG_INFO_HELP}\n\
         # TYPE {CONFIG_INFO} gauge\n{CONFIG_INFO}{{version=\"{shown}\"}} 1\n"
    )
}

/// The `tollgate_utilization_ratio{rule}` series of the rules serving now,
/// rendered here rather than kept as gauges of the recorder: a gauge
/// cannot be removed from it, and a rule a reload removed must not keep a
/// series that looks current.
#[must_use]
pub fn utilization_lines(shares: &[(String, f64)]) -> String {
    use std::fmt::Write as _;
    let name = metric::UTILIZATION;
    let mut out = format!("# HELP {name} {UTILIZATION_HELP}\n# TYPE {name} gauge\n");
    for (rule, share) in shares {
        let _ = writeln!(
            out,
            "{name}{{rule=\"{}\"}} {share}",
            text::label_value(rule)
        );
    }
    out
}

/// Store and decision latency buckets, seconds: 100 µs to 1 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// The process's Prometheus recorder, installed on first use. `metrics`
/// has one global recorder per process; every server in the process
/// shares it.
#[must_use]
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(STORE_LATENCY.to_owned()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(DECISION_LATENCY.to_owned()),
                        LATENCY_BUCKETS,
                    )
                })
                .map(PrometheusBuilder::build_recorder);
            match recorder {
                Ok(recorder) => {
                    let handle = recorder.handle();
                    // Fails only if another recorder is installed; then
                    // this handle renders what it has (nothing), which is
                    // still valid Prometheus text.
                    let _ = metrics::set_global_recorder(recorder);
                    catalog::describe();
                    handle
                }
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label_of(version: &str) -> String {
        let lines = config_info_lines(&ConfigInfo::now(version.to_owned()));
        let sample = lines.lines().nth(2).expect("a sample line");
        assert_eq!(lines.lines().count(), 3, "{lines:?}");
        sample
            .strip_prefix("tollgate_config_info{version=\"")
            .and_then(|rest| rest.strip_suffix("\"} 1"))
            .unwrap_or_else(|| panic!("not one sample: {sample:?}"))
            .to_owned()
    }

    #[test]
    fn a_version_from_outside_cannot_break_the_page() {
        assert_eq!(label_of("v1"), "v1");
        assert_eq!(label_of("a\"b"), "a\\\"b");
        assert_eq!(label_of("a\nb"), "a\\nb");
        assert_eq!(label_of("a\\b"), "a\\\\b");
    }

    #[test]
    fn a_long_version_is_cut_on_a_character_boundary() {
        let long = "é".repeat(VERSION_LABEL_CAP);
        let shown = label_of(&long);
        assert!(shown.ends_with('…'), "{shown}");
        let kept = shown.trim_end_matches('…');
        assert!(kept.len() <= VERSION_LABEL_CAP && kept.len() >= VERSION_LABEL_CAP - 1);
        assert!(kept.chars().all(|c| c == 'é'));
    }
}
