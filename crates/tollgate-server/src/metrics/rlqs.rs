//! The RLQS service's Prometheus names (docs/rlqs.md, "Metrics"):
//! here, not in `doors/rlqs/`, so the catalog lists them without
//! importing a door.

/// `tollgate_rlqs_streams`: streams open.
pub const STREAMS: &str = "tollgate_rlqs_streams";
/// `tollgate_rlqs_buckets`: buckets held by the open streams.
pub const BUCKETS: &str = "tollgate_rlqs_buckets";
/// `tollgate_rlqs_reports_total`: usage reports received.
pub const REPORTS: &str = "tollgate_rlqs_reports_total";
/// `tollgate_rlqs_requests_total{rule,outcome}`: requests Envoy reported
/// admitting or denying.
pub const REQUESTS: &str = "tollgate_rlqs_requests_total";
/// `tollgate_rlqs_assignments_total{kind}`: actions sent.
pub const ASSIGNMENTS: &str = "tollgate_rlqs_assignments_total";
/// `tollgate_rlqs_streams_cut_total{reason}`: streams ended by tollgate.
pub const STREAMS_CUT: &str = "tollgate_rlqs_streams_cut_total";
/// Every `reason` of [`STREAMS_CUT`].
pub const CUT_REASONS: &[&str] = &[
    "too_many_streams",
    "bad_report",
    "too_large",
    "not_reading",
    "silent",
];
/// `tollgate_rlqs_buckets_refused_total{reason}`: reports of buckets a
/// stream may not hold (`too_many`: past `max_buckets_per_stream`;
/// `too_long`: an id over 1 KiB), answered `DENY_ALL` or abandoned.
pub const BUCKETS_REFUSED: &str = "tollgate_rlqs_buckets_refused_total";
/// Every `reason` of [`BUCKETS_REFUSED`].
pub const REFUSED_REASONS: &[&str] = &["too_many", "too_long"];
