//! What the reverse proxy's tests share: the binary started as a proxy
//! before one upstream, and the waits for what it settles on its own
//! task once a response has ended (the store, `/metrics`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{Tollgate, get, remaining};

/// The binary with `config`, proxying to `http://upstream`, its HTTP API
/// on a free port too.
pub fn serve(config: &str, upstream: SocketAddr) -> Tollgate {
    let upstream = format!("http://{upstream}");
    Tollgate::start(
        config,
        &[
            "--proxy",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--http",
            "127.0.0.1:0",
        ],
    )
}

/// Waits (up to 5 s) for `rule`/`key` to have `want` left: the proxy
/// settles on its own task once the response has ended.
pub fn settles_to(s: &Tollgate, rule: &str, key: &str, want: u64) {
    let start = Instant::now();
    loop {
        let now = remaining(s, rule, key);
        if now == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{rule}/{key}: {now} remaining, never {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to 5 s) for `/metrics` to hold the line `want`; returns the
/// page.
pub fn metric_appears(s: &Tollgate, want: &str) -> String {
    let start = Instant::now();
    loop {
        let metrics = get(s.api(), "/metrics").text();
        if metrics.lines().any(|l| l == want) {
            return metrics;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{want} never in\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
