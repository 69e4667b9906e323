//! `ShouldRateLimit` as the server reads it: the gRPC body (its length
//! prefixes, arriving in chunks of the first byte's size), the protobuf
//! RateLimitRequest, then the decision over the example Envoy config.
#![no_main]

use std::sync::LazyLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tollgate_fuzz::{RUNTIME, config, envoy, gate};
use tollgate_server::doors::envoy::grpc::fuzzing::read_request;
use tollgate_server::doors::envoy::service::EnvoyService;

static SERVICE: LazyLock<EnvoyService> = LazyLock::new(|| {
    let config = config();
    let limits = envoy(&config);
    EnvoyService::new(gate(&config, &limits), limits)
        .expect("the example service")
        .with_dynamic_metadata(true)
});

/// The server's default bound is 4 MiB; a small one reaches the "too
/// long" path too.
const MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&size, body)) = data.split_first() else {
        return;
    };
    let size = usize::from(size).max(1);
    let chunks: Vec<Bytes> = body.chunks(size).map(Bytes::copy_from_slice).collect();
    RUNTIME.block_on(async {
        if let Ok(Some(request)) = read_request(chunks, MAX).await {
            let _ = SERVICE.decide(&request).await;
        }
    });
});
