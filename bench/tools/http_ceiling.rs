//! The HTTP ceiling of a check, for `bench/http.sh`: `POST /v1/check`
//! served by tollgate's own connection handling ([`serve_with`], as
//! `tollgate serve` serves it), reading the body as the API does
//! ([`read_body`]), and answering every request with the same bytes an
//! admitted check of `bench/http/rules.toml`'s `open` rule gets (status,
//! `Content-Type`, `RateLimit-Policy`, `RateLimit`, JSON body), built once.
//! No JSON parsing, no decision, no header formatting, no metrics: what is
//! left is what any check costs over HTTP/1.1 on this stack, so
//! `memory-store checks/s ÷ this` is how close the check path comes to
//! its own ceiling, and `this ÷ GET /healthz` how much a POST with a body
//! and a check-sized answer costs over the no-op GET.
//!
//! ```sh
//! cargo run --release -p tollgate-server --example http_ceiling -- 127.0.0.1:0
//! ```
//!
//! It prints `listening on http://ADDR` to standard error and serves until
//! interrupted (SIGINT; SIGTERM ends it at once).

use std::convert::Infallible;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tollgate_http::headers::{RATELIMIT, RATELIMIT_POLICY};
use tollgate_server::doors::api::read_body;
use tollgate_server::server::serve_with;

/// The allocator `tollgate serve` runs with, so the comparison is fair.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An admitted check's answer body for the `open` rule (1,000,000 per 1 s).
const BODY: &[u8] = b"{\"allowed\":true,\"rule\":\"open\",\"limit\":1000000,\"remaining\":999999,\
\"reset_after_ms\":1,\"retry_after_ms\":null}\n";

/// The constant answer: what `tollgate serve` sends for such a check.
fn answer() -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from_static(BODY)));
    let headers = res.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        RATELIMIT_POLICY,
        HeaderValue::from_static("\"open\";q=1000000;w=1"),
    );
    headers.insert(RATELIMIT, HeaderValue::from_static("\"open\";r=999999;t=1"));
    res
}

async fn handle(req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.uri().path() != "/v1/check" || req.method() != http::Method::POST {
        let mut res = Response::new(Full::new(Bytes::from_static(b"POST /v1/check only\n")));
        *res.status_mut() = StatusCode::NOT_FOUND;
        return res;
    }
    match read_body(req).await {
        Ok(_) => answer(),
        Err(res) => res,
    }
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".to_owned());
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("listening on http://{local}");
    serve_with(
        listener,
        "HTTP ceiling",
        tollgate_server::server::SEND_TIMEOUT,
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
        |_peer| {
            hyper::service::service_fn(|req| async move { Ok::<_, Infallible>(handle(req).await) })
        },
    )
    .await;
    Ok(())
}
