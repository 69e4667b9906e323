//! The Envoy reference service's Prometheus names (`[metrics]
//! reference_names`, docs/metrics.md "Reference names"), as Envoy
//! Gateway's statsd mapping names envoyproxy/ratelimit's stats, so its
//! Grafana dashboard and its users' queries read tollgate unchanged:
//!
//! | name | type | labels |
//! |---|---|---|
//! | `ratelimit_service_rate_limit_{total_hits,over_limit,near_limit,within_limit,shadow_mode}` | counter | `domain`, `key1`, `key2` |
//! | `ratelimit_service_should_rate_limit_error` | counter | `err_type` (`redis_error`, `service_error`) |
//! | `ratelimit_service_total_requests` | counter | `grpc_method` (`ShouldRateLimit`, `Check`) |
//! | `ratelimit_service_response_time_seconds` | histogram | `grpc_method` |
//! | `ratelimit_service_config_load_success`, `…_error` | counter | |
//! | `ratelimit_service_global_shadow_mode` | counter | |
//! | `go_memstats_gc_cpu_fraction` | gauge | |
//!
//! The series live here, per server, not in the process's recorder: a
//! server with the setting off shows none of them even when another server
//! of the same process (a test's) records them. The hits are counted with
//! the reference's arithmetic (`tally.rs`); the labels are the reference's
//! stats key, sanitized and folded as the mapping folds it
//! (`stats_key.rs`). Keys are config paths, so the series are bounded by
//! the config; keys made of request values (`detailed_metric`,
//! `value_to_metric`, a descriptor's own `limit`) are capped at
//! [`MAX_REQUEST_SERIES`], past which they count under `key1="_other"`.

mod stats_key;
mod tally;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

pub use stats_key::{Labels, descriptor_key, fold, sanitize};
pub use tally::{
    Counts, NEAR_LIMIT, OVER_LIMIT, SHADOW_MODE, Seen, TOTAL_HITS, WITHIN_LIMIT, near_threshold,
    tally,
};

use super::catalog::Kind;
use super::text::label_value;

/// The five per-key counters, in [`Counts`] order, with their help.
pub const RATE_LIMIT: [(&str, &str); 5] = [
    (
        "ratelimit_service_rate_limit_total_hits",
        "Hits (cost units) of descriptors that found a limit, by stats key (reference name).",
    ),
    (
        "ratelimit_service_rate_limit_over_limit",
        "Hits over the limit, by stats key (reference name and arithmetic).",
    ),
    (
        "ratelimit_service_rate_limit_near_limit",
        "Hits past the near-limit threshold and within the limit, by stats key (reference name and arithmetic).",
    ),
    (
        "ratelimit_service_rate_limit_within_limit",
        "Hits of descriptors answered within the limit, by stats key (reference name).",
    ),
    (
        "ratelimit_service_rate_limit_shadow_mode",
        "Hits over a shadow-mode limit (answered OK), by stats key (reference name).",
    ),
];
/// `ratelimit_service_should_rate_limit_error{err_type}`.
pub const ERRORS: &str = "ratelimit_service_should_rate_limit_error";
/// `ratelimit_service_total_requests{grpc_method}`.
pub const REQUESTS: &str = "ratelimit_service_total_requests";
/// `ratelimit_service_response_time_seconds{grpc_method}`.
pub const RESPONSE_TIME: &str = "ratelimit_service_response_time_seconds";
/// `ratelimit_service_config_load_success`.
pub const LOAD_SUCCESS: &str = "ratelimit_service_config_load_success";
/// `ratelimit_service_config_load_error`.
pub const LOAD_ERROR: &str = "ratelimit_service_config_load_error";
/// `ratelimit_service_global_shadow_mode`: the name the statsd exporter
/// gives the reference's `ratelimit.service.global_shadow_mode`, which the
/// mapping leaves unmapped (the stat's name, escaped).
pub const GLOBAL_SHADOW_MODE: &str = "ratelimit_service_global_shadow_mode";
/// `go_memstats_gc_cpu_fraction`: Envoy Gateway's dashboard plots it; no
/// garbage collector runs here, so it is 0.
pub const GC_CPU_FRACTION: &str = "go_memstats_gc_cpu_fraction";

