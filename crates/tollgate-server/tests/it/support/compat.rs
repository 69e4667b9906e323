//! The binary started as envoyproxy/ratelimit is: under the name
//! `ratelimit` (a symlink in a temp dir), configured by its environment
//! alone ([`Ratelimit`]), and a gRPC client over TLS for its port
//! ([`grpc_call`]).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};

/// How long the entry may take to start (or to refuse).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Envoy Gateway's Deployment environment (its `expectedRateLimitContainerEnv`
/// with Redis and Prometheus on), verbatim but for `CONFIG_TYPE`, which
/// the caller sets, and `REDIS_URL`, the certificate paths and the ports,
/// which point at the test's own.
pub const ENVOY_GATEWAY: &[(&str, &str)] = &[
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("LOG_LEVEL", "info"),
    ("USE_STATSD", "false"),
    ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
    ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
    ("GRPC_SERVER_USE_TLS", "true"),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("USE_PROMETHEUS", "true"),
    ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
];

/// A running entry, killed on drop.
pub struct Ratelimit {
    child: Child,
    log: Arc<Mutex<String>>,
    /// `GRPC_HOST:GRPC_PORT` as bound.
    pub grpc: SocketAddr,
    /// `HOST:PORT` as bound.
    pub http: SocketAddr,
    /// `DEBUG_HOST:DEBUG_PORT` as bound.
    pub debug: SocketAddr,
    /// `PROMETHEUS_ADDR` as bound.
    pub metrics: Option<SocketAddr>,
    _dir: tempfile::TempDir,
}

impl Drop for Ratelimit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ratelimit` (a symlink to the test binary) with exactly `env` (and
/// `PATH`), in a temp dir it returns too.
fn command(env: &[(&str, &str)]) -> (Command, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let link = dir.path().join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tollgate"), &link).expect("symlink");
    let mut cmd = Command::new(&link);
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    // A busy CI machine can keep Redis past the 50 ms default, and a test
    // not about timeouts must not fail on one; those about them set it.
    if !env.iter().any(|(k, _)| *k == "REDIS_TIMEOUT") {
        cmd.env("REDIS_TIMEOUT", "10s");
    }
    cmd.envs(env.iter().copied());
    (cmd, dir)
}

fn addr_after(line: &str, marker: &str) -> Option<SocketAddr> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let end = rest
        .find(|c: char| c.is_whitespace() || c == ',')
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

impl Ratelimit {
    /// Starts it and waits for the gRPC port's log line (the last port
    /// opened); panics with the log if it exits first.
    pub fn start(env: &[(&str, &str)]) -> Ratelimit {
        let (mut cmd, dir) = command(env);
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ratelimit");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().expect("log").push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        });
        let (mut http, mut debug, mut metrics, mut grpc) = (None, None, None, None);
        let deadline = Instant::now() + START_TIMEOUT;
        while grpc.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    http = http.or(addr_after(&line, "reference HTTP listening on http://"));
                    debug = debug.or(addr_after(&line, "reference debug listening on http://"));
                    metrics = metrics.or(addr_after(&line, "ops listening on http://"));
                    grpc = grpc
                        .or(addr_after(&line, "(gRPC over TLS) listening on "))
                        .or(addr_after(&line, "(gRPC) listening on "));
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!("ratelimit did not start: {}", log.lock().expect("log"));
                }
            }
        }
        Ratelimit {
            child,
            log,
            grpc: grpc.expect("grpc"),
            http: http.expect("reference HTTP port logged before gRPC"),
            debug: debug.expect("debug port logged before gRPC"),
            metrics,
            _dir: dir,
        }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }
}

/// Runs it with `env` to its exit (for the refusals).
pub fn output(env: &[(&str, &str)]) -> Output {
    let (mut cmd, _dir) = command(env);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ratelimit");
    let deadline = Instant::now() + START_TIMEOUT;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "ratelimit {env:?} did not exit: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// A TLS client config trusting `ca`, presenting `client` (cert, key)
/// when given, offering ALPN `h2`.
pub fn client_tls(ca: &Path, client: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(cert.expect("ca cert")).expect("add ca");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)
                    .expect("cert")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("certs"),
                PrivateKeyDer::from_pem_file(key).expect("key"),
            )
            .expect("client auth"),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// One unary gRPC call over TLS to `addr` (verified as `server_name`):
/// `path`, the message `request`; the response message's bytes and the
/// `grpc-status`, or the connection's error (a refused handshake).
pub async fn grpc_call(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    server_name: &str,
    path: &str,
    request: &[u8],
) -> Result<(Bytes, String), String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls_pki_types::ServerName::try_from(server_name.to_owned())
        .map_err(|e| e.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut client, conn) = h2::client::handshake(stream)
        .await
        .map_err(|e| format!("h2: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::post(format!("https://{server_name}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .map_err(|e| e.to_string())?;
    let (response, mut send) = client
        .send_request(req, false)
        .map_err(|e| format!("h2 send: {e}"))?;
    let mut frame = BytesMut::new();
    frame.put_u8(0);
    frame.put_u32(u32::try_from(request.len()).expect("small"));
    frame.put_slice(request);
    send.send_data(frame.freeze(), true)
        .map_err(|e| format!("h2 data: {e}"))?;
    let response = response.await.map_err(|e| format!("h2 response: {e}"))?;
    let (head, mut body) = response.into_parts();
    let mut data = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| format!("h2 body: {e}"))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = body
        .trailers()
        .await
        .map_err(|e| format!("h2 trailers: {e}"))?;
    let status = trailers
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| head.headers.get("grpc-status"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let message = if data.len() >= 5 {
        data.split_off(5).freeze()
    } else {
        Bytes::new()
    };
    Ok((message, status))
}

/// A file path as a `&str` for an environment value.
pub fn path_str(path: &Path) -> String {
    path.to_str().expect("utf-8 path").to_owned()
}

/// `dir/name` written with `text`; returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&path, text).expect("write");
    path
}
