//! The reference's listeners: HTTP (`HOST:PORT`, `/healthcheck` and
//! `/json`), gRPC (`GRPC_HOST:GRPC_PORT`, TLS from files), debug
//! (`DEBUG_HOST:DEBUG_PORT`, `/rlconfig`) and Prometheus
//! (`PROMETHEUS_ADDR`, `/metrics`), and the stats sinks it may be told to
//! use instead.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use super::env::{Env, Refusal};

/// Where each of the reference's listeners is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// `HOST:PORT` (default `0.0.0.0:8080`).
    pub http: SocketAddr,
    /// `GRPC_HOST:GRPC_PORT` (default `0.0.0.0:8081`).
    pub grpc: SocketAddr,
    /// `DEBUG_HOST:DEBUG_PORT` (default `0.0.0.0:6070`).
    pub debug: SocketAddr,
    /// `PROMETHEUS_ADDR` when `USE_PROMETHEUS` is true.
    pub metrics: Option<SocketAddr>,
}

/// The gRPC port's TLS: `GRPC_SERVER_TLS_CERT`/`_KEY` (re-read when they
/// change), and client certificates required when
/// `GRPC_CLIENT_TLS_CACERT` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcTls {
    /// The certificate chain, PEM.
    pub cert: PathBuf,
    /// Its private key, PEM.
    pub key: PathBuf,
    /// The CA client certificates must chain to; `None`: none asked for.
    pub client_ca: Option<PathBuf>,
    /// `GRPC_CLIENT_TLS_SAN`: a DNS name the client certificate must carry.
    pub client_san: Option<String>,
}

/// The listeners' addresses.
///
/// # Errors
/// A port or host that does not parse or resolve, `GRPC_UDS`, a sink
/// tollgate does not have, a Prometheus path other than `/metrics`.
pub fn listen(env: &Env) -> Result<Listen, Refusal> {
    let uds = env.string("GRPC_UDS", "")?;
    if !uds.is_empty() {
        return Err(Refusal::new(
            "GRPC_UDS",
            "a unix socket for gRPC is not supported: use GRPC_HOST and GRPC_PORT",
        ));
    }
    let http = host_port(env, "HOST", "PORT", 8080)?;
    let grpc = host_port(env, "GRPC_HOST", "GRPC_PORT", 8081)?;
    let debug = host_port(env, "DEBUG_HOST", "DEBUG_PORT", 6070)?;
    // The reference's default is true: only an explicit true is refused,
    // since tollgate has no statsd sink to send to (docs/ratelimit-env.md).
    if env.bool("USE_STATSD", false)? {
        return Err(Refusal::new(
            "USE_STATSD",
            "there is no statsd sink: set USE_STATSD=false and USE_PROMETHEUS=true",
        ));
    }
    if env.bool("USE_DOG_STATSD", false)? {
        return Err(Refusal::new(
            "USE_DOG_STATSD",
            "there is no DogStatsD sink: set USE_PROMETHEUS=true",
        ));
    }
    // The reference serves it only with USE_PROMETHEUS.
    let path = env.string("PROMETHEUS_PATH", "/metrics")?;
    if path != "/metrics" && env.bool("USE_PROMETHEUS", false)? {
        return Err(Refusal::new(
            "PROMETHEUS_PATH",
            format!("{path:?}: metrics are served at /metrics only"),
        ));
    }
    let addr = env.string("PROMETHEUS_ADDR", ":9090")?;
    let metrics = if env.bool("USE_PROMETHEUS", false)? {
        Some(go_addr(&addr).map_err(|why| Refusal::new("PROMETHEUS_ADDR", why))?)
    } else {
        None
    };
    Ok(Listen {
        http,
        grpc,
        debug,
        metrics,
    })
}

/// The gRPC port's TLS, when `GRPC_SERVER_USE_TLS` is true.
///
/// # Errors
/// A value that does not parse; TLS without a certificate or key.
pub fn grpc_tls(env: &Env) -> Result<Option<GrpcTls>, Refusal> {
    let on = env.bool("GRPC_SERVER_USE_TLS", false)?;
    let cert = env.string("GRPC_SERVER_TLS_CERT", "")?;
    let key = env.string("GRPC_SERVER_TLS_KEY", "")?;
    let ca = env.string("GRPC_CLIENT_TLS_CACERT", "")?;
    let san = env.string("GRPC_CLIENT_TLS_SAN", "")?;
    if !on {
        return Ok(None);
    }
    for (name, value) in [
        ("GRPC_SERVER_TLS_CERT", &cert),
        ("GRPC_SERVER_TLS_KEY", &key),
    ] {
        if value.is_empty() {
            return Err(Refusal::new(name, "GRPC_SERVER_USE_TLS=true needs it"));
        }
    }
    if !san.is_empty() && ca.is_empty() {
        return Err(Refusal::new(
            "GRPC_CLIENT_TLS_SAN",
            "needs GRPC_CLIENT_TLS_CACERT (client certificates are verified only with it)",
        ));
    }
    Ok(Some(GrpcTls {
        cert: cert.into(),
        key: key.into(),
        client_ca: Some(ca).filter(|s| !s.is_empty()).map(PathBuf::from),
        client_san: Some(san).filter(|s| !s.is_empty()),
    }))
}

