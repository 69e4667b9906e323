//! Rules that hold something past the answer, through the layer: a cost
//! read from the response (reserved on arrival, settled once when the body
//! ends: from the head, from the trailers, at the estimate when missing or
//! when the body is dropped) and `concurrency` leases held while the body
//! streams, renewed past their lease, released at its end.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tollgate::{Algorithm, Limiter, MemoryStore, Store, TokioClock};
use tollgate_tower::RateLimitLayer;
use tollgate_tower::cost::ResponseCost;
use tollgate_tower::usage::UsageBody;
use tower::{Layer, Service, ServiceExt, service_fn};

use crate::support::{limiter, peek, rule};

const HOUR: Duration = Duration::from_secs(3600);

/// A response body: all at once, or frames from a channel the test feeds
/// (a stream the test ends or abandons).
enum TestBody {
    Full(Option<Bytes>),
    Stream(mpsc::UnboundedReceiver<Frame<Bytes>>),
}

impl From<String> for TestBody {
    fn from(s: String) -> Self {
        TestBody::Full(Some(Bytes::from(s)))
    }
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            TestBody::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            TestBody::Stream(rx) => rx.poll_recv(cx).map(|f| f.map(Ok)),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, TestBody::Full(None))
    }
}

/// What the inner service answers next: each request takes the front one.
type Script = Arc<Mutex<Vec<Response<TestBody>>>>;

fn service(
    script: Script,
) -> impl Service<Request<String>, Response = Response<TestBody>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    service_fn(move |_req: Request<String>| {
        let next = script.lock().expect("script").remove(0);
        async move { Ok::<_, Infallible>(next) }
    })
}

/// A response of `body` with `usage` in its head, if given.
fn full(usage: Option<&str>, body: &str) -> Response<TestBody> {
    let mut r = Response::new(TestBody::from(body.to_owned()));
    if let Some(u) = usage {
        r.headers_mut()
            .insert("x-usage-tokens", u.parse().expect("value"));
    }
    r
}

/// A streamed response, fed through the returned sender.
fn streamed(usage: Option<&str>) -> (Response<TestBody>, mpsc::UnboundedSender<Frame<Bytes>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut r = Response::new(TestBody::Stream(rx));
    if let Some(u) = usage {
        r.headers_mut()
            .insert("x-usage-tokens", u.parse().expect("value"));
    }
    (r, tx)
}

fn req(team: &str) -> Request<String> {
    Request::get("/v1/chat")
        .header("x-team", team)
        .body(String::new())
        .expect("request")
}

fn tokens(estimate: u64) -> ResponseCost {
    ResponseCost::new(
        "response_header:x-usage-tokens".parse().expect("source"),
        estimate,
    )
    .expect("cost")
}

