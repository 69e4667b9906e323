//! Helpers for tests that run the real `tollgate serve` binary: start it on
//! free ports (it logs the address it bound; `127.0.0.1:0` is passed),
//! speak raw HTTP/1.1 to it, and run an upstream for the proxy.
// Items stay `pub`, as when each test file was a crate of its own: in a
// test binary nothing outside can see them, `pub(crate)` or not.
#![allow(unreachable_pub)]

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};

pub mod body_upstream;
pub mod compat;
pub mod eg_certs;
pub mod envoy;
pub mod envoy_bootstrap;
pub mod gateway;
pub mod llm_clients;
pub mod llm_replay;
pub mod loopback;
pub mod model;
pub mod piece_upstream;
pub mod proxy;
pub mod recorder;
pub mod reference;
pub mod rlqs_client;
pub mod rlqs_envoy;
pub mod rlqs_script;
pub mod rlqs_server;
pub mod rls;
pub mod tls_upstream;
pub mod usage_upstream;
pub mod xds;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a server may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `tollgate serve`, killed on drop.
pub struct Tollgate {
    child: Child,
    /// The HTTP API's address, when served.
    pub http: Option<SocketAddr>,
    /// The proxy's address, when served.
    pub proxy: Option<SocketAddr>,
    /// The Envoy rate limit service's address, when served.
    pub grpc: Option<SocketAddr>,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

/// Writes `config` to a temp dir; returns the dir and the file.
pub fn config_file(config: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, config).expect("write config");
    (dir, path)
}

/// `tollgate serve --config <config> <args>` run to its exit (for the
/// ways it refuses to start).
pub fn serve_output(config: &str, args: &[&str]) -> std::process::Output {
    serve_output_with_env(config, args, &[])
}

