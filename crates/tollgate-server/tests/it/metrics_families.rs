//! `/metrics` as a whole (docs/operations.md, "Metrics"): a fresh serve
//! lists every family tollgate exports, each with `# HELP` and `# TYPE`,
//! before any request; families come in name order, the same at every
//! scrape; the build and the process are described; each door records
//! its decision latency.

use std::collections::BTreeSet;

use tollgate_server::metrics::catalog::FAMILIES;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::support::rls::{Rls, desc};
use crate::support::{Tollgate, get, post_json, request, start_upstream};

const CONFIG: &str = r#"
[[rules]]
name = "per_user"
algorithm = "gcra"
limit = 3
period = "1m"
"#;

/// The families of `text` in the order their `# TYPE` lines come, after
/// checking that each is the line right after the family's `# HELP`, and
/// that every sample belongs to a family listed before it.
fn families(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut previous = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap();
            assert!(
                previous.starts_with(&format!("# HELP {name} ")),
                "no HELP right before {line:?}:\n{text}"
            );
            names.push(name.to_owned());
        } else if !line.starts_with('#') && !line.is_empty() {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = names.last().expect("a sample before any TYPE");
            assert!(
                name.starts_with(family.as_str()),
                "{line:?} outside its family:\n{text}"
            );
        }
        previous = line;
    }
    names
}

#[test]
fn a_fresh_serve_lists_every_family_with_help_and_type() {
    let s = Tollgate::start(CONFIG, &["--http", "127.0.0.1:0"]);
    let text = get(s.api(), "/metrics").text();
    let names: BTreeSet<String> = families(&text).into_iter().collect();
    for (name, kind, _) in FAMILIES {
        assert!(
            names.contains(*name),
            "{name} missing before any request:\n{text}"
        );
        assert!(
            text.contains(&format!("# TYPE {name} {}\n", kind.as_str())),
            "{name}:\n{text}"
        );
    }
    // the families that had no HELP before the catalog, by name
    for name in [
        "tollgate_near_limit_total",
        "tollgate_overridden_checks_total",
        "tollgate_admin_operations_total",
        "tollgate_charge_units_total",
        "tollgate_reservations_total",
        "tollgate_leases_total",
        "tollgate_envoy_unknown_domain_requests_total",
        "tollgate_envoy_descriptors_total",
        "tollgate_usage_unread_total",
        "tollgate_decision_latency_seconds",
    ] {
        assert!(text.contains(&format!("# HELP {name} ")), "{name}:\n{text}");
    }
}

#[test]
fn families_come_sorted_and_in_the_same_order_at_every_scrape() {
    let s = Tollgate::start(CONFIG, &["--http", "127.0.0.1:0"]);
    let first = families(&get(s.api(), "/metrics").text());
    // events between the scrapes add series, not families out of order
    for key in ["a", "b", "c", "d"] {
        let body = format!(r#"{{"rule":"per_user","key":"{key}"}}"#);
        post_json(s.api(), "/v1/check", &body);
    }
    let text = get(s.api(), "/metrics").text();
    let second = families(&text);
    let mut sorted = second.clone();
    sorted.sort();
    assert_eq!(second, sorted, "{text}");
    assert_eq!(first, second);
    let checks: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tollgate_checks_total{"))
        .collect();
    let mut sorted_checks = checks.clone();
    sorted_checks.sort_unstable();
    assert_eq!(checks, sorted_checks, "{text}");
}

#[test]
fn build_info_and_process_series_are_exported() {
    let s = Tollgate::start(CONFIG, &["--http", "127.0.0.1:0"]);
    let text = get(s.api(), "/metrics").text();
    let version = env!("CARGO_PKG_VERSION");
    let build = text
        .lines()
        .find(|l| l.starts_with("tollgate_build_info{"))
        .unwrap_or_else(|| panic!("no build info:\n{text}"));
    assert!(build.contains(&format!("version=\"{version}\"")), "{build}");
    assert!(build.ends_with("} 1"), "{build}");
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name}:\n{text}"));
        let value: f64 = line[name.len() + 1..].parse().unwrap();
        assert!(value >= 0.0, "{line}");
    }
    let fds = text
        .lines()
        .find(|l| l.starts_with("process_open_fds "))
        .unwrap();
    assert!(
        !fds.ends_with(" 0"),
        "a serving process holds sockets: {fds}"
    );
}

/// The `_count` of `tollgate_decision_latency_seconds{door}` in `text`.
fn decisions(text: &str, door: &str) -> Option<u64> {
    let prefix = format!("tollgate_decision_latency_seconds_count{{door=\"{door}\"}} ");
    let line = text.lines().find(|l| l.starts_with(&prefix))?;
    line[prefix.len()..].parse().ok()
}

