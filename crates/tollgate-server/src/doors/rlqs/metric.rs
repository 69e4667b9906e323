//! The RLQS service's Prometheus names (docs/metrics.md).

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
    "too_many_buckets",
    "bad_report",
    "too_large",
    "not_reading",
];
