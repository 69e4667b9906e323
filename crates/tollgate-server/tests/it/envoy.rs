//! The Envoy rate limit service end to end: the real binary with `--grpc`
//! and `--envoy-config`, called over gRPC as Envoy calls it
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), on the
//! memory store and on a real redis-server.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::UInt64Value;
use redis_harness::RedisServer;
use tonic::transport::Channel;

use crate::support;
use crate::support::rls::{Rls, code, desc, toml, yaml_file};

const RLS: &str = "\
domain: rl
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: path
    value: /admin
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: path
    value: /api*
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: client
    value: acme
    descriptors:
      - key: path
        rate_limit:
          unit: hour
          requests_per_unit: 1
  - key: plan
    value: base
    rate_limit:
      name: base
      unit: hour
      requests_per_unit: 1
  - key: plan
    value: premium
    rate_limit:
      name: premium
      unit: hour
      requests_per_unit: 100
      replaces:
        - name: base
  - key: free
    rate_limit:
      unlimited: true
  - key: blocked
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: trial
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: free2
    rate_limit:
      name: freebie
      unlimited: true
  - key: vip
    rate_limit:
      unit: hour
      requests_per_unit: 10
      replaces:
        - name: freebie
  - key: bulk
    rate_limit:
      unit: hour
      requests_per_unit: 5
      algorithm: gcra
";

fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

fn one(entries: &[(&str, &str)]) -> RateLimitRequest {
    req("rl", vec![desc(entries)])
}

/// (code, requests_per_unit, unit, remaining) of a status with a limit.
fn limited(s: &DescriptorStatus) -> (Code, u32, Unit, u32) {
    let l = s.current_limit.as_ref().expect("current_limit");
    (
        code(s.code),
        l.requests_per_unit,
        Unit::try_from(l.unit).expect("unit"),
        s.limit_remaining,
    )
}

fn unlimited_ok(s: &DescriptorStatus) -> bool {
    code(s.code) == Code::Ok && s.current_limit.is_none()
}

#[test]
fn a_key_only_descriptor_counts_each_value_on_its_own() {
    away_from_a_minute_edge();
    let mut rls = Rls::start("memory", RLS);
    for left in [2, 1, 0] {
        let r = rls.ok(one(&[("user", "alice")]));
        assert_eq!(code(r.overall_code), Code::Ok);
        assert_eq!(limited(&r.statuses[0]), (Code::Ok, 3, Unit::Minute, left));
        let reset = r.statuses[0].duration_until_reset.expect("reset");
        assert!(
            reset.seconds <= 60 && (reset.seconds > 0 || reset.nanos > 0),
            "{reset:?}"
        );
    }
    let r = rls.ok(one(&[("user", "alice")]));
    assert_eq!(code(r.overall_code), Code::OverLimit);
    assert_eq!(
        limited(&r.statuses[0]),
        (Code::OverLimit, 3, Unit::Minute, 0)
    );
    // Another value is another counter.
    let r = rls.ok(one(&[("user", "bob")]));
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 3, Unit::Minute, 2));
}

