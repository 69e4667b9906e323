//! The `[envoy]` table against the real binary: `response_headers` (the
//! reference's `LIMIT_RESPONSE_HEADERS_ENABLED` and its header names) adds
//! the limit, remaining and reset of the descriptor closest to its limit
//! to every answer; `merge_domains` is `--envoy-merge-domains`; bad values
//! are errors naming line and field.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::support::envoy::away_from_a_window_edge;
use crate::support::rls::{Rls, desc};

const YAML: &str = "\
domain: h
descriptors:
  - key: wide
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: narrow
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: open
    rate_limit: {unlimited: true}
";

fn call(rls: &mut Rls, keys: &[&str]) -> Vec<(String, String)> {
    let r = rls.ok(RateLimitRequest {
        domain: "h".to_owned(),
        descriptors: keys.iter().map(|k| desc(&[(k, "x")])).collect(),
        hits_addend: 0,
    });
    r.response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

#[test]
fn the_descriptor_closest_to_its_limit_is_reported_in_headers() {
    // Counts in per-minute windows: not across a minute's end.
    away_from_a_window_edge(60, Duration::from_secs(15));
    let config = "[store]\nurl = \"memory\"\n\n[envoy]\nresponse_headers = true\n\
                  remaining_header = \"X-Left\"\n";
    let mut rls = Rls::start_with(config, YAML, &[]);
    let headers = call(&mut rls, &["wide", "narrow", "open"]);
    assert_eq!(headers.len(), 3, "{headers:?}");
    assert_eq!(headers[0], ("RateLimit-Limit".to_owned(), "2".to_owned()));
    assert_eq!(headers[1], ("X-Left".to_owned(), "1".to_owned()));
    assert_eq!(headers[2].0, "RateLimit-Reset");
    let reset: u64 = headers[2].1.parse().expect("seconds");
    assert!((1..=60).contains(&reset), "a minute's window: {reset}");
    // the narrow limit is spent: it answers, remaining 0
    call(&mut rls, &["narrow"]);
    let headers = call(&mut rls, &["wide", "narrow"]);
    assert_eq!(headers[0].1, "2");
    assert_eq!(headers[1].1, "0");
    // only unlimited descriptors: no headers
    assert!(call(&mut rls, &["open"]).is_empty());
}

#[test]
fn reference_is_the_same_as_true() {
    let config = "[store]\nurl = \"memory\"\n\n[envoy]\nresponse_headers = \"reference\"\n";
    let mut rls = Rls::start_with(config, YAML, &[]);
    let headers = call(&mut rls, &["wide", "narrow"]);
    let names: Vec<&str> = headers.iter().map(|h| h.0.as_str()).collect();
    assert_eq!(
        names,
        ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"]
    );
    assert_eq!(headers[0].1, "2");
}

#[test]
fn ietf_sends_ratelimit_and_its_policy_for_the_closest_descriptor() {
    away_from_a_window_edge(60, Duration::from_secs(15));
    let yaml =
        format!("{YAML}  - key: never\n    rate_limit: {{unit: second, requests_per_unit: 0}}\n");
    let config = "[store]\nurl = \"memory\"\n\n[envoy]\nresponse_headers = \"ietf\"\n";
    let mut rls = Rls::start_with(config, &yaml, &[]);
    let headers = call(&mut rls, &["wide", "narrow", "open"]);
    assert_eq!(headers.len(), 2, "{headers:?}");
    assert_eq!(
        headers[0],
        (
            "RateLimit-Policy".to_owned(),
            "\"envoy.h.narrow\";q=2;w=60".to_owned()
        )
    );
    let (name, value) = &headers[1];
    assert_eq!(name, "RateLimit");
    let t = value
        .strip_prefix("\"envoy.h.narrow\";r=1;t=")
        .unwrap_or_else(|| panic!("{value}"));
    let t: u64 = t.parse().expect("seconds");
    assert!((1..=60).contains(&t), "a minute's window: {t}");
    // Spent: remaining 0, then over the limit (the over-limit descriptor
    // is the one reported).
    call(&mut rls, &["narrow"]);
    let headers = call(&mut rls, &["wide", "narrow"]);
    assert!(
        headers[1].1.starts_with("\"envoy.h.narrow\";r=0;t="),
        "{headers:?}"
    );
    // The wide limit alone: its hour (the denied request took nothing).
    let headers = call(&mut rls, &["wide"]);
    assert_eq!(headers[0].1, "\"envoy.h.wide\";q=10;w=3600");
    assert!(
        headers[1].1.starts_with("\"envoy.h.wide\";r=8;t="),
        "{headers:?}"
    );
    // A zero limit, which no rule counts, by its full key.
    let headers = call(&mut rls, &["never"]);
    assert_eq!(headers[0].1, "\"h.never\";q=0;w=1");
    assert_eq!(headers[1].1, "\"h.never\";r=0;t=1");
    // Only unlimited descriptors: no headers.
    assert!(call(&mut rls, &["open"]).is_empty());
}

#[test]
fn without_the_switch_no_headers_are_added() {
    let mut rls = Rls::start_with("[store]\nurl = \"memory\"\n", YAML, &[]);
    assert!(call(&mut rls, &["wide", "narrow"]).is_empty());
}

#[test]
fn merge_domains_in_the_config_merges_as_the_flag_does() {
    let other = "domain: h\ndescriptors:\n  - key: extra\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("other.yaml");
    std::fs::write(&path, other).expect("write");
    let config = "[store]\nurl = \"memory\"\n\n[envoy]\nmerge_domains = true\n";
    let mut rls = Rls::start_with(
        config,
        YAML,
        &["--envoy-config", path.to_str().expect("utf-8")],
    );
    let r = rls.ok(RateLimitRequest {
        domain: "h".to_owned(),
        descriptors: vec![desc(&[("extra", "x")])],
        hits_addend: 0,
    });
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(1)
    );
}

