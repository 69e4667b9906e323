//! The Redis store's own pipelined connection (standalone and Sentinel over
//! plain TCP) against real `redis-server` processes: many concurrent checks
//! share one connection and each gets its own answer; a check in flight when
//! the server dies fails and is never sent again; a frozen server fails
//! checks with a timeout, on time; `AUTH` and `SELECT` on connect; dropping
//! the store closes its connection. Concurrent checks share script runs
//! (batches): a lost script or function library, a dead server or a
//! timeout never runs a check of a batch twice. Runs go as functions,
//! falling back to scripts where the user may not call them, and a user
//! that may run neither is told so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis_harness::{RedisServer, Reply};
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{
    Algorithm, Decision, MemoryStore, Rule, RuleSpec, Store, StoreError, StoreErrorKind,
};

use crate::support::relay;

/// Connects to `url`, first waiting, if need be, until the hour has a
/// minute left: the tests count in windows of an hour on the real clock.
async fn connect(url: &str, timeout: Duration) -> RedisStore {
    redis_harness::clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60));
    let options = RedisOptions {
        prefix: "conn".to_owned(),
        timeout,
        ..RedisOptions::default()
    };
    RedisStore::connect(url, options).await.expect("connect")
}

/// Clients connected to `server`, the one `redis-cli` asking excluded.
fn clients(server: &RedisServer) -> usize {
    server.cli(&["CLIENT", "LIST"]).lines().count() - 1
}

fn window(name: &str, limit: u64) -> Rule {
    RuleSpec::new(
        name,
        Algorithm::FixedWindow,
        limit,
        Duration::from_secs(3600),
    )
    .build()
    .expect("valid rule")
}

