//! The whole chain as Envoy Gateway deploys it: tollgate started as
//! `ratelimit` with Envoy Gateway's environment (`CONFIG_TYPE=GRPC_XDS_SOTW`,
//! mTLS to the ADS server with certificates shaped as its certgen makes
//! them, the gRPC port over TLS, `FORCE_START_WITHOUT_INITIAL_CONFIG`, a
//! real Redis, Prometheus on), the test ADS server (`xds-harness`, behaving
//! as Envoy Gateway's go-control-plane) serving the `RateLimitConfig`
//! Envoy Gateway renders for `examples/envoy/envoy-gateway.yaml`'s routes,
//! and a real Envoy running that example, reaching tollgate over TLS.
//! Every step is checked through Envoy: before the first snapshot,
//! after it, with the ADS server killed, restarted with a new snapshot,
//! and after a bad snapshot. Every wait is on something observable (a
//! harness event, a log line, `/rlconfig`, `/metrics`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use redis_harness::RedisServer;
use serde_json::json;
use tollgate_server::rls_conf::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use xds_harness::{AdsServer, Event, ServerTls};

use crate::support;
use crate::support::compat::{ENVOY_GATEWAY, Ratelimit, path_str};
use crate::support::eg_certs::EgCerts;
use crate::support::envoy::{Envoy, away_from_a_window_edge, envoy_binary};
use crate::support::envoy_bootstrap::Example;
use crate::support::model::ModelServer;
use crate::support::xds::{acked, nacked, runtime, set};

const DOMAIN: &str = "default/eg/http";
const API: &str = "httproute/default/api/rule/0/match/0/www_example_com";
const LLM: &str = "httproute/default/llm/rule/0/match/0/www_example_com";

/// How long a wait on an event may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);

fn node(key: &str, value: &str, limit: Option<(u32, RateLimitUnit)>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.to_owned(),
        value: value.to_owned(),
        rate_limit: limit.map(|(n, unit)| RateLimitPolicy {
            unit: unit.into(),
            requests_per_unit: n,
            ..RateLimitPolicy::default()
        }),
        ..RateLimitDescriptor::default()
    }
}

fn under(
    mut parent: RateLimitDescriptor,
    children: Vec<RateLimitDescriptor>,
) -> RateLimitDescriptor {
    parent.descriptors = children;
    parent
}

/// What Envoy Gateway's translator sends for the example's routes (the
/// shape of `examples/envoy/envoy-gateway-ratelimit.yaml`), with hourly
/// windows for the API's rules so no window turns during the test, and
/// `llm_tokens` an hour on the LLM route. `extra` goes under the API route.
fn eg_config(llm_tokens: u32, extra: Vec<RateLimitDescriptor>) -> RateLimitConfig {
    use RateLimitUnit::Hour;
    let mut api = vec![
        node("rule-0-match-0", "", Some((3, Hour))),
        under(
            node("masked_remote_address", "0.0.0.0/0", None),
            vec![node("remote_address", "", Some((20, Hour)))],
        ),
    ];
    api.extend(extra);
    RateLimitConfig {
        name: DOMAIN.to_owned(),
        domain: DOMAIN.to_owned(),
        descriptors: vec![
            under(node(API, API, None), api),
            under(
                node(LLM, LLM, None),
                vec![node(
                    "rule-0-match--1",
                    "rule-0-match--1",
                    Some((llm_tokens, Hour)),
                )],
            ),
        ],
    }
}

/// Envoy Gateway's container environment, `CONFIG_TYPE=GRPC_XDS_SOTW`,
/// with the test's addresses, files and Redis. Two additions: the xDS
/// server's name given by `CONFIG_GRPC_XDS_SERVER_TLS_SAN` (Envoy Gateway's
/// URL host `envoy-gateway` does not resolve here, so the URL is the
/// harness's address), and short reconnect backoffs.
fn environment(
    certs: &EgCerts,
    ads: SocketAddr,
    redis: &RedisServer,
    runtime: &str,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = ENVOY_GATEWAY
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let rl_cert = path_str(&certs.cert("ratelimit"));
    let rl_key = path_str(&certs.key("ratelimit"));
    let ca = path_str(&certs.ca());
    let ours = [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_owned()),
        ("CONFIG_GRPC_XDS_SERVER_URL", ads.to_string()),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway".to_owned()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", rl_cert.clone()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", rl_key.clone()),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ca.clone()),
        ("GRPC_SERVER_TLS_CERT", rl_cert),
        ("GRPC_SERVER_TLS_KEY", rl_key),
        ("GRPC_SERVER_TLS_CA_CERT", ca),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms".to_owned()),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "500ms".to_owned()),
        ("RUNTIME_ROOT", runtime.to_owned()),
        ("REDIS_URL", redis.addr()),
        ("PROMETHEUS_ADDR", "127.0.0.1:0".to_owned()),
        ("HOST", "127.0.0.1".to_owned()),
        ("PORT", "0".to_owned()),
        ("GRPC_HOST", "127.0.0.1".to_owned()),
        ("GRPC_PORT", "0".to_owned()),
        ("DEBUG_HOST", "127.0.0.1".to_owned()),
        ("DEBUG_PORT", "0".to_owned()),
    ];
    env.extend(ours.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    env
}

