//! A fake model server for the usage tests of the proxy and of Envoy: it
//! reports what each answer "used" in `x-usage-tokens`, as a model server
//! (or a shim before it) does, the amount chosen by the test per request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};

use super::loopback::LoopbackServer;

/// A fake model server: answers every request with `x-usage-tokens` set
/// to the request's `x-want-tokens` (1 when absent), after a short
/// "generation"; counts what it served; stopped on drop.
pub struct ModelServer {
    /// Its address.
    pub addr: SocketAddr,
    served: Arc<AtomicU64>,
    _server: LoopbackServer,
}

impl ModelServer {
    /// Starts it on a free loopback port.
    pub fn start() -> ModelServer {
        let served = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&served);
        let server = LoopbackServer::start(move |stream| {
            let counter = Arc::clone(&counter);
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(
                hyper_util::rt::TokioIo::new(stream),
                hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let usage = req
                        .headers()
                        .get("x-want-tokens")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("1")
                        .to_owned();
                    async move {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        Response::builder()
                            .header("x-usage-tokens", usage.as_str())
                            .body(Full::new(Bytes::from(format!(
                                "{{\"choices\":[{{\"text\":\"...\"}}],\"usage\":{{\"total_tokens\":{usage}}}}}"
                            ))))
                    }
                }),
            ));
        });
        ModelServer {
            addr: server.addr,
            served,
            _server: server,
        }
    }

    /// Requests answered so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::SeqCst)
    }
}
