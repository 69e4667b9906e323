//! The admin API: its paths (percent-decoded rule and key, `top`'s
//! query) and JSON bodies. The first byte picks method and section; the
//! rest is the path's tail, then `\n`, then the body.
#![no_main]

use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::Full;
use libfuzzer_sys::fuzz_target;
use tollgate_fuzz::{RUNTIME, config, envoy, gate};
use tollgate_server::doors::admin::{Admin, Tokens};

const ROUTES: [(Method, &str); 10] = [
    (Method::GET, "keys"),
    (Method::DELETE, "keys"),
    (Method::POST, "blocks"),
    (Method::GET, "blocks"),
    (Method::DELETE, "blocks"),
    (Method::POST, "refunds"),
    (Method::GET, "overrides"),
    (Method::PUT, "overrides"),
    (Method::DELETE, "overrides"),
    (Method::GET, "top"),
];

static ADMIN: LazyLock<Admin> = LazyLock::new(|| {
    let config = config();
    let gate = gate(&config, &envoy(&config));
    let tokens = Tokens::new(&[], None).expect("no tokens");
    Admin::new(Arc::new(move || Arc::clone(&gate)), tokens)
});

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (method, section) = &ROUTES[usize::from(pick) % ROUTES.len()];
    let (tail, body) = match rest.iter().position(|&b| b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let Ok(tail) = std::str::from_utf8(tail) else {
        return;
    };
    let Ok(uri) = format!("/admin/v1/{section}/{tail}").parse::<Uri>() else {
        return; // not a request target hyper would hand over
    };
    let req = Request::builder()
        .method(method.clone())
        .uri(uri)
        .body(Full::new(Bytes::copy_from_slice(body)))
        .expect("a request");
    let res = RUNTIME.block_on(ADMIN.handle(req));
    assert_ne!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
});
