//! `[envoy] store_failure` and `[envoy] shadow_mode`, over real gRPC:
//! a Redis that dies answers each rule's `on_error` by default and a gRPC
//! `UNKNOWN` under `store_failure = "error"` (the reference's Redis error,
//! which leaves the choice to Envoy's `failure_mode_deny`); the
//! `ratelimit` entry sets "error", and `SHADOW_MODE=true` answers `OK`
//! with the statuses as they decided.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use redis_harness::RedisServer;

use crate::support::compat::{Ratelimit, write};
use crate::support::get;
use crate::support::rls::{Rls, code, connect, desc};

/// Two limits of one domain; `shadowed` in shadow mode.
const YAML: &str = "\
domain: d
descriptors:
  - key: tight
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
";

fn request(keys: &[&str]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".to_owned(),
        descriptors: keys.iter().map(|k| desc(&[(k, "v")])).collect(),
        hits_addend: 0,
    }
}

/// The TOML over `store` with `on_error` and `[envoy]` lines `envoy`.
fn config(store: &str, on_error: &str, envoy: &str) -> String {
    format!(
        "[store]\nurl = \"{store}\"\ntimeout = \"200ms\"\non_error = \"{on_error}\"\n\n\
         [envoy]\n{envoy}\n\n\
         [[rules]]\nname = \"http_rule\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n"
    )
}

/// Each call's overall code, or the error's code, for `keys`, with Redis
/// stopped after a first call that it answered.
fn after_redis_dies(
    on_error: &str,
    envoy: &str,
    keys: &[&[&str]],
) -> Vec<Result<Code, tonic::Code>> {
    let redis = RedisServer::start();
    let mut rls = Rls::start_with(&config(&redis.url(), on_error, envoy), YAML, &[]);
    assert_eq!(code(rls.ok(request(&["wide"])).overall_code), Code::Ok);
    redis.stop();
    keys.iter()
        .map(|k| {
            rls.call(request(k))
                .map(|r| code(r.overall_code))
                .map_err(|s| s.code())
        })
        .collect()
}

#[test]
fn by_default_the_failure_policy_answers_a_store_failure() {
    let keys: &[&[&str]] = &[&["wide"], &["shadowed"], &["tight", "wide"]];
    assert_eq!(
        after_redis_dies("allow", "", keys),
        [Ok(Code::Ok), Ok(Code::Ok), Ok(Code::Ok)]
    );
    assert_eq!(
        after_redis_dies("deny", "store_failure = \"policy\"", keys),
        [Ok(Code::OverLimit), Ok(Code::Ok), Ok(Code::OverLimit)]
    );
}

#[test]
fn under_store_failure_error_a_store_failure_is_a_grpc_error() {
    let keys: &[&[&str]] = &[&["wide"], &["shadowed"], &["tight", "wide"], &["unknown"]];
    let unknown = Err(tonic::Code::Unknown);
    // Whatever the policy, a shadow limit too (the reference's pipeline
    // fails as a whole); a call that needs no store still answers.
    for on_error in ["allow", "deny", "local"] {
        assert_eq!(
            after_redis_dies(on_error, "store_failure = \"error\"", keys),
            [unknown, unknown, unknown, Ok(Code::Ok)],
            "on_error = {on_error}"
        );
    }
}

#[test]
fn the_error_names_the_failure_and_the_store_answers_again_after() {
    let redis = RedisServer::start();
    let mut rls = Rls::start_with(
        &config(&redis.url(), "deny", "store_failure = \"error\""),
        YAML,
        &[],
    );
    redis.stop();
    let err = rls.call(request(&["wide"])).expect_err("store down");
    assert_eq!(err.code(), tonic::Code::Unknown);
    assert!(err.message().starts_with("store unavailable"), "{err:?}");
}

