//! The `[envoy]` table against the real binary: `response_headers` (the
//! reference's `LIMIT_RESPONSE_HEADERS_ENABLED` and its header names) adds
//! the limit, remaining and reset of the descriptor closest to its limit
//! to every answer; `merge_domains` is `--envoy-merge-domains`; bad values
//! are errors naming line and field.

mod common;

use common::rls::{Rls, desc};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

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

#[test]
fn bad_settings_are_errors_naming_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = dir.path().join("t.toml");
    std::fs::write(
        &toml,
        "[envoy]\nresponse_headers = \"yes\"\nlimit_header = \"bad header\"\nbogus = 1\n",
    )
    .expect("write");
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
    let t = toml.display().to_string();
    for want in [
        format!("{t}:2: envoy.response_headers: expected a boolean"),
        format!("{t}:3: envoy.limit_header: \"bad header\" is not an HTTP header name"),
        format!("{t}:4: envoy.bogus: unknown field"),
    ] {
        assert!(err.contains(&want), "{want} not in\n{err}");
    }
}