/// Retries while the store reports transient failures, for at most 10 s.
async fn settle(store: &RedisStore, rule: &Rule, key: &[u8]) -> Decision {
    let start = Instant::now();
    loop {
        match store.check(rule, key, 1, None).await {
            Ok(d) => return d,
            Err(e) => {
                assert!(e.is_transient(), "{e}");
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "no recovery: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Checks `key` once (admitted: the script is loaded, the connection
/// open), then freezes the server (SIGSTOP: the kernel takes its bytes, it
/// runs nothing).
async fn warm_then_pause(server: &RedisServer, store: &RedisStore, rule: &Rule, key: &[u8]) {
    let d = store.check(rule, key, 1, None).await.expect("warm");
    assert!(d.allowed, "the warm-up check was denied");
    server.pause();
}

/// A check of `key` at cost 1, and how long it took to answer.
async fn timed_check(
    store: RedisStore,
    rule: Rule,
    key: String,
) -> (Result<Decision, StoreError>, Duration) {
    let start = Instant::now();
    let result = store.check(&rule, key.as_bytes(), 1, None).await;
    (result, start.elapsed())
}

/// A store timeout no test waits out: a reply the connection failed to
/// notice (once noticed only when the timeout's timer woke it) then
/// leaves its check waiting, which [`HANG`] turns into a failure.
const NEVER: Duration = Duration::from_secs(3600);

/// A call still running after this never ends: a hang guard, far above
/// any pause of a loaded machine, never a bound on how fast things went.
const HANG: Duration = Duration::from_secs(60);

/// `call`'s answer; panics when it has not ended after [`HANG`].
async fn ended<T>(call: impl Future<Output = T>, what: &str) -> T {
    tokio::time::timeout(HANG, call)
        .await
        .unwrap_or_else(|_| panic!("{what} still running after {HANG:?}"))
}

/// `n` concurrent checks of cost 1, of keys `{prefix}0` to `{prefix}{n-1}`.
fn spawn_checks(
    store: &RedisStore,
    rule: &Rule,
    prefix: &str,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<Decision, StoreError>>> {
    (0..n)
        .map(|i| {
            let (store, rule) = (store.clone(), rule.clone());
            let key = format!("{prefix}{i}");
            tokio::spawn(async move { store.check(&rule, key.as_bytes(), 1, None).await })
        })
        .collect()
}

/// 512 tasks check distinct keys with distinct costs, all at once, four
/// rounds: each answer must be its own key's (a reply handed to the wrong
/// caller shows as a wrong `remaining`), promptly, over one connection.
/// "Promptly": without the timeout's timer (none fires within the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_share_one_connection_and_get_their_own_answers() {
    let server = RedisServer::start();
    let store = connect(&server.url(), NEVER).await;
    let rule = Arc::new(window("pipelined", 1000));
    for round in 1..=4u64 {
        let tasks: Vec<_> = (0..512u64)
            .map(|i| {
                let (store, rule) = (store.clone(), rule.clone());
                tokio::spawn(async move {
                    let cost = 1 + i % 7;
                    let key = format!("k{i}");
                    let d = store.check(&rule, key.as_bytes(), cost, None).await;
                    (i, cost, d)
                })
            })
            .collect();
        // Regression: a reply read short once went unnoticed until the
        // timeout's timer woke the connection (every round took 5 s); with
        // a timeout of an hour that is a round that never ends.
        for task in tasks {
            let (i, cost, d) = ended(task, &format!("round {round}")).await.expect("task");
            let d = d.expect("check");
            assert!(d.allowed, "key {i} round {round}");
            assert_eq!(d.remaining, 1000 - round * cost, "key {i} round {round}");
        }
    }
    assert_eq!(clients(&server), 1, "one connection carries every check");
    assert!(server.keys_without_ttl().is_empty());
}

/// A check written to the server when it dies fails (`Unavailable`, long
/// before the timeout: a timeout's error is `Timeout`) and is never sent
/// again: after the restart, the key it named does not exist, though the
/// store reconnected and checks work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_in_flight_when_the_server_dies_fails_and_is_not_resent() {
    let server = RedisServer::start();
    let store = connect(&server.url(), NEVER).await;
    let rule = window("inflight", 10);
    // Frozen, the server takes the bytes (the kernel does) but never runs
    // them: the check is in flight for as long as we like.
    warm_then_pause(&server, &store, &rule, b"warm").await;
    let in_flight = {
        let (store, rule) = (store.clone(), rule.clone());
        tokio::spawn(async move { store.check(&rule, b"lost", 1, None).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.kill();
    let result = ended(in_flight, "the check in flight").await.expect("task");
    let err = result.expect_err("the server died with the check unanswered");
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");

    server.restart();
    // Regression: the first reply on a new connection once went unnoticed
    // until the timeout's timer woke the connection: with a timeout of an
    // hour, a check that never ends.
    let d = ended(settle(&store, &rule, b"after"), "the first check after").await;
    assert_eq!(d.remaining, 9, "the restarted server starts empty");
    let lost = store.redis_key(&rule, b"lost");
    let lost = String::from_utf8(lost).expect("utf-8 key");
    assert_eq!(
        server.command(&["EXISTS", &lost]),
        Reply::Int(0),
        "the check in flight was sent again"
    );
}

/// A frozen server (SIGSTOP: connections stay open, nothing answers) fails
/// each check with a timeout, on time: not before it (timers never fire
/// early), and by it (the error is the timeout's, naming it: nothing else
/// ends a call to a frozen server). How late after it a loaded machine
/// got round to it is not asserted. After it thaws, checks succeed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_fails_checks_with_a_timeout_on_time() {
    let timeout = Duration::from_millis(200);
    let server = RedisServer::start();
    let store = connect(&server.url(), timeout).await;
    let rule = window("frozen", 100);
    warm_then_pause(&server, &store, &rule, b"k").await;

    let timed = |store: RedisStore, rule: Rule| timed_check(store, rule, "k".into());
    let (first, waited) = ended(timed(store.clone(), rule.clone()), "the check").await;
    let err: StoreError = first.expect_err("nothing answers");
    assert_eq!(err.kind(), StoreErrorKind::Timeout, "{err}");
    assert!(err.to_string().contains("within 200ms"), "{err}");
    // Timer granularity (1 ms).
    assert!(
        waited >= timeout - Duration::from_millis(5),
        "timed out after {waited:?}"
    );
    // Many at once, and again: each fails, transiently, and ends.
    for _ in 0..2 {
        let tasks: Vec<_> = (0..32)
            .map(|_| tokio::spawn(timed(store.clone(), rule.clone())))
            .collect();
        for task in tasks {
            let (result, _) = ended(task, "a check").await.expect("task");
            let err = result.expect_err("nothing answers");
            assert!(err.is_transient(), "{err}");
        }
    }

    server.resume();
    let d = settle(&store, &rule, b"k").await;
    assert!(d.allowed);
}

/// The URL's password and database are used on every connection; a wrong
/// password fails the connection with a protocol error (a misconfiguration,
/// not an outage).
#[tokio::test]
async fn auth_and_select_come_from_the_url() {
    let server = RedisServer::start();
    // Set after the start: the harness's readiness probe does not log in.
    assert_eq!(
        server.command(&["CONFIG", "SET", "requirepass", "s3cret"]),
        Reply::Status("OK".to_owned())
    );
    let port = server.port();
    let rule = window("authed", 5);
    for url in [
        format!("redis://:s3cret@127.0.0.1:{port}/3"),
        format!("redis://default:s3cret@127.0.0.1:{port}/3"),
    ] {
        let store = connect(&url, Duration::from_secs(2)).await;
        store.ping().await.expect("ping");
        assert!(
            store
                .check(&rule, b"k", 1, None)
                .await
                .expect("check")
                .allowed
        );
        let key = String::from_utf8(store.redis_key(&rule, b"k")).expect("utf-8 key");
        let replies = server.pipeline(&[
            &["AUTH", "s3cret"],
            &["EXISTS", &key],
            &["SELECT", "3"],
            &["EXISTS", &key],
        ]);
        assert_eq!(replies[1], Reply::Int(0), "the key is in database 0");
        assert_eq!(replies[3], Reply::Int(1), "the key is not in database 3");
    }
    for url in [
        format!("redis://:wrong@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let options = RedisOptions {
            timeout: Duration::from_secs(2),
            ..RedisOptions::default()
        };
        let err = RedisStore::connect(&url, options)
            .await
            .expect_err("refused");
        assert_eq!(err.kind(), StoreErrorKind::Protocol, "{url}: {err}");
    }
}

/// The connection lives as long as the store (and its clones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_store_closes_its_connection() {
    let server = RedisServer::start();
    let store = connect(&server.url(), Duration::from_secs(2)).await;
    let clone = store.clone();
    store.ping().await.expect("ping");
    assert_eq!(clients(&server), 1);
    drop(store);
    clone.ping().await.expect("a clone still works");
    drop(clone);
    let start = Instant::now();
    while clients(&server) > 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "still connected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The count a fixed-window key holds (0 when absent).
fn window_count(server: &RedisServer, store: &RedisStore, rule: &Rule, key: &[u8]) -> i64 {
    let key = String::from_utf8(store.redis_key(rule, key)).expect("utf-8 key");
    match server.command(&["HGET", &key, "n"]) {
        Reply::Nil => 0,
        reply => reply
            .as_text()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("HGET {key} n answered {reply:?}")),
    }
}

/// `SCRIPT FLUSH` and `FUNCTION FLUSH` under concurrent checks of every
/// algorithm (batches of one algorithm and of several): every batch
/// answered `Function not found` is sent again once the library is loaded
/// again (and one answered `NOSCRIPT`, by source), and each check runs
/// exactly once: every one admitted, each key left exactly as the memory
/// store is after the same checks, round after round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_scripts_under_batches_run_each_check_exactly_once() {
    let server = RedisServer::start();
    let store = connect(&server.url(), Duration::from_secs(5)).await;
    let memory = MemoryStore::new();
    let rules: Arc<Vec<Rule>> = Arc::new(
        Algorithm::RATES
            .iter()
            .map(|&a| {
                RuleSpec::new(format!("flush_{a}"), a, 50, Duration::from_secs(600))
                    .build()
                    .expect("valid rule")
            })
            .collect(),
    );
    let t0 = 1_764_000_000_000_000;
    for round in 0..6u64 {
        server.script_flush();
        let t = t0 + round * 1_000_000;
        // Even rounds: each task checks one algorithm (single-script
        // batches); odd rounds: all five (mixed batches).
        let tasks: Vec<_> = (0..40usize)
            .map(|task| {
                let (store, rules) = (store.clone(), rules.clone());
                tokio::spawn(async move {
                    let picked: Vec<usize> = if round % 2 == 0 {
                        vec![task % 5; 3]
                    } else {
                        (0..5).collect()
                    };
                    let key = format!("k{}", task % 8);
                    let mut out = Vec::new();
                    // Tasks share keys: the order across tasks is the
                    // connection's, so each key is replayed one task at a
                    // time below.
                    for r in picked {
                        let d = store.check(&rules[r], key.as_bytes(), 1, Some(t)).await;
                        out.push((r, key.clone(), d.expect("check")));
                    }
                    out
                })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.expect("task"));
        }
        // Each key ran all its checks of this round exactly once: the
        // admitted units add up, whatever the order.
        let mut taken = std::collections::HashMap::new();
        for (r, key, d) in results.iter().flatten() {
            assert!(d.allowed, "round {round}: {d:?}");
            *taken.entry((*r, key.clone())).or_insert(0u64) += 1;
        }
        for ((r, key), n) in taken {
            for _ in 0..n {
                memory.check_sync(&rules[r], key.as_bytes(), 1, Some(t));
            }
            let peek = store
                .check(&rules[r], key.as_bytes(), 0, Some(t))
                .await
                .expect("peek");
            let expected = memory.check_sync(&rules[r], key.as_bytes(), 0, Some(t));
            assert_eq!(peek, expected, "round {round} rule {r} key {key}");
        }
    }
    assert!(server.keys_without_ttl().is_empty());
}

/// A batch written to the server when it dies fails as a whole
/// (`Unavailable`) and none of its checks is sent again: after the
/// restart, none of the keys it named exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_in_flight_when_the_server_dies_fails_and_is_not_resent() {
    let server = RedisServer::start();
    let store = connect(&server.url(), Duration::from_secs(5)).await;
    let rule = window("batch_inflight", 10);
    warm_then_pause(&server, &store, &rule, b"warm").await;
    let in_flight = spawn_checks(&store, &rule, "lost", 48);
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.kill();
    for task in in_flight {
        let err = task
            .await
            .expect("task")
            .expect_err("the server died with the batch unanswered");
        assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    }
    server.restart();
    settle(&store, &rule, b"after").await;
    for i in 0..48 {
        let key = format!("lost{i}");
        assert_eq!(
            window_count(&server, &store, &rule, key.as_bytes()),
            0,
            "{key} was sent again"
        );
    }
}

/// Checks of a batch that time out (the server frozen) may have run, and
/// may still run when it thaws, but never twice: each key counts at most
/// one unit afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_checks_that_time_out_never_run_twice() {
    let server = RedisServer::start();
    let store = connect(&server.url(), Duration::from_millis(200)).await;
    let rule = window("batch_timeout", 10);
    warm_then_pause(&server, &store, &rule, b"warm").await;
    let tasks = spawn_checks(&store, &rule, "late", 48);
    for task in tasks {
        let err = task.await.expect("task").expect_err("nothing answers");
        assert!(err.is_transient(), "{err}");
    }
    server.resume();
    settle(&store, &rule, b"after").await;
    // Whatever was in the frozen server's socket has run by now.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..48 {
        let key = format!("late{i}");
        let n = window_count(&server, &store, &rule, key.as_bytes());
        assert!(n <= 1, "{key} counted {n}: a check ran twice");
    }
}