#[test]
fn shadow_mode_decides_each_limit_alone_and_answers_ok() {
    let mut rls = Rls::start_with(
        &config("memory", "allow", "shadow_mode = true"),
        YAML,
        &["--http", "127.0.0.1:0"],
    );
    let both = || request(&["tight", "wide"]);
    let first = rls.ok(both());
    assert_eq!(code(first.overall_code), Code::Ok);
    assert_eq!(first.statuses[1].limit_remaining, 4);
    // `tight` is over: its status says so, the answer is OK, and `wide`
    // is counted (the request goes through), not held back with it.
    let second = rls.ok(both());
    assert_eq!(code(second.overall_code), Code::Ok);
    assert_eq!(code(second.statuses[0].code), Code::OverLimit);
    assert_eq!(code(second.statuses[1].code), Code::Ok);
    assert_eq!(second.statuses[1].limit_remaining, 3);
    let metrics = get(rls.server.api(), "/metrics").text();
    assert!(
        metrics.contains("tollgate_envoy_shadow_mode_answers_total 1"),
        "{metrics}"
    );
    // Without it: all or nothing, OVER_LIMIT, `wide` not consumed.
    let mut plain = Rls::start_with(&config("memory", "allow", ""), YAML, &[]);
    plain.ok(both());
    let second = plain.ok(both());
    assert_eq!(code(second.overall_code), Code::OverLimit);
    assert_eq!(second.statuses[1].limit_remaining, 4);
}

/// The entry's environment without TLS: `CONFIG_TYPE=FILE` on `dir`,
/// this Redis, loopback ports, and `extra`.
fn entry_env(
    dir: &std::path::Path,
    redis: &RedisServer,
    extra: &[(&str, &str)],
) -> Vec<(String, String)> {
    write(dir, "ratelimit/config/d.yaml", YAML);
    let mut env = vec![
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", redis.addr()),
        ("USE_STATSD", "false".to_owned()),
        // The listening lines the test reads are at info.
        ("LOG_LEVEL", "info".to_owned()),
        ("USE_PROMETHEUS", "true".to_owned()),
        ("PROMETHEUS_ADDR", "127.0.0.1:0".to_owned()),
        ("RUNTIME_ROOT", dir.to_str().expect("utf-8").to_owned()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_owned()),
        ("HOST", "127.0.0.1".to_owned()),
        ("PORT", "0".to_owned()),
        ("GRPC_HOST", "127.0.0.1".to_owned()),
        ("GRPC_PORT", "0".to_owned()),
        ("DEBUG_HOST", "127.0.0.1".to_owned()),
        ("DEBUG_PORT", "0".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// Starts the entry and waits for `/healthcheck` to pass (Redis has
/// answered), as the reference serves only once Redis answers.
fn start_entry(env: &[(String, String)]) -> (Ratelimit, tokio::runtime::Runtime) {
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let rl = Ratelimit::start(&pairs);
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(rl.http, "/healthcheck").status != 200 {
        assert!(Instant::now() < deadline, "never healthy: {}", rl.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    (rl, rt)
}

#[test]
fn the_entry_answers_a_dead_redis_with_a_grpc_error() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (rl, rt) = start_entry(&entry_env(dir.path(), &redis, &[]));
    let mut client = rt.block_on(connect(rl.grpc));
    let answer = rt
        .block_on(client.should_rate_limit(request(&["wide"])))
        .expect("Redis up");
    assert_eq!(code(answer.into_inner().overall_code), Code::Ok);
    redis.stop();
    let err = rt
        .block_on(client.should_rate_limit(request(&["wide"])))
        .expect_err("Redis down");
    assert_eq!(err.code(), tonic::Code::Unknown, "{}", rl.log());
}

#[test]
fn the_entry_honours_shadow_mode() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (rl, rt) = start_entry(&entry_env(dir.path(), &redis, &[("SHADOW_MODE", "true")]));
    let mut client = rt.block_on(connect(rl.grpc));
    let mut call = || {
        rt.block_on(client.should_rate_limit(request(&["tight"])))
            .expect("call")
            .into_inner()
    };
    assert_eq!(code(call().overall_code), Code::Ok);
    let over = call();
    assert_eq!(code(over.overall_code), Code::Ok, "{}", rl.log());
    assert_eq!(code(over.statuses[0].code), Code::OverLimit);
    let metrics = get(rl.metrics.expect("metrics port"), "/metrics").text();
    assert!(
        metrics.contains("tollgate_envoy_shadow_mode_answers_total 1"),
        "{metrics}"
    );
}

/// The value of the one line of `text` that starts `head` (a name and
/// its labels).
fn value(text: &str, head: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(head))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// `[total_hits, over_limit, near_limit, within_limit, shadow_mode]` of
/// the reference series of `key` in domain `d`.
fn reference_counts(text: &str, key: &str) -> [Option<u64>; 5] {
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
            &format!("ratelimit_service_rate_limit_{s}{{domain=\"d\",key1=\"{key}\"}} "),
        )
    })
}

