//! The layer through tower alone: one limit for every clone, readiness,
//! 429 / headers / problem+json, all-or-nothing rules, missing keys and the
//! store failure policies.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::header::RETRY_AFTER;
use http::{Request, Response, StatusCode};
use tollgate::OnError;
use tollgate::{Algorithm, Limiter};
use tollgate_tower::extract::MissingKey;
use tollgate_tower::headers::{HeaderOptions, X_RATELIMIT_REMAINING};
use tollgate_tower::{BuildError, HttpVerdict, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

use crate::support::down::{FailingStore, HungStore};
use crate::support::{
    self, get, limiter, member, members, ok_service, peek, problem_body, rule, send,
};

const HOUR: Duration = Duration::from_secs(3600);

fn key(name: &str) -> tollgate_tower::key::KeyExtractor {
    name.parse().expect("key extractor")
}

#[tokio::test]
async fn clones_share_one_limit() {
    let (limiter, _clock) = limiter([rule("per_key", Algorithm::Gcra, 5, HOUR)]);
    let calls = Arc::new(AtomicUsize::new(0));
    let layer =
        RateLimitLayer::new(limiter, [("per_key", key("header:x-api-key"))]).expect("layer");
    let svc = layer.layer(ok_service(calls.clone()));
    // Ten clones of the service (and one of the layer), three requests each,
    // all at once: the limit is the limiter's, not the clone's.
    let mut clones: Vec<_> = (0..9).map(|_| svc.clone()).collect();
    clones.push(layer.clone().layer(ok_service(calls.clone())));
    let mut tasks = Vec::new();
    for clone in clones {
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..3 {
                let req = Request::get("/")
                    .header("x-api-key", "alice")
                    .body(String::new())
                    .expect("request");
                if send(&clone, req).await.status() == StatusCode::OK {
                    admitted += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("task");
    }
    assert_eq!(admitted, 5);
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

/// An inner service that is ready only when `gate` is open, and panics when
/// called without having been polled ready (tower's contract). A clone
/// starts not ready.
struct Gated {
    gate: Arc<AtomicBool>,
    polled_ready: bool,
}

impl Clone for Gated {
    fn clone(&self) -> Self {
        Self {
            gate: self.gate.clone(),
            polled_ready: false,
        }
    }
}

impl Service<Request<String>> for Gated {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.gate.load(Ordering::SeqCst) {
            self.polled_ready = true;
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    fn call(&mut self, _req: Request<String>) -> Self::Future {
        assert!(self.polled_ready, "called without poll_ready");
        self.polled_ready = false;
        std::future::ready(Ok(Response::new(String::new())))
    }
}

fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[tokio::test]
async fn a_limited_request_is_answered_without_waiting_for_the_inner_service() {
    let (limiter, _clock) = limiter([rule("r", Algorithm::Gcra, 1, HOUR)]);
    let gate = Arc::new(AtomicBool::new(false));
    let mut svc = RateLimitLayer::new(limiter, [("r", key("path"))])
        .expect("layer")
        .layer(Gated {
            gate: gate.clone(),
            polled_ready: false,
        });
    let mut cx = Context::from_waker(Waker::noop());
    // The check comes first: the layer is ready while the inner is not.
    assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    let mut admitted = svc.call(Request::new(String::new()));
    // Admitted, so it waits for the inner service to be ready...
    assert!(poll_once(Pin::new(&mut admitted)).is_pending());
    // ...while a request over the limit is answered at once.
    assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    let mut limited = svc.call(Request::new(String::new()));
    let Poll::Ready(Ok(second)) = poll_once(Pin::new(&mut limited)) else {
        panic!("a 429 does not wait for the inner service");
    };
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    // Once the inner is ready, the admitted one is called (`Gated` panics
    // if called without having been polled ready).
    gate.store(true, Ordering::SeqCst);
    let Poll::Ready(Ok(first)) = poll_once(Pin::new(&mut admitted)) else {
        panic!("the inner service is ready");
    };
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().contains_key("ratelimit"));
}

#[tokio::test]
async fn a_denial_is_429_with_headers_retry_after_and_problem_json() {
    // GCRA 4 per 10 s: T = 2.5 s, so the first denial waits 2.5 s.
    let (limiter, clock) = limiter([rule("per_key", Algorithm::Gcra, 4, Duration::from_secs(10))]);
    let svc = RateLimitLayer::new(limiter, [("per_key", key("header:x-api-key"))])
        .expect("layer")
        .layer(ok_service(Arc::default()));
    let req = || {
        Request::get("/")
            .header("x-api-key", "alice")
            .body(String::new())
            .expect("request")
    };

    let first = send(&svc, req()).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.body(), "ok");
    assert_eq!(
        members(&first.headers()["ratelimit-policy"]),
        [member("per_key", &[("q", 4), ("w", 10)])]
    );
    // 3 left; back to full in 2.5 s, rounded up.
    assert_eq!(
        members(&first.headers()["ratelimit"]),
        [member("per_key", &[("r", 3), ("t", 3)])]
    );
    assert!(!first.headers().contains_key(RETRY_AFTER));

    for _ in 0..3 {
        assert_eq!(send(&svc, req()).await.status(), StatusCode::OK);
    }
    let denied = send(&svc, req()).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // 2.5 s, rounded up to whole seconds.
    assert_eq!(denied.headers()[RETRY_AFTER], "3");
    assert_eq!(
        members(&denied.headers()["ratelimit-policy"]),
        [member("per_key", &[("q", 4), ("w", 10)])]
    );
    assert_eq!(
        members(&denied.headers()["ratelimit"]),
        [member("per_key", &[("r", 0), ("t", 10)])]
    );
    let body = problem_body(&denied);
    assert_eq!(body["type"], "https://tollgate.dev/problems/quota-exceeded");
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated"], serde_json::json!(["per_key"]));
    let detail = body["detail"].as_str().expect("detail");
    assert!(
        detail.contains("per_key") && detail.contains("3 seconds"),
        "{detail}"
    );

    // The wait is exact: 1 ms early is still denied, on time is admitted.
    clock.advance(Duration::from_millis(2499));
    let early = send(&svc, req()).await;
    assert_eq!(early.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(early.headers()[RETRY_AFTER], "1", "at least 1 second");
    clock.advance(Duration::from_millis(1));
    assert_eq!(send(&svc, req()).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn legacy_headers_when_asked() {
    let (limiter, _clock) = limiter([rule("r", Algorithm::FixedWindow, 3, HOUR)]);
    let svc = RateLimitLayer::new(limiter, [("r", key("method"))])
        .expect("layer")
        .with_header_options(HeaderOptions { legacy: true })
        .layer(ok_service(Arc::default()));
    let r = send(&svc, Request::new(String::new())).await;
    assert_eq!(r.headers()[X_RATELIMIT_REMAINING], "2");
    assert!(r.headers().contains_key("x-ratelimit-limit"));
    assert!(r.headers().contains_key("x-ratelimit-reset"));
}

#[tokio::test]
async fn several_rules_are_all_or_nothing() {
    let (limiter, _clock) = limiter([
        rule("per_key", Algorithm::Gcra, 10, HOUR),
        rule("per_path", Algorithm::SlidingLog, 1, HOUR),
    ]);
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::new(
        limiter.clone(),
        [
            ("per_key", key("header:x-api-key")),
            ("per_path", key("path")),
        ],
    )
    .expect("layer")
    .layer(ok_service(calls.clone()));
    let req = |path: &str| {
        Request::get(path)
            .header("x-api-key", "k")
            .body(String::new())
            .expect("request")
    };

    let ok = send(&svc, req("/a")).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(
        members(&ok.headers()["ratelimit"]),
        [
            member("per_key", &[("r", 9), ("t", 360)]),
            member("per_path", &[("r", 0), ("t", 3600)]),
        ]
    );
    assert_eq!(peek(&limiter, "per_key", "k").await.remaining, 9);

    // per_path denies: per_key consumes nothing, however often.
    for _ in 0..3 {
        let denied = send(&svc, req("/a")).await;
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            problem_body(&denied)["violated"],
            serde_json::json!(["per_path"])
        );
        // One member per rule, the admitting one included.
        let names: Vec<_> = members(&denied.headers()["ratelimit-policy"])
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(names, ["per_key", "per_path"]);
        assert_eq!(denied.headers()[RETRY_AFTER], "3600");
    }
    assert_eq!(peek(&limiter, "per_key", "k").await.remaining, 9);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Another path is another per_path bucket; per_key goes on from 9.
    assert_eq!(send(&svc, req("/b")).await.status(), StatusCode::OK);
    assert_eq!(peek(&limiter, "per_key", "k").await.remaining, 8);
}

#[tokio::test]
async fn a_missing_header_keys_by_the_empty_value_by_default() {
    let (limiter, _clock) = limiter([rule("per_key", Algorithm::Gcra, 1, HOUR)]);
    let svc = RateLimitLayer::new(limiter.clone(), [("per_key", key("header:x-api-key"))])
        .expect("layer")
        .layer(ok_service(Arc::default()));
    let bare = || Request::new(String::new());
    assert_eq!(send(&svc, bare()).await.status(), StatusCode::OK);
    // Every request without the header shares the "" bucket...
    assert_eq!(
        send(&svc, bare()).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(peek(&limiter, "per_key", "").await.remaining, 0);
    // ...and one with a key has its own.
    let keyed = Request::get("/")
        .header("x-api-key", "k")
        .body(String::new())
        .expect("request");
    assert_eq!(send(&svc, keyed).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn missing_key_reject_answers_400_and_consumes_nothing() {
    let (limiter, _clock) = limiter([
        rule("per_path", Algorithm::Gcra, 5, HOUR),
        rule("per_key", Algorithm::Gcra, 5, HOUR),
    ]);
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::new(
        limiter.clone(),
        [
            ("per_path", key("path")),
            ("per_key", key("header:x-api-key")),
        ],
    )
    .expect("layer")
    .with_missing_key(MissingKey::Reject)
    .layer(ok_service(calls.clone()));
    for req in [
        Request::get("/p").body(String::new()),
        Request::get("/p")
            .header("x-api-key", "")
            .body(String::new()),
    ] {
        let r = send(&svc, req.expect("request")).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let body = problem_body(&r);
        assert_eq!(body["type"], "https://tollgate.dev/problems/missing-key");
        assert_eq!(body["status"], 400);
        let detail = body["detail"].as_str().expect("detail");
        assert!(
            detail.contains("x-api-key") && detail.contains("per_key"),
            "{detail}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(peek(&limiter, "per_path", "/p").await.remaining, 5);
    let ok = Request::get("/p")
        .header("x-api-key", "k")
        .body(String::new())
        .expect("request");
    assert_eq!(send(&svc, ok).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn missing_key_skip_leaves_the_rule_out() {
    let (limiter, _clock) = limiter([
        rule("per_path", Algorithm::Gcra, 5, HOUR),
        rule("per_key", Algorithm::Gcra, 5, HOUR),
    ]);
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::new(
        limiter.clone(),
        [
            ("per_path", key("path")),
            ("per_key", key("header:x-api-key")),
        ],
    )
    .expect("layer")
    .with_missing_key(MissingKey::Skip)
    .layer(ok_service(calls.clone()));
    // No key header: only `per_path` is checked, and the headers say so.
    let r = send(&svc, Request::get("/p").body(String::new()).expect("req")).await;
    assert_eq!(r.status(), StatusCode::OK);
    let names: Vec<String> = members(&r.headers()["ratelimit"])
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, ["per_path"]);
    assert_eq!(peek(&limiter, "per_path", "/p").await.remaining, 4);
    assert_eq!(peek(&limiter, "per_key", "").await.remaining, 5);
    // A key header: both rules.
    let keyed = Request::get("/p")
        .header("x-api-key", "k")
        .body(String::new())
        .expect("request");
    assert_eq!(send(&svc, keyed).await.status(), StatusCode::OK);
    assert_eq!(peek(&limiter, "per_key", "k").await.remaining, 4);
    // Every rule skipped: admitted unchecked, no RateLimit headers.
    let svc = RateLimitLayer::new(limiter.clone(), [("per_key", key("header:x-api-key"))])
        .expect("layer")
        .with_missing_key(MissingKey::Skip)
        .layer(ok_service(calls.clone()));
    let r = send(&svc, Request::get("/").body(String::new()).expect("req")).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(!r.headers().contains_key("ratelimit"));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_key_over_the_size_limit_is_counted_under_its_digest() {
    // Refusing it would let a long header value past every limit of a
    // service that passes errors on; it is limited as any other key.
    let (limiter, _clock) = limiter([rule("per_key", Algorithm::Gcra, 2, HOUR)]);
    let svc = RateLimitLayer::new(limiter, [("per_key", key("header:x-api-key"))])
        .expect("layer")
        .layer(ok_service(Arc::default()));
    let long = "k".repeat(tollgate::limits::MAX_KEY_LEN + 1);
    let other = format!("{}j", "k".repeat(tollgate::limits::MAX_KEY_LEN));
    let mut statuses = Vec::new();
    for value in [&long, &long, &long, &other] {
        let r = send(
            &svc,
            Request::get("/")
                .header("x-api-key", value.as_str())
                .body(String::new())
                .expect("request"),
        )
        .await;
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 200]);
}

#[tokio::test]
async fn client_ip_without_a_peer_address_is_a_500_not_a_shared_bucket() {
    let (limiter, _clock) = limiter([rule("per_ip", Algorithm::Gcra, 5, HOUR)]);
    let layer =
        RateLimitLayer::new(limiter.clone(), [("per_ip", key("client_ip"))]).expect("layer");
    let svc = layer.clone().layer(ok_service(Arc::default()));
    let r = send(&svc, Request::new(String::new())).await;
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        problem_body(&r)["detail"]
            .as_str()
            .expect("detail")
            .contains("peer address")
    );

    // PeerAddr (or a bare SocketAddr) extension by default...
    let r = send(
        &svc,
        get("/", "192.0.2.1:5000").body(String::new()).expect("r"),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let bare = Request::get("/")
        .extension(
            "192.0.2.1:5001"
                .parse::<std::net::SocketAddr>()
                .expect("addr"),
        )
        .body(String::new())
        .expect("request");
    assert_eq!(send(&svc, bare).await.status(), StatusCode::OK);
    assert_eq!(peek(&limiter, "per_ip", "192.0.2.1").await.remaining, 3);

    // ...or wherever `with_peer_addr` looks (axum's ConnectInfo, say).
    #[derive(Clone)]
    struct MyConnInfo(std::net::SocketAddr);
    let svc = layer
        .with_peer_addr(|ext| ext.get::<MyConnInfo>().map(|c| c.0))
        .layer(ok_service(Arc::default()));
    let req = Request::get("/")
        .extension(MyConnInfo("198.51.100.1:1".parse().expect("addr")))
        .body(String::new())
        .expect("request");
    assert_eq!(send(&svc, req).await.status(), StatusCode::OK);
    assert_eq!(peek(&limiter, "per_ip", "198.51.100.1").await.remaining, 4);
}

fn failing_layer() -> RateLimitLayer<FailingStore> {
    let limiter =
        Limiter::new(FailingStore, [rule("r", Algorithm::Gcra, 5, HOUR)]).expect("limiter");
    RateLimitLayer::new(Arc::new(limiter), [("r", key("path"))]).expect("layer")
}

#[tokio::test]
async fn store_failure_allow_passes_with_the_degraded_header() {
    let calls = Arc::new(AtomicUsize::new(0));
    // Allow is the default.
    let layer = failing_layer();
    assert_eq!(layer.on_error(), Some(OnError::Allow));
    let svc = layer.layer(ok_service(calls.clone()));
    let r = send(&svc, Request::new(String::new())).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.body(), "ok");
    assert_eq!(r.headers()["tollgate-degraded"], "store-unavailable");
    // The quota is known, what remains is not.
    assert!(!r.headers().contains_key("ratelimit"));
    assert_eq!(r.headers()["ratelimit-policy"], "\"r\";q=5;w=3600");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn store_failure_deny_is_503_with_retry_after_1() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = failing_layer()
        .with_on_error(OnError::Deny)
        .layer(ok_service(calls.clone()));
    let r = send(&svc, Request::new(String::new())).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()[RETRY_AFTER], "1");
    let body = problem_body(&r);
    assert_eq!(
        body["type"],
        "https://tollgate.dev/problems/store-unavailable"
    );
    assert_eq!(body["status"], 503);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn store_failure_local_decides_with_the_in_process_share() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = failing_layer()
        .with_on_error(OnError::Local)
        .layer(ok_service(calls.clone()));
    // One replica (no heartbeat from a test double): the whole quota of 5.
    for remaining in (0..5).rev() {
        let r = send(&svc, Request::new(String::new())).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["tollgate-degraded"], "local");
        let ratelimit = r.headers()["ratelimit"].to_str().expect("ascii");
        assert!(
            ratelimit.starts_with(&format!("\"r\";r={remaining};")),
            "{ratelimit}"
        );
    }
    let r = send(&svc, Request::new(String::new())).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["tollgate-degraded"], "local");
    assert!(r.headers().contains_key(RETRY_AFTER));
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

/// Over a `ResilientLimiter`, each rule's own policy answers, within the
/// store timeout; once the breaker is open, at once. On tokio's paused
/// clock (the store never answers, nothing else is waited on): the times
/// asserted are the timers' own, not how fast a loaded machine ran.
#[tokio::test(start_paused = true)]
async fn a_resilient_layer_applies_each_rules_policy_within_the_timeout() {
    let limiter = Limiter::new(
        HungStore,
        [
            rule("strict", Algorithm::Gcra, 5, HOUR),
            rule("open", Algorithm::Gcra, 5, HOUR),
        ],
    )
    .expect("limiter");
    let limiter = tollgate::ResilientLimiter::builder(limiter)
        .timeout(Duration::from_millis(100))
        .rule_on_error("strict", tollgate::OnError::Deny)
        // Its cool-down runs on the real clock: open for the whole test.
        .breaker(5, HOUR)
        .build()
        .expect("resilient");
    let limiter = Arc::new(limiter);
    let calls = Arc::new(AtomicUsize::new(0));
    let strict = RateLimitLayer::resilient(limiter.clone(), [("strict", key("path"))])
        .expect("layer")
        .layer(ok_service(calls.clone()));
    let open = RateLimitLayer::resilient(limiter.clone(), [("open", key("path"))])
        .expect("layer")
        .layer(ok_service(calls.clone()));
    for i in 0..8 {
        let start = tokio::time::Instant::now();
        let r = send(&strict, Request::new(String::new())).await;
        let took = start.elapsed();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[RETRY_AFTER], "1");
        assert!(took < Duration::from_millis(250), "check {i} took {took:?}");
        let r = send(&open, Request::new(String::new())).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["tollgate-degraded"], "store-unavailable");
    }
    assert!(limiter.breaker_open());
    let start = tokio::time::Instant::now();
    let r = send(&strict, Request::new(String::new())).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        start.elapsed() < Duration::from_millis(50),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 8);
}

#[tokio::test]
async fn decide_is_what_the_service_does() {
    let (limiter, _clock) = limiter([rule("r", Algorithm::Gcra, 1, HOUR)]);
    let layer = RateLimitLayer::new(limiter, [("r", key("path"))]).expect("layer");
    let req = Request::get("/x").body(()).expect("request");
    let HttpVerdict::Admit {
        headers, decision, ..
    } = layer.decide(&req).await
    else {
        panic!("first request admitted");
    };
    assert_eq!(headers["ratelimit"], "\"r\";r=0;t=3600");
    assert_eq!(decision.expect("decided").decisions[0].remaining, 0);
    let mut response = Response::new(());
    response
        .headers_mut()
        .insert("ratelimit", "stale".parse().expect("v"));
    response.headers_mut().extend(headers);
    assert_eq!(response.headers()["ratelimit"], "\"r\";r=0;t=3600");
    match layer.decide(&req).await {
        HttpVerdict::Respond {
            response, decision, ..
        } => {
            assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(response.headers()[RETRY_AFTER], "3600");
            assert!(!decision.expect("decided").allowed);
        }
        other => panic!("second request denied, got {other:?}"),
    }
}

#[test]
fn a_layer_with_bad_rules_cannot_be_built() {
    let (limiter, _clock) = limiter([rule("a", Algorithm::Gcra, 1, HOUR)]);
    let none: [(&str, _); 0] = [];
    assert_eq!(
        RateLimitLayer::new(limiter.clone(), none).expect_err("no rules"),
        BuildError::NoRules
    );
    assert_eq!(
        RateLimitLayer::new(limiter.clone(), [("b", key("path"))]).expect_err("unknown"),
        BuildError::UnknownRule("b".into())
    );
    assert_eq!(
        RateLimitLayer::new(limiter, [("a", key("path")), ("a", key("method"))])
            .expect_err("twice"),
        BuildError::DuplicateRule("a".into())
    );
}

#[tokio::test]
async fn the_service_is_ready_at_once_when_limited() {
    let (limiter, _clock) = limiter([rule("r", Algorithm::Gcra, 1, HOUR)]);
    let mut svc = RateLimitLayer::new(limiter, [("r", key("path"))])
        .expect("layer")
        .layer(ok_service(Arc::default()));
    for expected in [
        StatusCode::OK,
        StatusCode::TOO_MANY_REQUESTS,
        StatusCode::TOO_MANY_REQUESTS,
    ] {
        let ready = tokio::time::timeout(Duration::from_secs(5), svc.ready())
            .await
            .expect("ready at once")
            .expect("infallible");
        let r = ready
            .call(Request::new(String::new()))
            .await
            .expect("infallible");
        assert_eq!(r.status(), expected);
    }
}

/// The field lines of `name`, joined as one list (RFC 9110 §5.3).
fn joined(r: &Response<String>, name: &str) -> Vec<support::Member> {
    r.headers()
        .get_all(name)
        .iter()
        .flat_map(support::members)
        .collect()
}

/// A layer inside another (a route's limit under a global one): each
/// answer shows both rules' members, and the inner layer's 429 keeps its
/// `Retry-After` and the denying rule's state.
#[tokio::test]
async fn stacked_layers_show_every_rule() {
    let (limiter, _clock) = limiter([
        rule("global", Algorithm::FixedWindow, 100, HOUR),
        rule("login", Algorithm::FixedWindow, 1, HOUR),
    ]);
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = RateLimitLayer::new(limiter.clone(), [("login", key("path"))]).expect("layer");
    let outer = RateLimitLayer::new(limiter, [("global", key("path"))]).expect("layer");
    let svc = outer.layer(inner.layer(ok_service(calls.clone())));

    let r = send(&svc, Request::new(String::new())).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        joined(&r, "ratelimit"),
        [
            member("login", &[("r", 0), ("t", 3600)]),
            member("global", &[("r", 99), ("t", 3600)]),
        ]
    );
    let r = send(&svc, Request::new(String::new())).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        joined(&r, "ratelimit-policy"),
        [
            member("login", &[("q", 1), ("w", 3600)]),
            member("global", &[("q", 100), ("w", 3600)]),
        ]
    );
    assert_eq!(
        joined(&r, "ratelimit"),
        [
            member("login", &[("r", 0), ("t", 3600)]),
            member("global", &[("r", 98), ("t", 3600)]),
        ]
    );
    assert_eq!(r.headers()[RETRY_AFTER], "3600");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A `path` key is the path as the upstream resolves it: another spelling
/// of a path that used its quota is not a new bucket.
#[tokio::test]
async fn spellings_of_a_path_share_its_bucket() {
    let (limiter, _clock) = limiter([rule("per_path", Algorithm::FixedWindow, 1, HOUR)]);
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::new(limiter, [("per_path", key("path"))])
        .expect("layer")
        .layer(ok_service(calls.clone()));
    let at = |path: &str| Request::get(path).body(String::new()).expect("request");
    assert_eq!(send(&svc, at("/login")).await.status(), StatusCode::OK);
    for other in [
        "/%6cogin",
        "//login",
        "/./login",
        "/x/../login",
        "/login?next=/",
    ] {
        assert_eq!(
            send(&svc, at(other)).await.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{other}"
        );
    }
    // A different path is a different bucket.
    assert_eq!(send(&svc, at("/login/")).await.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
