//! Every metric family tollgate exports, with its type and help text: one
//! list, so `/metrics` shows each family's `# HELP` and `# TYPE` from the
//! first scrape, before its first event ([`super::text::stable`]), and a
//! family recorded without a description still gets its help.

use crate::doors::rlqs::metric as rlqs;
use tollgate::resilient::metric;

/// A family's Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Buckets, a sum and a count.
    Histogram,
}

impl Kind {
    /// The word on the `# TYPE` line.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One family: name, type, help.
pub type Family = (&'static str, Kind, &'static str);

/// Every family. The hand-rendered ones (utilization, config info, build
/// info, process) are listed too: their rendering writes the same help.
pub const FAMILIES: &[Family] = &[
    (
        super::BUILD_INFO,
        Kind::Gauge,
        "Always 1; the labels name the build serving.",
    ),
    (
        metric::ADMIN_OPERATIONS,
        Kind::Counter,
        "Operators' changes through the admin API, by operation.",
    ),
    (
        metric::CHARGE_CLAMPED,
        Kind::Counter,
        "Units of charges not recorded because the key's debt reached its cap.",
    ),
    (
        metric::CHARGE_DEBT,
        Kind::Gauge,
        "Units over the limit the latest charge of the rule left on its key.",
    ),
    (
        metric::CHARGE_UNITS,
        Kind::Counter,
        "Units charges recorded in the store.",
    ),
    (
        metric::CHARGE_UNRECORDED,
        Kind::Counter,
        "Units of charges the store did not take because it failed, by failure policy.",
    ),
    (
        metric::CHARGES_IN_DEBT,
        Kind::Counter,
        "Charges that left their key in debt.",
    ),
    (
        metric::CHECKS,
        Kind::Counter,
        "Checks by rule and outcome (one per rule of a multi-rule check).",
    ),
    (
        metric::BREAKER_OPEN,
        Kind::Gauge,
        "1 while the circuit breaker is open (checks skip the store), else 0.",
    ),
    (
        metric::BREAKER_OPENED,
        Kind::Counter,
        "Times the circuit breaker opened after repeated store failures.",
    ),
    (
        crate::config::CONFIG_INFO,
        Kind::Gauge,
        crate::config::CONFIG_INFO_HELP,
    ),
    (
        crate::config::LOADED_AT,
        Kind::Gauge,
        "When the serving config was loaded (Unix time).",
    ),
    (
        crate::config::RELOADS,
        Kind::Counter,
        "Config reloads by outcome (error: refused, the old config still serves).",
    ),
    (
        super::DECISION_LATENCY,
        Kind::Histogram,
        "Time a door took to decide a request, by door (store call included).",
    ),
    (
        super::ENVOY_DESCRIPTORS,
        Kind::Counter,
        "Envoy descriptors whose limit names runtime values, by stats key and outcome.",
    ),
    (
        super::ENVOY_FOLDED,
        Kind::Counter,
        "Envoy descriptors counted under key=\"_other\" because the key cap was reached.",
    ),
    (
        super::ENVOY_SHADOW_MODE,
        Kind::Counter,
        "Envoy answers [envoy] shadow_mode turned from OVER_LIMIT to OK (the reference's global_shadow_mode).",
    ),
    (
        super::ENVOY_UNKNOWN_DOMAIN,
        Kind::Counter,
        "Envoy requests for a domain no config defines (answered OK, unlimited).",
    ),
    (
        metric::FAILURE_POLICY,
        Kind::Counter,
        "Checks answered by the failure policy because the store failed.",
    ),
    (
        metric::LEASES_HELD,
        Kind::Gauge,
        "Leases this replica took that are neither released through it nor ended by themselves.",
    ),
    (
        metric::LEASES,
        Kind::Counter,
        "Lease operations by rule and outcome.",
    ),
    (
        metric::LIVE_REPLICAS,
        Kind::Gauge,
        "Replicas sharing the store, as learned from the heartbeat.",
    ),
    (
        super::MEMORY_KEYS,
        Kind::Gauge,
        "Keys held by the in-memory store.",
    ),
    (
        metric::NEAR_LIMIT,
        Kind::Counter,
        "Units of admitted checks past the rule's near-limit threshold.",
    ),
    (
        metric::OVERRIDDEN,
        Kind::Counter,
        "Checks decided under a runtime override, by rule.",
    ),
    (
        metric::REFUND_UNITS,
        Kind::Counter,
        "Units refunds gave back in the store.",
    ),
    (
        metric::REFUND_UNRECORDED,
        Kind::Counter,
        "Units of refunds the store did not take back because it failed, by failure policy.",
    ),
    (
        metric::RESERVATIONS_OPEN,
        Kind::Gauge,
        "Reservations this replica made that are neither settled nor cancelled through it, their ttl not over.",
    ),
    (
        metric::RESERVATIONS,
        Kind::Counter,
        "Reservations by rule and outcome.",
    ),
    (
        metric::STORE_ERRORS,
        Kind::Counter,
        "Store calls that failed (or were skipped by the open circuit breaker), by kind.",
    ),
    (
        metric::STORE_LATENCY,
        Kind::Histogram,
        "Time the store took to answer a check.",
    ),
    (
        super::STORE_UP,
        Kind::Gauge,
        "1 while the store answers (as /readyz reports it), 0 when it does not.",
    ),
    (
        super::UPSTREAM_ERRORS,
        Kind::Counter,
        "Proxied requests the upstream failed: no connection (502), an error (502) or no answer in time (504).",
    ),
    (
        tollgate_http::usage::USAGE_UNREAD,
        Kind::Counter,
        "Responses whose usage could not be read, settled at the estimate, by rule and reason.",
    ),
    (metric::UTILIZATION, Kind::Gauge, super::UTILIZATION_HELP),
    (
        rlqs::STREAMS,
        Kind::Gauge,
        "Open streams of Envoy's rate limit quota service (RLQS).",
    ),
    (
        rlqs::BUCKETS,
        Kind::Gauge,
        "Buckets the open RLQS streams hold.",
    ),
    (rlqs::REPORTS, Kind::Counter, "RLQS usage reports received."),
    (
        rlqs::REQUESTS,
        Kind::Counter,
        "Requests Envoy reported over RLQS, by rule and outcome (allowed, denied); rule empty for a bucket of no rule.",
    ),
    (
        rlqs::ASSIGNMENTS,
        Kind::Counter,
        "RLQS bucket actions sent, by kind (token_bucket, allow_all, deny_all, abandon).",
    ),
    (
        rlqs::STREAMS_CUT,
        Kind::Counter,
        "RLQS streams tollgate ended, by reason.",
    ),
    (
        super::process::CPU,
        Kind::Counter,
        "Total user and system CPU time spent in seconds.",
    ),
    (
        super::process::OPEN_FDS,
        Kind::Gauge,
        "Number of open file descriptors.",
    ),
    (
        super::process::RESIDENT,
        Kind::Gauge,
        "Resident memory size in bytes.",
    ),
    (
        super::process::VIRTUAL,
        Kind::Gauge,
        "Virtual memory size in bytes.",
    ),
    (
        super::process::START_TIME,
        Kind::Gauge,
        "Start time of the process since unix epoch in seconds.",
    ),
];

/// The family `name`, if tollgate exports it.
#[must_use]
pub fn family(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|(n, _, _)| *n == name)
}

/// Hands every description to the recorder (it writes `# HELP` for the
/// families it renders).
pub(super) fn describe() {
    for &(name, kind, help) in FAMILIES {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, help),
            Kind::Gauge => metrics::describe_gauge!(name, help),
            Kind::Histogram => metrics::describe_histogram!(name, help),
        }
    }
}