#[test]
fn values_wildcards_and_nesting_pick_the_limit() {
    away_from_a_minute_edge();
    let mut rls = Rls::start("memory", RLS);
    // An exact value.
    assert_eq!(
        rls.ok(one(&[("path", "/admin")])).overall_code,
        Code::Ok as i32
    );
    let r = rls.ok(one(&[("path", "/admin")]));
    assert_eq!(limited(&r.statuses[0]), (Code::OverLimit, 1, Unit::Hour, 0));
    // A prefix wildcard: every matching value counts on its own key.
    for _ in 0..2 {
        assert_eq!(
            rls.ok(one(&[("path", "/api/v1")])).overall_code,
            Code::Ok as i32
        );
    }
    let r = rls.ok(one(&[("path", "/api/v1")]));
    assert_eq!(
        limited(&r.statuses[0]),
        (Code::OverLimit, 2, Unit::Minute, 0)
    );
    let r = rls.ok(one(&[("path", "/api/v2")]));
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 2, Unit::Minute, 1));
    // No node for this value and no key-only default: no limit, ever.
    for _ in 0..5 {
        let r = rls.ok(one(&[("path", "/other")]));
        assert_eq!(code(r.overall_code), Code::Ok);
        assert!(unlimited_ok(&r.statuses[0]), "{r:?}");
    }
    // Nested: client=acme then any path.
    let r = rls.ok(one(&[("client", "acme"), ("path", "/x")]));
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 1, Unit::Hour, 0));
    let r = rls.ok(one(&[("client", "acme"), ("path", "/x")]));
    assert_eq!(code(r.overall_code), Code::OverLimit);
    // Stopping above the limited level, going past it, or another client:
    // no limit.
    for entries in [
        &[("client", "acme")][..],
        &[("client", "acme"), ("path", "/x"), ("extra", "1")],
        &[("client", "other"), ("path", "/x")],
        &[("user", "carol"), ("more", "1")],
    ] {
        let r = rls.ok(one(entries));
        assert_eq!(code(r.overall_code), Code::Ok, "{entries:?}");
        assert!(unlimited_ok(&r.statuses[0]), "{entries:?}: {r:?}");
    }
    // An unknown domain limits nothing.
    let r = rls.ok(req("nope", vec![desc(&[("path", "/admin")])]));
    assert_eq!(code(r.overall_code), Code::Ok);
    assert!(unlimited_ok(&r.statuses[0]));
}

#[test]
fn a_denied_request_consumes_nothing_from_its_other_limits() {
    away_from_a_minute_edge();
    let mut rls = Rls::start("memory", RLS);
    let both = || {
        req(
            "rl",
            vec![desc(&[("path", "/admin")]), desc(&[("user", "dave")])],
        )
    };
    let r = rls.ok(both());
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(limited(&r.statuses[1]), (Code::Ok, 3, Unit::Minute, 2));
    for _ in 0..3 {
        let r = rls.ok(both());
        assert_eq!(code(r.overall_code), Code::OverLimit);
        assert_eq!(limited(&r.statuses[0]), (Code::OverLimit, 1, Unit::Hour, 0));
        // Would have admitted; not consumed.
        assert_eq!(limited(&r.statuses[1]), (Code::Ok, 3, Unit::Minute, 2));
    }
    let r = rls.ok(one(&[("user", "dave")]));
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 3, Unit::Minute, 1));
}

#[test]
fn hits_addend_is_the_cost() {
    let mut rls = Rls::start("memory", RLS);
    let mut r3 = one(&[("bulk", "x")]);
    r3.hits_addend = 3;
    let r = rls.ok(r3.clone());
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 5, Unit::Hour, 2));
    let r = rls.ok(r3);
    assert_eq!(code(r.overall_code), Code::OverLimit);
    // A descriptor's own hits_addend wins; 0 reads without consuming.
    let mut peek = desc(&[("bulk", "x")]);
    peek.hits_addend = Some(UInt64Value { value: 0 });
    let mut r0 = req("rl", vec![peek]);
    r0.hits_addend = 9;
    let r = rls.ok(r0);
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 5, Unit::Hour, 2));
    // The request's hits_addend 0 means 1.
    let r = rls.ok(one(&[("bulk", "x")]));
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 5, Unit::Hour, 1));
}

#[test]
fn unlimited_zero_shadow_and_replaces() {
    let mut rls = Rls::start("memory", RLS);
    for _ in 0..3 {
        let r = rls.ok(one(&[("free", "x")]));
        assert_eq!(code(r.statuses[0].code), Code::Ok);
        assert!(r.statuses[0].current_limit.is_none());
        assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    }
    let r = rls.ok(one(&[("blocked", "x")]));
    assert_eq!(code(r.overall_code), Code::OverLimit);
    assert_eq!(
        limited(&r.statuses[0]),
        (Code::OverLimit, 0, Unit::Second, 0)
    );
    // Shadow mode: counted, reported, never enforced.
    let r = rls.ok(one(&[("trial", "t")]));
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 1, Unit::Hour, 0));
    let r = rls.ok(one(&[("trial", "t")]));
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 1, Unit::Hour, 0));
    // `premium` replaces `base` when both match: base is neither counted
    // nor reported.
    for _ in 0..3 {
        let r = rls.ok(req(
            "rl",
            vec![desc(&[("plan", "base")]), desc(&[("plan", "premium")])],
        ));
        assert_eq!(code(r.overall_code), Code::Ok);
        assert!(unlimited_ok(&r.statuses[0]), "{r:?}");
        assert_eq!(code(r.statuses[1].code), Code::Ok);
    }
    let r = rls.ok(one(&[("plan", "base")]));
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 1, Unit::Hour, 0));
}

