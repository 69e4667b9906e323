//! Exactness under load with the real SDKs (`llm_sdk` has the single
//! calls): 64 concurrent streaming clients are charged exactly the usage
//! the upstream reported, and a fleet of three proxies on one Redis never
//! admits a request once the budget is spent.
//!
//! The fleet's check does not depend on timing: calls are made one at a
//! time until the budget is spent, each settle awaited before the next,
//! so whether a call may be admitted follows from the usage reported so
//! far (admitted exactly while `used + estimate <= budget`, the estimate
//! being 1); then a burst of concurrent calls to all three proxies must
//! all be refused, and charge nothing (an admitted call would have reserved its estimate
//! before its answer reached the client).

use redis_harness::RedisServer;

use crate::llm_sdk::{
    TEAM, base, charged, clear_of_the_hour, counting_rule, gateway, settles_to, sum,
};
use crate::support::Tollgate;
use crate::support::llm_clients::{Llmock, Target};
use crate::support::llm_replay::{Replay, USAGE_HEADER, shape_of_api};

/// Concurrent clients.
const CLIENTS: u64 = 64;
/// Streamed calls each swarm makes (four a client).
const CALLS: u64 = 4 * CLIENTS;

/// `CALLS` streamed calls of `api`, `CLIENTS` at a time, through one
/// proxy; every one must succeed. Returns the usage the SDKs read.
fn swarm(s: &Tollgate, api: &str, anthropic_path: &str) -> Vec<crate::support::llm_clients::Usage> {
    let mut target = Target::new(vec![base(s)], TEAM);
    target.anthropic_path = anthropic_path.to_owned();
    let calls = target.swarm(api, CALLS, CLIENTS);
    assert_eq!(calls.len() as u64, CALLS);
    calls
        .iter()
        .map(|c| {
            assert!(c.ok, "{api} #{}: {}", c.seq, c.raw);
            c.usage
                .unwrap_or_else(|| panic!("{api} #{}: no usage", c.seq))
        })
        .collect()
}

#[test]
fn sixty_four_streaming_sdk_clients_are_charged_the_replayed_usage_exactly() {
    clear_of_the_hour();
    let replay = Replay::start();
    let header = format!("response_header:{USAGE_HEADER}");
    let s = gateway(&counting_rule("tokens", Some(&header)), &replay.url());
    // The first 64 streams are held open until all 64 have begun: the
    // proxy carries 64 at once.
    replay.hold_streams(CLIENTS);
    let mut want = 0;
    for api in ["openai-chat-stream", "anthropic-stream"] {
        let shape = shape_of_api(api);
        for u in swarm(&s, api, "") {
            assert_eq!(u.total, shape.total, "{api}");
            want += u.total;
        }
    }
    assert!(replay.streams_met(), "fewer than {CLIENTS} streams at once");
    assert_eq!(replay.served(), 2 * CALLS);
    settles_to(&s, "tokens", want);
}

#[test]
fn sixty_four_streaming_sdk_clients_are_charged_what_llmock_reported_exactly() {
    clear_of_the_hour();
    let llmock = Llmock::start();
    for (family, api) in [
        ("openai", "openai-chat-stream"),
        ("openai", "openai-responses-stream"),
        ("anthropic", "anthropic-stream"),
    ] {
        let config = format!(
            "{}{}",
            counting_rule("total", Some(family)),
            counting_rule("output", Some(&format!("{family}:output")))
        );
        let s = gateway(&config, &llmock.url);
        let reported = sum(swarm(&s, api, "/anthropic"));
        settles_to(&s, "total", reported.total);
        settles_to(&s, "output", reported.output);
    }
}

/// The budget the fleet shares: a few calls' worth.
const BUDGET: u64 = 100;

/// Three proxies on one Redis before `upstream`, a [`BUDGET`] of `cost`
/// per team (estimate 1) and a rule counting the same tokens: calls of
/// `api` one at a time, round the fleet, until one is refused, then a
/// burst of 48 concurrent calls that must all be refused.
fn fleet_never_admits_past_a_spent_budget(
    upstream: &str,
    cost: &str,
    api: &str,
    path: &str,
) -> u64 {
    clear_of_the_hour();
    let redis = RedisServer::start();
    let config = format!(
        "[store]\nurl = \"{}\"\ntimeout = \"2s\"\n\n\
         [[rules]]\nname = \"budget\"\nalgorithm = \"fixed_window\"\nlimit = {BUDGET}\n\
         period = \"1h\"\nkey = \"header:x-team\"\ncost = \"{cost}\"\nestimate = 1\n\n{}",
        redis.url(),
        counting_rule("tokens", Some(cost))
    );
    let fleet: Vec<Tollgate> = (0..3).map(|_| gateway(&config, upstream)).collect();
    let target = |bases: Vec<String>| {
        let mut t = Target::new(bases, TEAM);
        t.anthropic_path = path.to_owned();
        t
    };
    let bases: Vec<String> = fleet.iter().map(base).collect();
    let mut session = target(bases.clone()).session();
    let mut used = 0;
    let mut admitted = 0;
    for i in 0.. {
        assert!(
            i < 1000,
            "{admitted} calls admitted and the budget still not spent"
        );
        let call = session.call(&format!("{api}:async"), i % 3);
        if used < BUDGET {
            assert!(
                call.ok,
                "call {i} with {used} of {BUDGET} used: {}",
                call.raw
            );
            used += call.usage.expect("usage").total;
            admitted += 1;
            // The next call's fate follows from `used` only once this
            // settle is in, on every proxy (one Redis).
            settles_to(&fleet[(i + 1) % 3], "tokens", used);
        } else {
            assert_eq!(
                call.status,
                Some(429),
                "call {i} with {used} of {BUDGET} used was not refused: {}",
                call.raw
            );
            break;
        }
    }
    assert!(admitted >= 2, "the budget holds a few calls");

    let burst = target(bases).swarm(api, 48, 48);
    assert_eq!(burst.len(), 48);
    for c in &burst {
        assert_eq!(
            c.status,
            Some(429),
            "burst #{} was admitted: {}",
            c.seq,
            c.raw
        );
    }
    for proxy in &fleet {
        assert_eq!(charged(proxy, "tokens"), used, "a refused call was charged");
    }
    admitted
}

#[test]
fn a_fleet_of_three_never_admits_a_call_once_the_budget_is_spent() {
    let replay = Replay::start();
    let header = format!("response_header:{USAGE_HEADER}");
    let admitted =
        fleet_never_admits_past_a_spent_budget(&replay.url(), &header, "openai-chat-stream", "");
    // Only the admitted calls reached the upstream.
    assert_eq!(replay.served(), admitted);
}

#[test]
fn a_fleet_of_three_never_admits_a_call_once_llmock_reported_the_budget_spent() {
    let llmock = Llmock::start();
    fleet_never_admits_past_a_spent_budget(&llmock.url, "openai", "openai-chat-stream", "");
    fleet_never_admits_past_a_spent_budget(
        &llmock.url,
        "anthropic",
        "anthropic-stream",
        "/anthropic",
    );
}