/// `host_var:port_var`, resolved once now. An empty host is every
/// address, IPv6 and IPv4, as Go's `:port` (the reference joins the two
/// with `fmt.Sprintf("%s:%d")`); the bind falls back to `0.0.0.0`.
fn host_port(env: &Env, host_var: &str, port_var: &str, port: u16) -> Result<SocketAddr, Refusal> {
    let host = env.string(host_var, "0.0.0.0")?;
    let host = if host.is_empty() { "::" } else { host.as_str() };
    let port = u16::try_from(env.int(port_var, i64::from(port))?)
        .map_err(|_| Refusal::new(port_var, "not a port (0 to 65535)"))?;
    resolve(host, port).map_err(|why| Refusal::new(host_var, why))
}

/// A Go listen address: `host:port`, or `:port` for every address, IPv6
/// and IPv4 (`[::]:port`; where IPv6 is off, the bind falls back to
/// `0.0.0.0`: [`bind_any`]).
fn go_addr(addr: &str) -> Result<SocketAddr, String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("{addr:?} is not host:port or :port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{addr:?}: {port:?} is not a port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    resolve(if host.is_empty() { "::" } else { host }, port)
}

/// Binds `addr`; `[::]:port` (every address) falls back to `0.0.0.0:port`
/// where the host has no IPv6.
///
/// # Errors
/// The bind's error, with the address.
pub async fn bind_any(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind(addr).await {
        Err(_) if addr.ip() == std::net::Ipv6Addr::UNSPECIFIED => {
            tokio::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, addr.port())).await
        }
        bound => bound,
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host:?} does not resolve: {e}"))?
        .next()
        .ok_or_else(|| format!("{host:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddr {
        s.parse().expect("addr")
    }

    #[test]
    fn the_reference_ports_by_default() {
        let l = listen(&Env::from_pairs(&[])).expect("defaults");
        assert_eq!(
            l,
            Listen {
                http: at("0.0.0.0:8080"),
                grpc: at("0.0.0.0:8081"),
                debug: at("0.0.0.0:6070"),
                metrics: None,
            }
        );
        let l = listen(&Env::from_pairs(&[
            ("USE_STATSD", "false"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", ":19001"),
            ("HOST", "127.0.0.1"),
            ("PORT", "9"),
            ("GRPC_HOST", "::1"),
            ("GRPC_PORT", "10"),
            ("DEBUG_HOST", "localhost"),
            ("DEBUG_PORT", "0"),
        ]))
        .expect("set");
        assert_eq!(l.http, at("127.0.0.1:9"));
        assert_eq!(l.grpc, at("[::1]:10"));
        assert_eq!(l.debug.port(), 0);
        assert!(l.debug.ip().is_loopback());
        assert_eq!(l.metrics, Some(at("[::]:19001")));
        let l = listen(&Env::from_pairs(&[("USE_PROMETHEUS", "true")])).expect("default addr");
        assert_eq!(l.metrics, Some(at("[::]:9090")));
    }

    #[test]
    fn an_empty_host_is_every_address() {
        let l = listen(&Env::from_pairs(&[
            ("HOST", ""),
            ("GRPC_HOST", ""),
            ("DEBUG_HOST", ""),
        ]))
        .expect("empty hosts");
        assert_eq!(l.http, at("[::]:8080"));
        assert_eq!(l.grpc, at("[::]:8081"));
        assert_eq!(l.debug, at("[::]:6070"));
    }

    #[test]
    fn refused_listeners_and_sinks() {
        for (pairs, variable) in [
            (vec![("GRPC_UDS", "/tmp/rl.sock")], "GRPC_UDS"),
            (vec![("PORT", "70000")], "PORT"),
            (vec![("GRPC_PORT", "x")], "GRPC_PORT"),
            (vec![("HOST", "no such host.invalid")], "HOST"),
            (vec![("USE_STATSD", "true")], "USE_STATSD"),
            (vec![("USE_DOG_STATSD", "true")], "USE_DOG_STATSD"),
            (
                vec![("PROMETHEUS_PATH", "/m"), ("USE_PROMETHEUS", "true")],
                "PROMETHEUS_PATH",
            ),
            (
                vec![("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", "19001")],
                "PROMETHEUS_ADDR",
            ),
        ] {
            let err = listen(&Env::from_pairs(&pairs)).expect_err(variable);
            assert_eq!(err.variable, variable, "{pairs:?}: {err}");
        }
    }

    #[test]
    fn grpc_tls_from_files() {
        assert_eq!(grpc_tls(&Env::from_pairs(&[])), Ok(None));
        let t = grpc_tls(&Env::from_pairs(&[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
            ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
            ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
        ]))
        .expect("tls");
        assert_eq!(
            t,
            Some(GrpcTls {
                cert: "/certs/tls.crt".into(),
                key: "/certs/tls.key".into(),
                client_ca: None,
                client_san: None,
            })
        );
        let t = grpc_tls(&Env::from_pairs(&[
            ("GRPC_SERVER_USE_TLS", "1"),
            ("GRPC_SERVER_TLS_CERT", "c"),
            ("GRPC_SERVER_TLS_KEY", "k"),
            ("GRPC_CLIENT_TLS_CACERT", "ca"),
            ("GRPC_CLIENT_TLS_SAN", "envoy"),
        ]))
        .expect("mtls")
        .expect("on");
        assert_eq!(t.client_ca, Some("ca".into()));
        assert_eq!(t.client_san.as_deref(), Some("envoy"));
        let err =
            grpc_tls(&Env::from_pairs(&[("GRPC_SERVER_USE_TLS", "true")])).expect_err("no cert");
        assert_eq!(err.variable, "GRPC_SERVER_TLS_CERT");
    }
}
