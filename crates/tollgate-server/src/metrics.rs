//! Prometheus metrics (`GET /metrics`), recorded through the `metrics`
//! facade and rendered by `metrics-exporter-prometheus`.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `tollgate_checks_total` | counter | `rule`, `outcome` (`allowed`, `denied`, `error`) | one per (rule, key) pair checked, with that pair's own answer; `error` when the store failed and the policy refused (503) |
//! | `tollgate_store_latency_seconds` | histogram | | time the shared store took per check (success or failure) |
//! | `tollgate_store_errors_total` | counter | `kind` (`timeout`, `unavailable`, `protocol`, `circuit_open`) | failed store calls, and calls skipped while the circuit breaker is open |
//! | `tollgate_failure_policy_total` | counter | `policy` (`allow`, `deny`, `local`) | checks the failure policy answered instead of the store |
//! | `tollgate_memory_store_keys` | gauge | | keys held by the in-memory store (set at each scrape) |
//! | `tollgate_upstream_errors_total` | counter | `kind` (`connect`, `timeout`, `other`) | proxied requests the upstream failed (502 / 504) |
//!
//! Rule labels come from the config only (an unknown rule is refused
//! before anything is recorded), so label sets stay bounded.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// `tollgate_checks_total{rule, outcome}`.
pub const CHECKS: &str = "tollgate_checks_total";
/// `tollgate_store_latency_seconds`.
pub const STORE_LATENCY: &str = "tollgate_store_latency_seconds";
/// `tollgate_store_errors_total{kind}`.
pub const STORE_ERRORS: &str = "tollgate_store_errors_total";
/// `tollgate_failure_policy_total{policy}`.
pub const FAILURE_POLICY: &str = "tollgate_failure_policy_total";
/// `tollgate_memory_store_keys`.
pub const MEMORY_KEYS: &str = "tollgate_memory_store_keys";

/// `tollgate_upstream_errors_total{kind}`.
pub const UPSTREAM_ERRORS: &str = "tollgate_upstream_errors_total";

/// Store latency buckets, seconds: 100 µs to 1 s.
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
                .map(PrometheusBuilder::build_recorder);
            match recorder {
                Ok(recorder) => {
                    let handle = recorder.handle();
                    // Fails only if another recorder is installed; then
                    // this handle renders what it has (nothing), which is
                    // still valid Prometheus text.
                    let _ = metrics::set_global_recorder(recorder);
                    describe();
                    handle
                }
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone()
}

fn describe() {
    metrics::describe_counter!(
        CHECKS,
        "Checks by rule and outcome (one per rule of a multi-rule check)."
    );
    metrics::describe_histogram!(
        STORE_LATENCY,
        metrics::Unit::Seconds,
        "Time the store took to answer a check."
    );
    metrics::describe_counter!(
        STORE_ERRORS,
        "Store calls that failed (or were skipped by the open circuit breaker), by kind."
    );
    metrics::describe_counter!(
        FAILURE_POLICY,
        "Checks answered by the failure policy because the store failed."
    );
    metrics::describe_gauge!(MEMORY_KEYS, "Keys held by the in-memory store.");
    metrics::describe_counter!(
        UPSTREAM_ERRORS,
        "Proxied requests the upstream failed: no connection (502), an error (502) or no answer in time (504)."
    );
}

/// Counts one checked (rule, key) pair under `tollgate_checks_total` with
/// its outcome (`allowed`, `denied` or `error`).
///
/// The counters are registered once per rule and kept: `metrics::counter!`
/// with a rule label builds the key (two allocations) and looks it up in
/// the recorder on every call, which a check cannot afford.
pub fn count_check(rule: &str, outcome: Outcome) {
    let cache = check_counters();
    let i = outcome as usize;
    let cached = cache
        .read()
        .ok()
        .and_then(|map| map.get(rule).and_then(|c| c[i].clone()));
    let counter = cached.unwrap_or_else(|| {
        // Registered on first use only, as `counter!` would: no zero
        // series appear for outcomes that never happened.
        let counter =
            metrics::counter!(CHECKS, "rule" => rule.to_owned(), "outcome" => outcome.as_str());
        if let Ok(mut map) = cache.write() {
            map.entry(rule.into()).or_default()[i] = Some(counter.clone());
        }
        counter
    });
    counter.increment(1);
}

/// The outcome label of `tollgate_checks_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted.
    Allowed,
    /// Denied.
    Denied,
    /// The store failed and the failure policy refused (503).
    Error,
}

impl Outcome {
    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Error => "error",
        }
    }
}

type CheckCounters = RwLock<HashMap<Box<str>, [Option<Counter>; 3]>>;

fn check_counters() -> &'static CheckCounters {
    static COUNTERS: OnceLock<CheckCounters> = OnceLock::new();
    COUNTERS.get_or_init(|| {
        // Install the recorder before registering anything: a counter
        // registered with no recorder would count into the void forever.
        let _ = handle();
        RwLock::new(HashMap::new())
    })
}

/// `tollgate_store_latency_seconds`, registered once.
pub fn store_latency() -> &'static Histogram {
    static LATENCY: OnceLock<Histogram> = OnceLock::new();
    LATENCY.get_or_init(|| {
        let _ = handle();
        metrics::histogram!(STORE_LATENCY)
    })
}