/// The other families, with their type and help.
pub const OTHERS: [(&str, Kind, &str); 7] = [
    (
        ERRORS,
        Kind::Counter,
        "ShouldRateLimit calls that failed, by kind (reference name): redis_error when the store failed, service_error for a refused request.",
    ),
    (
        REQUESTS,
        Kind::Counter,
        "Unary gRPC calls, by method (reference name).",
    ),
    (
        RESPONSE_TIME,
        Kind::Histogram,
        "Time to answer a unary gRPC call, by method (reference name).",
    ),
    (
        LOAD_SUCCESS,
        Kind::Counter,
        "Config loads that serve, the first one included (reference name).",
    ),
    (
        LOAD_ERROR,
        Kind::Counter,
        "Config loads refused, the previous config still serving (reference name).",
    ),
    (
        GLOBAL_SHADOW_MODE,
        Kind::Counter,
        "ShouldRateLimit answers that would have been OVER_LIMIT, answered OK under [envoy] shadow_mode (the reference's SHADOW_MODE; name as its exporter gives it).",
    ),
    (
        GC_CPU_FRACTION,
        Kind::Gauge,
        "Share of CPU time spent in garbage collection: always 0, no collector runs (for dashboards made for the Go service).",
    ),
];

/// The most series keyed by request values; past it they count under
/// `key1="_other"` of their domain.
pub const MAX_REQUEST_SERIES: usize = 1_000;
/// Where request-valued keys past the cap count.
const OTHER: &str = "_other";

/// Prometheus' default histogram buckets (the statsd exporter's), seconds.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// An error kind of [`ERRORS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The store failed (the failure policy answered).
    Redis,
    /// The request was refused (an error status).
    Service,
}

/// A method of [`REQUESTS`] and [`RESPONSE_TIME`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
    ShouldRateLimit,
    /// `grpc.health.v1.Health/Check`.
    Check,
}

const METHODS: [&str; 2] = ["ShouldRateLimit", "Check"];
const ERROR_KINDS: [&str; 2] = ["redis_error", "service_error"];

/// One stats key's counters.
#[derive(Debug, Default)]
struct Series {
    counts: [AtomicU64; 5],
}

/// One stats key's series, kept by a caller to count into without
/// looking the key up again.
#[derive(Debug, Clone)]
pub struct SeriesHandle(Arc<Series>);