#[test]
fn bad_requests_are_invalid_argument_naming_the_problem() {
    let mut rls = Rls::start("memory", RLS);
    let cases = vec![
        (req("", vec![desc(&[("user", "x")])]), "domain"),
        (req("rl", vec![]), "descriptor list must not be empty"),
        (req("rl", vec![desc(&[])]), "descriptors[0] has no entries"),
        (req("rl", vec![desc(&[("user", "x")]); 65]), "at most 64"),
    ];
    for (request, why) in cases {
        let status = rls.call(request).expect_err(why);
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{why}: {status:?}"
        );
        assert!(
            status.message().contains(why),
            "{why}: {}",
            status.message()
        );
    }
    // The service is still there.
    let r = rls.ok(one(&[("user", "x")]));
    assert_eq!(code(r.overall_code), Code::Ok);
}

/// Waits, if need be, until the clock minute has at least 10 s left: the
/// limits here are per clock minute (a fixed window), and a count that
/// straddles two minutes admits up to twice the limit. Every test that
/// counts on a per-minute limit starts with it.
fn away_from_a_minute_edge() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into = now.as_secs() % 60;
    if into >= 50 {
        std::thread::sleep(std::time::Duration::from_secs(61 - into));
    }
}

#[test]
fn two_replicas_on_one_redis_hold_one_limit() {
    let redis = RedisServer::start();
    let mut replicas: Vec<Rls> = (0..2).map(|_| Rls::start(&redis.url(), RLS)).collect();
    away_from_a_minute_edge();
    let mut admitted = 0;
    for i in 0..10 {
        let r = replicas[i % 2].ok(one(&[("user", "fleet")]));
        if code(r.overall_code) == Code::Ok {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3, "a limit of 3 per minute across both replicas");
    // And on the memory store each replica holds its own.
    let mut local: Vec<Rls> = (0..2).map(|_| Rls::start("memory", RLS)).collect();
    away_from_a_minute_edge();
    let mut admitted = 0;
    for i in 0..10 {
        let r = local[i % 2].ok(one(&[("user", "fleet")]));
        if code(r.overall_code) == Code::Ok {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 6, "the memory store: each replica its own 3");
}

#[test]
fn sigterm_drains_the_grpc_service_and_exits_zero() {
    let mut rls = Rls::start("memory", RLS);
    assert_eq!(rls.ok(one(&[("user", "x")])).overall_code, Code::Ok as i32);
    rls.server.signal("TERM");
    // The client stays alive and answers (as Envoy does) while the server
    // says GOAWAY and closes the connection.
    let server = &mut rls.server;
    let status = rls
        .rt
        .block_on(async {
            for _ in 0..100 {
                if let Some(status) = server.wait_exit(Duration::ZERO) {
                    return Some(status);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None
        })
        .expect("exits within 10 s of SIGTERM");
    assert!(status.success(), "{status:?}: {}", rls.server.log());
    assert!(
        rls.server.log().contains("Envoy rate limit service"),
        "{}",
        rls.server.log()
    );
}

#[test]
fn metrics_count_envoy_limits_by_rule() {
    let mut rls = Rls::start_with(&toml("memory"), RLS, &["--http", "127.0.0.1:0"]);
    for _ in 0..2 {
        rls.ok(one(&[("path", "/admin")]));
    }
    let metrics =
        String::from_utf8(support::get(rls.server.api(), "/metrics").body).expect("utf-8");
    let line = |outcome: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("tollgate_checks_total{")
                    && l.contains("rule=\"envoy.rl.path__admin\"")
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap_or("").to_owned())
    };
    assert_eq!(line("allowed").as_deref(), Some("1"), "{metrics}");
    assert_eq!(line("denied").as_deref(), Some("1"), "{metrics}");
}

#[test]
fn a_replaced_unlimited_limit_still_reads_unlimited() {
    let mut rls = Rls::start("memory", RLS);
    let r = rls.ok(req(
        "rl",
        vec![desc(&[("free2", "x")]), desc(&[("vip", "x")])],
    ));
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX, "{r:?}");
    assert_eq!(limited(&r.statuses[1]), (Code::Ok, 10, Unit::Hour, 9));
}

#[test]
fn a_long_value_is_limited_like_any_other_and_cannot_switch_limits_off() {
    away_from_a_minute_edge();
    let mut rls = Rls::start("memory", RLS);
    assert_eq!(
        rls.ok(one(&[("path", "/admin")])).overall_code,
        Code::Ok as i32
    );
    // 5,000 bytes, and 3,000 `;` that escaping doubles: over the store's
    // key limit, so counted under a digest, not refused (an error would
    // let Envoy's default failure_mode_deny: false admit the request).
    for long in ["v".repeat(5000), ";".repeat(3000)] {
        let with_long = || {
            req(
                "rl",
                vec![
                    desc(&[("path", "/admin")]),
                    desc(&[("user", long.as_str())]),
                ],
            )
        };
        let r = rls.ok(with_long());
        assert_eq!(code(r.overall_code), Code::OverLimit);
        assert_eq!(limited(&r.statuses[0]), (Code::OverLimit, 1, Unit::Hour, 0));
        for left in [2, 1, 0] {
            let r = rls.ok(one(&[("user", long.as_str())]));
            assert_eq!(limited(&r.statuses[0]), (Code::Ok, 3, Unit::Minute, left));
        }
        let r = rls.ok(one(&[("user", long.as_str())]));
        assert_eq!(code(r.overall_code), Code::OverLimit);
    }
}

#[test]
fn a_failed_store_answers_by_policy_without_made_up_numbers() {
    for (policy, want) in [("allow", Code::Ok), ("deny", Code::OverLimit)] {
        let redis = RedisServer::start();
        let config = format!(
            "[store]\nurl = \"{}\"\ntimeout = \"200ms\"\non_error = \"{policy}\"\n\n\
             [[rules]]\nname = \"http_rule\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n",
            redis.url()
        );
        let mut rls = Rls::start_with(&config, RLS, &[]);
        let mut call = |r: RateLimitRequest| rls.ok(r);
        let r = call(one(&[("user", "f")]));
        assert_eq!(limited(&r.statuses[0]), (Code::Ok, 3, Unit::Minute, 2));
        redis.kill();
        // The policy's answer is what shows the store was not waited on
        // (a killed Redis refuses at once, the 200 ms timeout bounds the
        // rest); how long a loaded machine took over it is not asserted.
        for _ in 0..3 {
            let r = call(req(
                "rl",
                vec![desc(&[("user", "f")]), desc(&[("trial", "f")])],
            ));
            assert_eq!(code(r.overall_code), want, "{policy}: {r:?}");
            assert_eq!(code(r.statuses[0].code), want, "{policy}: {r:?}");
            match policy {
                // Nothing was decided: no limit, no remaining, no reset.
                "allow" => assert!(unlimited_ok(&r.statuses[0]), "{r:?}"),
                _ => assert_eq!(
                    r.statuses[0]
                        .current_limit
                        .as_ref()
                        .map(|l| l.requests_per_unit),
                    Some(3)
                ),
            }
            // The shadow limit never fails the request.
            assert_eq!(code(r.statuses[1].code), Code::Ok, "{policy}: {r:?}");
        }
    }
}

#[test]
fn the_grpc_health_service_reports_serving() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let rls = Rls::start("memory", RLS);
    let addr = rls.server.grpc();
    let status = rls.rt.block_on(async move {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let mut health = HealthClient::new(channel);
        let mut out = Vec::new();
        for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
            let r = health
                .check(HealthCheckRequest {
                    service: service.to_owned(),
                })
                .await
                .expect("Check");
            out.push(r.into_inner().status);
        }
        out
    });
    assert_eq!(status, vec![ServingStatus::Serving as i32; 2]);
}

