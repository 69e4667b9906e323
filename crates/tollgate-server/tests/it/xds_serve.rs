//! `tollgate serve` with `[envoy.xds]` against the test ADS server
//! (Envoy Gateway's go-control-plane behaviour): the first config served
//! over real gRPC `ShouldRateLimit`, the requests as the reference sends
//! them, an update that keeps the counters of unchanged limits, a bad
//! snapshot NACKed with its domain and descriptor while the old config
//! serves, a SIGHUP that keeps the xDS limits, and the version shown in
//! `/v1/rules` and `/metrics` being the xDS `version_info`.

use tollgate_server::rls_conf::RateLimitUnit::{Hour, Minute, Unknown};

use crate::support::Tollgate;
use crate::support::xds::{
    NODE, acked, ads, client, codes, config_version, eg_domain, eg_request, metrics, nacked,
    runtime, set, toml,
};

const ARGS: &[&str] = &["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"];

#[test]
fn the_first_config_is_served_and_requests_are_the_references() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    set(
        &ads,
        "1",
        &[eg_domain("default/eg/http", "httproute/a", &[(2, Minute)])],
    );
    let url = ads.addr().to_string();
    let server = Tollgate::start(&toml(&url, ""), ARGS);
    rt.block_on(acked(&ads, "1"));
    let mut c = client(&rt, &server);
    let req = eg_request("default/eg/http", "httproute/a", 0);
    assert_eq!(codes(&rt, &mut c, &req, 3), ["OK", "OK", "OVER_LIMIT"]);
    // The requests: node id and metadata on every one, the type URL, no
    // names; the first with no version or nonce; the ACK with both.
    let events = ads.events();
    let requests: Vec<_> = events.iter().filter_map(|e| e.request()).collect();
    assert!(requests.len() >= 2, "{events:#?}");
    for r in &requests {
        let node = r.node.as_ref().expect("node");
        assert_eq!(node.id, NODE);
        let meta = node.metadata.as_ref().expect("metadata");
        assert!(
            format!("{:?}", meta.fields["cluster"]).contains("\"eg\""),
            "{meta:?}"
        );
        assert_eq!(
            r.type_url,
            "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
        );
        assert!(r.resource_names.is_empty());
    }
    assert_eq!(
        (
            requests[0].version_info.as_str(),
            requests[0].response_nonce.as_str()
        ),
        ("", "")
    );
    let ack = rt.block_on(acked(&ads, "1"));
    let ack = ack.ack().expect("ack");
    let sent = events
        .iter()
        .find_map(|e| e.response())
        .expect("a response");
    assert_eq!(ack.response_nonce, sent.nonce);
    assert!(ack.error_detail.is_none());
    // The version shown is the xDS one.
    assert_eq!(config_version(&server), "1");
    assert!(metrics(&server).contains("tollgate_config_info{version=\"1\"} 1"));
}

#[test]
fn an_update_keeps_the_counts_of_unchanged_limits_and_drops_removed_domains() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    let a = eg_domain("a", "route", &[(3, Hour), (5, Hour)]);
    let gone = eg_domain("gone", "route", &[(1, Hour)]);
    set(&ads, "1", &[a.clone(), gone]);
    let server = Tollgate::start(&toml(&ads.addr().to_string(), ""), ARGS);
    rt.block_on(acked(&ads, "1"));
    let mut c = client(&rt, &server);
    let kept = eg_request("a", "route", 0);
    let changed = eg_request("a", "route", 1);
    let removed = eg_request("gone", "route", 0);
    assert_eq!(codes(&rt, &mut c, &kept, 2), ["OK", "OK"]);
    assert_eq!(codes(&rt, &mut c, &changed, 5), ["OK"; 5]);
    assert_eq!(codes(&rt, &mut c, &removed, 2), ["OK", "OVER_LIMIT"]);
    // Version 2: rule 1's limit changes, domain `gone` goes, `b` comes.
    let a2 = eg_domain("a", "route", &[(3, Hour), (6, Hour)]);
    set(&ads, "2", &[a2, eg_domain("b", "route", &[(1, Hour)])]);
    rt.block_on(acked(&ads, "2"));
    assert_eq!(config_version(&server), "2");
    // Rule 0 kept its count of 2 (one left); rule 1 is a new limit.
    assert_eq!(codes(&rt, &mut c, &kept, 2), ["OK", "OVER_LIMIT"]);
    assert_eq!(
        codes(&rt, &mut c, &removed, 2),
        ["OK", "OK"],
        "no limit: an unknown domain"
    );
    let b = eg_request("b", "route", 0);
    assert_eq!(codes(&rt, &mut c, &b, 2), ["OK", "OVER_LIMIT"]);
}