/// Where the user may not call functions, checks (single, batched,
/// multi-rule) and leases run as scripts; where it may run neither
/// functions nor scripts, a check fails with an error that says so, and
/// nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_refused_fall_back_to_scripts_and_no_scripting_says_so() {
    let server = RedisServer::start();
    let calls = |command: &str| server.command_calls(command);
    let store = connect(&server.url(), Duration::from_secs(5)).await;
    let rule = window("refused", 100);
    assert!(
        store
            .check(&rule, b"k", 1, None)
            .await
            .expect("decided")
            .allowed
    );
    assert_eq!(calls("fcall"), 2, "Function not found, then the call");
    assert_eq!(calls("evalsha") + calls("eval"), 0);

    assert_eq!(
        server.cli(&["ACL", "SETUSER", "default", "-fcall"]).trim(),
        "OK"
    );
    let checks = (0..20).map(|_| store.check(&rule, b"k", 1, None));
    for d in futures_util::future::join_all(checks).await {
        assert!(d.expect("decided by script").allowed);
    }
    assert!(calls("evalsha") + calls("eval") >= 1, "ran as scripts");
    assert_eq!(
        window_count(&server, &store, &rule, b"k"),
        21,
        "each check once"
    );

    // The user may call functions but not load them, and the library is
    // gone: loading is refused, and the checks go as scripts.
    assert_eq!(server.cli(&["FUNCTION", "FLUSH"]).trim(), "OK");
    assert_eq!(
        server
            .cli(&["ACL", "SETUSER", "default", "+fcall", "-function"])
            .trim(),
        "OK"
    );
    let store = connect(&server.url(), Duration::from_secs(5)).await;
    assert!(
        store
            .check(&rule, b"k", 1, None)
            .await
            .expect("decided")
            .allowed
    );
    assert_eq!(window_count(&server, &store, &rule, b"k"), 22);

    // EVALSHA refused, EVAL allowed: by source.
    assert_eq!(
        server
            .cli(&["ACL", "SETUSER", "default", "-evalsha"])
            .trim(),
        "OK"
    );
    assert!(
        store
            .check(&rule, b"k", 1, None)
            .await
            .expect("decided by EVAL")
            .allowed
    );
    assert_eq!(window_count(&server, &store, &rule, b"k"), 23);

    assert_eq!(
        server.cli(&["ACL", "SETUSER", "default", "-eval"]).trim(),
        "OK"
    );
    let e = store
        .check(&rule, b"k", 1, None)
        .await
        .expect_err("no way to run a script");
    assert!(
        e.to_string().contains("Redis refuses tollgate's scripts"),
        "{e}"
    );
    assert_eq!(
        window_count(&server, &store, &rule, b"k"),
        23,
        "nothing written"
    );
}

