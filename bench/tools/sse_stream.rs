//! An LLM-shaped upstream and a time-to-first-byte client, for
//! `bench/llm.sh` (bench/llm.md).
//!
//! ```text
//! sse_stream serve ADDR [--cert FILE --key FILE] [--events N] [--interval-ms MS] [--threads T]
//! sse_stream client URL [--requests M] [--concurrency C] [--ca FILE] [--expect-events K]
//! ```
//!
//! `serve` answers HTTP/1.1 (over TLS when given a PEM certificate chain
//! and key; ALPN `http/1.1` only, so every proxy in front speaks HTTP/1.1 to
//! it, as nginx's `proxy_pass` does). A request for a path ending in
//! `/stream` gets a model's streamed answer in OpenAI's chat-completions
//! shape: the head and a first chunk at once, then N more chunks, one every
//! MS milliseconds (a model producing tokens), then a usage chunk and
//! `data: [DONE]` (`stream_options.include_usage`): N + 3 events. Any other
//! path gets one chat completion as a JSON body of fixed length. It prints
//! `listening on http(s)://ADDR` to standard error and serves until killed.
//!
//! `client` opens C connections (keep-alive, TLS for an `https` URL,
//! verified against `--ca`) and sends M requests over them, each
//! `GET URL` with `x-key: k<i>` (the proxies' rules key on it), and records
//! for each the time to its response head and to the first byte of its
//! body, and the whole answer. Each connection first sends one request
//! that is not counted (the warm-up: it makes a proxy open its upstream
//! connections, so no handshake is in the figures), then the connections
//! start one after the other, a C-th of an answer's length apart, so the
//! streams do not begin in bursts of C. It prints one line of
//! `name=value` words (times in ms): `n`, `bad` (not 200, failed, or not K
//! events when `--expect-events K`), `rps`, `head_p50`, `head_p99`, and
//! for the body's first byte `p50`, `p90`, `p99`, `max`, and the whole
//! answer's `total_p50`, `total_p99`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE, HOST};
use http::{Request, Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Sleep, sleep_until};
use tokio_rustls::{TlsAcceptor, TlsConnector};

const USAGE: &str = "usage: sse_stream serve ADDR [--cert FILE --key FILE] [--events N] \
[--interval-ms MS] [--threads T]\n       sse_stream client URL [--requests M] [--concurrency C] \
[--ca FILE] [--expect-events K]";

/// One streamed chunk of a token (every one the same: the proxies copy
/// bytes, they do not read them, so their content does not matter).
const CHUNK: &[u8] = b"data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\
\"created\":1700000000,\"model\":\"bench\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok\"},\
\"finish_reason\":null}]}\n\n";

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, rest) = args.split_first().ok_or(USAGE)?;
    let (target, flags) = rest.split_first().ok_or(USAGE)?;
    let flags = Flags::parse(flags)?;
    match mode.as_str() {
        "serve" => {
            let threads = flags.num("--threads", 1)?.max(1);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(serve(target, &flags))
        }
        "client" => {
            // One thread: the client's own scheduling delays are the same
            // for every target it measures.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(client(target, &flags))
        }
        _ => Err(USAGE.into()),
    }
}

/// `--name value` pairs after the address.
struct Flags(Vec<(String, String)>);

impl Flags {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut pairs = Vec::new();
        let mut it = args.iter();
        while let Some(name) = it.next() {
            if !name.starts_with("--") {
                return Err(format!("{name:?}: expected --FLAG VALUE\n{USAGE}"));
            }
            let value = it.next().ok_or(format!("{name} needs a value"))?;
            pairs.push((name.clone(), value.clone()));
        }
        Ok(Self(pairs))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn num(&self, name: &str, default: usize) -> Result<usize, String> {
        self.get(name).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|_| format!("{name}: {v:?} is not a count"))
        })
    }
}

// ---------------------------------------------------------------- upstream

