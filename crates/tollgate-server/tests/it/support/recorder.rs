//! A stand-in rate limit service that records every `ShouldRateLimit`
//! request and answers `OK`: Envoy pointed at it shows what Envoy itself
//! sends (its descriptors, their `limit` override, `hits_addend`), which
//! tollgate's answers alone cannot.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// The recording service on a free loopback port, in its own thread and
/// runtime; stopped on drop.
pub struct Recorder {
    /// Its gRPC address.
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<RateLimitRequest>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Recording(Arc<Mutex<Vec<RateLimitRequest>>>);

#[tonic::async_trait]
impl RateLimitService for Recording {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        self.0
            .lock()
            .expect("recorder lock")
            .push(request.into_inner());
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok.into(),
            ..RateLimitResponse::default()
        }))
    }
}

impl Recorder {
    /// Starts it.
    pub fn start() -> Recorder {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind recorder");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let service = RateLimitServiceServer::new(Recording(Arc::clone(&seen)));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let incoming = tonic::transport::server::TcpIncoming::from(listener);
                let serve = tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming(incoming);
                // Stopped without draining: Envoy keeps its connection
                // open as long as it runs.
                tokio::select! {
                    _ = serve => {}
                    _ = stopped => {}
                }
            });
        });
        Recorder {
            addr,
            seen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The requests recorded so far.
    pub fn requests(&self) -> Vec<RateLimitRequest> {
        self.seen.lock().expect("recorder lock").clone()
    }

    /// Waits (up to 5 s) until `n` requests are recorded and returns them.
    pub fn wait_for(&self, n: usize) -> Vec<RateLimitRequest> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let seen = self.requests();
            if seen.len() >= n || Instant::now() > deadline {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