/// `tollgate validate` of `toml` beside the Envoy YAML: its stderr, and the
/// TOML file's name as errors show it.
fn validate(toml_text: &str) -> (String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = dir.path().join("t.toml");
    std::fs::write(&toml, toml_text).expect("write");
    let yaml = dir.path().join("h.yaml");
    std::fs::write(&yaml, YAML).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["validate", "--config"])
        .arg(&toml)
        .arg("--envoy-config")
        .arg(&yaml)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).expect("utf-8");
    (err, toml.display().to_string())
}

#[test]
fn bad_settings_are_errors_naming_line_and_field() {
    let (err, t) =
        validate("[envoy]\nresponse_headers = \"yes\"\nlimit_header = \"bad header\"\nbogus = 1\n");
    for want in [
        format!(
            "{t}:2: envoy.response_headers: unknown response_headers \"yes\"; \
             expected true, false, \"reference\" or \"ietf\""
        ),
        format!("{t}:3: envoy.limit_header: \"bad header\" is not an HTTP header name"),
        format!("{t}:4: envoy.bogus: unknown field"),
    ] {
        assert!(err.contains(&want), "{want} not in\n{err}");
    }
    let (err, t) = validate("[envoy]\nresponse_headers = 1\n");
    let want = format!(
        "{t}:2: envoy.response_headers: expected true, false, \"reference\" or \"ietf\", found integer"
    );
    assert!(err.contains(&want), "{want} not in\n{err}");
    // The IETF pair has its own names: a reference name beside it is a
    // mistake, not silently unused.
    let (err, t) = validate("[envoy]\nresponse_headers = \"ietf\"\nreset_header = \"X-Reset\"\n");
    let want = format!(
        "{t}:3: envoy.reset_header: reset_header names a reference header; \
         response_headers = \"ietf\" sends RateLimit and RateLimit-Policy"
    );
    assert!(err.contains(&want), "{want} not in\n{err}");
}