/// What every streamed answer is made of, built once.
struct Shape {
    /// Token chunks after the first.
    events: usize,
    interval: Duration,
    /// The usage chunk and `[DONE]`, sent together at the end.
    tail: Bytes,
    /// The whole answer of a request that is not for `/stream`.
    json: Bytes,
}

async fn serve(addr: &str, flags: &Flags) -> Result<(), String> {
    let events = flags.num("--events", 20)?;
    let interval = Duration::from_millis(flags.num("--interval-ms", 20)? as u64);
    let completion = events + 1;
    let usage = format!(
        "\"usage\":{{\"prompt_tokens\":12,\"completion_tokens\":{completion},\"total_tokens\":{}}}",
        12 + completion
    );
    let shape = Arc::new(Shape {
        events,
        interval,
        tail: Bytes::from(format!(
            "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\
             \"created\":1700000000,\"model\":\"bench\",\"choices\":[],{usage}}}\n\ndata: [DONE]\n\n"
        )),
        json: Bytes::from(format!(
            "{{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1700000000,\
             \"model\":\"bench\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\
             \"content\":\"{}\"}},\"finish_reason\":\"stop\"}}],{usage}}}\n",
            "tok ".repeat(completion).trim_end()
        )),
    });
    let tls = match (flags.get("--cert"), flags.get("--key")) {
        (Some(cert), Some(key)) => Some(acceptor(Path::new(cert), Path::new(key))?),
        (None, None) => None,
        _ => return Err("--cert and --key go together".into()),
    };
    let addr: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let listener = TcpListener::bind(addr).await.map_err(|e| e.to_string())?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    eprintln!("listening on {scheme}://{local}");
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        // As a server that streams tokens would: each event goes out at once.
        let _ = tcp.set_nodelay(true);
        let (shape, tls) = (Arc::clone(&shape), tls.clone());
        tokio::spawn(async move {
            let svc = service_fn(move |req| answer(req, Arc::clone(&shape)));
            let http = hyper::server::conn::http1::Builder::new();
            match tls {
                None => drop(http.serve_connection(TokioIo::new(tcp), svc).await),
                Some(tls) => {
                    if let Ok(stream) = tls.accept(tcp).await {
                        drop(http.serve_connection(TokioIo::new(stream), svc).await);
                    }
                }
            }
        });
    }
}

fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect)
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

async fn answer(req: Request<Incoming>, shape: Arc<Shape>) -> Result<Response<Answer>, Infallible> {
    let stream = req.uri().path().ends_with("/stream");
    // A request body (a prompt) is read whole before the answer starts.
    drop(req.into_body().collect().await);
    let (content_type, body) = if stream {
        let body = Answer {
            shape,
            next: 0,
            start: tokio::time::Instant::now(),
            sleep: None,
            json: None,
        };
        ("text/event-stream", body)
    } else {
        let json = Some(shape.json.clone());
        let next = shape.events + 2; // nothing streamed
        let body = Answer {
            shape,
            next,
            start: tokio::time::Instant::now(),
            sleep: None,
            json,
        };
        ("application/json", body)
    };
    let mut res = Response::new(body);
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, content_type.parse().expect("a header value"));
    h.insert(CACHE_CONTROL, "no-cache".parse().expect("a header value"));
    Ok(res)
}

