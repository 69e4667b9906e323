//! A stand-in rate limit service that records every `ShouldRateLimit`
//! request and answers `OK`: Envoy pointed at it shows what Envoy itself
//! sends (its descriptors, their `limit` override, `hits_addend`), which
//! tollgate's answers alone cannot.

use std::net::SocketAddr;

use super::loopback::LoopbackServer;
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
    _server: LoopbackServer,
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
        let seen = Arc::new(Mutex::new(Vec::new()));
        let service = RateLimitServiceServer::new(Recording(Arc::clone(&seen)));
        let server = LoopbackServer::grpc(tonic::transport::Server::builder().add_service(service));
        let addr = server.addr;
        Recorder {
            addr,
            seen,
            _server: server,
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
