//! The rate limit quota service (RLQS, docs/rlqs.md) against the real
//! binary with a tonic client and no Envoy: Envoy 1.40's message pattern
//! replayed (a new bucket alone with `time_elapsed` 0, `domain` on every
//! message, periodic reports of every bucket, a reconnect whose first
//! message is periodic), the bucket-to-rule mapping seen through the admin
//! API's inspect, shares that add up to the rule's limit over one and two
//! streams, blocks and overrides applied on the next report, unspent
//! shares given back, and an idle bucket abandoned. Hostile clients are
//! in `rlqs_hostile`.

use crate::support::rlqs_client::{
    Answer, Assigned, RlqsClient, action_for, actions_for, bucket, buckets_named,
};
use crate::support::rlqs_server::{block, metrics, remaining, set_override, start, unblock};

/// The TTL every assignment carries by default (INTERFACE: 15 s).
const DEFAULT_TTL: (i64, i32) = (15, 0);

/// Asserts `a` is a token bucket Envoy 1.40 enforces as a one-shot share
/// (docs/rlqs.md): at least one token, no refill (`tokens_per_fill`
/// unset), a `fill_interval` of whole seconds (1.40 divides by its
/// seconds: under 1 s is no limit) give or take the 1 ns that makes Envoy
/// replace the bucket, and a TTL of whole seconds (1.40 reads only the
/// seconds; unset expires at once). Returns `max_tokens`.
fn share(a: &Answer) -> u32 {
    let Assigned::Tokens {
        max,
        per_fill,
        fill,
    } = &a.assigned
    else {
        panic!("not a token bucket: {a:?}");
    };
    assert!(*max >= 1, "an empty token bucket: {a:?}");
    assert_eq!(*per_fill, None, "a refill Envoy 1.40 would apply: {a:?}");
    assert!(
        fill.0 >= 1 && (0..=1).contains(&fill.1),
        "fill_interval {a:?}"
    );
    let ttl = a.ttl.unwrap_or_else(|| panic!("no TTL: {a:?}"));
    assert!(
        ttl.0 >= 1 && ttl.1 == 0,
        "TTL not whole seconds >= 1: {a:?}"
    );
    *max
}