const REDIS_ERROR: &str = "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} ";
const SERVICE_ERROR: &str =
    "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} ";
const GLOBAL: &str = "ratelimit_service_global_shadow_mode ";

#[test]
fn under_store_failure_error_a_dead_store_is_a_redis_error_and_its_hits_count() {
    let redis = RedisServer::start();
    let toml = format!(
        "{}\n[metrics]\nreference_names = true\n",
        config(&redis.url(), "deny", "store_failure = \"error\"")
    );
    let mut rls = Rls::start_with(&toml, YAML, &["--http", "127.0.0.1:0"]);
    assert_eq!(code(rls.ok(request(&["wide"])).overall_code), Code::Ok);
    redis.stop();
    let mut both = request(&["tight", "wide"]);
    both.hits_addend = 2;
    let err = rls.call(both).expect_err("store down");
    assert_eq!(err.code(), tonic::Code::Unknown);
    // a refused request is the other kind
    let mut empty = request(&["wide"]);
    empty.domain = String::new();
    let refused = rls.call(empty).expect_err("no domain");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);

    let text = get(rls.server.api(), "/metrics").text();
    // As the reference: each limit's hits in total_hits (counted before
    // its Redis call), nothing else, and the call once as a redis_error.
    assert_eq!(
        reference_counts(&text, "tight"),
        [Some(2), Some(0), Some(0), Some(0), Some(0)],
        "{text}"
    );
    assert_eq!(
        reference_counts(&text, "wide"),
        [Some(3), Some(0), Some(0), Some(1), Some(0)],
        "{text}"
    );
    assert_eq!(value(&text, REDIS_ERROR), Some(1), "{text}");
    assert_eq!(value(&text, SERVICE_ERROR), Some(1), "{text}");
    assert_eq!(
        value(
            &text,
            "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} "
        ),
        Some(3),
        "{text}"
    );
}

#[test]
fn shadow_mode_counts_the_answers_it_turned_ok_under_the_reference_name() {
    let toml = format!(
        "{}\n[metrics]\nreference_names = true\n",
        config("memory", "allow", "shadow_mode = true")
    );
    let mut rls = Rls::start_with(&toml, YAML, &["--http", "127.0.0.1:0"]);
    let text = get(rls.server.api(), "/metrics").text();
    assert_eq!(value(&text, GLOBAL), Some(0), "{text}");
    assert!(
        text.contains("# TYPE ratelimit_service_global_shadow_mode counter\n"),
        "{text}"
    );
    assert_eq!(code(rls.ok(request(&["tight"])).overall_code), Code::Ok);
    let over = rls.ok(request(&["tight"]));
    assert_eq!(code(over.overall_code), Code::Ok);
    assert_eq!(code(over.statuses[0].code), Code::OverLimit);
    // A limit's own shadow_mode reads OK: the answer was never a denial,
    // so the reference does not count it.
    for _ in 0..3 {
        rls.ok(request(&["shadowed"]));
    }
    let text = get(rls.server.api(), "/metrics").text();
    assert_eq!(value(&text, GLOBAL), Some(1), "{text}");
    // The per-limit shadow_mode series is for limits in shadow mode of
    // their own, as there: `tight` is over, not shadowed.
    let tight = reference_counts(&text, "tight");
    assert_eq!(
        (tight[0], tight[1], tight[4]),
        (Some(2), Some(1), Some(0)),
        "{text}"
    );
    assert_eq!(reference_counts(&text, "shadowed")[4], Some(2), "{text}");
}
