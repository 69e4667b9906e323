//! tollgate's rate limit quota service (RLQS, docs/rlqs.md) with real
//! Envoy 1.40 processes on `deploy/envoy/rlqs.yaml` (only addresses and
//! domain changed, `support::rlqs_envoy`), under closed-loop load: one
//! Envoy, three, and three split over two tollgate replicas on one Redis
//! hold a fixed window's limit within the documented bound, with no call
//! to tollgate per request. Then the operations docs/rlqs.md promises: a
//! deny-all block from the admin API reaches every Envoy within one
//! report; a killed tollgate leaves Envoy enforcing its last assignment
//! until the TTL, then its fallback (allow all), and a restarted one gets
//! every bucket back; an idle bucket is abandoned and the next request
//! makes a fresh one. Every wait polls with a deadline of a few report
//! periods (Envoy 1.40 reports every 5 s).
//!
//! The bound (docs/rlqs.md): with demand above the limit `L`, a window
//! admits at most `L` + the leases outstanding at its start (at most
//! `L/2`: each stream's share is at most `L / (2 x streams)`) + what Envoy
//! admitted before a bucket's first assignment, and at least `L` minus
//! one report period's grants (at most `L/2`). The counts start one report
//! after every stream is open, so the third term is in no counted window.
//! The figures are printed (`--nocapture`) for the issue's closing note.

use std::time::{Duration, Instant};

use redis_harness::RedisServer;

use crate::support::envoy::envoy_binary;
use crate::support::rlqs_envoy::{Load, RlqsEnvoy, Sample, now_ms};
use crate::support::{self, Tollgate};

/// The rule's limit per window.
const LIMIT: u64 = 100;
/// The fixed window, in seconds (windows are aligned to the Unix epoch).
const PERIOD_S: u64 = 20;
/// Windows counted per run.
const WINDOWS: u64 = 3;
/// How hard each Envoy's load thread sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Demand {
    /// A request every 5 ms or so: far above the limit (at least ten times
    /// it per window) without one core's worth of busy loop per Envoy. A
    /// lease is spent within milliseconds of its report.
    Flood,
    /// A request every 300 ms or so: with three Envoys about twice the
    /// limit per window, but less than a stream's share per report, so a
    /// lease is spent over seconds and leases cross window edges (the
    /// bound's time shift).
    Paced,
}

impl Demand {
    fn pause(self) -> Duration {
        match self {
            Demand::Flood => Duration::from_millis(5),
            Demand::Paced => Duration::from_millis(300),
        }
    }

    /// The fewest requests a window must see for the run to mean what it
    /// says: demand above the limit.
    fn least_per_window(self) -> u64 {
        match self {
            Demand::Flood => 10 * LIMIT,
            Demand::Paced => LIMIT * 6 / 5,
        }
    }
}
/// The RLQS domain every Envoy here reports under.
const DOMAIN: &str = "fleet";

/// A config: `[store]` at `store`, `[rlqs]` with `rlqs` lines, and
/// `per-tenant`: `LIMIT` per `PERIOD_S` s, a fixed window.
fn config(store: &str, rlqs: &str) -> String {
    config_with_rule(
        store,
        rlqs,
        &format!("algorithm = \"fixed_window\"\nlimit = {LIMIT}\nperiod = \"{PERIOD_S}s\""),
    )
}

/// A config with `per-tenant` defined by `rule` (TOML lines).
fn config_with_rule(store: &str, rlqs: &str, rule: &str) -> String {
    format!(
        "[store]\nurl = \"{store}\"\ntimeout = \"2s\"\n\n[rlqs]\n{rlqs}\n\n\
         [[rules]]\nname = \"per-tenant\"\n{rule}\n"
    )
}

/// `tollgate serve` with the gRPC port at `grpc` (e.g. `127.0.0.1:0`), the
/// HTTP API (for `/metrics`) and the admin API on free ports.
fn tollgate(config: &str, grpc: &str) -> Tollgate {
    Tollgate::start(
        config,
        &[
            "--grpc",
            grpc,
            "--http",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ],
    )
}