impl SeriesHandle {
    /// Adds `counts` (a series appears with its first hit, as the
    /// reference's stats).
    pub fn add(&self, counts: Counts) {
        for (slot, n) in self.0.counts.iter().zip(counts) {
            if n > 0 {
                slot.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// One method's calls: a histogram.
#[derive(Debug, Default)]
struct Calls {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    nanos: AtomicU64,
}

/// The series of one server (shared by every generation of its doors).
#[derive(Debug, Default)]
pub struct ReferenceMetrics {
    series: Mutex<HashMap<Labels, Arc<Series>>>,
    /// Stats keys already folded, so a key is sanitized and split once.
    keys: RwLock<HashMap<String, Arc<Series>>>,
    /// How many series are keyed by request values.
    from_request: AtomicUsize,
    errors: [AtomicU64; 2],
    calls: [Calls; 2],
    shadow_answers: AtomicU64,
}

impl ReferenceMetrics {
    /// Adds `counts` to the series of the stats key `key` (unsanitized);
    /// `from_request` when the key holds request values (capped).
    pub fn add(&self, key: &str, from_request: bool, counts: Counts) {
        if counts.iter().all(|&c| c == 0) {
            // As the reference's stats: a series appears with its first hit.
            return;
        }
        if let Some(series) = self.series(key, from_request) {
            series.add(counts);
        }
    }

    /// The series of the stats key `key` (unsanitized), for a caller that
    /// keeps it (a limit whose key is its config path); `None` for a key
    /// with no level below its domain.
    #[must_use]
    pub fn series(&self, key: &str, from_request: bool) -> Option<SeriesHandle> {
        let known = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = known.get(key) {
            return Some(SeriesHandle(Arc::clone(s)));
        }
        drop(known);
        self.series_of(key, from_request).map(SeriesHandle)
    }

    fn series_of(&self, key: &str, from_request: bool) -> Option<Arc<Series>> {
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = keys.get(key) {
            return Some(Arc::clone(s));
        }
        let mut labels = fold(&sanitize(key))?;
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        if from_request
            && !series.contains_key(&labels)
            && self.from_request.load(Ordering::Relaxed) >= MAX_REQUEST_SERIES
        {
            ::metrics::counter!(super::ENVOY_FOLDED).increment(1);
            labels = Labels {
                domain: labels.domain,
                key1: OTHER.to_owned(),
                key2: None,
            };
        }
        let s = Arc::clone(series.entry(labels).or_insert_with(|| {
            if from_request {
                self.from_request.fetch_add(1, Ordering::Relaxed);
            }
            Arc::new(Series::default())
        }));
        // Request-valued keys are not remembered: their number is a
        // client's choice, and folding them again is cheap enough.
        if !from_request {
            keys.insert(key.to_owned(), Arc::clone(&s));
        }
        Some(s)
    }

    /// Counts a failed `ShouldRateLimit` call.
    pub fn error(&self, kind: ErrorKind) {
        self.errors[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an answer made `OK` by `[envoy] shadow_mode` that would have
    /// been `OVER_LIMIT` (the reference's `global_shadow_mode`).
    pub fn shadow_answer(&self) {
        self.shadow_answers.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a unary call of `method` that took `took`.
    pub fn call(&self, method: Method, took: Duration) {
        let calls = &self.calls[method as usize];
        let secs = took.as_secs_f64();
        if let Some(b) = BUCKETS.iter().position(|&le| secs <= le) {
            calls.buckets[b].fetch_add(1, Ordering::Relaxed);
        }
        calls.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        calls.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Every family, with `# HELP` and `# TYPE` even before its first
    /// series; `loads` the config loads that served and that were refused.
    #[must_use]
    pub fn render(&self, loads: (u64, u64)) -> String {
        let mut out = String::new();
        let series: Vec<(Labels, [u64; 5])> = {
            let map = self.series.lock().unwrap_or_else(PoisonError::into_inner);
            map.iter()
                .map(|(l, s)| {
                    (
                        l.clone(),
                        s.counts.each_ref().map(|c| c.load(Ordering::Relaxed)),
                    )
                })
                .collect()
        };
        for (i, (name, help)) in RATE_LIMIT.iter().enumerate() {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, counts) in &series {
                let _ = write!(
                    out,
                    "{name}{{domain=\"{}\",key1=\"{}\"",
                    label_value(&labels.domain),
                    label_value(&labels.key1)
                );
                if let Some(key2) = &labels.key2 {
                    let _ = write!(out, ",key2=\"{}\"", label_value(key2));
                }
                let _ = writeln!(out, "}} {}", counts[i]);
            }
        }
        // Each family's HELP and TYPE right before its series: the page
        // is re-sorted by family ([`super::text::stable`]), which reads a
        // sample as its family's only after that family's TYPE.
        let head = |out: &mut String, name: &str| {
            if let Some((_, kind, help)) = OTHERS.iter().find(|(n, _, _)| *n == name) {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {}", kind.as_str());
            }
        };
        head(&mut out, ERRORS);
        for (kind, n) in ERROR_KINDS.iter().zip(&self.errors) {
            let _ = writeln!(
                out,
                "{ERRORS}{{err_type=\"{kind}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        head(&mut out, REQUESTS);
        for (method, calls) in METHODS.iter().zip(&self.calls) {
            let count = calls.count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{REQUESTS}{{grpc_method=\"{method}\"}} {count}");
        }
        head(&mut out, RESPONSE_TIME);
        for (method, calls) in METHODS.iter().zip(&self.calls) {
            let count = calls.count.load(Ordering::Relaxed);
            let mut below = 0;
            for (le, n) in BUCKETS.iter().zip(&calls.buckets) {
                below += n.load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "{RESPONSE_TIME}_bucket{{grpc_method=\"{method}\",le=\"{le}\"}} {below}"
                );
            }
            #[allow(clippy::cast_precision_loss)] // a sum of durations, shown in seconds
            let sum = calls.nanos.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(
                out,
                "{RESPONSE_TIME}_bucket{{grpc_method=\"{method}\",le=\"+Inf\"}} {count}\n\
                 {RESPONSE_TIME}_sum{{grpc_method=\"{method}\"}} {sum}\n\
                 {RESPONSE_TIME}_count{{grpc_method=\"{method}\"}} {count}"
            );
        }
        head(&mut out, LOAD_SUCCESS);
        let _ = writeln!(out, "{LOAD_SUCCESS} {}", loads.0);
        head(&mut out, LOAD_ERROR);
        let _ = writeln!(out, "{LOAD_ERROR} {}", loads.1);
        head(&mut out, GLOBAL_SHADOW_MODE);
        let shadow = self.shadow_answers.load(Ordering::Relaxed);
        let _ = writeln!(out, "{GLOBAL_SHADOW_MODE} {shadow}");
        head(&mut out, GC_CPU_FRACTION);
        let _ = writeln!(out, "{GC_CPU_FRACTION} 0");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_of_deeper_levels_add_into_their_two_level_series() {
        let m = ReferenceMetrics::default();
        m.add("d.a.b.c", false, [1, 0, 0, 1, 0]);
        m.add("d.a.b.e", false, [2, 0, 0, 2, 0]);
        m.add("d.a", false, [1, 1, 0, 0, 0]);
        let text = m.render((1, 0));
        assert!(
            text.contains(
                "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"a\",key2=\"b\"} 3\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("ratelimit_service_rate_limit_over_limit{domain=\"d\",key1=\"a\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("ratelimit_service_config_load_success 1\n"),
            "{text}"
        );
    }

    #[test]
    fn request_valued_keys_are_capped() {
        let m = ReferenceMetrics::default();
        for n in 0..=MAX_REQUEST_SERIES {
            m.add(&format!("d.user_{n}"), true, [1, 0, 0, 1, 0]);
        }
        // a config key is never folded
        m.add("d.route", false, [1, 0, 0, 1, 0]);
        let text = m.render((0, 0));
        assert!(
            text.contains(
                "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"_other\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains("key1=\"route\"} 1\n"), "{text}");
        assert!(!text.contains(&format!("user_{MAX_REQUEST_SERIES}\"")));
    }

    #[test]
    fn sorted_with_the_page_every_line_stays_in_its_family() {
        let m = ReferenceMetrics::default();
        m.add("d.a", false, [1, 0, 0, 1, 0]);
        let page = crate::metrics::text::stable(&m.render((1, 0)));
        for (name, kind, _) in OTHERS {
            assert!(
                page.contains(&format!("# TYPE {name} {}\n", kind.as_str())),
                "{page}"
            );
        }
        assert!(!page.contains("untyped"), "{page}");
        assert!(
            !page.contains("# TYPE ratelimit_service_response_time_seconds_"),
            "{page}"
        );
    }

    #[test]
    fn a_call_lands_in_its_bucket() {
        let m = ReferenceMetrics::default();
        m.call(Method::ShouldRateLimit, Duration::from_millis(20));
        let text = m.render((0, 0));
        let line = |le: &str| {
            format!("{RESPONSE_TIME}_bucket{{grpc_method=\"ShouldRateLimit\",le=\"{le}\"}}")
        };
        assert!(text.contains(&format!("{} 0\n", line("0.01"))), "{text}");
        assert!(text.contains(&format!("{} 1\n", line("0.025"))), "{text}");
        assert!(text.contains("ratelimit_service_total_requests{grpc_method=\"Check\"} 0\n"));
    }
}