/// An answer's body: the JSON at once, or the stream's frames on time.
/// Frame 0 (the first chunk) is ready with the head; frame k (1..=N) is
/// due k intervals after the start; frame N + 1 (usage, `[DONE]`) with
/// frame N. Due times count from the start, so a late wake does not
/// delay the frames after it.
struct Answer {
    shape: Arc<Shape>,
    next: usize,
    start: tokio::time::Instant,
    sleep: Option<Pin<Box<Sleep>>>,
    json: Option<Bytes>,
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(json) = this.json.take() {
            return Poll::Ready(Some(Ok(Frame::data(json))));
        }
        let n = this.shape.events;
        if this.next > n + 1 {
            return Poll::Ready(None);
        }
        let k = this.next.min(n);
        if k > 0 {
            let due = this.start + this.shape.interval * u32::try_from(k).unwrap_or(u32::MAX);
            let sleep = this.sleep.get_or_insert_with(|| Box::pin(sleep_until(due)));
            ready!(sleep.as_mut().poll(cx));
            this.sleep = None;
        }
        let frame = if this.next == n + 1 {
            this.shape.tail.clone()
        } else {
            Bytes::from_static(CHUNK)
        };
        this.next += 1;
        Poll::Ready(Some(Ok(Frame::data(frame))))
    }

    fn is_end_stream(&self) -> bool {
        self.json.is_none() && self.next > self.shape.events + 1
    }

    fn size_hint(&self) -> SizeHint {
        match &self.json {
            Some(json) => SizeHint::with_exact(json.len() as u64),
            None if self.is_end_stream() => SizeHint::with_exact(0),
            None => SizeHint::default(),
        }
    }
}

// ------------------------------------------------------------------ client

/// One measured request.
struct Sample {
    head: Duration,
    first: Duration,
    total: Duration,
}

/// What the connections share.
struct Run {
    uri: Uri,
    authority: String,
    addr: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    requests: usize,
    expect: Option<usize>,
    next: AtomicUsize,
    /// Each connection's warm-up answer length: the stagger is their median.
    warm: Mutex<Vec<Duration>>,
    barrier: tokio::sync::Barrier,
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn client(url: &str, flags: &Flags) -> Result<(), String> {
    let uri: Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(format!("{url}: not an http(s) URL")),
    };
    let authority = uri.authority().ok_or("URL without a host")?.to_string();
    let host = uri.host().ok_or("URL without a host")?;
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let tls = if https {
        let ca = flags.get("--ca").ok_or("an https URL needs --ca FILE")?;
        let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
            .map_err(|e| format!("{host}: {e}"))?;
        Some((connector(Path::new(ca))?, name))
    } else {
        None
    };
    let concurrency = flags.num("--concurrency", 16)?.max(1);
    let run = Arc::new(Run {
        addr: format!("{host}:{port}"),
        authority,
        uri,
        tls,
        requests: flags.num("--requests", 1000)?,
        expect: flags
            .get("--expect-events")
            .map(str::parse)
            .transpose()
            .map_err(|_| "--expect-events: not a count")?,
        next: AtomicUsize::new(0),
        warm: Mutex::new(Vec::new()),
        barrier: tokio::sync::Barrier::new(concurrency),
    });
    let mut set = tokio::task::JoinSet::new();
    for i in 0..concurrency {
        set.spawn(connection(Arc::clone(&run), i, concurrency));
    }
    let mut samples = Vec::with_capacity(run.requests);
    let mut bad = 0usize;
    let mut span = (None::<Instant>, None::<Instant>);
    while let Some(done) = set.join_next().await {
        let (mut s, b, first, last) = done.map_err(|e| e.to_string())??;
        samples.append(&mut s);
        bad += b;
        span.0 = match (span.0, first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        span.1 = span.1.max(last);
    }
    report(&samples, bad, span);
    Ok(())
}

fn connector(ca: &Path) -> Result<TlsConnector, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))? {
        roots
            .add(cert.map_err(|e| format!("{}: {e}", ca.display()))?)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

async fn open(run: &Run) -> Result<Sender, String> {
    let tcp = TcpStream::connect(&run.addr)
        .await
        .map_err(|e| format!("{}: {e}", run.addr))?;
    let _ = tcp.set_nodelay(true);
    let http = hyper::client::conn::http1::Builder::new();
    let sender = match &run.tls {
        None => {
            let (sender, conn) = http
                .handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            sender
        }
        Some((tls, name)) => {
            let stream = tls
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| format!("TLS: {e}"))?;
            let (sender, conn) = http
                .handshake(TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            sender
        }
    };
    Ok(sender)
}

/// One request: its sample, or why it failed.
async fn request(run: &Run, sender: &mut Sender, i: usize) -> Result<Sample, String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let req = Request::get(run.uri.clone())
        .header(HOST, &run.authority)
        .header(ACCEPT, "text/event-stream")
        .header("x-key", format!("k{}", i % 10_000))
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let head = t0.elapsed();
    let status = res.status();
    let mut body = res.into_body();
    let (mut first, mut events, mut prev) = (None, 0usize, 0u8);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        let Some(data) = frame.data_ref().filter(|d| !d.is_empty()) else {
            continue;
        };
        first.get_or_insert_with(|| t0.elapsed());
        // An SSE event ends with a blank line: count "\n\n", across frames.
        for &b in data.iter() {
            if b == b'\n' && prev == b'\n' {
                events += 1;
                prev = 0;
            } else {
                prev = b;
            }
        }
    }
    let total = t0.elapsed();
    if status != StatusCode::OK {
        return Err(format!("status {status}"));
    }
    if run.expect.is_some_and(|k| k != events) {
        return Err(format!("{events} events"));
    }
    Ok(Sample {
        head,
        first: first.ok_or("an empty body")?,
        total,
    })
}

