//! The whole Envoy examples the repository ships (`examples/envoy/`: Envoy
//! bootstraps beside the envoyproxy/ratelimit configs tollgate serves for
//! them), held to what docs/envoy.md says of them: Envoy 1.40 accepts each
//! bootstrap as it is (`envoy --mode validate`), `tollgate validate`
//! accepts each limits file, every bootstrap's domain has its limits file,
//! and the edge example limits real requests with only its addresses
//! changed. The other real-Envoy tests run their cases on these bootstraps
//! too (`support::envoy_bootstrap`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support;
use crate::support::envoy::{Envoy, away_from_a_window_edge, envoy_binary};
use crate::support::envoy_bootstrap::{Example, example_path, yaml_to_json};
use crate::support::model::ModelServer;
use crate::support::rls::{Rls, toml};

/// Every `*.yaml` of `examples/envoy/`, parsed: (file name, content).
fn examples() -> Vec<(String, Value)> {
    let dir = example_path("");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).expect("read example");
            (name, yaml_to_json(&text))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A bootstrap has `static_resources`; a limits file has a `domain`.
fn is_bootstrap(config: &Value) -> bool {
    config.get("static_resources").is_some()
}

/// The domain a bootstrap's rate limit filter asks for.
fn filter_domain(name: &str) -> String {
    let mut example = Example::load(name);
    example.rate_limit_filter()["domain"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: the rate limit filter has no domain"))
        .to_owned()
}

#[test]
fn every_envoy_bootstrap_in_examples_passes_envoy_validate() {
    let envoy = envoy_binary();
    let bootstraps: Vec<String> = examples()
        .into_iter()
        .filter(|(_, c)| is_bootstrap(c))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        bootstraps,
        ["edge.yaml", "envoy-gateway.yaml", "llm-tokens.yaml"]
    );
    for name in &bootstraps {
        let out = Command::new(&envoy)
            .args(["--mode", "validate", "-c"])
            .arg(example_path(name))
            .output()
            .expect("run envoy");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("OK"),
            "envoy --mode validate -c examples/envoy/{name}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn every_limits_file_in_examples_passes_tollgate_validate_and_serves_a_bootstrap() {
    let (bootstraps, limits): (Vec<_>, Vec<_>) =
        examples().into_iter().partition(|(_, c)| is_bootstrap(c));
    let mut domains = Vec::new();
    for (name, config) in &limits {
        let path: PathBuf = example_path(name);
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["validate", "--envoy-config"])
            .arg(&path)
            .output()
            .expect("run tollgate");
        assert!(
            out.status.success(),
            "tollgate validate --envoy-config examples/envoy/{name}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        domains.push(config["domain"].as_str().expect("domain").to_owned());
    }
    // Each bootstrap asks for a domain one of the limits files defines.
    for (name, _) in &bootstraps {
        let domain = filter_domain(name);
        assert!(
            domains.contains(&domain),
            "{name} asks for domain {domain}; the limits files define {domains:?}"
        );
    }
}

/// tollgate serving `examples/envoy/edge-ratelimit.yaml`, behind Envoy on
/// `examples/envoy/edge.yaml` with `edit` applied after the test's
/// addresses.
fn edge(edit: impl FnOnce(&mut Example)) -> (Envoy, ModelServer, Rls) {
    let limits = std::fs::read_to_string(example_path("edge-ratelimit.yaml")).expect("read");
    let rls = Rls::start_with(&toml("memory"), &limits, &[]);
    let upstream = ModelServer::start();
    let mut example = Example::load("edge.yaml").for_test(upstream.addr, rls.server.grpc());
    edit(&mut example);
    (Envoy::start(&example.text()), upstream, rls)
}

fn login(envoy: &Envoy, path: &str) -> u16 {
    support::request(envoy.listener, "GET", path, &[], b"").status
}

#[test]
fn the_edge_example_denies_the_sixth_login_of_a_clock_minute() {
    envoy_binary();
    // `path=/login` is 5 a minute, a fixed window: keep the count in one.
    away_from_a_window_edge(60, Duration::from_secs(15));
    let (envoy, upstream, _rls) = edge(|_| {});
    let statuses: Vec<u16> = (0..6).map(|_| login(&envoy, "/login")).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "{}", envoy.log());
    // The route matches the path without its query: the same counter.
    assert_eq!(login(&envoy, "/login?next=/home"), 429);
    // Another path has no such limit (7 requests so far: within the
    // client's 10 a second, whichever second they fell in).
    assert_eq!(login(&envoy, "/home"), 200);
    assert_eq!(upstream.served(), 6);
    assert_eq!(envoy.stat("cluster.upstream.ratelimit.over_limit"), Some(2));
}

#[test]
fn without_its_http2_option_the_rate_limit_cluster_fails_every_call() {
    // What docs/envoy.md warns of: the option left out, Envoy calls the
    // gRPC service over HTTP/1.1, every call fails, and with Envoy's
    // default `failure_mode_deny: false` every request goes through with
    // no limit at all.
    envoy_binary();
    away_from_a_window_edge(60, Duration::from_secs(15));
    let (envoy, upstream, _rls) = edge(|example| {
        example.rate_limit_filter()["failure_mode_deny"] = Value::Bool(false);
        let removed = example
            .cluster("ratelimit")
            .as_object_mut()
            .expect("cluster")
            .remove("typed_extension_protocol_options");
        assert!(
            removed.is_some(),
            "edge.yaml's ratelimit cluster sets HTTP/2"
        );
    });
    let statuses: Vec<u16> = (0..7).map(|_| login(&envoy, "/login")).collect();
    assert_eq!(statuses, [200; 7], "{}", envoy.log());
    assert_eq!(upstream.served(), 7);
    assert_eq!(envoy.stat("cluster.upstream.ratelimit.error"), Some(7));
    assert_eq!(
        envoy
            .stat("cluster.upstream.ratelimit.over_limit")
            .unwrap_or(0),
        0
    );
}
