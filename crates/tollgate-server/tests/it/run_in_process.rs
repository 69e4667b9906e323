//! `server::run` is a library function: listeners bound by the caller on
//! `127.0.0.1:0`, a shutdown future, a config. This drives it in process,
//! the way an embedding program (or `main`) does.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate_server::config::Config;
use tollgate_server::doors::Door;
use tollgate_server::server::{Listeners, run};

const CONFIG: &str =
    "[[rules]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 1\nperiod = \"1h\"\n";

async fn post(addr: std::net::SocketAddr, body: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /v1/check HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_until_shutdown_then_returns() {
    let config = Config::parse(CONFIG, "inline.toml").expect("config");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(run(
        Listeners::default().with(Door::Api, listener),
        async {
            let _ = stopped.await;
        },
        config,
    ));

    let first = post(addr, r#"{"rule":"r","key":"k"}"#).await;
    assert!(first.starts_with("HTTP/1.1 200 "), "{first}");
    let second = post(addr, r#"{"rule":"r","key":"k"}"#).await;
    assert!(second.starts_with("HTTP/1.1 429 "), "{second}");

    stop.send(()).expect("signal shutdown");
    let result = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("run returned after shutdown")
        .expect("no panic");
    assert_eq!(result, Ok(()));
    assert!(TcpStream::connect(addr).await.is_err(), "still listening");
}

#[tokio::test]
async fn run_refuses_nothing_to_serve_and_a_proxy_without_upstream() {
    let config = Config::parse(CONFIG, "inline.toml").expect("config");
    let err = run(Listeners::default(), async {}, config.clone())
        .await
        .expect_err("no listeners");
    assert!(err.contains("nothing to serve"), "{err}");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let err = run(
        Listeners::default().with(Door::Proxy, listener),
        async {},
        config,
    )
    .await
    .expect_err("no upstream");
    assert!(err.contains("needs an upstream"), "{err}");
}

/// `serve_with` puts a service of the caller's behind the same connection
/// handling: it answers (here with `read_body`'s 413 past the cap, and the
/// body it read otherwise), and returns once the shutdown future resolves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_serves_a_callers_service_until_shutdown() {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::Full;
    use tollgate_server::doors::api::{MAX_BODY, read_body};
    use tollgate_server::server::serve_with;

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_with(
        listener,
        "test door",
        tollgate_server::server::SEND_TIMEOUT,
        async {
            let _ = stopped.await;
        },
        |_peer| {
            hyper::service::service_fn(|req| async move {
                Ok::<_, Infallible>(match read_body(req).await {
                    Ok(body) => {
                        let mut echo = b"read ".to_vec();
                        echo.extend_from_slice(&body);
                        http::Response::new(Full::new(Bytes::from(echo)))
                    }
                    Err(res) => res,
                })
            })
        },
    ));

    let echoed = post(addr, "hello").await;
    assert!(echoed.starts_with("HTTP/1.1 200 "), "{echoed}");
    assert!(echoed.ends_with("\r\n\r\nread hello"), "{echoed}");
    let too_big = post(addr, &"x".repeat(MAX_BODY + 1)).await;
    assert!(too_big.starts_with("HTTP/1.1 413 "), "{too_big}");

    stop.send(()).expect("signal shutdown");
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("serve_with returned after shutdown")
        .expect("no panic");
    assert!(TcpStream::connect(addr).await.is_err(), "still listening");
}
