//! Reservations open and leases held, and those that ran out, in
//! `/metrics` (docs/metrics.md): the real `tollgate serve`
//! binary, each reservation and lease ending once — settled, released, or
//! expired when its time ran out.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Tollgate, get, post_json, series};

const RULES: &str = r#"
[[rules]]
name = "tpm"
algorithm = "sliding_window"
limit = 100
period = "1m"

[[rules]]
name = "inflight"
algorithm = "concurrency"
limit = 5
lease = "4s"
"#;

/// The `inflight` rule's lease.
const LEASE: Duration = Duration::from_secs(4);

/// Sleeps until `t` (at once if it has passed).
fn sleep_until(t: Instant) {
    std::thread::sleep(t.saturating_duration_since(Instant::now()));
}

fn post(s: &Tollgate, path: &str, body: &Value) -> Value {
    let r = post_json(s.api(), path, &body.to_string());
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

#[test]
fn open_and_held_count_down_as_they_end_or_expire() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    let reserve = |ttl_ms: u64| {
        post(
            &s,
            "/v1/reserve",
            &json!({"rule": "tpm", "key": "a", "cost": 10, "ttl_ms": ttl_ms}),
        )["reservation"]
            .as_str()
            .expect("a reservation")
            .to_owned()
    };
    let acquire = || {
        post(&s, "/v1/acquire", &json!({"rule": "inflight", "key": "a"}))["lease"]
            .as_str()
            .expect("a lease")
            .to_owned()
    };
    let _short = reserve(300);
    let long = reserve(60_000);
    let third = reserve(60_000);
    let first = acquire();
    let _second = acquire();
    let renewed = acquire();
    // Every lease was taken before this: each ends by itself no later
    // than `acquired + LEASE` unless renewed. The steps below wait for
    // their moments and leave seconds of room on the other side, so a
    // loaded machine's pauses cannot reorder them.
    let acquired = Instant::now();
    let m = get(s.api(), "/metrics").text();
    assert_eq!(
        series(&m, "tollgate_reservations_open", r#"rule="tpm""#),
        3.0,
        "{m}"
    );
    assert_eq!(
        series(&m, "tollgate_leases_held", r#"rule="inflight""#),
        3.0,
        "{m}"
    );

    post(&s, "/v1/settle", &json!({"reservation": long, "cost": 12}));
    post(&s, "/v1/cancel", &json!({"reservation": third}));
    post(&s, "/v1/release", &json!({"lease": first}));
    std::thread::sleep(Duration::from_millis(400));
    let m = get(s.api(), "/metrics").text();
    // the 300 ms reservation ran out; the leases live 4 s
    assert_eq!(
        series(&m, "tollgate_reservations_open", r#"rule="tpm""#),
        0.0,
        "{m}"
    );
    let expired = r#"rule="tpm",outcome="expired""#;
    assert_eq!(
        series(&m, "tollgate_reservations_total", expired),
        1.0,
        "{m}"
    );
    assert_eq!(
        series(&m, "tollgate_leases_held", r#"rule="inflight""#),
        2.0,
        "{m}"
    );

    // Renewed half way through its lease: it now lives 2 s past the end of
    // the unrenewed one, and is counted expired only after `renewed_at +
    // LEASE`.
    sleep_until(acquired + LEASE / 2);
    post(&s, "/v1/renew", &json!({"lease": renewed}));
    let renewed_at = Instant::now();
    sleep_until(acquired + LEASE);
    let m = get(s.api(), "/metrics").text();
    // the unreleased lease ended by itself; the renewed one still lives
    let lease_expired = r#"rule="inflight",outcome="expired""#;
    assert_eq!(
        series(&m, "tollgate_leases_total", lease_expired),
        1.0,
        "{m}"
    );
    assert_eq!(
        series(&m, "tollgate_leases_held", r#"rule="inflight""#),
        1.0,
        "{m}"
    );
    sleep_until(renewed_at + LEASE);
    let m = get(s.api(), "/metrics").text();
    assert_eq!(
        series(&m, "tollgate_leases_total", lease_expired),
        2.0,
        "{m}"
    );
    assert_eq!(
        series(&m, "tollgate_leases_held", r#"rule="inflight""#),
        0.0,
        "{m}"
    );
    // settled and cancelled ones never count as expired
    assert_eq!(
        series(&m, "tollgate_reservations_total", expired),
        1.0,
        "{m}"
    );
}

/// The reservations a replica follows for its gauge are bounded by
/// `[store] max_keys` (they were bounded by a fixed million, ~170 MB, even
/// under a small key cap).
#[test]
fn open_reservations_followed_are_bounded_by_max_keys() {
    let config = format!("[store]\nmax_keys = 3\n{RULES}");
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    for key in ["a", "b", "c", "d", "e"] {
        let body = json!({"rule": "tpm", "key": key, "cost": 1, "ttl_ms": 60_000});
        assert!(post(&s, "/v1/reserve", &body)["reservation"].is_string());
    }
    let m = get(s.api(), "/metrics").text();
    assert_eq!(
        series(&m, "tollgate_reservations_open", r#"rule="tpm""#),
        3.0,
        "{m}"
    );
}