/// The example's bootstrap at the test's addresses, its rate limit
/// cluster over TLS as Envoy Gateway sets it: Envoy's certificate, the
/// CA, TLS 1.3 at most, no SNI, no SAN match, no ALPN.
fn bootstrap(certs: &EgCerts, upstream: SocketAddr, grpc: SocketAddr) -> String {
    let mut example = Example::load("envoy-gateway.yaml").for_test(upstream, grpc);
    let file = |p: std::path::PathBuf| json!({"filename": path_str(&p)});
    example.cluster("ratelimit_cluster")["transport_socket"] = json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": {
                "tls_params": {"tls_maximum_protocol_version": "TLSv1_3"},
                "tls_certificates": [{
                    "certificate_chain": file(certs.cert("envoy")),
                    "private_key": file(certs.key("envoy")),
                }],
                "validation_context": {"trusted_ca": file(certs.ca())},
            },
        },
    });
    example.text()
}

fn ads_tls(certs: &EgCerts) -> ServerTls {
    ServerTls {
        cert: certs.cert("envoy-gateway"),
        key: certs.key("envoy-gateway"),
        client_ca: Some(certs.ca()),
    }
}

/// Waits (up to [`WAIT`]) until `found` gives something, and returns it;
/// panics with `what` and `context()` otherwise.
fn wait_until<T>(
    what: &str,
    context: impl Fn() -> String,
    mut found: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(t) = found() {
            return t;
        }
        assert!(Instant::now() < deadline, "no {what}: {}", context());
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Chain {
    envoy: Envoy,
    upstream: ModelServer,
    rl: Ratelimit,
}

impl Chain {
    fn status(&self, path: &str, headers: &[(&str, &str)]) -> u16 {
        support::request(self.envoy.listener, "GET", path, headers, b"").status
    }

    fn user(&self, name: &str) -> u16 {
        self.status("/api/items", &[("x-user-id", name)])
    }

    fn complete(&self, tokens: u64) -> u16 {
        let tokens = tokens.to_string();
        self.status("/v1/chat", &[("x-want-tokens", tokens.as_str())])
    }

    fn rlconfig(&self) -> String {
        support::get(self.rl.debug, "/rlconfig").text()
    }

    fn metrics(&self) -> String {
        support::get(self.rl.metrics.expect("PROMETHEUS_ADDR"), "/metrics").text()
    }

    /// Both logs, for a failure's message.
    fn logs(&self) -> String {
        format!("tollgate:\n{}\nenvoy:\n{}", self.rl.log(), self.envoy.log())
    }

    /// Waits until `/rlconfig` holds `line`.
    fn wait_rlconfig(&self, line: &str) {
        wait_until(
            &format!("/rlconfig line {line:?}"),
            || self.rlconfig(),
            || self.rlconfig().lines().any(|l| l == line).then_some(()),
        );
    }

    /// Waits until tollgate has logged `text`.
    fn wait_log(&self, text: &str) {
        wait_until(
            &format!("log line {text:?}"),
            || self.rl.log(),
            || self.rl.log().contains(text).then_some(()),
        );
    }

    /// The units charged to the LLM limit (Envoy's stream-done calls,
    /// counted in full under `count_own_cost`), from the Prometheus port.
    fn llm_charged(&self) -> u64 {
        self.metrics()
            .lines()
            .filter(|l| {
                l.starts_with("tollgate_charge_units_total{") && l.contains("httproute_default_llm")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

/// `/rlconfig`'s line for the API route's per-user rule.
fn user_line() -> String {
    format!(
        "{DOMAIN}.{API}_{API}.rule-0-match-0: unit=HOUR requests_per_unit=3, shadow_mode: false, quota_mode: false"
    )
}

/// `/rlconfig`'s line for the LLM route's rule at `tokens` an hour.
fn llm_line(tokens: u32) -> String {
    format!(
        "{DOMAIN}.{LLM}_{LLM}.rule-0-match--1_rule-0-match--1: unit=HOUR requests_per_unit={tokens}, shadow_mode: false, quota_mode: false"
    )
}

#[test]
fn envoy_gateway_chain_over_xds_with_mtls_redis_and_a_real_envoy() {
    envoy_binary();
    away_from_a_window_edge(3600, Duration::from_secs(300));
    let certs = EgCerts::generate();
    let rt = runtime();
    let first = rt.block_on(AdsServer::start(Some(ads_tls(&certs))));
    let redis = RedisServer::start();
    let runtime_dir = tempfile::tempdir().expect("tempdir");
    let env = environment(&certs, first.addr(), &redis, &path_str(runtime_dir.path()));
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let rl = Ratelimit::start(&pairs);
    let upstream = ModelServer::start();
    let envoy = Envoy::start(&bootstrap(&certs, upstream.addr, rl.grpc));
    let chain = Chain {
        envoy,
        upstream,
        rl,
    };

    // Connected over mTLS (the client's request reached the server), no
    // snapshot yet: the service answers an error and Envoy's failure mode
    // decides (the test bootstrap's failure_mode_deny: a 500).
    rt.block_on(first.wait_for("the first request", |e| {
        e.iter().find_map(Event::request).map(|_| ())
    }));
    assert_eq!(chain.user("alice"), 500, "{}", chain.logs());
    assert_eq!(chain.upstream.served(), 0);
    let log = chain.rl.log();
    assert!(log.contains("no xDS config yet"), "{log}");
    assert!(!log.contains("answered OK"), "{log}");

    // The first snapshot: 3 an hour per user, as the limits say.
    set(&first, "1", &[eg_config(100, vec![])]);
    rt.block_on(acked(&first, "1"));
    chain.wait_rlconfig(&user_line());
    chain.wait_rlconfig(&llm_line(100));
    let alice: Vec<u16> = (0..4).map(|_| chain.user("alice")).collect();
    assert_eq!(alice, [200, 200, 200, 429], "{}", chain.logs());
    assert_eq!(chain.user("carol"), 200);
    assert_eq!(chain.user("carol"), 200);
    let metrics = chain.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tollgate_checks_total{") && l.contains("outcome=\"denied\"")),
        "{metrics}"
    );
    if metrics.contains("ratelimit_service_") {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("ratelimit_service_rate_limit_over_limit{")),
            "{metrics}"
        );
    }

    // Envoy Gateway goes away: the last good config keeps serving.
    let addr = rt.block_on(first.stop());
    chain.wait_log("reconnecting in");
    assert_eq!(chain.user("alice"), 429, "{}", chain.logs());
    assert_eq!(chain.user("bob"), 200, "{}", chain.logs());

    // It comes back with versions from "1" again and a new snapshot: the
    // LLM route's limit down to 50 tokens. Applied; the per-user counters
    // (an unchanged limit) kept: carol has one request left.
    let again = rt.block_on(AdsServer::start_at(addr, Some(ads_tls(&certs))));
    set(&again, "1", &[eg_config(50, vec![])]);
    rt.block_on(acked(&again, "1"));
    chain.wait_rlconfig(&llm_line(50));
    assert_eq!(chain.user("alice"), 429, "{}", chain.logs());
    assert_eq!(chain.user("carol"), 200, "{}", chain.logs());
    assert_eq!(chain.user("carol"), 429, "{}", chain.logs());
    // 60 tokens fit the peek (none used yet) and are charged when the
    // stream is done, past the 50: the next completion is refused.
    assert_eq!(chain.complete(60), 200, "{}", chain.logs());
    wait_until(
        "the stream-done charge of 60",
        || chain.metrics(),
        || (chain.llm_charged() >= 60).then_some(()),
    );
    assert_eq!(chain.complete(1), 429, "{}", chain.logs());

    // A bad snapshot (a limit without a unit): NACKed naming the domain
    // and the descriptor; Envoy still gets the old limits.
    let bad = node(
        "rule-1-match-0",
        "rule-1-match-0",
        Some((5, RateLimitUnit::Unknown)),
    );
    set(&again, "2", &[eg_config(1000, vec![bad])]);
    let nack = rt.block_on(nacked(&again, 0));
    assert_eq!(nack.version_info, "1", "the last accepted version");
    let message = nack.error_detail.expect("error_detail").message;
    assert!(message.contains(DOMAIN), "{message}");
    assert!(message.contains("rule-1-match-0"), "{message}");
    assert!(
        chain.rlconfig().lines().any(|l| l == llm_line(50)),
        "{}",
        chain.rlconfig()
    );
    assert!(
        !chain.rlconfig().contains("rule-1-match-0"),
        "{}",
        chain.rlconfig()
    );
    assert_eq!(chain.complete(1), 429, "the old 50 tokens, not 1000");
    assert_eq!(chain.user("carol"), 429);
    assert_eq!(chain.user("dave"), 200);
    assert_eq!(chain.upstream.served(), 3 + 2 + 1 + 1 + 1 + 1);
}