#[test]
fn every_door_records_its_decision_latency_from_zero() {
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n";
    let config = format!("{CONFIG}key = \"client_ip\"\n");
    let mut rls = Rls::start_with(
        &config,
        yaml,
        &[
            "--http",
            "127.0.0.1:0",
            "--proxy",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
        ],
    );
    let s = &rls.server;
    let before = get(s.api(), "/metrics").text();
    for door in ["api", "proxy", "envoy"] {
        assert_eq!(decisions(&before, door), Some(0), "{door}:\n{before}");
    }
    // the doors' unlabelled (or bounded-label) counters, at 0 from the start
    for series in [
        "tollgate_envoy_unknown_domain_requests_total 0",
        "tollgate_envoy_metric_keys_folded_total 0",
        "tollgate_upstream_errors_total{kind=\"connect\"} 0",
        "tollgate_upstream_errors_total{kind=\"timeout\"} 0",
        "tollgate_upstream_errors_total{kind=\"other\"} 0",
    ] {
        assert!(before.lines().any(|l| l == series), "{series}:\n{before}");
    }
    post_json(s.api(), "/v1/check", r#"{"rule":"per_user","key":"a"}"#);
    assert_eq!(request(s.proxy(), "GET", "/", &[], b"").status, 200);
    let api = s.api();
    rls.ok(RateLimitRequest {
        domain: "d".to_owned(),
        descriptors: vec![desc(&[("k", "v")])],
        ..RateLimitRequest::default()
    });
    let after = get(api, "/metrics").text();
    for door in ["api", "proxy", "envoy"] {
        assert_eq!(decisions(&after, door), Some(1), "{door}:\n{after}");
    }
    assert!(
        after.contains("# TYPE tollgate_decision_latency_seconds histogram\n"),
        "{after}"
    );
}

#[test]
fn the_apis_usage_calls_record_their_decision_latency() {
    let config = format!(
        "{CONFIG}\n[[rules]]\nname = \"inflight\"\nalgorithm = \"concurrency\"\n\
         limit = 2\nlease = \"30s\"\n"
    );
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    let api = s.api();
    let id_of =
        |r: &crate::support::Resp, field: &str| r.json()[field].as_str().expect("an id").to_owned();
    let mut calls = 0;
    let mut call = |path: &str, body: String| {
        let r = post_json(api, path, &body);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        calls += 1;
        assert_eq!(
            decisions(&get(api, "/metrics").text(), "api"),
            Some(calls),
            "{path}"
        );
        r
    };
    call(
        "/v1/charge",
        r#"{"rule":"per_user","key":"c","cost":1}"#.to_owned(),
    );
    let r = call(
        "/v1/reserve",
        r#"{"rule":"per_user","key":"r","cost":1}"#.to_owned(),
    );
    let id = id_of(&r, "reservation");
    call(
        "/v1/settle",
        format!(r#"{{"reservation":"{id}","cost":1}}"#),
    );
    let r = call(
        "/v1/reserve",
        r#"{"rule":"per_user","key":"r","cost":1}"#.to_owned(),
    );
    let id = id_of(&r, "reservation");
    call("/v1/cancel", format!(r#"{{"reservation":"{id}"}}"#));
    let r = call("/v1/acquire", r#"{"rule":"inflight","key":"l"}"#.to_owned());
    let lease = id_of(&r, "lease");
    call("/v1/renew", format!(r#"{{"lease":"{lease}"}}"#));
    call("/v1/release", format!(r#"{{"lease":"{lease}"}}"#));
}

#[test]
fn the_reference_names_are_families_like_the_others() {
    use tollgate_server::metrics::reference::{OTHERS, RATE_LIMIT};
    let config = format!("{CONFIG}\n[metrics]\nreference_names = true\n");
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    let text = get(s.api(), "/metrics").text();
    let names = families(&text);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "{text}");
    // a histogram's lines stay in their family
    for name in &names {
        assert!(
            !["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| name.ends_with(s)),
            "{name} listed as a family:\n{text}"
        );
        assert!(
            !text.contains(&format!("# TYPE {name} untyped")),
            "{name}:\n{text}"
        );
    }
    for name in RATE_LIMIT
        .iter()
        .map(|(n, _)| *n)
        .chain(OTHERS.iter().map(|(n, _, _)| *n))
    {
        assert!(names.iter().any(|n| n == name), "{name}:\n{text}");
    }
    for (name, kind, _) in OTHERS {
        assert!(
            text.contains(&format!("# TYPE {name} {}\n", kind.as_str())),
            "{name}:\n{text}"
        );
    }
}