/// [`serve_output`] with `env` set for the process.
pub fn serve_output_with_env(
    config: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let (_dir, path) = config_file(config);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.arg("serve").arg("--config").arg(&path).args(args);
    cmd.envs(env.iter().copied());
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(_status) = child.try_wait().expect("wait") {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "tollgate serve {args:?} did not exit: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Tollgate {
    /// Starts `tollgate serve --config <config> <args>` and waits for the
    /// log lines of the front doors the args name (the HTTP API when no
    /// `--proxy` is given, or when `--http` is).
    pub fn start(config: &str, args: &[&str]) -> Tollgate {
        Self::start_with_env(Some(config), args, &[])
    }

    /// [`Tollgate::start`] with the environment variables `env` set
    /// (`TOLLGATE_HTTP`, ...: a door named by its variable counts as
    /// named by its flag); with no `config`, no `--config` is passed.
    pub fn start_with_env(config: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Tollgate {
        // Every hourly fixed window a test counts in (memory or Redis, one
        // clock) stays whole for the test's first minute.
        redis_harness::clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60));
        let (dir, path) = config_file(config.unwrap_or_default());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.arg("serve");
        if config.is_some() {
            cmd.arg("--config").arg(&path);
        }
        cmd.args(args);
        cmd.env("RUST_LOG", "info");
        cmd.envs(env.iter().copied());
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tollgate");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock()
                    .expect("log lock")
                    .push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        });
        let named = |flag: &str, var: &str| {
            args.contains(&flag) || env.iter().any(|(k, v)| *k == var && !v.is_empty())
        };
        let wants_proxy = named("--proxy", "TOLLGATE_PROXY");
        let wants_grpc = named("--grpc", "TOLLGATE_GRPC");
        let wants_http = named("--http", "TOLLGATE_HTTP") || !(wants_proxy || wants_grpc);
        let mut server = Tollgate {
            child,
            http: None,
            proxy: None,
            grpc: None,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while (wants_http && server.http.is_none())
            || (wants_proxy && server.proxy.is_none())
            || (wants_grpc && server.grpc.is_none())
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(a) = addr_after(&line, "HTTP API listening on http://") {
                        server.http = Some(a);
                    }
                    // `https://` once the listener serves TLS.
                    if let Some(a) = addr_after(&line, "reverse proxy listening on http://")
                        .or_else(|| addr_after(&line, "reverse proxy listening on https://"))
                    {
                        server.proxy = Some(a);
                    }
                    if let Some(a) = addr_after(&line, "reverse proxy listening on https://") {
                        server.proxy = Some(a);
                    }
                    if let Some(a) =
                        addr_after(&line, "Envoy rate limit service (gRPC) listening on ")
                    {
                        server.grpc = Some(a);
                    }
                }
                Err(_) => panic!(
                    "tollgate serve {args:?} did not report its addresses; log:\n{}",
                    server.log()
                ),
            }
        }
        server
    }

    /// The config file it was started with (a test may rewrite it).
    pub fn config_path(&self) -> PathBuf {
        self._dir.path().join("tollgate.toml")
    }

    /// The HTTP API's address.
    pub fn api(&self) -> SocketAddr {
        self.http.expect("the HTTP API is served")
    }

    /// The proxy's address.
    pub fn proxy(&self) -> SocketAddr {
        self.proxy.expect("the proxy is served")
    }

    /// The Envoy rate limit service's address.
    pub fn grpc(&self) -> SocketAddr {
        self.grpc.expect("the gRPC service is served")
    }

    /// The admin API's address (`--admin 127.0.0.1:0`), from the line it
    /// logged when it opened (before the doors: `start` has waited for
    /// those).
    pub fn admin(&self) -> SocketAddr {
        let log = self.log();
        log.lines()
            .find_map(|line| addr_after(line, "admin API listening on http://"))
            .unwrap_or_else(|| panic!("no admin API in the log:\n{log}"))
    }

    /// The ops listener's address (`--ops 127.0.0.1:0`), from the line it
    /// logged when it opened (before the doors).
    pub fn ops(&self) -> SocketAddr {
        let log = self.log();
        log.lines()
            .find_map(|line| addr_after(line, "ops listening on http://"))
            .unwrap_or_else(|| panic!("no ops listener in the log:\n{log}"))
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log lock").clone()
    }

    /// Whether it logs `line` (a part of one) within a minute: what the
    /// server did may show in its answers before the reader thread has
    /// read the log line that says so, so a test waits for the line
    /// instead of reading the log once.
    pub fn logs(&self, line: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.log.lock().expect("log lock").contains(line) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. `TERM`) with the `kill` program.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Waits up to `timeout` for it to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Peak resident memory (`VmHWM`) in KiB, from `/proc`.
    pub fn peak_rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }
}

impl Drop for Tollgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn addr_after(line: &str, marker: &str) -> Option<SocketAddr> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let end = rest
        .find(|c: char| c.is_whitespace() || c == ',')
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// A parsed HTTP/1.1 response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`.
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Connects with a timeout on every read and write.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    s.set_write_timeout(Some(Duration::from_secs(30)))
        .expect("write timeout");
    s
}

/// Sends one request (`Connection: close`) and reads the whole response.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut s = connect(addr);
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" || method == "PUT" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write head");
    s.write_all(body).expect("write body");
    read_response(&mut s)
}

/// Sends `raw` as it is, then shuts down the sending side (as an HTTP/1.0
/// client or `curl -T` may once its request is out), and reads the answer
/// to the end of the connection.
pub fn half_closed(addr: SocketAddr, raw: &[u8]) -> Resp {
    let mut s = connect(addr);
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    s.write_all(raw).expect("write request");
    s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    parse_response(&out)
}

/// `POST path` with a JSON body.
pub fn post_json(addr: SocketAddr, path: &str, body: &str) -> Resp {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
}

/// `GET path`.
pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, &[], b"")
}

/// Reads a response to the end of the connection.
pub fn read_response(s: &mut impl Read) -> Resp {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    parse_response(&raw)
}

