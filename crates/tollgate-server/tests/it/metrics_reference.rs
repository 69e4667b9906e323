//! The Envoy reference service's Prometheus names (`[metrics]
//! reference_names`, docs/metrics.md "Reference names"): the series Envoy
//! Gateway's statsd mapping makes of envoyproxy/ratelimit's stats, with
//! the values the reference's own stats tests expect
//! (`test/redis/fixed_cache_impl_test.go` `TestNearLimit`), every name
//! and label Envoy Gateway's Grafana dashboard queries, and none of them
//! with the setting off.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::Channel;

use crate::support::rls::{Rls, code, desc, toml};
use crate::support::{Tollgate, get};

/// The reference names on, over the memory store.
fn on() -> String {
    format!("{}\n[metrics]\nreference_names = true\n", toml("memory"))
}

/// The value of the one line of `text` that starts `head` (a name and
/// its labels, `{` included).
fn value(text: &str, head: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(head))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// `[total_hits, over_limit, near_limit, within_limit, shadow_mode]` of
/// the series whose labels are `labels` (as written, without braces).
fn counts(text: &str, labels: &str) -> [Option<u64>; 5] {
    [
        "total_hits",
        "over_limit",
        "near_limit",
        "within_limit",
        "shadow_mode",
    ]
    .map(|s| {
        value(
            text,
            &format!("ratelimit_service_rate_limit_{s}{{{labels}}} "),
        )
    })
}

fn metrics(rls: &Rls) -> String {
    get(rls.server.api(), "/metrics").text()
}

/// `/metrics` once `done` holds of it (a reload is applied in the
/// background; 30 s at most, then the last page, for the assertion to
/// show).
fn metrics_when(rls: &Rls, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = metrics(rls);
        if done(&text) || std::time::Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A request of `entries` on `domain` at a cost of `hits`.
fn hits(domain: &str, entries: &[(&str, &str)], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![desc(entries)],
        hits_addend: hits,
    }
}

const NEAR: &str = "\
domain: near
descriptors:
  - key: key4
    value: value4
    rate_limit: {unit: hour, requests_per_unit: 15}
  - key: key9
    value: value9
    rate_limit: {unit: hour, requests_per_unit: 20}
";

#[test]
fn hits_split_between_within_near_and_over_as_the_reference_counts_them() {
    let mut rls = Rls::start_with(&on(), NEAR, &["--http", "127.0.0.1:0"]);
    // limit 15, near threshold 12: 10 then 1 (count 11), within, not near
    for n in [10, 1] {
        let r = rls.ok(hits("near", &[("key4", "value4")], n));
        assert_eq!(code(r.overall_code), code(1), "{r:?}");
    }
    let key4 = "domain=\"near\",key1=\"key4_value4\"";
    assert_eq!(
        counts(&metrics(&rls), key4),
        [Some(11), Some(0), Some(0), Some(11), Some(0)]
    );
    // 2 more (count 13): 1 of them past the threshold
    rls.ok(hits("near", &[("key4", "value4")], 2));
    assert_eq!(
        counts(&metrics(&rls), key4),
        [Some(13), Some(0), Some(1), Some(13), Some(0)]
    );
    // 3 more would make 16 of 15: 1 over, the 2 below the limit near
    let r = rls.ok(hits("near", &[("key4", "value4")], 3));
    assert_eq!(code(r.overall_code), code(2), "{r:?}");
    assert_eq!(
        counts(&metrics(&rls), key4),
        [Some(16), Some(1), Some(3), Some(13), Some(0)]
    );

    // "some of it in all three places": 7 hits from 15 of 20 (threshold 16)
    rls.ok(hits("near", &[("key9", "value9")], 15));
    rls.ok(hits("near", &[("key9", "value9")], 7));
    let key9 = "domain=\"near\",key1=\"key9_value9\"";
    assert_eq!(
        counts(&metrics(&rls), key9),
        [Some(22), Some(2), Some(4), Some(15), Some(0)]
    );
}

const SHAPES: &str = "\
domain: shapes
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: client
    value: 10.0.0.1
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: route
    value: r
    descriptors:
      - key: user
        descriptors:
          - key: plan
            value: gold
            rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shadowed
    rate_limit: {unit: minute, requests_per_unit: 1}
    shadow_mode: true
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: open
    rate_limit: {unlimited: true}
";

