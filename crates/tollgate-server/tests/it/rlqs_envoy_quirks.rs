//! What Envoy 1.40's rate limit quota filter (RLQS) does where it departs
//! from the proto's comments, and tollgate's RLQS server relies on it:
//! each test runs the real Envoy on `deploy/envoy/rlqs.yaml` (only its
//! addresses changed, and what the test names) against a scripted server
//! (`support::rlqs_script`) and asserts on the reports the script receives
//! and on Envoy's answers (200, or 429 when denied). A test that fails
//! here means Envoy changed: check docs/rlqs.md's list of quirks and the
//! server's answers against the new behaviour before changing the test.
//!
//! Envoy applies a response on its main thread; a test learns that it has
//! by toggling a probe bucket in the same response
//! ([`Fixture::apply`]) and waiting for the probe's answer to change.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use serde_json::{Value, json};

use crate::support::envoy::{Envoy, envoy_binary};
use crate::support::envoy_bootstrap::yaml_to_json;
use crate::support::rlqs_script::{
    Bucket, Report, RlqsScript, abandon, blanket, bucket, duration, requests_per_second,
    token_bucket,
};
use crate::support::{self, Upstream};

/// The RLQS domain of `deploy/envoy/rlqs.yaml`.
const DOMAIN: &str = "tollgate";

/// The tenant of the probe bucket [`Fixture::apply`] toggles.
const PROBE: &str = "probe";

/// A time to live no test outlasts.
fn ttl() -> Option<envoy_types::pb::google::protobuf::Duration> {
    Some(duration(120, 0))
}

/// The bucket `deploy/envoy/rlqs.yaml` makes for `x-tenant: tenant`.
fn tenant(tenant: &str) -> Bucket {
    bucket(&[("name", "per-tenant"), ("tenant", tenant)])
}

/// `deploy/envoy/rlqs.yaml` in the repository.
fn rlqs_yaml() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/envoy/rlqs.yaml")
}

/// `deploy/envoy/rlqs.yaml` with the listener and admin on free ports,
/// its clusters at `rlqs` and `upstream`, then `edit` applied to each
/// bucket's settings (`RateLimitQuotaBucketSettings`).
fn bootstrap(rlqs: SocketAddr, upstream: SocketAddr, mut edit: impl FnMut(&mut Value)) -> String {
    let path = rlqs_yaml();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut config = yaml_to_json(&text);
    let loopback = json!({"socket_address": {"address": "127.0.0.1", "port_value": 0}});
    config["admin"]["address"] = loopback.clone();
    config["static_resources"]["listeners"][0]["address"] = loopback;
    for cluster in config["static_resources"]["clusters"]
        .as_array_mut()
        .expect("clusters")
    {
        let addr = match cluster["name"].as_str() {
            Some("rlqs") => rlqs,
            Some("upstream") => upstream,
            other => panic!("rlqs.yaml: unexpected cluster {other:?}"),
        };
        cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] = json!({
            "socket_address": {"address": "127.0.0.1", "port_value": addr.port()}
        });
    }
    let filter = &mut config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        ["typed_config"]["http_filters"][0];
    assert_eq!(filter["name"], "envoy.filters.http.rate_limit_quota");
    assert_eq!(filter["typed_config"]["domain"], DOMAIN);
    for matcher in filter["typed_config"]["bucket_matchers"]["matcher_list"]["matchers"]
        .as_array_mut()
        .expect("matchers")
    {
        edit(&mut matcher["on_match"]["action"]["typed_config"]);
    }
    serde_json::to_string_pretty(&config).expect("JSON")
}

/// One Envoy on `deploy/envoy/rlqs.yaml`, its scripted RLQS server and
/// its upstream.
struct Fixture {
    script: RlqsScript,
    envoy: Envoy,
    _upstream: Upstream,
    /// How many responses [`Fixture::apply`] has pushed (the probe is
    /// denied after an odd number, allowed after an even one).
    applied: std::cell::Cell<u32>,
}