/// Parses a whole HTTP/1.1 response (content-length, chunked or to EOF).
pub fn parse_response(raw: &[u8]) -> Resp {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .expect("chunk size");
        data = &data[eol + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// The deterministic test pattern: byte `i` of a stream.
pub fn pattern_byte(i: u64) -> u8 {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i >> 7);
    x.to_be_bytes()[0]
}

/// Fills `buf` with the pattern from stream offset `offset`.
pub fn fill_pattern(buf: &mut [u8], offset: u64) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(offset + j as u64);
    }
}

/// A test upstream (hyper, in its own thread and runtime):
///
/// * `/echo`: streams the request body back; `x-method`, `x-uri` headers.
/// * `/headers`: the request's header lines as the body.
/// * `/big?n=N`: N bytes of the pattern, streamed (no length).
/// * `/slow?ms=N`: answers after N ms.
/// * `/hop`: a response with hop-by-hop fields.
/// * `/close`: `200 closing` with `Connection: close` (the connection ends).
/// * `/linger`: `200 lingering`, then the upstream closes the connection
///   50 ms later, as an idle keep-alive timeout does.
/// * anything else: `200 ok` with `x-upstream: yes`.
pub struct Upstream {
    pub addr: SocketAddr,
    accepted: Arc<std::sync::atomic::AtomicU64>,
    ended: Arc<std::sync::atomic::AtomicU64>,
    /// Stops the upstream when dropped.
    _server: loopback::LoopbackServer,
}

struct PatternBody {
    offset: u64,
    end: u64,
}

impl hyper::body::Body for PatternBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.offset >= self.end {
            return Poll::Ready(None);
        }
        let n = usize::try_from((self.end - self.offset).min(64 * 1024)).expect("small");
        let mut buf = vec![0u8; n];
        fill_pattern(&mut buf, self.offset);
        self.offset += n as u64;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf)))))
    }
}