#[test]
fn stats_keys_are_config_paths_folded_to_two_levels() {
    let mut rls = Rls::start_with(&on(), SHAPES, &["--http", "127.0.0.1:0"]);
    // per-IP values of a key-only node: one series
    for ip in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
        rls.ok(hits("shapes", &[("remote_address", ip)], 1));
    }
    // a configured address: its dots are not levels
    rls.ok(hits("shapes", &[("client", "10.0.0.1")], 1));
    // three levels: the third folded away
    rls.ok(hits(
        "shapes",
        &[("route", "r"), ("user", "u1"), ("plan", "gold")],
        1,
    ));
    rls.ok(hits(
        "shapes",
        &[("route", "r"), ("user", "u2"), ("plan", "gold")],
        1,
    ));
    // shadow mode: the second call is over, answered OK
    for _ in 0..2 {
        let r = rls.ok(hits("shapes", &[("shadowed", "x")], 1));
        assert_eq!(code(r.overall_code), code(1), "{r:?}");
    }
    // detailed_metric: the request's value names the series
    rls.ok(hits("shapes", &[("detailed", "d1")], 1));
    // unlimited, and no limit at all: no series
    rls.ok(hits("shapes", &[("open", "o")], 1));
    rls.ok(hits("shapes", &[("nothing", "n")], 1));

    let text = metrics(&rls);
    let series = |labels: &str| counts(&text, labels);
    assert_eq!(
        series("domain=\"shapes\",key1=\"remote_address\""),
        [Some(3), Some(0), Some(0), Some(3), Some(0)],
        "{text}"
    );
    assert_eq!(
        series("domain=\"shapes\",key1=\"client_10_0_0_1\"")[0],
        Some(1),
        "{text}"
    );
    assert_eq!(
        series("domain=\"shapes\",key1=\"route_r\",key2=\"user\"")[0],
        Some(2),
        "{text}"
    );
    assert_eq!(
        // limit 1, threshold 0: the first hit within and near
        series("domain=\"shapes\",key1=\"shadowed\""),
        [Some(2), Some(1), Some(1), Some(1), Some(1)],
        "{text}"
    );
    assert_eq!(
        series("domain=\"shapes\",key1=\"detailed_d1\"")[0],
        Some(1),
        "{text}"
    );
    for absent in ["key1=\"open", "key1=\"nothing", "remote_address_192"] {
        assert!(!text.contains(absent), "{absent}:\n{text}");
    }
    let lines = text
        .lines()
        .filter(|l| l.starts_with("ratelimit_service_rate_limit_total_hits{"))
        .count();
    assert_eq!(lines, 5, "{text}");
}

#[test]
fn calls_errors_and_loads_are_counted() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    // SIGHUP only: each reload below is one load
    let mut rls = Rls::start_with(
        &on(),
        NEAR,
        &["--http", "127.0.0.1:0", "--reload-poll", "0s"],
    );
    let fresh = metrics(&rls);
    for series in [
        "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 0",
        "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} 0",
        "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 0",
        "ratelimit_service_total_requests{grpc_method=\"Check\"} 0",
        "ratelimit_service_config_load_success 1",
        "ratelimit_service_config_load_error 0",
        "go_memstats_gc_cpu_fraction 0",
    ] {
        assert!(fresh.lines().any(|l| l == series), "{series}:\n{fresh}");
    }
    rls.ok(hits("near", &[("key4", "value4")], 1));
    let refused = rls.call(hits("", &[("key4", "value4")], 1));
    assert_eq!(refused.unwrap_err().code(), tonic::Code::InvalidArgument);
    let addr = rls.server.grpc();
    rls.rt.block_on(async move {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        HealthClient::new(channel)
            .check(HealthCheckRequest::default())
            .await
            .expect("Check");
    });
    // the health answer is streamed, and counted once it has ended
    let text = metrics_when(&rls, |t| {
        value(t, "ratelimit_service_total_requests{grpc_method=\"Check\"}") != Some(0)
    });
    let at = |head: &str| value(&text, head);
    assert_eq!(
        at("ratelimit_service_should_rate_limit_error{err_type=\"service_error\"}"),
        Some(1),
        "{text}"
    );
    assert_eq!(
        at("ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"}"),
        Some(2),
        "{text}"
    );
    assert_eq!(
        at("ratelimit_service_total_requests{grpc_method=\"Check\"}"),
        Some(1),
        "{text}"
    );
    assert_eq!(
        at("ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"}"),
        Some(2),
        "{text}"
    );
    assert!(text.contains("# TYPE ratelimit_service_response_time_seconds histogram\n"));

    // a refused reload, then one that serves
    let path = rls.server.config_path();
    let good = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, "[metrics]\nreference_names = 7\n").expect("write");
    rls.server.signal("HUP");
    let text = metrics_when(&rls, |t| {
        value(t, "ratelimit_service_config_load_error ") != Some(0)
    });
    let loads = |t: &str| {
        (
            value(t, "ratelimit_service_config_load_success "),
            value(t, "ratelimit_service_config_load_error "),
        )
    };
    assert_eq!(loads(&text), (Some(1), Some(1)), "{text}");
    std::fs::write(&path, good).expect("write");
    rls.server.signal("HUP");
    let text = metrics_when(&rls, |t| {
        value(t, "ratelimit_service_config_load_success ") != Some(1)
    });
    assert_eq!(loads(&text), (Some(2), Some(1)), "{text}");
}