/// A frozen server with a check already out: checks made while it waits
/// (held back until its reply, to go as one batch) still fail within the
/// timeout of their own call, not of when the connection first wrote them
/// (`Store::bounds_calls` promises that: `ResilientLimiter` then sets no
/// timer of its own).
///
/// Lateness shows only on the real clock (the connection's deadlines are
/// `std::time::Instant`s), so this asserts one upper bound, chosen to be
/// generous: timed from when they were written, the held-back checks
/// would wait up to 1.8 timeouts; the bound is 1.5, a timeout of 3 s
/// leaving 1.5 s for a loaded machine's pauses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_held_back_behind_a_frozen_batch_fail_on_time() {
    let timeout = Duration::from_secs(3);
    let slack = timeout / 2;
    let server = RedisServer::start();
    let store = connect(&server.url(), timeout).await;
    assert_eq!(store.bounds_calls(), Some(timeout));
    let rule = window("held", 100);
    warm_then_pause(&server, &store, &rule, b"k").await;
    let first = tokio::spawn(timed_check(store.clone(), rule.clone(), "first".into()));
    let mut later = Vec::new();
    for i in 0..4 {
        tokio::time::sleep(timeout / 5).await;
        later.push(tokio::spawn(timed_check(
            store.clone(),
            rule.clone(),
            format!("later{i}"),
        )));
    }
    for task in std::iter::once(first).chain(later) {
        let (result, waited) = ended(task, "a check").await.expect("task");
        let err = result.expect_err("nothing answers");
        assert!(err.is_transient(), "{err}");
        assert!(
            waited <= timeout + slack,
            "failed after {waited:?} (timeout {timeout:?}): {err}"
        );
    }
    server.resume();
    assert!(settle(&store, &rule, b"k").await.allowed);
}

