//! `value_to_metric` and `detailed_metric` in `/metrics`, against the real
//! binary: `tollgate_envoy_descriptors_total{key, outcome}` names the
//! request's values as the reference's stats keys do, and the number of
//! keys is capped, what is past the cap counted under `_other` and in
//! `tollgate_envoy_metric_keys_folded_total`.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::support;
use crate::support::rls::{Rls, desc, toml};

const YAML: &str = "\
domain: m
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: detailed
    detailed_metric: true
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1}
";

fn call(rls: &mut Rls, entries: &[(&str, &str)]) {
    rls.ok(RateLimitRequest {
        domain: "m".to_owned(),
        descriptors: vec![desc(entries)],
        hits_addend: 0,
    });
}

/// The value of the series whose line starts with `head`, 0 when absent.
fn series(metrics: &str, head: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(head))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn runtime_values_label_the_metrics_and_their_number_is_capped() {
    let mut rls = Rls::start_with(&toml("memory"), YAML, &["--http", "127.0.0.1:0"]);
    call(&mut rls, &[("route", "draw"), ("user", "1")]);
    call(&mut rls, &[("route", "draw"), ("user", "1")]);
    call(&mut rls, &[("route", "erase"), ("user", "1")]);
    call(&mut rls, &[("detailed", "x")]);
    call(&mut rls, &[("detailed", "x")]);
    call(&mut rls, &[("plain", "x")]);
    let m = support::get(rls.server.api(), "/metrics").text();
    let d = "tollgate_envoy_descriptors_total";
    assert_eq!(
        series(
            &m,
            &format!("{d}{{key=\"m.route_draw.user\",outcome=\"within_limit\"}}")
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        series(
            &m,
            &format!("{d}{{key=\"m.route_draw.user\",outcome=\"over_limit\"}}")
        ),
        1.0
    );
    assert_eq!(
        series(
            &m,
            &format!("{d}{{key=\"m.route_erase.user\",outcome=\"within_limit\"}}")
        ),
        1.0
    );
    assert_eq!(
        series(
            &m,
            &format!("{d}{{key=\"m.detailed_x\",outcome=\"shadow_mode\"}}")
        ),
        1.0
    );
    // a limit without the flags is in the per-rule metrics only
    assert!(!m.contains("key=\"m.plain"), "{m}");

    // Past the cap, new keys fold into _other.
    for n in 0..1_100 {
        call(&mut rls, &[("route", &format!("r{n}")), ("user", "1")]);
    }
    let m = support::get(rls.server.api(), "/metrics").text();
    let keys = m
        .lines()
        .filter(|l| l.starts_with(d) && l.contains("outcome=\"within_limit\""))
        .count();
    assert!(keys <= 1_001, "{keys} series");
    let folded = series(&m, "tollgate_envoy_metric_keys_folded_total ");
    assert_eq!(folded, 1_103.0 - 1_000.0, "{folded}");
    assert_eq!(
        series(
            &m,
            &format!("{d}{{key=\"_other\",outcome=\"within_limit\"}}")
        ),
        folded
    );
}

/// A client's values can be as long as a request (64 KiB): a `key` label
/// keeps at most 256 bytes (a long one cut, with the SHA-256 of the whole
/// key so two long keys still count apart), else the 1,000 keys could hold
/// and serve tens of megabytes of labels on every scrape.
#[test]
fn long_runtime_values_make_bounded_labels() {
    let mut rls = Rls::start_with(&toml("memory"), YAML, &["--http", "127.0.0.1:0"]);
    let long = |c: char| c.to_string().repeat(60_000);
    call(&mut rls, &[("route", &long('a')), ("user", "1")]);
    call(&mut rls, &[("route", &long('a')), ("user", "1")]);
    call(
        &mut rls,
        &[("route", &format!("{}b", long('a'))), ("user", "1")],
    );
    let m = support::get(rls.server.api(), "/metrics").text();
    let d = "tollgate_envoy_descriptors_total";
    let labels: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with(d))
        .filter_map(|l| l.split("key=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(labels.len(), 3, "{labels:?}");
    for label in &labels {
        assert!(label.len() <= 256, "a label of {} bytes", label.len());
        assert!(label.starts_with("m.route_aaa"), "{label}");
    }
    // the two long keys are two series: the first within then over, the
    // second within
    let mut distinct = labels.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 2, "{labels:?}");
}
