//! tollgate's RLQS server with real Envoy 1.40 processes, the operations
//! docs/rlqs.md promises: a deny-all block from the admin API reaches
//! every Envoy within one report; a killed tollgate leaves Envoy enforcing
//! its last assignment until the TTL, then its fallback (allow all), and
//! a restarted one gets every bucket back; an idle bucket is abandoned and
//! the next request makes a fresh one. Every wait polls with a deadline
//! of a few report periods (Envoy 1.40 reports every 5 s).

use std::time::{Duration, Instant};

use crate::rlqs_real::{DOMAIN, config_with_rule, eventually, metric, tollgate};
use crate::support::envoy::envoy_binary;
use crate::support::rlqs_envoy::{Load, RlqsEnvoy, now_ms};
use crate::support::{self, Tollgate};

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