fn query_u64(req: &Request<Incoming>, name: &str) -> u64 {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn text_body(s: String) -> BoxBody<Bytes, BoxError> {
    http_body_util::Full::new(Bytes::from(s))
        .map_err(|never: Infallible| match never {})
        .boxed()
}

impl Upstream {
    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Connections ended (closed by either side) so far.
    pub fn ended(&self) -> u64 {
        self.ended.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn upstream_service(
    req: Request<Incoming>,
    linger: Arc<tokio::sync::Notify>,
) -> Result<Response<BoxBody<Bytes, BoxError>>, Infallible> {
    let path = req.uri().path().to_owned();
    let res = match path.as_str() {
        "/close" => {
            let mut res = Response::new(text_body("closing".to_owned()));
            res.headers_mut()
                .insert("connection", "close".parse().expect("value"));
            res
        }
        "/linger" => {
            linger.notify_one();
            Response::new(text_body("lingering".to_owned()))
        }
        "/echo" => {
            let method = req.method().to_string();
            let uri = req.uri().to_string();
            let mut res = Response::new(req.into_body().map_err(BoxError::from).boxed());
            res.headers_mut()
                .insert("x-method", method.parse().expect("value"));
            res.headers_mut()
                .insert("x-uri", uri.parse().expect("value"));
            res
        }
        "/headers" => {
            let mut text = String::new();
            for (k, v) in req.headers() {
                text.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
            }
            Response::new(text_body(text))
        }
        "/big" => {
            let n = query_u64(&req, "n");
            Response::new(PatternBody { offset: 0, end: n }.boxed())
        }
        "/slow" => {
            let ms = query_u64(&req, "ms");
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Response::new(text_body("slow done".to_owned()))
        }
        "/hop" => {
            let mut res = Response::new(text_body("hop".to_owned()));
            let h = res.headers_mut();
            h.insert("connection", "x-private".parse().expect("value"));
            h.insert("x-private", "secret".parse().expect("value"));
            h.insert("keep-alive", "timeout=5".parse().expect("value"));
            h.insert("x-public", "ok".parse().expect("value"));
            res
        }
        _ => {
            let mut res = Response::new(text_body("ok".to_owned()));
            res.headers_mut()
                .insert("x-upstream", "yes".parse().expect("value"));
            res
        }
    };
    Ok(res)
}

/// Starts the test upstream on a free loopback port.
pub fn start_upstream() -> Upstream {
    let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = Arc::clone(&accepted);
    let ended = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ended_count = Arc::clone(&ended);
    let server = loopback::LoopbackServer::start(move |stream| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let ended = Arc::clone(&ended_count);
        tokio::spawn(async move {
            let linger = Arc::new(tokio::sync::Notify::new());
            let notified = Arc::clone(&linger);
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(
                hyper_util::rt::TokioIo::new(stream),
                hyper::service::service_fn(move |req| upstream_service(req, Arc::clone(&linger))),
            );
            tokio::select! {
                _ = conn => {}
                () = async {
                    notified.notified().await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                } => {}
            }
            ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
    });
    Upstream {
        addr: server.addr,
        accepted,
        ended,
        _server: server,
    }
}

/// A loopback address nothing listens on (bound, then closed).
pub fn dead_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

/// Parses a header value as a structured-field List, panicking with the
/// value when it is not one.
pub fn sf_list(value: &str) -> sfv::List {
    sfv::Parser::new(value)
        .parse::<sfv::List>()
        .unwrap_or_else(|e| panic!("{value:?} is not a structured-field List: {e}"))
}

/// The (name, params) of each member of a RateLimit / RateLimit-Policy list.
pub fn ratelimit_members(value: &str) -> Vec<(String, Vec<(String, i64)>)> {
    sf_list(value)
        .into_iter()
        .map(|member| match member {
            sfv::ListEntry::Item(item) => {
                let name = match item.bare_item {
                    sfv::BareItem::String(s) => s.as_str().to_owned(),
                    other => panic!("member is not an sf-string: {other:?} in {value:?}"),
                };
                let params = item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        let n = match v {
                            sfv::BareItem::Integer(i) => i64::from(*i),
                            other => panic!("parameter {k} is not an integer: {other:?}"),
                        };
                        (k.as_str().to_owned(), n)
                    })
                    .collect();
                (name, params)
            }
            sfv::ListEntry::InnerList(_) => panic!("inner list in {value:?}"),
        })
        .collect()
}

/// Runs `cmd` to its exit with `input` on its stdin and its output
/// captured, and fails the test if it has not exited within `limit`: for
/// the inputs that once made a subcommand block or read forever.
pub fn output_within(mut cmd: Command, input: &[u8], limit: Duration) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    // Written from a thread: the child may stop reading (and the pipe fill)
    // before all of it is written.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let pid = child.id();
    let (done, wait) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output().expect("output"));
    });
    let out = wait.recv_timeout(limit).unwrap_or_else(|_| {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        panic!("{cmd:?} still running after {limit:?}");
    });
    let _ = writer.join();
    out
}

/// A process's stdout, which must be UTF-8.
pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

/// A process's stderr, which must be UTF-8.
pub fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// POSTs `body` as JSON to `path` of `s`'s HTTP API.
pub fn post(s: &Tollgate, path: &str, body: &serde_json::Value) -> Resp {
    post_json(s.api(), path, &body.to_string())
}

/// What remains of `rule`/`key`, peeked (cost 0) through `s`'s HTTP API
/// (a 429 while the key is in debt).
pub fn remaining(s: &Tollgate, rule: &str, key: &str) -> u64 {
    let r = post_json(
        s.api(),
        "/v1/check",
        &format!(r#"{{"rule":"{rule}","key":"{key}","cost":0}}"#),
    );
    assert!(matches!(r.status, 200 | 429), "peek: {}", r.text());
    r.json()["remaining"].as_u64().expect("remaining")
}

/// The value of the series `name{labels}` in a `/metrics` text (0 when
/// absent).
pub fn series(metrics: &str, name: &str, labels: &str) -> f64 {
    let head = format!("{name}{{{labels}}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&head))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}