impl Fixture {
    /// Starts them, `edit` applied to each bucket's settings.
    fn start(edit: impl FnMut(&mut Value)) -> Fixture {
        let script = RlqsScript::start();
        let upstream = support::start_upstream();
        let envoy = Envoy::start(&bootstrap(script.addr, upstream.addr, edit));
        // The filter says at `info` whether it made a token bucket anew or
        // kept the one it had (`Fixture::token_bucket_logs`).
        let r = support::request(
            envoy.admin,
            "POST",
            "/logging?rate_limit_quota=info",
            &[],
            b"",
        );
        assert_eq!(r.status, 200, "{}", r.text());
        Fixture {
            script,
            envoy,
            _upstream: upstream,
            applied: std::cell::Cell::new(0),
        }
    }

    /// Envoy's status for a request of `x-tenant: tenant`.
    fn get(&self, tenant: &str) -> u16 {
        support::request(
            self.envoy.listener,
            "GET",
            "/",
            &[("x-tenant", tenant)],
            b"",
        )
        .status
    }

    /// Envoy's statuses for `n` requests of `tenant`, in order.
    fn statuses(&self, tenant: &str, n: usize) -> Vec<u16> {
        (0..n).map(|_| self.get(tenant)).collect()
    }

    /// The stream Envoy opened last.
    fn stream(&self) -> usize {
        let n = self.script.streams();
        assert!(n > 0, "Envoy opened no RLQS stream");
        n - 1
    }

    /// Makes `tenant`'s bucket (one request) and waits for its first report.
    fn sight(&self, tenant: &str) -> Report {
        let since = Instant::now();
        assert_eq!(self.get(tenant), 200, "{tenant}: no assignment yet");
        let b = self::tenant(tenant);
        self.script.wait(&format!("first report of {b:?}"), |r| {
            r.iter()
                .find(|r| r.at >= since && r.is_first_sighting() && r.buckets() == [b.clone()])
                .cloned()
        })
    }