/// Out of file descriptors, the gRPC port backs off and says so instead of
/// spinning a core (tonic's own acceptor retried at once, forever).
#[test]
fn out_of_file_descriptors_the_grpc_port_backs_off() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let (dir, yaml) = yaml_file(RLS);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let script = format!(
        "ulimit -n 48 && exec \"$0\" serve --grpc 127.0.0.1:{port} --envoy-config {}",
        yaml.display()
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_tollgate"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let listening = rx
        .iter()
        .take(50)
        .any(|l| l.contains(&format!("listening on 127.0.0.1:{port}")));
    assert!(listening, "the gRPC service did not start");
    // More connections than descriptors: the rest wait in the backlog,
    // and accept fails with EMFILE.
    let conns: Vec<_> = (0..80)
        .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    assert!(conns.len() >= 60, "{} connections", conns.len());
    std::thread::sleep(Duration::from_millis(300));
    let cpu = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).expect("stat");
        let fields: Vec<u64> = stat
            .rsplit(')')
            .next()
            .expect("fields")
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|f| f.parse().expect("ticks"))
            .collect();
        fields.iter().sum::<u64>()
    };
    let before = cpu();
    std::thread::sleep(Duration::from_secs(2));
    let ticks = cpu() - before;
    let log: Vec<String> = rx.try_iter().collect();
    let _ = child.kill();
    let _ = child.wait();
    drop(conns);
    drop(dir);
    // A busy loop takes ~200 ticks (2 s of a core at 100 Hz); backing off
    // takes a few.
    assert!(ticks < 50, "{ticks} ticks of CPU in 2 s");
    assert!(
        log.iter()
            .any(|l| l.contains("Envoy rate limit service: accept failed")),
        "{log:?}"
    );
}