/// Envoy Gateway's config for its dashboard's route (the names its
/// translator gives `httproute/default/http-ratelimit` rule 0 match 0).
const GATEWAY: &str = "\
domain: default/eg/http
descriptors:
  - key: httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example
    value: httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example
    descriptors:
      - key: rule-0-match-0
        value: rule-0-match-0
        rate_limit: {unit: hour, requests_per_unit: 3}
";

/// The expressions of Envoy Gateway's dashboard, verbatim
/// (envoyproxy/gateway `charts/gateway-addons-helm/dashboards/global-ratelimit.json`
/// at d32f28294245), `$DefaultDomain` being its default, `default/eg/http`.
const DASHBOARD: [&str; 6] = [
    "(go_memstats_gc_cpu_fraction)*1000000",
    "(process_resident_memory_bytes{app_kubernetes_io_component=\"ratelimit\"})/1000000",
    "(process_virtual_memory_bytes{app_kubernetes_io_component=\"ratelimit\"})/1000000",
    "ratelimit_service_rate_limit_total_hits{domain=\"$DefaultDomain\", key1=\"httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example_httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example\", key2=\"rule-0-match-0_rule-0-match-0\"}",
    "ratelimit_service_rate_limit_near_limit{domain=\"$DefaultDomain\", key1=\"httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example_httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example\", key2=\"rule-0-match-0_rule-0-match-0\"}",
    "ratelimit_service_rate_limit_over_limit{domain=\"$DefaultDomain\", key1=\"httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example_httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example\", key2=\"rule-0-match-0_rule-0-match-0\"}",
];

/// The metric an expression selects and its label matchers, less the
/// ones Prometheus' scrape adds from the pod (`app_kubernetes_io_*`).
fn selector(expr: &str) -> (String, Vec<(String, String)>) {
    let expr = expr.replace("$DefaultDomain", "default/eg/http");
    let start = expr.trim_start_matches('(');
    let end = start.find(['{', ')', '*', ' ']).unwrap_or(start.len());
    let name = start[..end].to_owned();
    let mut matchers = Vec::new();
    if let Some(body) = start[end..].strip_prefix('{') {
        let body = &body[..body.find('}').expect("closed selector")];
        for m in body.split(", ") {
            let (label, v) = m.split_once('=').expect("an equality matcher");
            if !label.starts_with("app_kubernetes_io_") {
                matchers.push((label.to_owned(), v.trim_matches('"').to_owned()));
            }
        }
    }
    (name, matchers)
}

#[test]
fn every_series_the_gateway_dashboard_queries_is_exported() {
    let mut rls = Rls::start_with(&on(), GATEWAY, &["--http", "127.0.0.1:0"]);
    let entries = [
        (
            "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example",
            "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example",
        ),
        ("rule-0-match-0", "rule-0-match-0"),
    ];
    for _ in 0..4 {
        rls.ok(hits("default/eg/http", &entries, 1));
    }
    let text = metrics(&rls);
    let mut values = Vec::new();
    for expr in DASHBOARD {
        let (name, matchers) = selector(expr);
        let want: String = matchers
            .iter()
            .map(|(l, v)| format!("{l}=\"{v}\""))
            .collect::<Vec<_>>()
            .join(",");
        let head = if want.is_empty() {
            format!("{name} ")
        } else {
            format!("{name}{{{want}}} ")
        };
        let v = value(&text, &head);
        assert!(v.is_some(), "{expr}: no {head:?}\n{text}");
        values.push(v);
    }
    // 4 hits of a limit of 3 (threshold 2): the third near, the fourth over
    assert_eq!(values[3..], [Some(4), Some(1), Some(1)], "{text}");
}

#[test]
fn off_by_default_and_then_no_reference_name_is_exported() {
    let mut rls = Rls::start_with(&toml("memory"), GATEWAY, &["--http", "127.0.0.1:0"]);
    rls.ok(hits(
        "default/eg/http",
        &[("rule-0-match-0", "rule-0-match-0")],
        1,
    ));
    let text = metrics(&rls);
    for expr in DASHBOARD {
        let (name, _) = selector(expr);
        if name.starts_with("process_") {
            // tollgate's own: exported either way
            assert!(text.contains(&format!("\n{name} ")), "{name}:\n{text}");
        } else {
            assert!(!text.contains(&name), "{name}:\n{text}");
        }
    }
    assert!(!text.contains("ratelimit_service_"), "{text}");
    let s = Tollgate::start(&on(), &["--http", "127.0.0.1:0"]);
    let text = get(s.api(), "/metrics").text();
    assert!(
        text.contains("# TYPE ratelimit_service_rate_limit_total_hits counter\n"),
        "{text}"
    );
}