    /// Pushes `actions` on the last stream with the probe bucket toggled
    /// in the same response, and returns once Envoy answers the probe as
    /// toggled: Envoy has applied the whole response. The probe bucket
    /// must have been made ([`Fixture::sight`]).
    fn apply(&self, mut actions: Vec<BucketAction>) {
        let n = self.applied.get() + 1;
        self.applied.set(n);
        let deny = n % 2 == 1;
        actions.push(blanket(&tenant(PROBE), deny, ttl()));
        self.script.push(self.stream(), actions);
        let want = if deny { 429 } else { 200 };
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.get(PROBE) != want {
            assert!(
                Instant::now() < deadline,
                "Envoy did not apply response #{n} (the probe is not {want}); its log:\n{}",
                self.envoy.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many times Envoy's log says it made a token bucket anew, and
    /// how many it kept the one it had (the assignment unchanged by its
    /// comparison).
    fn token_bucket_logs(&self) -> (usize, usize) {
        let log = self.envoy.log();
        (
            log.matches("A new TokenBucket has been configured").count(),
            log.matches("is carried over during response processing")
                .count(),
        )
    }

    /// Waits for `n` more reports after now (each 5 s apart): time that
    /// passes on Envoy's own clock.
    fn wait_reports(&self, n: usize) -> Vec<Report> {
        let since = Instant::now();
        self.script.wait(&format!("{n} more reports"), |r| {
            let later: Vec<Report> = r.iter().filter(|r| r.at > since).cloned().collect();
            (later.len() >= n).then_some(later)
        })
    }
}

fn allowed(r: &Report, b: &Bucket) -> u64 {
    r.usage(b).map_or(0, |u| u.num_requests_allowed)
}

#[test]
fn deploy_envoy_rlqs_yaml_passes_envoy_validate_as_it_is() {
    let out = Command::new(envoy_binary())
        .args(["--mode", "validate", "-c"])
        .arg(rlqs_yaml())
        .output()
        .expect("run envoy");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "envoy --mode validate -c deploy/envoy/rlqs.yaml: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn deploy_envoy_rlqs_yaml_names_the_bucket_after_x_rule_else_per_tenant() {
    let f = Fixture::start(|_| {});
    f.sight("acme");
    let headers = [("x-rule", "per-user"), ("x-tenant", "acme")];
    let r = support::request(f.envoy.listener, "GET", "/", &headers, b"");
    assert_eq!(r.status, 200);
    let per_user = bucket(&[("name", "per-user"), ("tenant", "acme")]);
    let named = f.script.wait("a report of the per-user bucket", |r| {
        r.iter().find(|r| r.usage(&per_user).is_some()).cloned()
    });
    assert_eq!(named.buckets(), [per_user]);
    assert!(named.is_first_sighting(), "{named:#?}");
}

#[test]
fn a_new_bucket_is_reported_alone_with_time_elapsed_0_then_every_bucket_as_deltas_in_whole_seconds()
{
    let f = Fixture::start(|_| {});
    let (a, b) = (tenant("a"), tenant("b"));
    let first = f.sight("a");
    assert_eq!(first.stream, 0);
    let usage = first.usage(&a).expect("a");
    // The proto says `gt {}`: a strict server would refuse this message.
    assert_eq!(usage.time_elapsed, Some(duration(0, 0)), "{first:#?}");
    assert_eq!(
        (usage.num_requests_allowed, usage.num_requests_denied),
        (1, 0)
    );
    let second = f.sight("b");
    assert_eq!(second.usage(&b).expect("b").num_requests_allowed, 1);
    assert_eq!(f.statuses("a", 3), [200; 3]);
    // Periodic reports from now on: wait until they have counted the 3
    // requests of `a`, then for one more, which must count nothing new.
    let periodic = |r: &[Report]| -> Vec<Report> {
        r.iter()
            .filter(|r| r.at > second.at && !r.is_first_sighting())
            .cloned()
            .collect()
    };
    let counted = f.script.wait("periodic reports counting 3 of a", |r| {
        let p = periodic(r);
        (p.iter().map(|r| allowed(r, &a)).sum::<u64>() >= 3).then_some(p.len())
    });
    let later = f.script.wait("one more periodic report", |r| {
        let p = periodic(r);
        (p.len() > counted).then_some(p)
    });
    // Deltas: the first reports' requests are not counted again, nor are
    // one report's in the next.
    assert_eq!(later.iter().map(|r| allowed(r, &a)).sum::<u64>(), 3);
    assert_eq!(later.iter().map(|r| allowed(r, &b)).sum::<u64>(), 0);
    for r in &later {
        assert_eq!(r.buckets().len(), 2, "every bucket, every time: {r:#?}");
        assert!(r.usage(&a).is_some() && r.usage(&b).is_some(), "{r:#?}");
        for u in &r.message.bucket_quota_usages {
            let elapsed = u.time_elapsed.expect("time_elapsed");
            assert_eq!(elapsed.nanos, 0, "whole seconds: {r:#?}");
        }
    }
    // The domain the proto says only the first message needs, on every one.
    for r in f.script.reports() {
        assert_eq!(r.message.domain, DOMAIN, "{r:#?}");
        assert_eq!(r.stream, 0);
    }
}

#[test]
fn reports_come_every_5s_even_when_reporting_interval_says_60s() {
    let f = Fixture::start(|settings| settings["reporting_interval"] = json!("60s"));
    f.sight("a");
    // The first report, then two periodic ones.
    let third = f.script.nth(2);
    let (first, second) = (f.script.nth(0), f.script.nth(1));
    let gap = third.at - second.at;
    assert!(
        gap >= Duration::from_secs(4) && gap < Duration::from_secs(60),
        "{gap:?} between two periodic reports"
    );
    assert!(second.at - first.at < Duration::from_secs(60));
    assert!(second.usage(&tenant("a")).is_some() && third.usage(&tenant("a")).is_some());
}

#[test]
fn requests_per_time_unit_is_ignored_a_0_rps_assignment_still_admits() {
    let f = Fixture::start(|_| {});
    f.sight("a");
    f.sight(PROBE);
    f.apply(vec![requests_per_second(&tenant("a"), 0, ttl())]);
    // 0 per second is deny-all by the proto.
    assert_eq!(f.statuses("a", 3), [200; 3]);
}

#[test]
fn an_assignment_without_time_to_live_expires_at_once() {
    // Without an expired-assignment fallback, an expired bucket goes back
    // to its no-assignment behaviour (ALLOW_ALL).
    let f = Fixture::start(|settings| {
        let removed = settings
            .as_object_mut()
            .and_then(|s| s.remove("expired_assignment_behavior"));
        assert!(
            removed.is_some(),
            "rlqs.yaml sets expired_assignment_behavior"
        );
    });
    f.sight("a");
    f.sight(PROBE);
    f.apply(vec![blanket(&tenant("a"), true, None)]);
    // The proto says an unset TTL never expires; it expires at once, and
    // the no-assignment ALLOW_ALL admits.
    assert_eq!(f.statuses("a", 2), [200; 2]);
    // The same DENY_ALL with a TTL denies.
    f.apply(vec![blanket(&tenant("a"), true, ttl())]);
    assert_eq!(f.statuses("a", 2), [429; 2]);
}

#[test]
fn a_token_bucket_without_tokens_per_fill_never_refills() {
    let f = Fixture::start(|_| {});
    f.sight("a");
    f.sight(PROBE);
    f.apply(vec![token_bucket(
        &tenant("a"),
        2,
        None,
        duration(1, 0),
        ttl(),
    )]);
    assert_eq!(f.statuses("a", 4), [200, 200, 429, 429]);
    // Two reports later, many fill intervals of 1 s have passed.
    f.wait_reports(2);
    assert_eq!(f.get("a"), 429);
}

#[test]
fn a_token_bucket_resent_unchanged_is_carried_over_its_tokens_not_reset() {
    let f = Fixture::start(|_| {});
    let a = tenant("a");
    f.sight("a");
    f.sight(PROBE);
    f.apply(vec![token_bucket(&a, 2, None, duration(1, 0), ttl())]);
    assert_eq!(f.statuses("a", 3), [200, 200, 429]);
    // The same proto again (as to extend its time to live): the spent
    // bucket stays spent.
    f.apply(vec![token_bucket(&a, 2, None, duration(1, 0), ttl())]);
    assert_eq!(f.get("a"), 429);
    assert_eq!(f.token_bucket_logs(), (1, 1));
}

#[test]
fn a_replaced_token_bucket_starts_with_the_old_ones_share_of_tokens_left_not_full() {
    let f = Fixture::start(|_| {});
    let a = tenant("a");
    f.sight("a");
    f.sight(PROBE);
    f.apply(vec![token_bucket(&a, 4, None, duration(1, 0), ttl())]);
    assert_eq!(f.statuses("a", 2), [200; 2]);
    // Half of 4 left: a bucket of 8 starts with half of 8.
    f.apply(vec![token_bucket(&a, 8, None, duration(1, 0), ttl())]);
    assert_eq!(f.statuses("a", 5), [200, 200, 200, 200, 429]);
    // Spent: a bucket made new by a change of fill_interval.nanos (which
    // Envoy compares, with max_tokens and tokens_per_fill) starts spent,
    // so it hands out nothing.
    f.apply(vec![token_bucket(&a, 8, None, duration(1, 1), ttl())]);
    assert_eq!(f.get("a"), 429);
    assert_eq!(f.token_bucket_logs(), (3, 0));
}

#[test]
fn a_blanket_rule_then_a_token_bucket_in_one_response_is_a_new_full_bucket() {
    let f = Fixture::start(|_| {});
    let a = tenant("a");
    f.sight("a");
    f.sight(PROBE);
    f.apply(vec![token_bucket(&a, 2, None, duration(1, 0), ttl())]);
    assert_eq!(f.statuses("a", 3), [200, 200, 429]);
    // The blanket rule drops the spent bucket; the token bucket after it
    // then has none to take its share from, and starts full. Envoy
    // applies a response's actions in order and only then hands the
    // buckets to its workers, which never see the blanket rule.
    for _ in 0..2 {
        f.apply(vec![
            blanket(&a, true, ttl()),
            token_bucket(&a, 2, None, duration(1, 0), ttl()),
        ]);
        assert_eq!(f.statuses("a", 3), [200, 200, 429]);
    }
}

#[test]
fn a_token_bucket_with_only_fill_interval_seconds_changed_is_carried_over() {
    let f = Fixture::start(|_| {});
    let a = tenant("a");
    f.sight("a");
    f.sight(PROBE);
    // One token every 4 s.
    f.apply(vec![token_bucket(&a, 2, Some(1), duration(4, 0), ttl())]);
    assert_eq!(f.statuses("a", 3), [200, 200, 429]);
    // One every 60 s by the proto; Envoy keeps the bucket it has.
    f.apply(vec![token_bucket(&a, 2, Some(1), duration(60, 0), ttl())]);
    assert_eq!(f.token_bucket_logs(), (1, 1));
    // Two reports later, at least 5 s: a token refilled at the old rate.
    f.wait_reports(2);
    assert_eq!(f.get("a"), 200);
}

#[test]
fn envoy_never_drops_an_idle_bucket_by_itself_but_drops_it_on_abandon_action() {
    let f = Fixture::start(|_| {});
    let (a, probe) = (tenant("a"), tenant(PROBE));
    let first = f.sight("a");
    f.sight(PROBE);
    // Three periods idle, and `a` is still reported in each.
    let idle = f.script.wait("three idle reports of a", |r| {
        let idle: Vec<&Report> = r
            .iter()
            .filter(|r| r.at > first.at && !r.is_first_sighting())
            .filter(|r| {
                r.usage(&a)
                    .is_some_and(|u| u.num_requests_allowed == 0 && u.num_requests_denied == 0)
            })
            .collect();
        (idle.len() >= 3).then_some(idle.len())
    });
    assert!(idle >= 3);
    f.apply(vec![abandon(&a)]);
    // The first report made after the response was applied: the one
    // counting the probe's denials (its polls after the toggle).
    let after = f.script.wait("a report counting the probe's denials", |r| {
        r.iter()
            .find(|r| r.usage(&probe).is_some_and(|u| u.num_requests_denied > 0))
            .cloned()
    });
    assert!(
        after.usage(&a).is_none(),
        "abandoned, still reported: {after:#?}"
    );
    // The next request makes the bucket anew: a first report again.
    let again = f.sight("a");
    assert_eq!(again.usage(&a).expect("a").num_requests_allowed, 1);
}

#[test]
fn after_the_server_drops_the_stream_envoy_reconnects_with_a_report_of_every_bucket() {
    let f = Fixture::start(|_| {});
    let (a, b) = (tenant("a"), tenant("b"));
    f.sight("a");
    f.sight("b");
    assert_eq!(f.script.streams(), 1);
    f.script.drop_stream(0);
    let reopened = f.script.wait("a report on a second stream", |r| {
        r.iter().find(|r| r.stream == 1).cloned()
    });
    // Not the first sighting of one bucket: every bucket, as on a tick.
    assert!(!reopened.is_first_sighting(), "{reopened:#?}");
    let mut buckets = reopened.buckets();
    buckets.sort();
    assert_eq!(buckets, [a, b]);
    assert_eq!(reopened.message.domain, DOMAIN);
}