#[test]
fn the_http_api_sees_the_same_counters_as_envoy() {
    away_from_a_minute_edge();
    let mut rls = Rls::start_with(&toml("memory"), RLS, &["--http", "127.0.0.1:0"]);
    let api = rls.server.api();
    let rules = String::from_utf8(support::get(api, "/v1/rules").body).expect("utf-8");
    assert!(rules.contains("\"envoy.rl.user\""), "{rules}");
    // One of user=erin's 3 through gRPC, one through the API's own check of
    // the same rule and key, and gRPC sees both.
    rls.ok(one(&[("user", "erin")]));
    let r = support::post_json(
        api,
        "/v1/check",
        r#"{"rule":"envoy.rl.user","key":"user=erin"}"#,
    );
    assert_eq!(r.status, 200);
    let body = String::from_utf8(r.body).expect("utf-8");
    assert!(body.contains("\"remaining\":1"), "{body}");
    let r = rls.ok(one(&[("user", "erin")]));
    assert_eq!(limited(&r.statuses[0]), (Code::Ok, 3, Unit::Minute, 0));
}

/// A domain no config defines is answered `OK` (the reference's answer),
/// but no longer silently: logged once by name, every request counted.
#[test]
fn an_unknown_domain_is_logged_once_and_counted() {
    let mut rls = Rls::start_with(&toml("memory"), RLS, &["--http", "127.0.0.1:0"]);
    for _ in 0..3 {
        let r = rls.ok(req("rl-typo", vec![desc(&[("path", "/admin")])]));
        assert_eq!(code(r.overall_code), Code::Ok);
        assert!(unlimited_ok(&r.statuses[0]));
    }
    let r = rls.ok(req("rl", vec![desc(&[("path", "/admin")])]));
    assert_eq!(code(r.overall_code), Code::Ok);
    let metrics = support::get(rls.server.api(), "/metrics").text();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("tollgate_envoy_unknown_domain_requests_total"))
        .unwrap_or_else(|| panic!("no unknown-domain series in\n{metrics}"));
    assert!(line.ends_with(" 3"), "{line}");
    // A last unknown domain: its warning is written after every earlier
    // one, so once it is read (the log comes through a pipe, in order),
    // so is everything the first requests logged.
    rls.ok(req("zz-last", vec![desc(&[("path", "/admin")])]));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let log = loop {
        let log = rls.server.log();
        if log.contains("domain \"zz-last\"") {
            break log;
        }
        assert!(std::time::Instant::now() < deadline, "never logged:\n{log}");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(log.matches("domain \"rl-typo\"").count(), 1, "{log}");
    assert!(!log.contains("domain \"rl\","), "{log}");
}