/// Asserts `a` is a blanket rule `want` with a TTL of whole seconds.
fn blanket(a: &Answer, want: &Assigned) {
    assert_eq!(&a.assigned, want, "{a:?}");
    let ttl = a.ttl.unwrap_or_else(|| panic!("no TTL: {a:?}"));
    assert!(
        ttl.0 >= 1 && ttl.1 == 0,
        "TTL not whole seconds >= 1: {a:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_bucket_reported_with_zero_elapsed_is_assigned_a_share() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let acme = bucket(&[("name", "per-tenant"), ("tenant", "acme")]);
    // 1.40's first message for a new bucket: itself alone, one request
    // admitted under its no-assignment behaviour, time_elapsed 0 (against
    // the proto's own `gt` rule).
    let a = c.one(&acme, 1, 0, 0).await;
    let k = share(&a);
    assert_eq!(a.ttl, Some(DEFAULT_TTL), "assignment_ttl's default");
    // The admitted request is charged and the share leased from the same
    // counter every door uses.
    assert_eq!(
        remaining(&s, "per-tenant", "tenant=acme"),
        10 - 1 - u64::from(k)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periodic_report_is_answered_for_every_bucket() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let ids: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|t| bucket(&[("name", "wide"), ("tenant", t)]))
        .collect();
    for id in &ids {
        share(&c.one(id, 1, 0, 0).await);
    }
    // The 5 s tick: every bucket in one message, deltas, whole seconds,
    // with a bucket first seen in it (a subscription as well).
    let fresh = bucket(&[("name", "wide"), ("tenant", "d")]);
    let r = c
        .exchange(&[
            (&ids[0], 3, 0, 5),
            (&ids[1], 0, 0, 5),
            (&ids[2], 1, 2, 5),
            (&fresh, 2, 0, 5),
        ])
        .await;
    assert_eq!(buckets_named(&r).len(), 4, "every bucket answered: {r:?}");
    for id in ids.iter().chain([&fresh]) {
        share(&action_for(&r, id));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_share_reaches_envoy_as_a_new_full_bucket() {
    // Envoy 1.40 carries a token bucket's tokens over to the next token
    // bucket it is sent, and rebuilds one only when max_tokens,
    // tokens_per_fill or fill_interval.nanos change: a share sent as the
    // same bucket would leave a spent bucket spent. tollgate sends each
    // share right after a DENY_ALL of the bucket, in the same message, so
    // that Envoy builds the bucket anew, full.
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let id = bucket(&[("name", "wide"), ("tenant", "acme")]);
    let mut first = true;
    for _ in 0..6 {
        let r = c.exchange(&[(&id, 1, 0, if first { 0 } else { 5 })]).await;
        first = false;
        let all = actions_for(&r, &id);
        assert_eq!(all.len(), 2, "{all:?}");
        blanket(&all[0], &Assigned::DenyAll);
        share(&all[1]);
        assert_eq!(all[0].ttl, all[1].ttl, "{all:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_whose_first_message_is_periodic_subscribes_every_bucket() {
    let s = start("[rlqs]\n");
    let one = bucket(&[("name", "wide"), ("tenant", "one")]);
    let two = bucket(&[("name", "wide"), ("tenant", "two")]);
    let mut first = RlqsClient::connect(s.grpc(), "web").await;
    share(&first.one(&one, 1, 0, 0).await);
    share(&first.one(&two, 1, 0, 0).await);
    drop(first);
    // Envoy reconnects on a later tick; the new stream's first message is
    // a periodic report of every bucket, not one-bucket initial reports.
    let mut again = RlqsClient::connect(s.grpc(), "web").await;
    let r = again.exchange(&[(&one, 2, 0, 5), (&two, 0, 1, 5)]).await;
    assert_eq!(buckets_named(&r).len(), 2, "{r:?}");
    share(&action_for(&r, &one));
    share(&action_for(&r, &two));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_charges_its_rule_under_its_canonical_key() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let acme = bucket(&[("tenant", "acme"), ("name", "per-tenant")]);
    let k = share(&c.one(&acme, 1, 0, 0).await);
    assert_eq!(
        remaining(&s, "per-tenant", "tenant=acme"),
        10 - 1 - u64::from(k)
    );
    assert_eq!(
        remaining(&s, "per-tenant", "tenant=other"),
        10,
        "another key charged"
    );
    // Entries sorted by name; `%`, `,` and `=` inside a name or a value
    // escaped, so that no two buckets share a key.
    let odd = bucket(&[
        ("name", "wide"),
        ("z", "1"),
        ("a", "x,y"),
        ("m", "p=q%"),
        ("b=c", "v"),
    ]);
    let k = share(&c.one(&odd, 1, 0, 0).await);
    let key = "a=x%2Cy,b%3Dc=v,m=p%3Dq%25,z=1";
    assert_eq!(remaining(&s, "wide", key), 100 - 1 - u64::from(k));
    // The bucket that would collide without escaping is another key.
    let near = bucket(&[("name", "wide"), ("a", "x"), ("y,m", "p=q%")]);
    share(&c.one(&near, 1, 0, 0).await);
    assert_eq!(remaining(&s, "wide", key), 100 - 1 - u64::from(k));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_of_no_rule_is_allowed_by_default() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let unknown = bucket(&[("name", "no-such-rule"), ("tenant", "acme")]);
    blanket(&c.one(&unknown, 1, 0, 0).await, &Assigned::AllowAll);
    // A concurrency rule limits requests in flight, which Envoy does not
    // report: its buckets are unmatched too.
    let inflight = bucket(&[("name", "inflight"), ("tenant", "acme")]);
    blanket(&c.one(&inflight, 1, 0, 0).await, &Assigned::AllowAll);
    // No `name` entry at all: no rule either.
    let nameless = bucket(&[("tenant", "acme")]);
    blanket(&c.one(&nameless, 1, 0, 0).await, &Assigned::AllowAll);
    // And it stays so on periodic reports.
    let r = c
        .exchange(&[(&unknown, 7, 0, 5), (&nameless, 3, 0, 5)])
        .await;
    blanket(&action_for(&r, &unknown), &Assigned::AllowAll);
    blanket(&action_for(&r, &nameless), &Assigned::AllowAll);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_of_no_rule_is_denied_when_unmatched_is_deny() {
    let s = start("[rlqs]\nunmatched = \"deny\"\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let unknown = bucket(&[("name", "no-such-rule"), ("tenant", "acme")]);
    blanket(&c.one(&unknown, 1, 0, 0).await, &Assigned::DenyAll);
    // A known rule is still leased.
    let known = bucket(&[("name", "wide"), ("tenant", "acme")]);
    share(&c.one(&known, 1, 0, 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_rule_and_key_entries_pick_the_rule_and_key() {
    let s = start(
        "[rlqs]\nkey_entries = [\"tenant\"]\n\n\
         [rlqs.domains.fixed]\nrule = \"per-tenant\"\nkey_entries = [\"tenant\"]\n\n\
         [rlqs.domains.whole]\nrule = \"pair\"\n",
    );
    // Domain `fixed`: every bucket is `per-tenant`'s, no `name` read; its
    // own key_entries: `tenant` alone makes the key.
    let mut fixed = RlqsClient::connect(s.grpc(), "fixed").await;
    let id = bucket(&[("tenant", "acme"), ("path", "/x")]);
    let k = share(&fixed.one(&id, 1, 0, 0).await);
    assert_eq!(
        remaining(&s, "per-tenant", "tenant=acme"),
        10 - 1 - u64::from(k)
    );
    // Domain `whole` names no key_entries of its own: every entry makes
    // the key, whatever `[rlqs] key_entries` says (which is for buckets
    // whose entry names the rule).
    let mut whole = RlqsClient::connect(s.grpc(), "whole").await;
    let id = bucket(&[("tenant", "acme"), ("path", "/x")]);
    let k = share(&whole.one(&id, 1, 0, 0).await);
    assert_eq!(
        remaining(&s, "pair", "path=/x,tenant=acme"),
        20 - 1 - u64::from(k)
    );
    // Another domain: `name` names the rule; the key is `tenant` alone.
    let mut other = RlqsClient::connect(s.grpc(), "other").await;
    let id = bucket(&[("name", "wide"), ("tenant", "acme"), ("path", "/y")]);
    let k = share(&other.one(&id, 1, 0, 0).await);
    assert_eq!(remaining(&s, "wide", "tenant=acme"), 100 - 1 - u64::from(k));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_streams_shares_within_a_window_never_exceed_the_limit() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let id = bucket(&[("name", "per-tenant"), ("tenant", "acme")]);
    let mut a = c.one(&id, 1, 0, 0).await;
    let mut used = 1u64;
    let mut rounds = 0;
    // Every share spent whole (allowed = the share) and demand far above
    // it: what was admitted plus what is leased stays within 10.
    while a.assigned != Assigned::DenyAll {
        let k = u64::from(share(&a));
        used += k;
        assert!(used <= 10, "admitted and leased {used} of 10");
        rounds += 1;
        assert!(rounds <= 10, "never exhausted: {a:?}");
        // Every share spent whole, demand far above it.
        a = c.one(&id, k, 100, 5).await;
    }
    assert_eq!(used, 10, "the whole limit was leased before DENY_ALL");
    blanket(&a, &Assigned::DenyAll);
    assert_eq!(remaining(&s, "per-tenant", "tenant=acme"), 0);
    // Exhausted stays exhausted: denied requests alone charge nothing.
    for _ in 0..3 {
        blanket(&c.one(&id, 0, 25, 5).await, &Assigned::DenyAll);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_streams_on_one_bucket_share_the_limit() {
    let s = start("[rlqs]\n");
    let id = bucket(&[("name", "pair"), ("tenant", "acme")]);
    let mut a = RlqsClient::connect(s.grpc(), "web").await;
    let mut b = RlqsClient::connect(s.grpc(), "web").await;
    let mut last = [a.one(&id, 1, 0, 0).await, b.one(&id, 1, 0, 0).await];
    let mut used = 2u64;
    for a in &last {
        used += u64::from(a.tokens());
    }
    assert!(used <= 20, "admitted and leased {used} of 20");
    let mut rounds = 0;
    while last.iter().any(|a| a.assigned != Assigned::DenyAll) {
        rounds += 1;
        assert!(rounds <= 20, "never exhausted: {last:?}");
        for (i, c) in [&mut a, &mut b].into_iter().enumerate() {
            let spent = u64::from(last[i].tokens());
            let next = c.one(&id, spent, 100, 5).await;
            if next.assigned != Assigned::DenyAll {
                let k = share(&next);
                // Both streams hold the bucket: each gets at most the
                // limit over twice the streams (INTERFACE41's cap).
                assert!(k <= 20 / 4, "a share of {k} with two streams on 20");
                used += u64::from(k);
            }
            assert!(used <= 20, "admitted and leased {used} of 20");
            last[i] = next;
        }
    }
    assert_eq!(used, 20, "the whole limit was leased before DENY_ALL");
    assert_eq!(remaining(&s, "pair", "tenant=acme"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_denies_all_on_the_next_report_and_its_end_leases_again() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let id = bucket(&[("name", "wide"), ("tenant", "evil")]);
    let k = share(&c.one(&id, 1, 0, 0).await);
    block(&s, "wide", "tenant=evil");
    blanket(&c.one(&id, u64::from(k), 0, 5).await, &Assigned::DenyAll);
    blanket(&c.one(&id, 0, 9, 5).await, &Assigned::DenyAll);
    // Another tenant of the rule is untouched.
    let good = bucket(&[("name", "wide"), ("tenant", "good")]);
    share(&c.one(&good, 1, 0, 0).await);
    unblock(&s, "wide", "tenant=evil");
    share(&c.one(&id, 0, 9, 5).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_override_changes_the_next_share() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    // `small`: 4 an hour, so one stream's share is at most 2.
    let id = bucket(&[("name", "small"), ("tenant", "acme")]);
    let k = share(&c.one(&id, 1, 0, 0).await);
    assert!(k <= 2, "a share of {k} of 4");
    let k = share(&c.one(&id, 0, 500, 5).await);
    assert!(k <= 2, "a share of {k} of 4");
    set_override(&s, "small", "tenant=acme", 1000);
    // Demand far above: the share follows the override's limit at the
    // first report after it (the cap is the limit deciding the key then).
    let k = share(&c.one(&id, 0, 500, 5).await);
    assert!(k > 2, "the override of 1000 left the share at {k}");
    assert!(k <= 1000 / 2, "a share of {k} of 1000");
    // And back down: an override below what was leased allows nothing new.
    set_override(&s, "small", "tenant=acme", 1);
    let a = c.one(&id, 0, 500, 5).await;
    assert!(
        a.assigned == Assigned::DenyAll || share(&a) <= 1,
        "an override of 1 still leased {a:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unspent_share_is_given_back_when_settled() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let id = bucket(&[("name", "per-tenant"), ("tenant", "acme")]);
    share(&c.one(&id, 1, 0, 0).await);
    // Nothing of the share spent, demand high: the next share is as big.
    let k = share(&c.one(&id, 0, 100, 5).await);
    for round in 0..12 {
        let a = c.one(&id, 0, 100, 5).await;
        assert_eq!(share(&a), k, "round {round}: the share shrank");
    }
    // Twelve shares of k were leased from a limit of 10: each came back.
    assert_eq!(
        remaining(&s, "per-tenant", "tenant=acme"),
        10 - 1 - u64::from(k)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outlives_the_grpc_ports_body_bound() {
    // Envoy holds its stream for the life of the process; the gRPC port
    // cuts a rate limit call whose body has not ended after 10 s, which
    // must not apply here.
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let id = bucket(&[("name", "wide"), ("tenant", "acme")]);
    share(&c.one(&id, 1, 0, 0).await);
    let start = tokio::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(13) {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        share(&c.one(&id, 0, 1, 1).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stream_leaves_its_shares_spent() {
    // Envoy keeps spending a share until its TTL whether or not the
    // stream lives: nothing of it comes back when the stream closes.
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let id = bucket(&[("name", "per-tenant"), ("tenant", "acme")]);
    let k = share(&c.one(&id, 1, 0, 0).await);
    c.finish();
    let end = c.ended().await;
    assert_eq!(end.code, tonic::Code::Ok, "{end:?}");
    assert_eq!(
        remaining(&s, "per-tenant", "tenant=acme"),
        10 - 1 - u64::from(k)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_bucket_is_abandoned() {
    let s =
        start("[rlqs]\nreport_period = \"1s\"\nassignment_ttl = \"2s\"\nabandon_after = \"2s\"\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let idle = bucket(&[("name", "wide"), ("tenant", "idle")]);
    let busy = bucket(&[("name", "wide"), ("tenant", "busy")]);
    share(&c.one(&idle, 1, 0, 0).await);
    share(&c.one(&busy, 1, 0, 0).await);
    // Report both until the idle one is abandoned; tollgate measures the
    // idle time itself. The busy one, used every time, never is.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let r = c.exchange(&[(&idle, 0, 0, 1), (&busy, 1, 0, 1)]).await;
        share(&action_for(&r, &busy));
        let a = action_for(&r, &idle);
        if a.assigned == Assigned::Abandon {
            break;
        }
        share(&a);
        assert!(tokio::time::Instant::now() < deadline, "never abandoned");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    // Its lease was settled at 0: only the first request stays charged.
    assert_eq!(remaining(&s, "wide", "tenant=idle"), 99);
    // Envoy erases the bucket; its next request starts it over.
    share(&c.one(&idle, 1, 0, 0).await);
}

/// The sum of the series of `name` whose labels include every one of
/// `labels` (`rule="x"`), in a `/metrics` text.
fn sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (set, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            let set: Vec<&str> = set.split(',').collect();
            labels
                .iter()
                .all(|want| set.contains(want))
                .then(|| value.trim().parse::<f64>().expect("a number"))
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_requests_and_assignments_are_counted() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let acme = bucket(&[("name", "per-tenant"), ("tenant", "acme")]);
    let lost = bucket(&[("name", "no-such-rule")]);
    share(&c.one(&acme, 1, 0, 0).await);
    blanket(&c.one(&lost, 2, 0, 0).await, &Assigned::AllowAll);
    let r = c.exchange(&[(&acme, 3, 2, 5), (&lost, 0, 0, 5)]).await;
    share(&action_for(&r, &acme));
    let m = metrics(&s);
    let count = |name: &str, labels: &[&str]| sum(&m, name, labels);
    assert_eq!(count("tollgate_rlqs_reports_total", &[]), 3.0, "{m}");
    let per_tenant = "rule=\"per-tenant\"";
    assert_eq!(
        count(
            "tollgate_rlqs_requests_total",
            &[per_tenant, "outcome=\"allowed\""]
        ),
        4.0
    );
    assert_eq!(
        count(
            "tollgate_rlqs_requests_total",
            &[per_tenant, "outcome=\"denied\""]
        ),
        2.0
    );
    assert_eq!(
        count("tollgate_rlqs_requests_total", &["outcome=\"allowed\""]),
        6.0,
        "the unmatched bucket's requests are counted too"
    );
    let kind = |k: &str| {
        count(
            "tollgate_rlqs_assignments_total",
            &[&format!("kind=\"{k}\"")],
        )
    };
    assert_eq!(kind("token_bucket"), 2.0);
    assert_eq!(kind("allow_all"), 2.0);
    assert_eq!(count("tollgate_rlqs_streams", &[]), 1.0);
    assert_eq!(count("tollgate_rlqs_buckets", &[]), 2.0);
    // A stream gone takes its buckets out of the gauges (the server sees
    // the close a little after: poll).
    drop(c);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let m = metrics(&s);
        if sum(&m, "tollgate_rlqs_streams", &[]) == 0.0
            && sum(&m, "tollgate_rlqs_buckets", &[]) == 0.0
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "gauges stuck: {m}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_unavailable_when_tollgate_stops() {
    // Envoy holds its stream forever: a draining tollgate ends it, so
    // that Envoy reconnects elsewhere and the drain is not held open.
    let mut s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let id = bucket(&[("name", "wide"), ("tenant", "acme")]);
    share(&c.one(&id, 1, 0, 0).await);
    s.signal("TERM");
    let end = c.ended().await;
    assert_eq!(end.code, tonic::Code::Unavailable, "{end:?}");
    let exited = tokio::task::block_in_place(|| s.wait_exit(std::time::Duration::from_secs(60)));
    assert!(exited.is_some(), "tollgate did not exit with a stream open");
}
