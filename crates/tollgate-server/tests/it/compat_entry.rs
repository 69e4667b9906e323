//! The binary started as `ratelimit` with Envoy Gateway's environment
//! (`CONFIG_TYPE=FILE` here; xDS is the xds tests'), against a real Redis:
//! `/healthcheck`, `/json`, `/rlconfig` in the reference's text, `/metrics`
//! on the Prometheus port, and `ShouldRateLimit` over TLS, with client
//! certificates when `GRPC_CLIENT_TLS_CACERT` asks for them, and the
//! server certificate re-read when its files change.

use std::path::Path;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message as _;
use redis_harness::{RedisServer, TestPki};

use crate::support::compat::{ENVOY_GATEWAY, Ratelimit, client_tls, grpc_call, path_str, write};
use crate::support::rls::desc;
use crate::support::{get, post_json};

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const SERVER_NAME: &str = "envoy-ratelimit.test";

/// Envoy Gateway's shape (its `header-and-cidr-matches` test tree): the
/// route, three rule matches and the masked remote address.
const EG_CONFIG: &str = "\
domain: first-listener
descriptors:
  - key: first-route
    value: first-route
    descriptors:
      - key: rule-0-match-0
        value: rule-0-match-0
        descriptors:
          - key: rule-0-match-1
            value: rule-0-match-1
            descriptors:
              - key: rule-0-match-2
                value: rule-0-match-2
                descriptors:
                  - key: masked_remote_address
                    value: 0.0.0.0/0
                    rate_limit:
                      unit: second
                      requests_per_unit: 5
  - key: second-route
    value: second-route
    rate_limit:
      unit: minute
      requests_per_unit: 2
";

/// The reference's `/rlconfig` of [`EG_CONFIG`] (the first line is the
/// one notes on Envoy Gateway quote from the reference).
const EG_RLCONFIG: &str = "\
first-listener.first-route_first-route.rule-0-match-0_rule-0-match-0.rule-0-match-1_rule-0-match-1.rule-0-match-2_rule-0-match-2.masked_remote_address_0.0.0.0/0: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false
first-listener.second-route_second-route: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false
";

/// The server's files and the config directory, in one temp dir.
struct Setup {
    dir: tempfile::TempDir,
    pki: TestPki,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = TestPki::generate(SERVER_NAME);
        write(dir.path(), "data/ratelimit/config/eg.yaml", EG_CONFIG);
        // RUNTIME_IGNOREDOTFILES=true: never read.
        write(
            dir.path(),
            "data/ratelimit/config/.eg.yaml.swp",
            "not: [yaml",
        );
        let certs = dir.path().join("certs");
        std::fs::create_dir_all(&certs).expect("mkdir");
        std::fs::copy(pki.server_cert(), certs.join("tls.crt")).expect("copy");
        std::fs::copy(pki.server_key(), certs.join("tls.key")).expect("copy");
        std::fs::copy(pki.ca_cert(), certs.join("ca.crt")).expect("copy");
        Setup { dir, pki }
    }

    fn path(&self, rel: &str) -> String {
        path_str(&self.dir.path().join(rel))
    }

    /// Envoy Gateway's environment, `CONFIG_TYPE=FILE`, this test's Redis,
    /// certificates and loopback ports, and `extra`.
    fn env(&self, redis: &RedisServer, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = ENVOY_GATEWAY
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let ours = [
            ("CONFIG_TYPE", "FILE".to_owned()),
            ("RUNTIME_ROOT", self.path("data")),
            ("REDIS_URL", redis.addr()),
            ("GRPC_SERVER_TLS_CERT", self.path("certs/tls.crt")),
            ("GRPC_SERVER_TLS_KEY", self.path("certs/tls.key")),
            ("GRPC_SERVER_TLS_CA_CERT", self.path("certs/ca.crt")),
            (
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                self.path("certs/tls.crt"),
            ),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", self.path("certs/tls.key")),
            (
                "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
                self.path("certs/ca.crt"),
            ),
            ("PROMETHEUS_ADDR", "127.0.0.1:0".to_owned()),
            ("HOST", "127.0.0.1".to_owned()),
            ("PORT", "0".to_owned()),
            ("GRPC_HOST", "127.0.0.1".to_owned()),
            ("GRPC_PORT", "0".to_owned()),
            ("DEBUG_HOST", "127.0.0.1".to_owned()),
            ("DEBUG_PORT", "0".to_owned()),
        ];
        env.extend(ours.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        env.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        env
    }
}

fn start(env: &[(String, String)]) -> Ratelimit {
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Ratelimit::start(&pairs)
}

