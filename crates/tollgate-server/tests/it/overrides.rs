//! `[[rules.overrides]]` against the real binary: exact keys and prefixes,
//! the most specific winning, on the memory store and on one Redis shared
//! by three replicas (the fleet admits exactly the override's limit), and
//! the answer's `limit` and `RateLimit-Policy` showing the limit that
//! applied (docs/config.md, "Per-key overrides").

use std::net::SocketAddr;

use redis_harness::RedisServer;

use crate::support::{self, Tollgate, post_json};

fn config(store: &str) -> String {
    format!(
        "[store]\nurl = \"{store}\"\ntimeout = \"2s\"\n\n\
         [[rules]]\nname = \"per_tenant\"\nalgorithm = \"fixed_window\"\nlimit = 2\nperiod = \"1h\"\n\
         \n  [[rules.overrides]]\n  key = \"tenant:acme\"\n  limit = 5\n\
         \n  [[rules.overrides]]\n  key = \"tenant:enterprise:*\"\n  limit = 7\n\
         \n  [[rules.overrides]]\n  key = \"tenant:enterprise:big*\"\n  limit = 9\n\
         \n  [[rules.overrides]]\n  key = \"tenant:slow\"\n  limit = 3\n  period = \"2h\"\n"
    )
}

/// One check of `key`: (allowed, limit, RateLimit-Policy).
fn check(api: SocketAddr, key: &str) -> (bool, u64, String) {
    let r = post_json(
        api,
        "/v1/check",
        &format!("{{\"rule\":\"per_tenant\",\"key\":\"{key}\"}}"),
    );
    let j = r.json();
    (
        j["allowed"].as_bool().expect("allowed"),
        j["limit"].as_u64().expect("limit"),
        r.header("RateLimit-Policy").unwrap_or_default().to_owned(),
    )
}

/// How many of `n` checks of `key`, spread over `apis` in turn, admit.
fn admitted(apis: &[SocketAddr], key: &str, n: usize) -> usize {
    (0..n)
        .filter(|i| check(apis[i % apis.len()], key).0)
        .count()
}

fn tiers_apply(apis: &[SocketAddr]) {
    // the rule's own limit
    assert_eq!(admitted(apis, "tenant:small", 10), 2);
    // an exact key
    assert_eq!(admitted(apis, "tenant:acme", 10), 5);
    // a prefix, and the longer prefix winning over it
    assert_eq!(admitted(apis, "tenant:enterprise:x", 20), 7);
    assert_eq!(admitted(apis, "tenant:enterprise:bigco", 20), 9);
    // what the answer shows is the limit that applied
    let (_, limit, policy) = check(apis[0], "tenant:enterprise:y");
    assert_eq!(limit, 7);
    assert_eq!(policy, "\"per_tenant\";q=7;w=3600");
    let (_, limit, policy) = check(apis[0], "tenant:slow");
    assert_eq!(limit, 3);
    assert_eq!(policy, "\"per_tenant\";q=3;w=7200");
}

#[test]
fn overrides_on_the_memory_store() {
    let s = Tollgate::start(&config("memory"), &["--http", "127.0.0.1:0"]);
    tiers_apply(&[s.api()]);
}

#[test]
fn overrides_across_three_replicas_on_redis() {
    let redis = RedisServer::start();
    let fleet: Vec<Tollgate> = (0..3)
        .map(|_| Tollgate::start(&config(&redis.url()), &["--http", "127.0.0.1:0"]))
        .collect();
    let apis: Vec<SocketAddr> = fleet.iter().map(Tollgate::api).collect();
    tiers_apply(&apis);
}

#[test]
fn bad_overrides_are_refused_with_their_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.toml");
    std::fs::write(
        &path,
        "[[rules]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 2\nperiod = \"1h\"\n\
         [[rules.overrides]]\nkey = \"a\"\nlimit = 0\n\
         [[rules.overrides]]\nkey = \"a\"\nlimit = 3\n\
         [[rules.overrides]]\nkey = \"b\"\nburst = 3\n\
         [[rules.overrides]]\nlimit = 3\n\
         [[rules.overrides]]\nkey = \"c\"\nper = 3\n",
    )
    .expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .expect("run validate");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for want in [
        "rules[0].overrides[0].limit: limit must be at least 1",
        "rules[0].overrides[1].key: \"a\" has an override already",
        "rules[0].overrides[2].burst: burst applies to gcra and token_bucket only",
        "rules[0].overrides[3].key: missing required field",
        "rules[0].overrides[4].per: unknown field",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
}

#[test]
fn the_proxy_answers_with_the_override_that_applied() {
    let up = support::start_upstream();
    let config = "[[rules]]\nname = \"per_tenant\"\nalgorithm = \"fixed_window\"\nlimit = 2\n\
                  period = \"1h\"\nkey = \"header:x-tenant\"\n\
                  [[rules.overrides]]\nkey = \"slow\"\nlimit = 3\nperiod = \"2h\"\n";
    let upstream = format!("http://{}", up.addr);
    let s = Tollgate::start(
        config,
        &["--proxy", "127.0.0.1:0", "--upstream", upstream.as_str()],
    );
    let policy = |tenant: &str| {
        let r = support::request(s.proxy(), "GET", "/", &[("x-tenant", tenant)], b"");
        (r.status, r.header("RateLimit-Policy").map(str::to_owned))
    };
    assert_eq!(
        policy("slow"),
        (200, Some("\"per_tenant\";q=3;w=7200".to_owned()))
    );
    assert_eq!(
        policy("other"),
        (200, Some("\"per_tenant\";q=2;w=3600".to_owned()))
    );
    let statuses: Vec<u16> = (0..3).map(|_| policy("slow").0).collect();
    assert_eq!(statuses, [200, 200, 429]);
}