type Outcome = (Vec<Sample>, usize, Option<Instant>, Option<Instant>);

async fn connection(run: Arc<Run>, me: usize, of: usize) -> Result<Outcome, String> {
    let mut sender = open(&run).await?;
    let warm = request(&run, &mut sender, me)
        .await
        .map_err(|e| format!("warm-up: {e}"))?;
    run.warm
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(warm.total);
    run.barrier.wait().await;
    let stagger = {
        let mut w = run
            .warm
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        w.sort();
        w[w.len() / 2] / u32::try_from(of).unwrap_or(u32::MAX)
    };
    tokio::time::sleep(stagger * u32::try_from(me).unwrap_or(u32::MAX)).await;
    let (mut samples, mut bad, mut first, mut last) = (Vec::new(), 0, None, None);
    loop {
        let i = run.next.fetch_add(1, Ordering::Relaxed);
        if i >= run.requests {
            break;
        }
        first.get_or_insert_with(Instant::now);
        match request(&run, &mut sender, i).await {
            Ok(s) => samples.push(s),
            Err(e) => {
                bad += 1;
                if bad <= 3 {
                    eprintln!("request {i}: {e}");
                }
                if sender.is_closed() {
                    sender = open(&run).await?;
                }
            }
        }
        last = Some(Instant::now());
    }
    Ok((samples, bad, first, last))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The nearest-rank percentile `p` (0..=100) of sorted durations, in ms.
fn pct(sorted: &[Duration], p: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    ms(sorted[rank.min(sorted.len()) - 1])
}

#[allow(clippy::print_stdout)] // its output is the point
fn report(samples: &[Sample], bad: usize, span: (Option<Instant>, Option<Instant>)) {
    let sorted = |f: fn(&Sample) -> Duration| {
        let mut v: Vec<Duration> = samples.iter().map(f).collect();
        v.sort();
        v
    };
    let (head, first, total) = (sorted(|s| s.head), sorted(|s| s.first), sorted(|s| s.total));
    let n = samples.len() + bad;
    let secs = match span {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    #[allow(clippy::cast_precision_loss)]
    let rps = if secs > 0.0 { n as f64 / secs } else { 0.0 };
    println!(
        "n={n} bad={bad} rps={rps:.1} head_p50={:.3} head_p99={:.3} p50={:.3} p90={:.3} p99={:.3} \
         max={:.3} total_p50={:.3} total_p99={:.3} (ms; p50..max: the body's first byte)",
        pct(&head, 50),
        pct(&head, 99),
        pct(&first, 50),
        pct(&first, 90),
        pct(&first, 99),
        pct(&first, 100),
        pct(&total, 50),
        pct(&total, 99),
    );
}