/// The sum of every series of family `name` whose labels include each of
/// `labels` (`k="v"` pairs, comma-separated; "" for all), in `s`'s
/// `/metrics`.
fn metric(s: &Tollgate, name: &str, labels: &str) -> f64 {
    let text = support::get(s.api(), "/metrics").text();
    sum_series(&text, name, labels)
}

fn sum_series(text: &str, name: &str, labels: &str) -> f64 {
    let wanted: Vec<&str> = labels.split(',').filter(|l| !l.is_empty()).collect();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (series_labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            let all = wanted
                .iter()
                .all(|w| series_labels.split(',').any(|l| l == *w));
            all.then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// Polls `f` every 100 ms until it holds or `limit` has passed; whether it
/// held.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One counted window: its start (Unix seconds), requests answered in it,
/// and how many were admitted (200) and neither admitted nor denied.
#[derive(Debug, Clone, Copy)]
struct Window {
    start_s: u64,
    sent: u64,
    admitted: u64,
    other: u64,
}

/// `samples` counted in the `n` windows from the one starting at `first`
/// (a window index).
fn count(samples: &[Sample], first: u64, n: u64) -> Vec<Window> {
    let mut out: Vec<Window> = (first..first + n)
        .map(|w| Window {
            start_s: w * PERIOD_S,
            sent: 0,
            admitted: 0,
            other: 0,
        })
        .collect();
    for s in samples {
        let w = s.at_ms / (PERIOD_S * 1000);
        let Some(i) = w.checked_sub(first).filter(|&i| i < n) else {
            continue;
        };
        let win = &mut out[usize::try_from(i).expect("small")];
        win.sent += 1;
        match s.status {
            200 => win.admitted += 1,
            429 => {}
            _ => win.other += 1,
        }
    }
    out
}

/// Runs one load thread per Envoy at `demand`, every request in tenant
/// `tenant`'s bucket, until `WINDOWS` whole windows have passed one report after
/// `streams` streams are open on `tollgates` together; the counted
/// windows, checked against the bound, and what the tollgates were asked.
fn fleet_run(
    what: &str,
    tollgates: &[&Tollgate],
    envoys: &[RlqsEnvoy],
    tenant: &str,
    demand: Demand,
) {
    let started = Instant::now();
    let loads: Vec<Load> = envoys
        .iter()
        .map(|e| Load::start(e.addr(), &[("x-tenant", tenant)], demand.pause()))
        .collect();
    let streams = envoys.len() as f64;
    let open = eventually(Duration::from_secs(30), || {
        tollgates
            .iter()
            .map(|t| metric(t, "tollgate_rlqs_streams", ""))
            .sum::<f64>()
            >= streams
    });
    assert!(
        open,
        "{what}: {streams} RLQS streams did not open; tollgate logs:\n{}\nEnvoy log:\n{}",
        tollgates
            .iter()
            .map(|t| t.log())
            .collect::<Vec<_>>()
            .join("\n---\n"),
        envoys[0].log()
    );
    // One report period (5 s) and a margin after every stream is open:
    // each bucket has had its first assignment, and what Envoy admitted
    // before it was charged, in no counted window.
    let period_ms = PERIOD_S * 1000;
    let first = (now_ms() + 6_000).div_ceil(period_ms);
    let end_ms = (first + WINDOWS) * period_ms;
    std::thread::sleep(Duration::from_millis(end_ms.saturating_sub(now_ms()) + 200));
    let samples: Vec<Sample> = loads.into_iter().flat_map(Load::stop).collect();
    let windows = count(&samples, first, WINDOWS);

    let reports: f64 = tollgates
        .iter()
        .map(|t| metric(t, "tollgate_rlqs_reports_total", ""))
        .sum();
    let checks: f64 = tollgates
        .iter()
        .map(|t| metric(t, "tollgate_checks_total", "rule=\"per-tenant\""))
        .sum();
    let rls_calls: f64 = tollgates
        .iter()
        .map(|t| {
            metric(
                t,
                "tollgate_decision_latency_seconds_count",
                "door=\"envoy\"",
            )
        })
        .sum();
    // Read after the counters: every report they hold came before it.
    let run_s = started.elapsed().as_secs_f64();
    let total_sent: u64 = samples.len() as u64;
    for w in &windows {
        eprintln!(
            "rlqs {what}: window {}: admitted {} of {} sent (limit {LIMIT})",
            w.start_s, w.admitted, w.sent
        );
    }
    let admitted: u64 = windows.iter().map(|w| w.admitted).sum();
    eprintln!(
        "rlqs {what}: {WINDOWS} windows admitted {admitted} (limit {}); \
         {total_sent} requests in all, {reports} reports, {checks} checks, \
         {rls_calls} ShouldRateLimit calls",
        WINDOWS * LIMIT
    );

    // The bound's terms for this limit (see the module's doc).
    let outstanding = LIMIT / 2;
    let one_period_grant = LIMIT / 2;
    for w in &windows {
        assert_eq!(w.other, 0, "{what}: answers neither 200 nor 429: {w:?}");
        // The premise: demand above the limit in every window.
        assert!(
            w.sent >= demand.least_per_window(),
            "{what}: only {} requests in window {}: the load did not exceed the limit",
            w.sent,
            w.start_s
        );
        assert!(
            w.admitted <= LIMIT + outstanding,
            "{what}: window {} admitted {} > {LIMIT} + {outstanding}",
            w.start_s,
            w.admitted
        );
        assert!(
            w.admitted >= LIMIT - one_period_grant,
            "{what}: window {} admitted {} < {LIMIT} - {one_period_grant}",
            w.start_s,
            w.admitted
        );
    }
    // Any run of windows admits at most L each plus the leases outstanding
    // at its start, once: what one window carries into the next was
    // counted in the first, but what the run's first window carries in was
    // counted before the run (here, before counting began).
    for pair in windows.windows(2) {
        let two = pair[0].admitted + pair[1].admitted;
        assert!(
            two <= 2 * LIMIT + outstanding,
            "{what}: windows {} and {} admitted {two} > 2 x {LIMIT} + {outstanding}",
            pair[0].start_s,
            pair[1].start_s
        );
    }
    assert!(
        admitted <= WINDOWS * LIMIT + outstanding,
        "{what}: {admitted} admitted over {WINDOWS} windows"
    );
    let sent: u64 = windows.iter().map(|w| w.sent).sum();
    if demand == Demand::Flood {
        assert!(
            admitted * 5 <= sent,
            "{what}: {admitted} of {sent} admitted: not far below no limit at all"
        );
    }
    // No call per request: a report every 5 s per stream (and one for
    // its bucket's first request), whatever the requests; a lease or two
    // per report; the rate limit service never asked.
    assert!(reports >= 1.0, "{what}: no report reached tollgate");
    let most_reports = streams * (run_s / 5.0 + 4.0);
    assert!(
        reports <= most_reports,
        "{what}: {reports} reports in {run_s:.0} s from {streams} streams"
    );
    assert!(
        checks <= 2.0 * reports + streams,
        "{what}: {checks} checks for {reports} reports"
    );
    if demand == Demand::Flood {
        assert!(
            reports * 20.0 <= total_sent as f64,
            "{what}: {reports} reports for {total_sent} requests"
        );
    }
    assert_eq!(rls_calls, 0.0, "{what}: Envoy called ShouldRateLimit");
    // Envoy's side of it: one gRPC stream each (a reconnect or two at most).
    for (i, e) in envoys.iter().enumerate() {
        let streams = e.streams_opened();
        assert!(
            streams.is_some_and(|n| (1..=3).contains(&n)),
            "{what}: Envoy {i} opened {streams:?} streams to tollgate"
        );
    }
}

#[test]
fn one_envoy_admits_the_limit_per_window_within_the_bound() {
    envoy_binary();
    let up = support::start_upstream();
    let s = tollgate(&config("memory", ""), "127.0.0.1:0");
    let envoy = RlqsEnvoy::start(s.grpc(), up.addr, DOMAIN);
    fleet_run("one Envoy", &[&s], &[envoy], "acme", Demand::Flood);
}

#[test]
fn three_envoys_on_one_tollgate_share_the_limit_within_the_bound() {
    envoy_binary();
    let up = support::start_upstream();
    let s = tollgate(&config("memory", ""), "127.0.0.1:0");
    let envoys: Vec<RlqsEnvoy> = (0..3)
        .map(|_| RlqsEnvoy::start(s.grpc(), up.addr, DOMAIN))
        .collect();
    fleet_run("three Envoys", &[&s], &envoys, "acme", Demand::Flood);
}

#[test]
fn three_envoys_paced_above_the_limit_spend_leases_across_window_edges_within_the_bound() {
    envoy_binary();
    let up = support::start_upstream();
    let s = tollgate(&config("memory", ""), "127.0.0.1:0");
    let envoys: Vec<RlqsEnvoy> = (0..3)
        .map(|_| RlqsEnvoy::start(s.grpc(), up.addr, DOMAIN))
        .collect();
    fleet_run("three Envoys, paced", &[&s], &envoys, "acme", Demand::Paced);
}

#[test]
fn three_envoys_on_two_replicas_over_redis_share_the_limit_within_the_bound() {
    envoy_binary();
    let redis = RedisServer::start();
    let up = support::start_upstream();
    let a = tollgate(&config(&redis.url(), ""), "127.0.0.1:0");
    let b = tollgate(&config(&redis.url(), ""), "127.0.0.1:0");
    // Each replica sizes its streams' shares by the live replicas: wait
    // until both count two.
    for replica in [&a, &b] {
        assert!(
            eventually(Duration::from_secs(30), || metric(
                replica,
                "tollgate_live_replicas",
                ""
            ) == 2.0),
            "the heartbeat did not count two replicas:\n{}",
            replica.log()
        );
    }
    let envoys = vec![
        RlqsEnvoy::start(a.grpc(), up.addr, DOMAIN),
        RlqsEnvoy::start(a.grpc(), up.addr, DOMAIN),
        RlqsEnvoy::start(b.grpc(), up.addr, DOMAIN),
    ];
    fleet_run(
        "two replicas, three Envoys",
        &[&a, &b],
        &envoys,
        "acme",
        Demand::Flood,
    );
}

/// One report period of Envoy 1.40 plus a margin for a busy machine: what
/// "within one report" may take.
const ONE_REPORT: Duration = Duration::from_secs(15);

/// `s`'s RLQS and check series, for a failure's message.
fn rlqs_metrics(s: &Tollgate) -> String {
    let text = support::get(s.api(), "/metrics").text();
    text.lines()
        .filter(|l| l.starts_with("tollgate_rlqs_") || l.starts_with("tollgate_checks_total"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until `s` has `n` RLQS streams open.
fn streams_open(s: &Tollgate, n: f64) {
    assert!(
        eventually(Duration::from_secs(30), || metric(
            s,
            "tollgate_rlqs_streams",
            ""
        ) >= n),
        "{n} RLQS streams did not open:\n{}",
        s.log()
    );
}

#[test]
fn a_deny_all_block_from_the_admin_api_reaches_every_envoy_within_a_report() {
    envoy_binary();
    let up = support::start_upstream();
    // A limit the probes never reach: only the block denies.
    let rule = "algorithm = \"gcra\"\nlimit = 100000\nperiod = \"1h\"";
    let s = tollgate(&config_with_rule("memory", "", rule), "127.0.0.1:0");
    let envoys: Vec<RlqsEnvoy> = (0..3)
        .map(|_| RlqsEnvoy::start(s.grpc(), up.addr, DOMAIN))
        .collect();
    for e in &envoys {
        assert_eq!(e.get("acme", None), 200);
    }
    streams_open(&s, 3.0);
    // Every stream holds a share (a token bucket) before the block.
    assert!(
        eventually(ONE_REPORT, || metric(
            &s,
            "tollgate_rlqs_assignments_total",
            "kind=\"token_bucket\""
        ) >= 3.0),
        "no share assigned:\n{}",
        s.log()
    );

    let r = support::post_json(
        s.admin(),
        "/admin/v1/blocks",
        r#"{"rule":"*","key":"tenant=acme","for_ms":600000}"#,
    );
    assert_eq!(r.status, 200, "block: {}", r.text());
    let blocked = Instant::now();
    for (i, e) in envoys.iter().enumerate() {
        let left = ONE_REPORT.saturating_sub(blocked.elapsed());
        assert!(
            eventually(left, || e.get("acme", None) == 429),
            "Envoy {i} still admits {:?} after the block:\n{}",
            blocked.elapsed(),
            s.log()
        );
        eprintln!(
            "rlqs block: Envoy {i} denies {:?} after the block",
            blocked.elapsed()
        );
    }
    // Another tenant's bucket is not blocked.
    assert_eq!(envoys[0].get("other", None), 200);
    // And it holds: the deny is an assignment, not one lucky answer.
    for e in &envoys {
        assert_eq!(e.get("acme", None), 429);
    }

    // Unblocked, every Envoy gets a share again within a report.
    let r = support::request(
        s.admin(),
        "DELETE",
        "/admin/v1/blocks/*/tenant%3Dacme",
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "unblock: {}", r.text());
    let unblocked = Instant::now();
    for (i, e) in envoys.iter().enumerate() {
        let left = ONE_REPORT.saturating_sub(unblocked.elapsed());
        assert!(
            eventually(left, || e.get("acme", None) == 200),
            "Envoy {i} still denies {:?} after the unblock:\n{}",
            unblocked.elapsed(),
            s.log()
        );
    }
}

#[test]
fn envoy_enforces_until_the_ttl_when_tollgate_dies_and_resubscribes_on_restart() {
    envoy_binary();
    let up = support::start_upstream();
    // 10 an hour: exhausted at once under load, and no window edge to
    // refill it while the test runs. A TTL of 10 s: two report periods.
    let rule = "algorithm = \"gcra\"\nlimit = 10\nperiod = \"1h\"";
    let config = config_with_rule("memory", "assignment_ttl = \"10s\"", rule);
    let mut s = tollgate(&config, "127.0.0.1:0");
    let grpc = s.grpc();
    let envoy = RlqsEnvoy::start(grpc, up.addr, DOMAIN);
    let load = Load::start(
        envoy.addr(),
        &[("x-tenant", "acme")],
        Duration::from_millis(20),
    );
    // Enforced: the limit spent, tollgate assigns deny-all, Envoy denies.
    assert!(
        eventually(Duration::from_secs(30), || metric(
            &s,
            "tollgate_rlqs_assignments_total",
            "kind=\"deny_all\""
        ) >= 1.0),
        "no deny-all assigned:\n{}",
        s.log()
    );
    assert!(
        eventually(ONE_REPORT, || load
            .samples()
            .last()
            .is_some_and(|x| x.status == 429)),
        "Envoy does not deny:\n{}",
        envoy.log()
    );

    s.signal("KILL");
    assert!(s.wait_exit(Duration::from_secs(10)).is_some(), "no exit");
    let killed = now_ms();
    // The last assignment came at a report at most 5 s before the kill,
    // with 10 s to live: Envoy denies for at least 3 s more.
    let expired_by = killed + 10_000 + 5_000;
    assert!(
        eventually(Duration::from_secs(30), || load
            .samples()
            .iter()
            .any(|x| x.at_ms > killed && x.status == 200)),
        "Envoy never fell back to allow-all:\n{}",
        envoy.log()
    );
    let samples = load.samples();
    let after: Vec<_> = samples.iter().filter(|x| x.at_ms > killed).collect();
    let first_admit = after
        .iter()
        .find(|x| x.status == 200)
        .map(|x| x.at_ms - killed)
        .expect("an admission");
    eprintln!("rlqs kill: Envoy denied until {first_admit} ms after the kill (TTL 10 s)");
    let early: Vec<_> = after.iter().filter(|x| x.at_ms <= killed + 3_000).collect();
    assert!(!early.is_empty(), "no request in the 3 s after the kill");
    assert!(
        early.iter().all(|x| x.status == 429),
        "Envoy admitted within 3 s of the kill, before its assignment's TTL"
    );
    assert!(
        first_admit <= expired_by - killed + 5_000,
        "the fallback came {first_admit} ms after the kill"
    );

    // Restarted on the same port: Envoy reconnects on a report tick, its
    // first message names every bucket, and tollgate enforces again.
    let restarted = tollgate(&config, &grpc.to_string());
    assert!(
        eventually(Duration::from_secs(30), || metric(
            &restarted,
            "tollgate_rlqs_buckets",
            ""
        ) > 0.0),
        "no bucket re-subscribed:\n{}",
        restarted.log()
    );
    let subscribed = now_ms();
    assert!(
        eventually(Duration::from_secs(30), || load
            .samples()
            .iter()
            .any(|x| x.at_ms > subscribed && x.status == 429)),
        "the restarted tollgate does not enforce the limit:\n{}",
        restarted.log()
    );
    let samples = load.stop();
    assert!(
        samples.iter().all(|x| matches!(x.status, 200 | 429)),
        "answers other than 200 and 429: no call on the request path may fail"
    );
}

#[test]
fn an_idle_bucket_is_abandoned_and_the_next_request_makes_a_fresh_one() {
    envoy_binary();
    let up = support::start_upstream();
    // 2 an hour: spent by the first requests, so the bucket is denied
    // (deny-all re-sent on every report) while it idles.
    let rule = "algorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"";
    let s = tollgate(
        &config_with_rule("memory", "abandon_after = \"10s\"", rule),
        "127.0.0.1:0",
    );
    let envoy = RlqsEnvoy::start(s.grpc(), up.addr, DOMAIN);
    assert!(
        eventually(ONE_REPORT, || envoy.get("idle", None) == 429),
        "the bucket is never denied:\n{}",
        s.log()
    );
    assert_eq!(metric(&s, "tollgate_rlqs_buckets", ""), 1.0);
    let denied = metric(&s, "tollgate_rlqs_assignments_total", "kind=\"deny_all\"");
    assert_eq!(
        metric(&s, "tollgate_rlqs_assignments_total", "kind=\"abandon\""),
        0.0
    );

    // No request for 10 s, reported idle every 5 s: abandoned.
    assert!(
        eventually(Duration::from_secs(60), || metric(
            &s,
            "tollgate_rlqs_assignments_total",
            "kind=\"abandon\""
        ) >= 1.0),
        "the idle bucket was not abandoned:\n{}",
        s.log()
    );
    // Until then it stayed denied (idle reports got deny-all again).
    assert!(
        metric(&s, "tollgate_rlqs_assignments_total", "kind=\"deny_all\"") > denied,
        "no deny-all while idle:\n{}",
        rlqs_metrics(&s)
    );
    assert!(
        eventually(ONE_REPORT, || metric(&s, "tollgate_rlqs_buckets", "")
            == 0.0),
        "tollgate still holds the abandoned bucket"
    );

    // Envoy dropped it: the next request makes a fresh bucket, admitted
    // before its first assignment (the old one was denied), and reported
    // at once.
    let reports = metric(&s, "tollgate_rlqs_reports_total", "");
    assert!(
        eventually(ONE_REPORT, || envoy.get("idle", None) == 200),
        "Envoy still denies on the abandoned bucket:\n{}",
        envoy.log()
    );
    assert!(
        eventually(ONE_REPORT, || metric(&s, "tollgate_rlqs_buckets", "")
            == 1.0
            && metric(&s, "tollgate_rlqs_reports_total", "") > reports),
        "the fresh bucket was not reported:\n{}",
        s.log()
    );
    // And the rule applies to it: still spent, denied again.
    assert!(
        eventually(ONE_REPORT, || envoy.get("idle", None) == 429),
        "the fresh bucket is not denied:\n{}",
        s.log()
    );
}

#[test]
fn the_bucket_name_picks_the_rule_a_domain_may_fix_it_and_no_rule_is_allowed() {
    envoy_binary();
    let up = support::start_upstream();
    // `strict` is spent after two requests; `per-tenant` never is.
    let config = "[store]\nurl = \"memory\"\n\n[rlqs]\n\n\
                  [rlqs.domains.fixed]\nrule = \"strict\"\nkey_entries = [\"tenant\"]\n\n\
                  [[rules]]\nname = \"per-tenant\"\nalgorithm = \"gcra\"\nlimit = 100000\nperiod = \"1h\"\n\n\
                  [[rules]]\nname = \"strict\"\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"\n";
    let s = tollgate(config, "127.0.0.1:0");
    let named = RlqsEnvoy::start(s.grpc(), up.addr, DOMAIN);
    let fixed = RlqsEnvoy::start(s.grpc(), up.addr, "fixed");
    let inspect = |key: &str| {
        let r = support::get(s.admin(), &format!("/admin/v1/keys/strict/{key}"));
        assert_eq!(r.status, 200, "inspect {key}: {}", r.text());
        r.json()["remaining"].as_u64().expect("remaining")
    };

    // x-rule names the rule: {name: strict, tenant: t1} is rule `strict`,
    // key `tenant=t1`, denied once its two are spent.
    assert!(
        eventually(ONE_REPORT, || named.get("t1", Some("strict")) == 429),
        "x-rule: strict is never denied:\n{}",
        s.log()
    );
    assert_eq!(inspect("tenant%3Dt1"), 0);
    // The same tenant without x-rule is `per-tenant`'s: not denied.
    for _ in 0..5 {
        assert_eq!(named.get("t1", None), 200);
    }
    // A domain with a fixed rule: {name: per-tenant, tenant: t2} counts on
    // `strict`, key `tenant=t2` (its key_entries).
    assert_eq!(inspect("tenant%3Dt2"), 2);
    assert!(
        eventually(ONE_REPORT, || fixed.get("t2", None) == 429),
        "domain `fixed` is not held to `strict`:\n{}",
        s.log()
    );
    assert_eq!(inspect("tenant%3Dt2"), 0);
    // A name no rule has: `unmatched` (allow by default), never denied.
    for _ in 0..3 {
        assert_eq!(named.get("t3", Some("no-such-rule")), 200);
    }
    assert!(
        eventually(ONE_REPORT, || metric(
            &s,
            "tollgate_rlqs_assignments_total",
            "kind=\"allow_all\""
        ) >= 1.0),
        "no allow-all for a bucket of no rule:\n{}",
        rlqs_metrics(&s)
    );
    assert_eq!(named.get("t3", Some("no-such-rule")), 200);
}

#[test]
fn sum_series_adds_the_series_whose_labels_match() {
    let text = "# HELP x y\nx_total{rule=\"a\",kind=\"k\"} 2\nx_total{rule=\"b\"} 3\n\
                x_total_more 9\nx_total 4\ng 1.5\n";
    assert_eq!(sum_series(text, "x_total", ""), 9.0);
    assert_eq!(sum_series(text, "x_total", "rule=\"a\""), 2.0);
    assert_eq!(sum_series(text, "x_total", "kind=\"k\",rule=\"a\""), 2.0);
    assert_eq!(sum_series(text, "x_total", "rule=\"c\""), 0.0);
    assert_eq!(sum_series(text, "g", ""), 1.5);
}