#[test]
fn a_bad_snapshot_is_nacked_naming_domain_and_descriptor_and_changes_nothing() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    set(&ads, "1", &[eg_domain("d", "route", &[(2, Hour)])]);
    let server = Tollgate::start(&toml(&ads.addr().to_string(), ""), ARGS);
    rt.block_on(acked(&ads, "1"));
    let mut c = client(&rt, &server);
    let req = eg_request("d", "route", 0);
    assert_eq!(codes(&rt, &mut c, &req, 1), ["OK"]);
    // A limit without a unit: the reference refuses it too.
    let bad = eg_domain("d", "route", &[(9, Hour), (5, Unknown)]);
    set(&ads, "2", &[bad]);
    let nack = rt.block_on(nacked(&ads, 0));
    assert_eq!(nack.version_info, "1", "the last accepted version");
    let message = nack.error_detail.expect("error_detail").message;
    assert!(message.contains("domain d"), "{message}");
    assert!(
        message.contains("route=route > rule-1-match-0"),
        "{message}"
    );
    let resent = ads
        .events()
        .iter()
        .filter_map(|e| e.response())
        .find(|r| r.version_info == "2")
        .cloned()
        .expect("version 2 sent");
    assert_eq!(nack.response_nonce, resent.nonce);
    // Nothing changed: the old limit and count, the old version.
    assert_eq!(codes(&rt, &mut c, &req, 2), ["OK", "OVER_LIMIT"]);
    assert_eq!(config_version(&server), "1");
    let rules = crate::support::get(server.api(), "/v1/rules").json();
    let shown = rules["reload_error"]["message"]
        .as_str()
        .expect("reload_error");
    assert!(shown.contains("route=route > rule-1-match-0"), "{rules}");
    assert!(metrics(&server).contains("tollgate_config_reloads_total{outcome=\"error\"} 1"));
    // The server sends it again at once on each NACK (go-control-plane's
    // loop): the same response is NACKed again, not loaded or logged again.
    let again = rt.block_on(nacked(&ads, 2));
    assert_eq!(again.version_info, "1");
    assert!(
        server.logs("xDS config version \"2\" refused"),
        "{}",
        server.log()
    );
    let refusals = server
        .log()
        .matches("xDS config version \"2\" refused")
        .count();
    assert_eq!(refusals, 1, "{}", server.log());
    // A fixed snapshot is taken at the next NACK, and the loop ends.
    set(&ads, "3", &[eg_domain("d", "route", &[(4, Hour)])]);
    rt.block_on(acked(&ads, "3"));
    assert_eq!(config_version(&server), "3");
    // The same counter (fixed window, same key) under the new limit:
    // 2 used of 4.
    assert_eq!(codes(&rt, &mut c, &req, 3), ["OK", "OK", "OVER_LIMIT"]);
}

