//! The tollgate side of the RLQS protocol tests: `tollgate serve` with an
//! `[rlqs]` section on the gRPC port (memory store), its admin API to see
//! what a report charged (inspect) and to block or override a key, and
//! its `/metrics`.

use std::net::SocketAddr;

use super::{Resp, Tollgate, get, request};

/// The admin API's token in these tests.
pub const TOKEN: &str = "rlqs-0123456789abcdef";

/// Rules the tests use: `per-tenant` (10 an hour), `wide` (100 an
/// hour), `pair` (20 an hour) and `small` (4 an hour), fixed windows so
/// that nothing refills while a test runs (`Tollgate::start` keeps an
/// hour's window whole for its first minute); and `inflight`, a
/// concurrency rule (no RLQS share).
pub const RULES: &str = "[[rules]]\nname = \"per-tenant\"\nalgorithm = \"fixed_window\"\nlimit = 10\nperiod = \"1h\"\n\n\
     [[rules]]\nname = \"wide\"\nalgorithm = \"fixed_window\"\nlimit = 100\nperiod = \"1h\"\n\n\
     [[rules]]\nname = \"pair\"\nalgorithm = \"fixed_window\"\nlimit = 20\nperiod = \"1h\"\n\n\
     [[rules]]\nname = \"small\"\nalgorithm = \"fixed_window\"\nlimit = 4\nperiod = \"1h\"\n\n\
     [[rules]]\nname = \"inflight\"\nalgorithm = \"concurrency\"\nlimit = 2\nlease = \"30s\"\n";

/// The whole config: the memory store, the admin token, `rlqs` (the
/// `[rlqs]` section and its subsections, as TOML) and [`RULES`].
pub fn config(rlqs: &str) -> String {
    format!(
        "[store]\nurl = \"memory\"\n\n\
         [admin]\n[[admin.tokens]]\nname = \"oncall\"\ntoken = \"{TOKEN}\"\n\n\
         {rlqs}\n\n{RULES}"
    )
}

/// `tollgate serve` with `config(rlqs)` on the gRPC port, the HTTP API
/// (for `/metrics`) and the admin API.
pub fn start(rlqs: &str) -> Tollgate {
    Tollgate::start(
        &config(rlqs),
        &[
            "--grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ],
    )
}

/// Percent-encodes `s` for a path segment (every byte but unreserved).
pub fn pct(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An admin request with the token, from a blocking thread (the tests
/// run on tokio; the request is a blocking socket).
pub fn admin(admin: SocketAddr, method: &str, path: &str, body: &str) -> Resp {
    let auth = format!("Bearer {TOKEN}");
    tokio::task::block_in_place(|| {
        request(
            admin,
            method,
            path,
            &[
                ("Content-Type", "application/json"),
                ("Authorization", auth.as_str()),
            ],
            body.as_bytes(),
        )
    })
}

/// An admin request that must answer 200, as JSON.
pub fn admin_ok(s: &Tollgate, method: &str, path: &str, body: &str) -> serde_json::Value {
    let r = admin(s.admin(), method, path, body);
    assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
    r.json()
}

/// What remains of `key` under `rule` (the admin API's inspect: a peek,
/// nothing consumed).
pub fn remaining(s: &Tollgate, rule: &str, key: &str) -> u64 {
    let path = format!("/admin/v1/keys/{}/{}", pct(rule), pct(key));
    admin_ok(s, "GET", &path, "")["remaining"]
        .as_u64()
        .unwrap_or_else(|| panic!("no remaining for {rule}/{key}"))
}

/// Blocks `key` under `rule` for ten minutes.
pub fn block(s: &Tollgate, rule: &str, key: &str) {
    let body = serde_json::json!({"rule": rule, "key": key, "for_ms": 600_000}).to_string();
    admin_ok(s, "POST", "/admin/v1/blocks", &body);
}

/// Ends the block of `key` under `rule`.
pub fn unblock(s: &Tollgate, rule: &str, key: &str) {
    let path = format!("/admin/v1/blocks/{}/{}", pct(rule), pct(key));
    admin_ok(s, "DELETE", &path, "");
}

/// Sets a runtime override of `key` under `rule` to `limit`.
pub fn set_override(s: &Tollgate, rule: &str, key: &str, limit: u64) {
    let path = format!("/admin/v1/overrides/{}/{}", pct(rule), pct(key));
    admin_ok(s, "PUT", &path, &format!("{{\"limit\":{limit}}}"));
}

/// The server's `/metrics` text (from the HTTP API).
pub fn metrics(s: &Tollgate) -> String {
    tokio::task::block_in_place(|| get(s.api(), "/metrics").text())
}
