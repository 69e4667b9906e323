//! Reloading `tollgate serve`'s config without a restart
//! (docs/operations.md), on the real binary, with the memory store and a
//! real `redis-server`: 100 swaps under concurrent load (SIGHUP and an
//! atomic rename alternating) with no failed check, no check decided by a
//! mix of two configs and the counts of an unchanged rule kept exactly; a
//! bad file that changes nothing and shows in `/v1/rules`, `/readyz` and
//! `/metrics`; a changed listener address reported; a changed admin token
//! reported, not silently ignored; and what happens to a changed rule's
//! state, as the docs say.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_harness::RedisServer;

use crate::support::{Tollgate, get, post_json, request};

/// The rule no reload changes: a count that only checks move. Its 30-day
/// window is epoch-aligned; a test starting in its last minutes would see
/// it roll over (about one chance in 40,000).
const STEADY: &str = "[[rules]]\nname = \"steady\"\nalgorithm = \"fixed_window\"\nlimit = 1000000000\nperiod = \"30d\"\n";

/// The `[store]` table: a timeout no loaded test machine reaches, and
/// `deny`, so a failed store call is a 503, never a silent admission.
fn store_table(store: &str) -> String {
    format!("[store]\nurl = \"{store}\"\ntimeout = \"5s\"\non_error = \"deny\"\n")
}

/// Generation `n` of the config: `steady` as ever, and `pair_a` and
/// `pair_b` whose limits both name `n` (one reload changes both).
fn generation(store: &str, n: u64) -> String {
    format!(
        "{}\n{STEADY}\n\
         [[rules]]\nname = \"pair_a\"\nalgorithm = \"fixed_window\"\nlimit = {}\nperiod = \"30d\"\n\n\
         [[rules]]\nname = \"pair_b\"\nalgorithm = \"gcra\"\nlimit = {}\nperiod = \"30d\"\n",
        store_table(store),
        10_000_000 + n,
        20_000_000 + n
    )
}

