//! A real Envoy 1.40 configured as Envoy Gateway configures it
//! (`examples/envoy/envoy-gateway.yaml`, only its addresses changed: the
//! listener's domain, per-route `RateLimitPerRoute` rules led by the
//! route's name, `rule-N-match-M` keys, a Distinct header, masked and
//! per-client addresses, a `requestCost: 0` peek and a `responseCost`
//! charged on stream done) in front of tollgate serving the limits EG
//! renders for it (`examples/envoy/envoy-gateway-ratelimit.yaml`) with
//! `[envoy] count_own_cost = true`, as the compatibility entry runs it:
//! 429s where the reference gives them, and a response's usage counted
//! even when it takes the count past the limit.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support;
use crate::support::envoy::{Envoy, away_from_a_window_edge, envoy_binary};
use crate::support::envoy_bootstrap::{Example, example_path};
use crate::support::gateway::{costing, entries, request};
use crate::support::model::ModelServer;
use crate::support::rls::{Rls, code, toml};

const DOMAIN: &str = "default/eg/http";
const LLM: &str = "httproute/default/llm/rule/0/match/0/www_example_com";

/// tollgate on the example's limits (`count_own_cost` as given), Envoy on
/// the example's bootstrap, the model server behind it.
fn start(count_own_cost: bool) -> (Envoy, ModelServer, Rls) {
    let limits =
        std::fs::read_to_string(example_path("envoy-gateway-ratelimit.yaml")).expect("read");
    let config = format!(
        "{}\n[envoy]\ncount_own_cost = {count_own_cost}\n",
        toml("memory")
    );
    let rls = Rls::start_with(&config, &limits, &["--http", "127.0.0.1:0"]);
    let upstream = ModelServer::start();
    let envoy = Envoy::start(
        &Example::load("envoy-gateway.yaml")
            .for_test(upstream.addr, rls.server.grpc())
            .text(),
    );
    (envoy, upstream, rls)
}

fn get(envoy: &Envoy, path: &str, headers: &[(&str, &str)]) -> support::Resp {
    support::request(envoy.listener, "GET", path, headers, b"")
}

/// A completion on the LLM route that uses `tokens`.
fn complete(envoy: &Envoy, tokens: u64) -> u16 {
    let tokens = tokens.to_string();
    get(envoy, "/v1/chat", &[("x-want-tokens", tokens.as_str())]).status
}

/// The tokens left on the LLM route's limit (0 when over), and whether it
/// is over, by a peek such as Envoy's request phase sends.
fn left(rls: &mut Rls) -> (Code, u32) {
    let d = costing(
        entries(&[(LLM, LLM), ("rule-0-match--1", "rule-0-match--1")]),
        0,
    );
    let r = rls.ok(request(DOMAIN, vec![d]));
    (code(r.statuses[0].code), r.statuses[0].limit_remaining)
}

/// Envoy sends the stream-done call after the response: waits (up to
/// 10 s) until the peek reads `want`, and returns what it read last.
fn settle_on(rls: &mut Rls, want: (Code, u32)) -> (Code, u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = left(rls);
        if now == want || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The LLM limit's denied checks, from tollgate's `/metrics`.
fn denied(rls: &Rls) -> u64 {
    let text = support::get(rls.server.api(), "/metrics").text();
    text.lines()
        .filter(|l| {
            l.starts_with("tollgate_checks_total{")
                && l.contains("httproute_default_llm")
                && l.contains("outcome=\"denied\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn real_envoy_with_eg_shaped_rules_answers_429s_by_user_and_by_client() {
    envoy_binary();
    away_from_a_window_edge(60, Duration::from_secs(20));
    let (envoy, upstream, _rls) = start(true);
    let user = |u| get(&envoy, "/api/items", &[("x-user-id", u)]).status;
    let statuses: Vec<u16> = (0..4).map(|_| user("alice")).collect();
    assert_eq!(statuses, [200, 200, 200, 429], "{}", envoy.log());
    // Another user, another counter; EG sets DRAFT_VERSION_03 headers,
    // which Envoy builds from the answer's numbers.
    let r = get(&envoy, "/api/items", &[("x-user-id", "bob")]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-ratelimit-remaining"),
        Some("2"),
        "{:?}",
        r.headers_named("x-ratelimit-limit")
    );
    let reset: u64 = r
        .header("x-ratelimit-reset")
        .and_then(|v| v.parse().ok())
        .expect("x-ratelimit-reset");
    assert!((1..=60).contains(&reset), "{reset}");
    // Without x-user-id Envoy sends only the per-client descriptor: 20 a
    // minute for 127.0.0.1, of which the admitted requests used 4.
    let anonymous: Vec<u16> = (0..17)
        .map(|_| get(&envoy, "/api/items", &[]).status)
        .collect();
    assert_eq!(anonymous[..16], [200; 16], "{}", envoy.log());
    assert_eq!(anonymous[16], 429);
    assert_eq!(upstream.served(), 20);
}

#[test]
fn real_envoy_stream_done_usage_is_counted_past_the_limit() {
    envoy_binary();
    away_from_a_window_edge(3600, Duration::from_secs(60));
    let (envoy, upstream, mut rls) = start(true);
    assert_eq!(complete(&envoy, 60), 200, "{}", envoy.log());
    assert_eq!(
        settle_on(&mut rls, (Code::Ok, 40)),
        (Code::Ok, 40),
        "{}",
        envoy.log()
    );
    // Admitted by its peek (60 of 100 used); its 90 tokens take the count
    // to 150, counted in full, as the reference counts them.
    assert_eq!(complete(&envoy, 90), 200);
    assert_eq!(
        settle_on(&mut rls, (Code::OverLimit, 0)),
        (Code::OverLimit, 0),
        "{}",
        envoy.log()
    );
    for _ in 0..2 {
        assert_eq!(complete(&envoy, 5), 429);
    }
    assert_eq!(upstream.served(), 2);
}

#[test]
fn real_envoy_without_count_own_cost_drops_usage_that_does_not_fit() {
    // The same flow without the switch: the 90 tokens are a check that
    // does not fit, refused and not recorded, so the next request passes.
    envoy_binary();
    away_from_a_window_edge(3600, Duration::from_secs(60));
    let (envoy, upstream, mut rls) = start(false);
    assert_eq!(complete(&envoy, 60), 200, "{}", envoy.log());
    assert_eq!(settle_on(&mut rls, (Code::Ok, 40)), (Code::Ok, 40));
    assert_eq!(complete(&envoy, 90), 200);
    // Once tollgate has refused the stream-done check (its metrics count
    // it), the count has not moved.
    let deadline = Instant::now() + Duration::from_secs(10);
    while denied(&rls) < 1 {
        assert!(
            Instant::now() < deadline,
            "no stream-done call: {}",
            envoy.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(left(&mut rls), (Code::Ok, 40));
    assert_eq!(complete(&envoy, 5), 200);
    assert_eq!(upstream.served(), 3);
}