fn request(entries: &[(&str, &str)]) -> Vec<u8> {
    RateLimitRequest {
        domain: "first-listener".to_owned(),
        descriptors: vec![desc(entries)],
        hits_addend: 0,
    }
    .encode_to_vec()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// `ShouldRateLimit` over TLS; the overall code, or the connection's error.
fn should_rate_limit(
    rl: &Ratelimit,
    ca: &Path,
    client: Option<(&Path, &Path)>,
    entries: &[(&str, &str)],
) -> Result<i32, String> {
    let (message, status) = runtime().block_on(grpc_call(
        rl.grpc,
        client_tls(ca, client),
        SERVER_NAME,
        SHOULD_RATE_LIMIT,
        &request(entries),
    ))?;
    if status != "0" {
        return Err(format!("grpc-status {status}"));
    }
    Ok(RateLimitResponse::decode(message)
        .expect("a RateLimitResponse")
        .overall_code)
}

/// Polls `/healthcheck` until it answers `want` (Redis is probed once a
/// second), or panics at the deadline with what it last answered.
fn wait_health(rl: &Ratelimit, want: u16) -> crate::support::Resp {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = get(rl.http, "/healthcheck");
        if r.status == want {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "/healthcheck still {} (want {want}): {}",
            r.status,
            rl.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn envoy_gateways_environment_serves_the_reference_ports() {
    let redis = RedisServer::start();
    let setup = Setup::new();
    let rl = start(&setup.env(&redis, &[]));

    let health = wait_health(&rl, 200);
    assert_eq!(health.text(), "OK");

    let rlconfig = get(rl.debug, "/rlconfig");
    assert_eq!(rlconfig.status, 200);
    assert_eq!(rlconfig.text(), EG_RLCONFIG);
    assert!(get(rl.debug, "/").text().starts_with("/rlconfig: "));

    let metrics = get(rl.metrics.expect("USE_PROMETHEUS=true"), "/metrics");
    assert_eq!(metrics.status, 200);
    assert!(metrics.text().contains("tollgate_"), "{}", metrics.text());

    let log = rl.log();
    let ignored = log
        .lines()
        .find(|l| l.contains("ignored environment variables"))
        .unwrap_or_else(|| panic!("no ignored line: {log}"));
    assert!(ignored.contains("GRPC_SERVER_TLS_CA_CERT"), "{ignored}");
    assert!(ignored.contains("PROMETHEUS_MAPPER_YAML"), "{ignored}");

    // gRPC over TLS, no client certificate asked (Envoy Gateway sets
    // GRPC_SERVER_TLS_CA_CERT, which the reference does not read).
    let ca = setup.pki.ca_cert();
    let route = [("second-route", "second-route")];
    assert_eq!(should_rate_limit(&rl, &ca, None, &route), Ok(1));
    assert_eq!(should_rate_limit(&rl, &ca, None, &route), Ok(1));
    assert_eq!(should_rate_limit(&rl, &ca, None, &route), Ok(2));
    // A client trusting another CA is refused the handshake.
    let other = should_rate_limit(&rl, &setup.pki.other_ca_cert(), None, &route);
    assert!(other.is_err(), "{other:?}");

    // /json: the same counter, 429 over the limit.
    let body = r#"{"domain":"first-listener","descriptors":[{"entries":[{"key":"second-route","value":"second-route"}]}]}"#;
    let over = post_json(rl.http, "/json", body);
    assert_eq!(over.status, 429, "{}", over.text());
    assert_eq!(over.json()["overallCode"], "OVER_LIMIT");
    let bad = post_json(rl.http, "/json", r#"{"domian":"x"}"#);
    assert_eq!(bad.status, 400);
    // No descriptor: an error, 400, as the reference's.
    let empty = post_json(rl.http, "/json", r#"{"domain":"nobody"}"#);
    assert_eq!(empty.status, 400, "{}", empty.text());
    let unknown = post_json(
        rl.http,
        "/json",
        r#"{"domain":"nobody","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#,
    );
    assert_eq!(unknown.status, 200, "{}", unknown.text());
    assert_eq!(unknown.json()["overallCode"], "OK");
}

/// `grpc.health.v1.Health/Check` of `ratelimit` over TLS, polled until
/// it reports a status (the entry sets it once a second); that status.
fn grpc_health(rl: &Ratelimit, ca: &Path) -> u8 {
    // HealthCheckRequest { service: "ratelimit" }
    let mut req = vec![0x0a, 9];
    req.extend_from_slice(b"ratelimit");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (message, status) = runtime()
            .block_on(grpc_call(
                rl.grpc,
                client_tls(ca, None),
                SERVER_NAME,
                "/grpc.health.v1.Health/Check",
                &req,
            ))
            .expect("call");
        // HealthCheckResponse { status }: 0x08, then the status.
        if status == "0" {
            assert_eq!(message.len(), 2, "{message:?}");
            return message[1];
        }
        assert!(Instant::now() < deadline, "no health status: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn grpc_health_of_ratelimit_mirrors_the_healthcheck() {
    let redis = RedisServer::start();
    let setup = Setup::new();
    let ca = setup.pki.ca_cert();
    let rl = start(&setup.env(&redis, &[]));
    wait_health(&rl, 200);
    // SERVING (1) from the next mirror on: polled.
    let deadline = Instant::now() + Duration::from_secs(30);
    while grpc_health(&rl, &ca) != 1 {
        assert!(Instant::now() < deadline, "ratelimit never SERVING");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Redis never answering: NOT_SERVING (2), as /healthcheck's 500.
    let unreachable = start(&setup.env(&redis, &[("REDIS_URL", "127.0.0.1:1")]));
    assert_eq!(grpc_health(&unreachable, &ca), 2);
    assert_eq!(get(unreachable.http, "/healthcheck").status, 500);
}

#[test]
fn client_certificates_when_asked_and_the_certificate_re_read() {
    let redis = RedisServer::start();
    let setup = Setup::new();
    let ca_file = setup.path("certs/ca.crt");
    let rl = start(&setup.env(&redis, &[("GRPC_CLIENT_TLS_CACERT", &ca_file)]));
    let (ca, cert, key) = (
        setup.pki.ca_cert(),
        setup.pki.client_cert(),
        setup.pki.client_key(),
    );
    let route = [("second-route", "second-route")];
    let without = should_rate_limit(&rl, &ca, None, &route);
    assert!(without.is_err(), "no client certificate: {without:?}");
    assert_eq!(
        should_rate_limit(&rl, &ca, Some((&cert, &key)), &route),
        Ok(1)
    );

    // A renewal: another CA's certificate for the same name replaces the
    // files; the next handshake serves it.
    let renewed = TestPki::generate(SERVER_NAME);
    std::fs::copy(renewed.server_key(), setup.dir.path().join("certs/tls.key")).expect("copy");
    std::fs::copy(
        renewed.server_cert(),
        setup.dir.path().join("certs/tls.crt"),
    )
    .expect("copy");
    assert_eq!(
        should_rate_limit(&rl, &renewed.ca_cert(), Some((&cert, &key)), &route),
        Ok(1)
    );
    let old = should_rate_limit(&rl, &ca, Some((&cert, &key)), &route);
    assert!(old.is_err(), "the old CA still verifies: {old:?}");
    assert!(rl.log().contains("re-read after a change"), "{}", rl.log());
}

#[test]
fn a_client_san_is_required_when_named() {
    let redis = RedisServer::start();
    let setup = Setup::new();
    let ca_file = setup.path("certs/ca.crt");
    let rl = start(&setup.env(
        &redis,
        &[
            ("GRPC_CLIENT_TLS_CACERT", &ca_file),
            ("GRPC_CLIENT_TLS_SAN", "envoy.test"),
        ],
    ));
    let (ca, cert, key) = (
        setup.pki.ca_cert(),
        setup.pki.client_cert(),
        setup.pki.client_key(),
    );
    // The harness's client certificate names no DNS SAN.
    let refused = should_rate_limit(
        &rl,
        &ca,
        Some((&cert, &key)),
        &[("second-route", "second-route")],
    );
    assert!(refused.is_err(), "{refused:?}");
}

#[test]
fn healthcheck_waits_for_a_domain_when_told() {
    let redis = RedisServer::start();
    let setup = Setup::new();
    std::fs::remove_file(setup.dir.path().join("data/ratelimit/config/eg.yaml")).expect("rm");
    let rl = start(&setup.env(
        &redis,
        &[("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")],
    ));
    assert_eq!(get(rl.debug, "/rlconfig").text(), "");
    // No domain: failing, whatever Redis says.
    assert_eq!(get(rl.http, "/healthcheck").status, 500);
    // A file appears in the directory: loaded, and healthy.
    write(setup.dir.path(), "data/ratelimit/config/eg.yaml", EG_CONFIG);
    let health = wait_health(&rl, 200);
    assert_eq!(health.text(), "OK");
    assert_eq!(get(rl.debug, "/rlconfig").text(), EG_RLCONFIG);
}

#[test]
fn envoy_gateways_xds_environment_is_healthy_before_any_config() {
    // Envoy Gateway's own CONFIG_TYPE, with its force start: ready as soon
    // as Redis answers, no config yet (the ADS server here refuses
    // connections; the xds tests hold one that answers).
    let redis = RedisServer::start();
    let setup = Setup::new();
    let rl = start(&setup.env(
        &redis,
        &[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "127.0.0.1:1"),
        ],
    ));
    assert_eq!(wait_health(&rl, 200).text(), "OK");
    let rlconfig = get(rl.debug, "/rlconfig");
    assert_eq!((rlconfig.status, rlconfig.text()), (200, String::new()));
}