/// Writes `text` to a new file beside `path` and renames it onto `path`
/// (what editors and Kubernetes do).
fn rename_onto(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// `GET /v1/rules`.
fn rules(s: &Tollgate) -> serde_json::Value {
    let r = get(s.api(), "/v1/rules");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// The limit `/v1/rules` shows for `name`.
fn limit_of(rules: &serde_json::Value, name: &str) -> Option<u64> {
    rules["rules"]
        .as_array()?
        .iter()
        .find(|r| r["name"] == name)?["limit"]
        .as_u64()
}

/// Waits until `done` holds of `/v1/rules` (10 s at most).
fn wait_rules(s: &Tollgate, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = rules(s);
        if done(&r) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never saw {what}; /v1/rules: {r}\nlog:\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `tollgate serve` over `store` with generation 0, polling every 50 ms.
fn start(store: &str) -> Tollgate {
    Tollgate::start(
        &generation(store, 0),
        &["--http", "127.0.0.1:0", "--reload-poll", "50ms"],
    )
}

/// A check of `pairs` ((rule, key, cost)); the answer's status and body,
/// with one object per pair under `checks` (a one-pair answer has its
/// fields at the top).
fn check(s: &Tollgate, pairs: &[(&str, &str, u64)]) -> (u16, serde_json::Value) {
    let checks: Vec<serde_json::Value> = pairs
        .iter()
        .map(|(rule, key, cost)| serde_json::json!({"rule": rule, "key": key, "cost": cost}))
        .collect();
    let body = serde_json::json!({ "checks": checks }).to_string();
    let r = post_json(s.api(), "/v1/check", &body);
    let mut body = r.json();
    assert!(body.get("degraded").is_none(), "the store failed: {body}");
    if !body["checks"].is_array() {
        body = serde_json::json!({ "checks": [body] });
    }
    (r.status, body)
}

fn swaps_under_load(store: &str) {
    let s = Arc::new(start(store));
    let path = s.config_path();
    let stop = Arc::new(AtomicBool::new(false));
    // The latest generation any check was decided by.
    let latest = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let s = Arc::clone(&s);
            let stop = Arc::clone(&stop);
            let latest = Arc::clone(&latest);
            std::thread::spawn(move || {
                let key = format!("k{w}");
                let mut admitted = 0u64;
                let mut generations = std::collections::BTreeSet::new();
                while !stop.load(Ordering::Relaxed) {
                    let (status, body) = check(
                        &s,
                        &[("steady", "k", 1), ("pair_a", &key, 1), ("pair_b", &key, 1)],
                    );
                    assert_eq!(status, 200, "a check failed during reloads: {body}");
                    let limits: Vec<u64> = body["checks"]
                        .as_array()
                        .expect("checks")
                        .iter()
                        .map(|c| c["limit"].as_u64().expect("limit"))
                        .collect();
                    let (a, b) = (limits[1] - 10_000_000, limits[2] - 20_000_000);
                    assert_eq!(
                        a, b,
                        "one check decided by two configs: pair_a of generation {a}, pair_b of {b}"
                    );
                    assert_eq!(limits[0], 1_000_000_000);
                    latest.fetch_max(a, Ordering::Relaxed);
                    generations.insert(a);
                    admitted += 1;
                }
                (admitted, generations)
            })
        })
        .collect();
    for n in 1..=100u64 {
        // Every change is a rename (a file written in place can be read
        // half-written by a loaded machine's poll: docs/operations.md);
        // every other one is followed by a SIGHUP, which reloads whether
        // or not the poll saw it first (`sighup_alone_reloads` shows
        // SIGHUP applying a change without polling).
        rename_onto(&path, &generation(store, n));
        if n % 2 == 1 {
            s.signal("HUP");
        }
        wait_rules(&s, &format!("generation {n}"), |r| {
            limit_of(r, "pair_a") == Some(10_000_000 + n)
                && limit_of(r, "pair_b") == Some(20_000_000 + n)
        });
        // Under load: a check decided by this generation before the next
        // swap, made sure of (a loaded machine may starve the workers while
        // the swaps run on).
        let deadline = Instant::now() + Duration::from_secs(30);
        while latest.load(Ordering::Relaxed) < n {
            assert!(Instant::now() < deadline, "no check under generation {n}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Some load after the last swap too.
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let mut admitted = 0;
    let mut seen = std::collections::BTreeSet::new();
    for w in workers {
        let (n, generations) = w.join().expect("worker");
        admitted += n;
        seen.extend(generations);
    }
    assert!(admitted > 100, "too little load: {admitted} checks");
    assert!(
        seen.len() > 10,
        "the load saw only generations {seen:?}: not under load"
    );
    // `steady` counted every admitted check and nothing else: no reload
    // refilled or forgot it.
    let (status, body) = check(&s, &[("steady", "k", 0)]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["checks"][0]["remaining"].as_u64(),
        Some(1_000_000_000 - admitted),
        "{body}"
    );
    let log = s.log();
    assert_eq!(
        log.matches("config reloaded (SIGHUP)").count(),
        50,
        "every SIGHUP reloads: {log}"
    );
    assert!(
        log.matches("config reloaded (a config file changed)")
            .count()
            >= 50,
        "every rename without a SIGHUP is noticed: {log}"
    );
    assert!(!log.contains("refused"), "{log}");
    let metrics = get(s.api(), "/metrics").text();
    let ok = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_config_reloads_total{outcome=\"ok\"} "))
        .and_then(|v| v.parse::<u64>().ok())
        .expect("reload counter");
    assert!(ok >= 100, "{metrics}");
}

#[test]
fn a_hundred_swaps_under_load_memory() {
    swaps_under_load("memory");
}

#[test]
fn a_hundred_swaps_under_load_redis() {
    let redis = RedisServer::start();
    swaps_under_load(&redis.url());
}

#[test]
fn sighup_alone_reloads() {
    let s = Tollgate::start(
        &generation("memory", 0),
        &["--http", "127.0.0.1:0", "--reload-poll", "0s"],
    );
    std::fs::write(s.config_path(), generation("memory", 1)).expect("write");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        limit_of(&rules(&s), "pair_a"),
        Some(10_000_000),
        "not polled"
    );
    s.signal("HUP");
    wait_rules(&s, "generation 1", |r| {
        limit_of(r, "pair_a") == Some(10_000_001)
    });
    assert!(s.logs("config reloaded (SIGHUP)"), "{}", s.log());
}

#[test]
fn a_bad_file_changes_nothing_and_shows() {
    let s = start("memory");
    let path = s.config_path();
    let first = rules(&s);
    let version = first["config_version"]
        .as_str()
        .expect("version")
        .to_owned();
    assert_eq!(version.len(), 16, "{first}");
    assert!(
        first["loaded_at"]
            .as_str()
            .expect("loaded_at")
            .ends_with('Z')
    );
    assert!(first["reload_error"].is_null(), "{first}");
    let (_, body) = check(&s, &[("pair_a", "x", 3)]);
    assert_eq!(body["checks"][0]["remaining"], 10_000_000 - 3, "{body}");

    let bad = generation("memory", 1).replace("limit = 10000001", "limit = \"lots\"");
    rename_onto(&path, &bad);
    wait_rules(&s, "the reload error", |r| !r["reload_error"].is_null());
    let r = rules(&s);
    let message = r["reload_error"]["message"].as_str().expect("message");
    assert!(
        message.contains("tollgate.toml:") && message.contains("rules[1].limit"),
        "file, line and field: {message}"
    );
    assert_eq!(
        r["config_version"],
        version.as_str(),
        "the old config serves"
    );
    assert_ne!(r["reload_error"]["config_version"], version.as_str());
    assert_eq!(limit_of(&r, "pair_a"), Some(10_000_000));
    let (status, body) = check(&s, &[("pair_a", "x", 1)]);
    assert_eq!(status, 200);
    assert_eq!(body["checks"][0]["remaining"], 10_000_000 - 4, "{body}");
    let ready = get(s.api(), "/readyz");
    assert_eq!(ready.status, 200, "a refused reload leaves it ready");
    assert_eq!(ready.json()["reload_error"]["message"], message);
    let metrics = get(s.api(), "/metrics").text();
    assert!(
        metrics.contains("tollgate_config_reloads_total{outcome=\"error\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("tollgate_config_info{{version=\"{version}\"}} 1")),
        "{metrics}"
    );
    assert!(s.logs("refused; still serving version"), "{}", s.log());
    // A SIGHUP tries again, and fails again.
    s.signal("HUP");
    wait_rules(&s, "the second error", |_| {
        get(s.api(), "/metrics")
            .text()
            .contains("tollgate_config_reloads_total{outcome=\"error\"} 2")
    });

    // Fixed: it loads, the error goes.
    rename_onto(&path, &generation("memory", 1));
    wait_rules(&s, "generation 1", |r| {
        limit_of(r, "pair_a") == Some(10_000_001) && r["reload_error"].is_null()
    });
    let r = rules(&s);
    assert_ne!(r["config_version"], version.as_str());
    let metrics = get(s.api(), "/metrics").text();
    assert_eq!(
        metrics.matches("tollgate_config_info{").count(),
        1,
        "one version series: {metrics}"
    );
}

#[test]
fn settings_read_at_start_are_reported_and_the_rest_applies() {
    let s = start("memory");
    let path = s.config_path();
    let text = generation("redis://127.0.0.1:1", 1) + "[http]\nlisten = \"127.0.0.1:1\"\n";
    rename_onto(&path, &text);
    wait_rules(&s, "generation 1", |r| {
        limit_of(r, "pair_a") == Some(10_000_001)
    });
    let r = rules(&s);
    let message = r["reload_error"]["message"].as_str().expect("reported");
    // `--http` on the command line wins over the file, so the address
    // itself is unchanged; the store is not.
    assert!(
        message.contains("[store] url changed from memory"),
        "{message}"
    );
    assert!(message.contains("needs a restart"), "{message}");
    // Still on the memory store (a Redis on port 1 would fail every check).
    let (status, body) = check(&s, &[("pair_a", "x", 1)]);
    assert_eq!(status, 200, "{body}");
    let ready = get(s.api(), "/readyz");
    assert_eq!(ready.status, 200, "{}", ready.text());
}

/// `serve`'s flags for the tests with an admin API: HTTP and admin on
/// free loopback ports, the config polled every 50 ms.
const WITH_ADMIN: &[&str] = &[
    "--http",
    "127.0.0.1:0",
    "--admin",
    "127.0.0.1:0",
    "--reload-poll",
    "50ms",
];

/// `[admin]` with one token, `token`.
fn admin_table(token: &str) -> String {
    format!("\n[admin]\n[[admin.tokens]]\nname = \"oncall\"\ntoken = \"{token}\"\n")
}

/// The status of `GET /admin/v1/blocks` on the admin API `s` logged, with
/// `token`.
fn admin_status(s: &Tollgate, token: &str) -> u16 {
    admin_call(s, token, "GET", "/admin/v1/blocks", "").0
}

/// A call of the admin API `s` logged, with `token`: its status and body.
fn admin_call(
    s: &Tollgate,
    token: &str,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, serde_json::Value) {
    let addr = s.admin();
    let auth = format!("Bearer {token}");
    let r = request(
        addr,
        method,
        path,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    );
    let json = serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
    (r.status, json)
}

/// A block and an override of a rule a reload removes, and an override a
/// reload makes invalid (a burst, once its rule's algorithm has none), stay
/// in the runtime table but out of force; each is deleted by its rule's
/// name, and the answer says there was one (they used to be a 404, unknown
/// rule, and `deleted: false`).
#[test]
fn entries_a_reload_leaves_behind_are_deleted_by_their_rule_name() {
    let token = "admin-token-0123456789";
    let two = |b_algorithm: &str| {
        format!(
            "{}\n[[rules]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 10\nperiod = \"1m\"\n\n\
             [[rules]]\nname = \"b\"\nalgorithm = \"{b_algorithm}\"\nlimit = 10\nperiod = \"1m\"\n{}",
            store_table("memory"),
            admin_table(token)
        )
    };
    let only_a = format!(
        "{}\n[[rules]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 10\nperiod = \"1m\"\n{}",
        store_table("memory"),
        admin_table(token)
    );
    let s = Tollgate::start(&two("gcra"), WITH_ADMIN);
    let call = |method: &str, path: &str, body: &str| admin_call(&s, token, method, path, body);
    // how many entries `GET path` lists under `field`
    let listed = |path: &str, field: &str| {
        let (status, json) = call("GET", path, "");
        assert_eq!(status, 200, "{json}");
        json[field].as_array().map_or(usize::MAX, Vec::len)
    };
    // a DELETE that finds its entry: 200, and `field` says so
    let delete = |path: &str, field: &str| {
        let (status, json) = call("DELETE", path, "");
        assert_eq!(
            (status, &json[field]),
            (200, &serde_json::Value::Bool(true)),
            "{path}: {json}"
        );
    };
    let has_b = |r: &serde_json::Value, algorithm: Option<&str>| {
        r["rules"].as_array().is_some_and(|rules| {
            rules
                .iter()
                .any(|x| x["name"] == "b" && algorithm.is_none_or(|a| x["algorithm"] == a))
        })
    };
    let set = call(
        "PUT",
        "/admin/v1/overrides/b/k",
        r#"{"limit":20,"burst":5}"#,
    );
    assert_eq!(set.0, 200, "{}", set.1);
    let block = call(
        "POST",
        "/admin/v1/blocks",
        r#"{"rule":"b","key":"k","for_ms":600000}"#,
    );
    assert_eq!(block.0, 200, "{}", block.1);

    // b's algorithm loses its burst: the override is left out, not listed.
    rename_onto(&s.config_path(), &two("fixed_window"));
    wait_rules(&s, "b a fixed window", |r| has_b(r, Some("fixed_window")));
    assert_eq!(listed("/admin/v1/overrides", "overrides"), 0);
    delete("/admin/v1/overrides/b/k", "deleted");

    // b removed: its block stays, out of force, and is deleted by name.
    let again = call("PUT", "/admin/v1/overrides/b/j", r#"{"limit":20}"#);
    assert_eq!(again.0, 200, "{}", again.1);
    rename_onto(&s.config_path(), &only_a);
    wait_rules(&s, "b removed", |r| !has_b(r, None));
    delete("/admin/v1/blocks/b/k", "unblocked");
    delete("/admin/v1/overrides/b/j", "deleted");
    // Nothing left of b to delete: an unknown rule again.
    assert_eq!(call("DELETE", "/admin/v1/overrides/b/j", "").0, 404);
    assert_eq!(call("DELETE", "/admin/v1/blocks/b/k", "").0, 404);

    // b back, as a GCRA rule: neither entry comes back with it.
    rename_onto(&s.config_path(), &two("gcra"));
    wait_rules(&s, "b back", |r| has_b(r, Some("gcra")));
    assert_eq!(listed("/admin/v1/overrides", "overrides"), 0);
    assert_eq!(listed("/admin/v1/blocks", "blocks"), 0);
}

#[test]
fn a_changed_admin_token_is_reported_not_silently_ignored() {
    let (old, new) = ("old-token-0123456789", "new-token-0123456789");
    let s = Tollgate::start(&(generation("memory", 0) + &admin_table(old)), WITH_ADMIN);
    assert_eq!(admin_status(&s, old), 200);
    // Revoking `old` by a reload: the rules apply, the token change
    // cannot (the admin API is set up at start), and the reload says so.
    rename_onto(
        &s.config_path(),
        &(generation("memory", 1) + &admin_table(new)),
    );
    wait_rules(&s, "generation 1", |r| {
        limit_of(r, "pair_a") == Some(10_000_001)
    });
    let r = rules(&s);
    let message = r["reload_error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("a token change that does not apply went unreported: {r}"));
    assert!(message.contains("[admin] changed"), "{message}");
    assert!(message.contains("needs a restart"), "{message}");
    assert_eq!(admin_status(&s, old), 200, "what the report says runs");
    assert_eq!(admin_status(&s, new), 401);
}

/// A one-rule config of `rule`'s `algorithm`, `limit` and `period`.
fn one_rule(store: &str, algorithm: &str, limit: u64, period: &str) -> String {
    format!(
        "{}\n[[rules]]\nname = \"r\"\n\
         algorithm = \"{algorithm}\"\nlimit = {limit}\nperiod = \"{period}\"\n",
        store_table(store)
    )
}

/// `remaining` of a check of `key` at `cost`.
fn remaining(s: &Tollgate, key: &str, cost: u64) -> u64 {
    let (status, body) = check(s, &[("r", key, cost)]);
    assert_eq!(status, 200, "{body}");
    body["checks"][0]["remaining"].as_u64().expect("remaining")
}

/// Reloads `text` and waits until `r` shows `limit`.
fn reload_to(s: &Tollgate, text: &str, limit: u64) {
    rename_onto(&s.config_path(), text);
    wait_rules(s, &format!("limit {limit}"), |r| {
        limit_of(r, "r") == Some(limit)
    });
}

fn changed_rules_state(store: &str) {
    let s = Tollgate::start(
        &one_rule(store, "fixed_window", 10, "1h"),
        &["--http", "127.0.0.1:0", "--reload-poll", "50ms"],
    );
    // A limit change on a window keeps the count.
    assert_eq!(remaining(&s, "w", 4), 6);
    reload_to(&s, &one_rule(store, "fixed_window", 20, "1h"), 20);
    assert_eq!(remaining(&s, "w", 0), 16, "4 of 20 used");
    // An algorithm change starts fresh.
    reload_to(&s, &one_rule(store, "token_bucket", 30, "1h"), 30);
    assert_eq!(remaining(&s, "w", 0), 30, "a full bucket");
    // GCRA keeps its time and reads it at the new rate: 5 of 10 per
    // hour is 30 minutes of debt, 10 units at 20 per hour.
    reload_to(&s, &one_rule(store, "gcra", 10, "1h"), 10);
    assert_eq!(remaining(&s, "g", 5), 5);
    reload_to(&s, &one_rule(store, "gcra", 20, "1h"), 20);
    assert_eq!(
        remaining(&s, "g", 0),
        10,
        "30 minutes owed at 3 minutes a unit"
    );
    // A sliding log keeps its entries through a limit and a period change.
    reload_to(&s, &one_rule(store, "sliding_log", 10, "1h"), 10);
    assert_eq!(remaining(&s, "l", 3), 7);
    reload_to(&s, &one_rule(store, "sliding_log", 12, "1h"), 12);
    assert_eq!(remaining(&s, "l", 0), 9, "3 of 12 used");
    rename_onto(&s.config_path(), &one_rule(store, "sliding_log", 12, "2h"));
    wait_rules(&s, "period 2h", |r| {
        r["rules"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == "r"))
            .is_some_and(|x| x["period_ms"] == 7_200_000)
    });
    assert_eq!(remaining(&s, "l", 0), 9, "the 3 entries count for 2h now");
}

#[test]
fn a_changed_rule_keeps_what_its_algorithm_allows_memory() {
    changed_rules_state("memory");
}

#[test]
fn a_changed_rule_keeps_what_its_algorithm_allows_redis() {
    let redis = RedisServer::start();
    changed_rules_state(&redis.url());
}

/// A rule a reload removed leaves `/metrics` with its utilization series
/// (it used to stay at its last value forever, looking current); the
/// rules that remain keep theirs.
#[test]
fn a_removed_rules_utilization_series_goes_with_it() {
    let s = Tollgate::start(
        &one_rule("memory", "fixed_window", 10, "1h"),
        &["--http", "127.0.0.1:0", "--reload-poll", "50ms"],
    );
    assert_eq!(remaining(&s, "k", 4), 6);
    let series = |s: &Tollgate| -> Vec<String> {
        get(s.api(), "/metrics")
            .text()
            .lines()
            .filter(|l| l.starts_with("tollgate_utilization_ratio{"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(series(&s), ["tollgate_utilization_ratio{rule=\"r\"} 0.4"]);
    let other = format!(
        "{}\n[[rules]]\nname = \"other\"\nalgorithm = \"gcra\"\nlimit = 5\nperiod = \"1s\"\n",
        store_table("memory")
    );
    rename_onto(&s.config_path(), &other);
    wait_rules(&s, "only `other`", |r| {
        limit_of(r, "r").is_none() && limit_of(r, "other") == Some(5)
    });
    let (status, _) = check(&s, &[("other", "k", 1)]);
    assert_eq!(status, 200);
    assert_eq!(
        series(&s),
        ["tollgate_utilization_ratio{rule=\"other\"} 0.2"]
    );
}