async fn call<S>(svc: &S, r: Request<String>) -> Response<UsageBody<TestBody>>
where
    S: Service<Request<String>, Response = Response<UsageBody<TestBody>>, Error = Infallible>
        + Clone,
{
    match svc.clone().oneshot(r).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// Waits (up to 5 s) until `rule`/`key` has `remaining` left: the settle
/// runs on its own task after the body ends.
async fn settles_to<S: Store>(limiter: &Limiter<S>, rule: &str, key: &str, remaining: u64) {
    let start = Instant::now();
    loop {
        let now = peek(limiter, rule, key).await.remaining;
        if now == remaining {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{rule}/{key}: {now} remaining, never {remaining}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A layer over `rules`, each keyed by `x-team`, `tpm` charged from the
/// response with an estimate of 100.
fn tpm_layer<S: Store>(limiter: Arc<Limiter<S>>, rules: &[&str]) -> RateLimitLayer<S> {
    let keyed = rules
        .iter()
        .map(|r| (*r, "header:x-team".parse().expect("key")));
    let layer = RateLimitLayer::new(limiter, keyed).expect("layer");
    if rules.contains(&"tpm") {
        layer.with_response_cost("tpm", tokens(100)).expect("cost")
    } else {
        layer
    }
}

#[tokio::test]
async fn usage_in_the_head_is_settled_when_the_body_ends() {
    let (limiter, _clock) = limiter([rule("tpm", Algorithm::Gcra, 1000, HOUR)]);
    let script: Script = Arc::new(Mutex::new(vec![full(Some("250"), "hello")]));
    let svc = tpm_layer(limiter.clone(), &["tpm"]).layer(service(script));

    let r = call(&svc, req("a")).await;
    assert_eq!(r.status(), StatusCode::OK);
    // The estimate is what the answer's headers count.
    let rl = r.headers()["ratelimit"].to_str().expect("ascii").to_owned();
    assert!(rl.contains("r=900"), "{rl}");
    // Reserved while the body is unread.
    assert_eq!(peek(&limiter, "tpm", "a").await.remaining, 900);
    let body = r.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(body, "hello");
    settles_to(&limiter, "tpm", "a", 750).await;
}

#[tokio::test]
async fn usage_in_the_trailers_is_read_when_the_head_has_none() {
    let (limiter, _clock) = limiter([rule("tpm", Algorithm::Gcra, 1000, HOUR)]);
    let (response, tx) = streamed(None);
    let script: Script = Arc::new(Mutex::new(vec![response]));
    let svc = tpm_layer(limiter.clone(), &["tpm"]).layer(service(script));

    let r = call(&svc, req("a")).await;
    tx.send(Frame::data(Bytes::from_static(b"tok tok")))
        .expect("send");
    let mut trailers = HeaderMap::new();
    trailers.insert("x-usage-tokens", "40".parse().expect("value"));
    tx.send(Frame::trailers(trailers)).expect("send");
    drop(tx);
    let collected = r.into_body().collect().await.expect("body");
    assert_eq!(
        collected.trailers().expect("trailers")["x-usage-tokens"],
        "40"
    );
    // 40 < 100: 60 of the estimate come back.
    settles_to(&limiter, "tpm", "a", 960).await;
}

#[tokio::test]
async fn missing_or_garbage_usage_settles_at_the_estimate() {
    let (limiter, _clock) = limiter([rule("tpm", Algorithm::Gcra, 1000, HOUR)]);
    let script: Script = Arc::new(Mutex::new(vec![
        full(None, "no usage"),
        full(Some("lots"), "garbage usage"),
        full(Some("-5"), "negative usage"),
    ]));
    let svc = tpm_layer(limiter.clone(), &["tpm"]).layer(service(script));
    for (i, left) in [900, 800, 700].into_iter().enumerate() {
        let r = call(&svc, req("a")).await;
        assert_eq!(r.status(), StatusCode::OK, "response {i}");
        r.into_body().collect().await.expect("body");
        settles_to(&limiter, "tpm", "a", left).await;
    }
    // Settled once each: nothing moves afterwards.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(peek(&limiter, "tpm", "a").await.remaining, 700);
}

#[tokio::test]
async fn a_body_dropped_mid_stream_settles_with_what_is_known() {
    let (limiter, _clock) = limiter([rule("tpm", Algorithm::Gcra, 1000, HOUR)]);
    let (first, tx1) = streamed(None);
    let (second, tx2) = streamed(Some("30"));
    let script: Script = Arc::new(Mutex::new(vec![first, second]));
    let svc = tpm_layer(limiter.clone(), &["tpm"]).layer(service(script));

    // No usage in the head, the client goes away after one chunk: the
    // estimate stays charged.
    let r = call(&svc, req("a")).await;
    tx1.send(Frame::data(Bytes::from_static(b"part")))
        .expect("send");
    let mut body = r.into_body();
    let frame = body.frame().await.expect("a frame").expect("data");
    assert_eq!(frame.into_data().expect("data"), "part");
    drop(body);
    settles_to(&limiter, "tpm", "a", 900).await;

    // Usage in the head: dropped before any frame, it is settled at it.
    let r = call(&svc, req("b")).await;
    drop(r);
    settles_to(&limiter, "tpm", "b", 970).await;
    drop((tx1, tx2));
}

#[tokio::test]
async fn a_lease_is_held_while_the_body_streams_then_released() {
    let (limiter, _clock) = limiter([rule("inflight", Algorithm::Concurrency, 1, HOUR)]);
    let (first, tx) = streamed(None);
    let script: Script = Arc::new(Mutex::new(vec![
        first,
        full(None, "second"),
        full(None, "third"),
    ]));
    let svc = tpm_layer(limiter.clone(), &["inflight"]).layer(service(script));

    let streaming = call(&svc, req("a")).await;
    assert_eq!(streaming.status(), StatusCode::OK);
    tx.send(Frame::data(Bytes::from_static(b"tok")))
        .expect("send");
    // The one slot is held: another request waits its turn (429).
    let denied = call(&svc, req("a")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(peek(&limiter, "inflight", "a").await.remaining, 0);

    drop(tx);
    streaming.into_body().collect().await.expect("body");
    settles_to(&limiter, "inflight", "a", 1).await;
    let admitted = call(&svc, req("a")).await;
    assert_eq!(admitted.status(), StatusCode::OK);
    drop(admitted);
    settles_to(&limiter, "inflight", "a", 1).await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_is_renewed_while_a_stream_outlives_it() {
    // The lease (500 ms) would end by itself early in a 1.5 s stream
    // unless renewed (every 250 ms). Tokio's paused clock drives both the
    // renewals and the store, so a loaded machine's pauses cannot let the
    // lease end between two renewals.
    let lease = Duration::from_millis(500);
    let limiter = Arc::new(
        Limiter::new(
            MemoryStore::builder().clock(TokioClock::new()).build(),
            [rule("inflight", Algorithm::Concurrency, 1, lease)],
        )
        .expect("limiter"),
    );
    let (first, tx) = streamed(None);
    let script: Script = Arc::new(Mutex::new(vec![first, full(None, "after")]));
    let svc = tpm_layer(limiter.clone(), &["inflight"]).layer(service(script));

    let streaming = call(&svc, req("a")).await;
    assert_eq!(streaming.status(), StatusCode::OK);
    let reader = tokio::spawn(async move { streaming.into_body().collect().await });
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        tx.send(Frame::data(Bytes::from_static(b"tok")))
            .expect("send");
        assert_eq!(
            peek(&limiter, "inflight", "a").await.remaining,
            0,
            "the lease was let go while the body streamed"
        );
    }
    drop(tx);
    reader.await.expect("reader").expect("body");
    settles_to(&limiter, "inflight", "a", 1).await;
    let after = call(&svc, req("a")).await;
    assert_eq!(after.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_rule_that_denies_gives_the_lease_back() {
    let (limiter, _clock) = limiter([
        rule("inflight", Algorithm::Concurrency, 5, HOUR),
        rule("tpm", Algorithm::Gcra, 150, HOUR),
    ]);
    let script: Script = Arc::new(Mutex::new(vec![full(Some("100"), "one")]));
    let svc = tpm_layer(limiter.clone(), &["inflight", "tpm"]).layer(service(script));

    let r = call(&svc, req("a")).await;
    assert_eq!(r.status(), StatusCode::OK);
    let policy = r.headers()["ratelimit-policy"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(
        policy.contains("\"inflight\"") && policy.contains("\"tpm\""),
        "{policy}"
    );
    r.into_body().collect().await.expect("body");
    settles_to(&limiter, "tpm", "a", 50).await;
    settles_to(&limiter, "inflight", "a", 5).await;

    // 50 left, the estimate is 100: denied by tpm, after the lease was
    // taken; it is given back before the answer.
    let denied = call(&svc, req("a")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(peek(&limiter, "inflight", "a").await.remaining, 5);
    assert_eq!(peek(&limiter, "tpm", "a").await.remaining, 50);
}

#[tokio::test]
async fn bad_costs_are_refused_when_the_layer_is_built() {
    let (limiter, _clock) = limiter([
        rule("inflight", Algorithm::Concurrency, 5, HOUR),
        rule("tpm", Algorithm::Gcra, 150, HOUR),
    ]);
    let layer = tpm_layer(limiter.clone(), &["inflight"]);
    let e = layer
        .clone()
        .with_response_cost("inflight", tokens(1))
        .expect_err("concurrency");
    assert!(e.to_string().contains("concurrency rule"), "{e}");
    let e = layer
        .with_response_cost("tpm", tokens(1))
        .expect_err("not checked");
    assert!(e.to_string().contains("tpm"), "{e}");
    let layer = RateLimitLayer::new(limiter, [("tpm", "header:x-team".parse().expect("key"))])
        .expect("layer");
    let e = layer
        .with_response_cost("tpm", tokens(151))
        .expect_err("too big");
    assert!(e.to_string().contains("estimate 151"), "{e}");
}

/// The layer sees request heads only: a rule keyed by a JSON body field,
/// or reserving an estimate read from the body, is refused when built
/// instead of keying every request alike (the reverse proxy reads
/// bodies; docs/proxy.md).
#[test]
fn rules_that_read_the_request_body_are_refused() {
    let (limiter, _clock) = limiter([rule("tpm", Algorithm::Gcra, 1000, HOUR)]);
    let err = RateLimitLayer::new(
        limiter.clone(),
        [("tpm", "request_json:/model".parse().expect("key"))],
    )
    .expect_err("a body key");
    assert!(
        matches!(&err, tollgate_tower::BuildError::ReadsBody { rule, .. } if rule == "tpm"),
        "{err}"
    );
    assert!(err.to_string().contains("request_json:/model"), "{err}");
    let err = tpm_layer(limiter, &["tpm"])
        .with_response_cost(
            "tpm",
            tokens(100).with_request_estimate("max_tokens".parse().expect("estimate")),
        )
        .expect_err("an estimate from the body");
    assert!(err.to_string().contains("estimate \"max_tokens\""), "{err}");
}