#[test]
fn a_sighup_reload_of_the_toml_keeps_the_xds_limits_and_version() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    set(&ads, "7", &[eg_domain("d", "route", &[(2, Hour)])]);
    let text = toml(&ads.addr().to_string(), "");
    let server = Tollgate::start(&text, ARGS);
    rt.block_on(acked(&ads, "7"));
    let mut c = client(&rt, &server);
    let req = eg_request("d", "route", 0);
    assert_eq!(codes(&rt, &mut c, &req, 1), ["OK"]);
    let more = format!(
        "{text}\n[[rules]]\nname = \"extra\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n"
    );
    std::fs::write(server.config_path(), more).expect("rewrite");
    server.signal("HUP");
    assert!(server.logs("config reloaded (SIGHUP)"), "{}", server.log());
    let rules = crate::support::get(server.api(), "/v1/rules").json();
    assert!(rules.to_string().contains("\"extra\""), "{rules}");
    assert_eq!(config_version(&server), "7");
    assert_eq!(
        codes(&rt, &mut c, &req, 2),
        ["OK", "OVER_LIMIT"],
        "the xDS limit and count"
    );
}

#[test]
fn files_and_xds_together_are_refused_naming_both() {
    let (_dir, yaml) = crate::support::rls::yaml_file("domain: d\ndescriptors: []\n");
    let yaml = yaml.to_str().expect("utf-8");
    let out = crate::support::serve_output(
        &toml("127.0.0.1:1", ""),
        &["--grpc", "127.0.0.1:0", "--envoy-config", yaml],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--envoy-config") && err.contains("[envoy.xds]"),
        "{err}"
    );
    // `validate` refuses what `serve` refuses.
    let (_d, config) = crate::support::config_file(&toml("127.0.0.1:1", ""));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("validate")
        .arg("--config")
        .arg(&config)
        .args(["--envoy-config", yaml])
        .output()
        .expect("validate");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("envoy.xds") && err.contains("--envoy-config"),
        "{err}"
    );
}

#[test]
fn the_xds_flags_need_no_config_file() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    set(&ads, "1", &[eg_domain("d", "route", &[(1, Hour)])]);
    let url = format!("http://{}", ads.addr());
    let server = Tollgate::start_with_env(
        None,
        &["--grpc", "127.0.0.1:0"],
        &[
            ("TOLLGATE_XDS_SERVER", &url),
            ("TOLLGATE_XDS_NODE_ID", NODE),
        ],
    );
    rt.block_on(acked(&ads, "1"));
    let mut c = client(&rt, &server);
    let req = eg_request("d", "route", 0);
    assert_eq!(codes(&rt, &mut c, &req, 2), ["OK", "OVER_LIMIT"]);
}

#[test]
fn a_huge_bad_snapshot_is_nacked_with_its_first_errors_under_grpc_gos_limit() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    set(&ads, "1", &[eg_domain("d", "route", &[(2, Hour)])]);
    let server = Tollgate::start(&toml(&ads.addr().to_string(), ""), ARGS);
    rt.block_on(acked(&ads, "1"));
    // 30,000 limits without a unit (100 domains of 300), one error of
    // about 200 bytes each: joined whole, the NACK would pass the 4 MiB a
    // grpc-go server (the harness's default, Envoy Gateway's) decodes, and
    // the stream would die instead.
    let bad = vec![(5, Unknown); 300];
    let domains: Vec<_> = (0..100)
        .map(|i| {
            eg_domain(
                &format!("default/envoy-gateway-{i}/http"),
                "httproute/default/a-route-with-a-long-name",
                &bad,
            )
        })
        .collect();
    set(&ads, "2", &domains);
    let nack = rt.block_on(nacked(&ads, 0));
    assert_eq!(nack.version_info, "1");
    let message = nack.error_detail.expect("error_detail").message;
    assert!(message.len() <= 16 << 10, "{} bytes", message.len());
    assert!(
        message.contains("rule-0-match-0"),
        "the first error: {message}"
    );
    assert!(message.ends_with("more errors"), "{message}");
    let rules = crate::support::get(server.api(), "/v1/rules").json();
    let shown = rules["reload_error"]["message"]
        .as_str()
        .expect("reload_error");
    assert!(shown.len() <= 16 << 10, "{} bytes", shown.len());
    assert!(
        server.log().len() < 1 << 20,
        "{} bytes of log",
        server.log().len()
    );
    assert_eq!(config_version(&server), "1");
}
