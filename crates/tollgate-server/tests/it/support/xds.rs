//! `tollgate serve` with `[envoy.xds]` against the test ADS server
//! (`xds-harness`), and Envoy Gateway-shaped `RateLimitConfig`s, for the
//! `xds_*` test files. The ADS server runs on a runtime of its own
//! threads, so it answers while a test blocks on the binary.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use tollgate_server::rls_conf::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use tonic::transport::Channel;
use xds_harness::{AdsServer, Event, ServerTls};

use super::rls::{connect, desc};
use super::{Tollgate, get};

/// The node id Envoy Gateway gives the rate limit service.
pub const NODE: &str = "envoy-ratelimit";

/// A runtime with threads of its own.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The TOML: a memory store, `[envoy.xds]` for `server` with short
/// backoffs, and `extra` lines inside `[envoy.xds]`.
pub fn toml(server: &str, extra: &str) -> String {
    format!(
        "[store]\nurl = \"memory\"\n\n[envoy.xds]\nserver = \"{server}\"\nnode_id = \"{NODE}\"\n\
         node_metadata = {{ cluster = \"eg\" }}\ninitial_backoff = \"50ms\"\nmax_backoff = \"200ms\"\n{extra}"
    )
}

/// Envoy Gateway's shape: domain = name, a route node (key = value = the
/// route, no limit), one `rule-N-match-0` leaf per `(per_unit, unit)`.
pub fn eg_domain(domain: &str, route: &str, rules: &[(u32, RateLimitUnit)]) -> RateLimitConfig {
    let leaves = rules
        .iter()
        .enumerate()
        .map(|(i, (per_unit, unit))| {
            let key = format!("rule-{i}-match-0");
            RateLimitDescriptor {
                value: key.clone(),
                key,
                rate_limit: Some(RateLimitPolicy {
                    unit: (*unit).into(),
                    requests_per_unit: *per_unit,
                    ..RateLimitPolicy::default()
                }),
                ..RateLimitDescriptor::default()
            }
        })
        .collect();
    RateLimitConfig {
        name: domain.to_owned(),
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            key: route.to_owned(),
            value: route.to_owned(),
            descriptors: leaves,
            ..RateLimitDescriptor::default()
        }],
    }
}

/// Sets `version` of the node's snapshot to `configs`.
pub fn set(ads: &AdsServer, version: &str, configs: &[RateLimitConfig]) {
    let encoded = configs
        .iter()
        .map(|c| (c.name.clone(), c.encode_to_vec()))
        .collect();
    ads.set_configs(NODE, version, encoded);
}

/// Waits for the ACK of `version`; returns it.
pub async fn acked(ads: &AdsServer, version: &str) -> xds_harness::Event {
    let what = format!("ACK of version {version:?}");
    ads.wait_for(&what, |events| {
        events
            .iter()
            .find(|e| e.ack().is_some_and(|r| r.version_info == version))
            .cloned()
    })
    .await
}

/// The `n`th NACK (from 0).
pub async fn nacked(
    ads: &AdsServer,
    n: usize,
) -> envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest {
    ads.wait_for(&format!("NACK #{n}"), |events| {
        events.iter().filter_map(Event::nack).nth(n).cloned()
    })
    .await
}

/// The ADS server, plain or TLS.
pub async fn ads(tls: Option<ServerTls>) -> AdsServer {
    AdsServer::start(tls).await
}

/// The request Envoy Gateway's rate limit filter sends for `route`'s rule
/// `rule`.
pub fn eg_request(domain: &str, route: &str, rule: usize) -> RateLimitRequest {
    let key = format!("rule-{rule}-match-0");
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![desc(&[(route, route), (&key, &key)])],
        hits_addend: 0,
    }
}

/// A client of `server`'s gRPC port.
pub fn client(rt: &tokio::runtime::Runtime, server: &Tollgate) -> RateLimitServiceClient<Channel> {
    rt.block_on(connect(server.grpc()))
}

/// One call.
pub fn call(
    rt: &tokio::runtime::Runtime,
    client: &mut RateLimitServiceClient<Channel>,
    req: RateLimitRequest,
) -> Result<RateLimitResponse, tonic::Status> {
    rt.block_on(client.should_rate_limit(req))
        .map(tonic::Response::into_inner)
}

/// The overall codes of `n` calls of `req`, as `OK`/`OVER_LIMIT` names.
pub fn codes(
    rt: &tokio::runtime::Runtime,
    client: &mut RateLimitServiceClient<Channel>,
    req: &RateLimitRequest,
    n: usize,
) -> Vec<String> {
    (0..n)
        .map(|_| {
            let r = call(rt, client, req.clone()).expect("ShouldRateLimit");
            super::rls::code(r.overall_code).as_str_name().to_owned()
        })
        .collect()
}

/// `config_version` of `/v1/rules`.
pub fn config_version(server: &Tollgate) -> String {
    let r = get(server.api(), "/v1/rules").json();
    r["config_version"]
        .as_str()
        .expect("config_version")
        .to_owned()
}

/// `/metrics` of the HTTP API.
pub fn metrics(server: &Tollgate) -> String {
    get(server.api(), "/metrics").text()
}