#[test]
fn an_override_and_a_failed_store_count_as_the_reference_counts_them() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    use envoy_types::pb::google::protobuf::UInt64Value;
    use redis_harness::RedisServer;

    let redis = RedisServer::start();
    let config = format!(
        "[store]\nurl = \"{}\"\ntimeout = \"200ms\"\non_error = \"allow\"\n\n\
         [[rules]]\nname = \"http_rule\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n\
         \n[metrics]\nreference_names = true\n",
        redis.url()
    );
    let mut rls = Rls::start_with(&config, NEAR, &["--http", "127.0.0.1:0"]);
    // a descriptor's own limit: its series is named by the request's values
    let mut own = desc(&[("key4", "value4"), ("user", "u7")]);
    own.limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: 3, // hour
    });
    // and its own hits_addend of 2: the whole limit, within and near
    own.hits_addend = Some(UInt64Value { value: 2 });
    let r = rls.ok(RateLimitRequest {
        domain: "near".to_owned(),
        descriptors: vec![own],
        hits_addend: 0,
    });
    assert_eq!(code(r.overall_code), code(1), "{r:?}");
    let text = metrics(&rls);
    assert_eq!(
        counts(
            &text,
            "domain=\"near\",key1=\"key4_value4\",key2=\"user_u7\""
        ),
        [Some(2), Some(0), Some(1), Some(2), Some(0)],
        "{text}"
    );
    // the store gone, `allow` answers: the hits count, nothing else, and
    // the call is a redis_error
    redis.kill();
    rls.ok(hits("near", &[("key9", "value9")], 3));
    let text = metrics(&rls);
    assert_eq!(
        counts(&text, "domain=\"near\",key1=\"key9_value9\""),
        [Some(3), Some(0), Some(0), Some(0), Some(0)],
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"}"
        ),
        Some(1),
        "{text}"
    );
}

const PEEKS: &str = "\
domain: peeks
descriptors:
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 0}
";

#[test]
fn a_peek_makes_no_series_and_a_zero_limit_is_all_over() {
    use envoy_types::pb::google::protobuf::UInt64Value;
    let mut rls = Rls::start_with(&on(), PEEKS, &["--http", "127.0.0.1:0"]);
    // Envoy Gateway's hits_addend 0 check: nothing to count, no series
    let mut peek = desc(&[("route", "r")]);
    peek.hits_addend = Some(UInt64Value { value: 0 });
    rls.ok(RateLimitRequest {
        domain: "peeks".to_owned(),
        descriptors: vec![peek],
        hits_addend: 0,
    });
    let text = metrics(&rls);
    assert!(!text.contains("key1=\"route\""), "{text}");
    // requests_per_unit 0: every hit over, none near
    let r = rls.ok(hits("peeks", &[("closed", "c")], 2));
    assert_eq!(code(r.overall_code), code(2), "{r:?}");
    let text = metrics(&rls);
    assert_eq!(
        counts(&text, "domain=\"peeks\",key1=\"closed\""),
        [Some(2), Some(2), Some(0), Some(0), Some(0)],
        "{text}"
    );
    // then a hit of the peeked limit makes its series
    rls.ok(hits("peeks", &[("route", "r")], 1));
    let text = metrics(&rls);
    assert_eq!(
        counts(&text, "domain=\"peeks\",key1=\"route\""),
        [Some(1), Some(0), Some(0), Some(1), Some(0)],
        "{text}"
    );
}

const CHARGED: &str = "\
domain: charged
descriptors:
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 5, charge: true}
";

#[test]
fn a_charge_past_the_limit_counts_its_hits_over() {
    use envoy_types::pb::google::protobuf::UInt64Value;
    let mut rls = Rls::start_with(&on(), CHARGED, &["--http", "127.0.0.1:0"]);
    let charge = |n: u64| {
        let mut d = desc(&[("tokens", "t")]);
        d.hits_addend = Some(UInt64Value { value: n });
        RateLimitRequest {
            domain: "charged".to_owned(),
            descriptors: vec![d],
            hits_addend: 0,
        }
    };
    // 7 of 5 (threshold 4), recorded in full: 4 within the threshold,
    // 1 near, 2 over; then 3 more, all over (the key is in debt)
    rls.ok(charge(7));
    let labels = "domain=\"charged\",key1=\"tokens\"";
    let text = metrics(&rls);
    assert_eq!(
        counts(&text, labels),
        [Some(7), Some(2), Some(1), Some(0), Some(0)],
        "{text}"
    );
    rls.ok(charge(3));
    let text = metrics(&rls);
    assert_eq!(
        counts(&text, labels),
        [Some(10), Some(5), Some(1), Some(0), Some(0)],
        "{text}"
    );
}
