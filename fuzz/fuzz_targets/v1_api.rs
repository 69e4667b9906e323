//! The `/v1/*` JSON bodies: the check-body readers against each other,
//! then the body through the HTTP API (the first byte picks the endpoint).
#![no_main]

use std::sync::LazyLock;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use libfuzzer_sys::fuzz_target;
use tollgate_fuzz::{RUNTIME, config, envoy, gate};
use tollgate_http::headers::HeaderOptions;
use tollgate_server::doors::api::{Api, fuzzing::read_check};

const PATHS: [&str; 8] = [
    "/v1/check",
    "/v1/charge",
    "/v1/reserve",
    "/v1/settle",
    "/v1/cancel",
    "/v1/acquire",
    "/v1/release",
    "/v1/renew",
];

static API: LazyLock<Api> = LazyLock::new(|| {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .build_recorder()
        .handle();
    let config = config();
    Api::new(
        gate(&config, &envoy(&config)),
        HeaderOptions::default(),
        metrics,
    )
});

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    // The byte scan takes only what the serde reader reads the same way.
    let (plain, json) = read_check(body);
    if let Some(plain) = plain {
        match json {
            Ok((pairs, multi)) => {
                assert_eq!(plain, pairs, "the two readers disagree");
                assert!(!multi, "the byte scan read a checks body");
            }
            Err(e) => panic!("the byte scan read {plain:?}, the serde reader refused: {e}"),
        }
    }
    let path = PATHS[usize::from(pick) % PATHS.len()];
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::copy_from_slice(body)))
        .expect("a request");
    let res = RUNTIME.block_on(API.handle(req));
    assert_ne!(res.status(), StatusCode::INTERNAL_SERVER_ERROR, "{path}");
});