/// A TCP relay to `upstream` that delays the server's first `Function not
/// found` by `delay`, then stops passing the client's bytes on (the server
/// as good as frozen for this connection from then on): the library's load
/// goes nowhere.
fn relay_freezing_after_function_not_found(upstream: String, delay: Duration) -> u16 {
    relay::relay(
        upstream,
        |_, frozen| !frozen.load(Ordering::SeqCst),
        move |bytes, frozen| {
            if bytes.windows(18).any(|w| w == b"Function not found") {
                frozen.store(true, Ordering::SeqCst);
                delay
            } else {
                Duration::ZERO
            }
        },
    )
}

/// The library loaded after `Function not found` is loaded within what is
/// left of the call's timeout: a check whose `FCALL` was answered late and
/// whose load then goes unanswered fails within the timeout
/// (`Store::bounds_calls`), not the time to the answer plus another
/// timeout.
///
/// As for held-back checks, one generous upper bound on the real clock:
/// the late answer comes at 0.6 timeouts, so another whole timeout for
/// the load would end it at 1.6; the bound is 1.3, a timeout of 5 s
/// leaving 1.5 s for a loaded machine's pauses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_load_that_hangs_fails_within_the_check_timeout() {
    let timeout = Duration::from_secs(5);
    let slack = timeout * 3 / 10;
    let server = RedisServer::start();
    let port = relay_freezing_after_function_not_found(server.addr(), timeout * 3 / 5);
    let store = connect(&format!("redis://127.0.0.1:{port}"), timeout).await;
    let rule = window("load_hangs", 100);
    let start = Instant::now();
    let err = ended(store.check(&rule, b"k", 1, None), "the check")
        .await
        .expect_err("the load goes unanswered");
    let waited = start.elapsed();
    assert!(err.is_transient(), "{err}");
    assert!(
        waited <= timeout + slack,
        "failed after {waited:?} (timeout {timeout:?}): {err}"
    );
}

/// A TCP relay to `upstream`. Once `arm` is set, the next connection to
/// send bytes is cut after them: what its client sends later goes nowhere,
/// and the server's replies reach the client `delay` late (a path that
/// dies silently, with one reply still on its way). Other connections
/// pass everything.
fn relay_cut_after_next_request(upstream: String, arm: Arc<AtomicBool>, delay: Duration) -> u16 {
    relay::relay(
        upstream,
        move |_, cut| {
            if cut.load(Ordering::SeqCst) {
                return false;
            }
            if arm.swap(false, Ordering::SeqCst) {
                cut.store(true, Ordering::SeqCst);
            }
            true
        },
        move |_, cut| {
            if cut.load(Ordering::SeqCst) {
                delay
            } else {
                Duration::ZERO
            }
        },
    )
}

/// A connection whose path dies silently with two commands out, the
/// older's reply arriving after the newer was written, is still found dead
/// (nothing at all for a whole timeout while replies are owed) and
/// replaced: checks decide again, not time out for as long as the socket
/// stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_silent_after_a_late_reply_is_replaced() {
    let timeout = Duration::from_millis(300);
    let server = RedisServer::start();
    let arm = Arc::new(AtomicBool::new(false));
    let port = relay_cut_after_next_request(server.addr(), arm.clone(), timeout / 3);
    let store = connect(&format!("redis://127.0.0.1:{port}"), timeout).await;
    let rule = window("silent", 1000);
    assert!(
        store
            .check(&rule, b"warm", 1, None)
            .await
            .expect("warm")
            .allowed
    );
    arm.store(true, Ordering::SeqCst);
    let first = {
        let (store, rule) = (store.clone(), rule.clone());
        tokio::spawn(async move { store.check(&rule, b"first", 1, None).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    // A whole batch waits: it goes out before the first one's reply.
    for task in spawn_checks(&store, &rule, "lost", 70) {
        let err = task
            .await
            .expect("task")
            .expect_err("never reaches the server");
        assert!(err.is_transient(), "{err}");
    }
    assert!(first.await.expect("task").expect("answered late").allowed);
    // Kept, the silent connection would time checks out for as long as
    // the relay holds it open (for good): a deadline far beyond the few
    // timeouts a replacement takes only turns that into a failure.
    let start = Instant::now();
    loop {
        if store.check(&rule, b"after", 1, None).await.is_ok() {
            break;
        }
        assert!(
            start.elapsed() < HANG,
            "still no answer after {:?}: the silent connection was kept",
            start.elapsed()
        );
    }
}

/// A user that may run the scripts but not touch tollgate's keys gets the
/// server's own error, not one about scripts.
#[tokio::test]
async fn a_key_permission_error_is_not_taken_for_refused_scripts() {
    let server = RedisServer::start();
    let store = connect(&server.url(), Duration::from_secs(5)).await;
    let rule = window("keys", 100);
    assert!(
        store
            .check(&rule, b"k", 1, None)
            .await
            .expect("decided")
            .allowed
    );
    assert_eq!(
        server
            .cli(&["ACL", "SETUSER", "default", "resetkeys", "~other:*"])
            .trim(),
        "OK"
    );
    let e = store
        .check(&rule, b"k", 1, None)
        .await
        .expect_err("no access to the key");
    let text = e.to_string();
    assert!(text.contains("NOPERM"), "{text}");
    assert!(!text.contains("refuses tollgate's scripts"), "{text}");
}

/// The checks of a batch a flushed library fails together load it once,
/// not each: a load compiles the whole library on the server.
#[tokio::test]
async fn a_flushed_library_is_loaded_once_for_a_whole_batch() {
    let server = RedisServer::start();
    let store = connect(&server.url(), Duration::from_secs(5)).await;
    let rule = window("once", 1000);
    assert!(
        store
            .check(&rule, b"k", 1, None)
            .await
            .expect("decided")
            .allowed
    );
    server.script_flush();
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
    // on this current-thread runtime all forty queue before the
    // connection's task runs: one batch, answered `Function not found`
    let checks = (0..40).map(|_| store.check(&rule, b"k", 1, None));
    for d in futures_util::future::join_all(checks).await {
        assert!(d.expect("decided").allowed);
    }
    assert_eq!(
        server.command_calls("function|load"),
        1,
        "one FUNCTION LOAD"
    );
    assert_eq!(
        window_count(&server, &store, &rule, b"k"),
        41,
        "each check once"
    );
}
