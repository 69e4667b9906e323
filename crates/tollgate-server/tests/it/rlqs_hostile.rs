//! Hostile clients of the rate limit quota service (RLQS, docs/rlqs.md)
//! against the real binary: bytes that are not a message, a message over
//! 1 MiB (and a length prefix claiming one), more buckets than
//! `max_buckets_per_stream`, more streams than `max_streams`, a client
//! that never reads its answers, an empty bucket id or domain, a domain
//! changed mid-stream and huge bucket entries. Each is cut or refused
//! with a status that names the problem, and a well-behaved stream of the
//! same server is answered throughout.

use std::time::Duration;

use bytes::Bytes;
use tonic::Code;

use crate::support::Tollgate;
use crate::support::rlqs_client::{
    Assigned, Ended, RawRlqs, RlqsClient, action_for, bucket, buckets_named, grpc_frame, reports,
};
use crate::support::rlqs_server::{metrics, start};
use crate::support::series;

/// How long a cut may take to show (the server's own bounds are seconds;
/// the rest is room for a loaded machine).
const CUT_WITHIN: Duration = Duration::from_secs(90);

/// A well-behaved stream: open, one bucket answered.
async fn good(s: &Tollgate, tenant: &str) -> RlqsClient {
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let id = bucket(&[("name", "wide"), ("tenant", tenant)]);
    let a = c.one(&id, 1, 0, 0).await;
    assert!(
        matches!(a.assigned, Assigned::Tokens { .. }),
        "a good stream was not leased: {a:?}"
    );
    c
}

/// Asserts the good stream `c` is still answered (a report that spent
/// nothing, with demand: as often as a test likes, never exhausted nor
/// idle).
async fn still_served(c: &mut RlqsClient, tenant: &str) {
    let id = bucket(&[("name", "wide"), ("tenant", tenant)]);
    let a = c.one(&id, 0, 1, 5).await;
    assert!(
        matches!(a.assigned, Assigned::Tokens { .. }),
        "a good stream went unserved: {a:?}"
    );
}

/// Asserts `e` has `code` and a message naming `what`.
fn refused(e: &Ended, code: Code, what: &str) {
    assert_eq!(e.code, code, "{e:?}");
    assert!(
        e.message.to_lowercase().contains(what),
        "the status does not name {what:?}: {e:?}"
    );
}

/// `tollgate_rlqs_streams_cut_total{reason}`.
fn cuts(s: &Tollgate, reason: &str) -> f64 {
    series(
        &metrics(s),
        "tollgate_rlqs_streams_cut_total",
        &format!("reason=\"{reason}\""),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_a_message_cut_that_stream_alone() {
    let s = start("[rlqs]\n");
    let mut other = good(&s, "other").await;
    let mut raw = RawRlqs::open(s.grpc()).await;
    raw.send_bytes(grpc_frame(b"\xff\xff\xff\xff not protobuf"))
        .expect("send");
    let end = raw.end(true, CUT_WITHIN).await;
    assert_eq!(
        end.status.as_deref(),
        Some("3"),
        "not INVALID_ARGUMENT: {end:?}"
    );
    assert!(
        end.message.as_deref().is_some_and(|m| m.contains("decode")),
        "the status does not say the report could not be decoded: {end:?}"
    );
    still_served(&mut other, "other").await;
    good(&s, "after").await;
    assert_eq!(cuts(&s, "bad_report"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_one_mib_is_resource_exhausted() {
    let s = start("[rlqs]\n");
    let mut other = good(&s, "other").await;
    // A real report, encoded by tonic, one entry of 1.1 MiB.
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let huge = "x".repeat(1_100_000);
    let id = bucket(&[("name", "wide"), ("tenant", &huge)]);
    c.report(&[(&id, 1, 0, 0)]);
    refused(&c.ended().await, Code::ResourceExhausted, "");
    // A length prefix claiming 2 MiB, and little after it: refused on
    // the prefix, not after waiting for the rest.
    let mut raw = RawRlqs::open(s.grpc()).await;
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(2u32 << 20).to_be_bytes());
    frame.extend_from_slice(b"\x0a\x03web");
    raw.send_bytes(Bytes::from(frame)).expect("send");
    let end = raw.end(true, CUT_WITHIN).await;
    assert_eq!(end.status.as_deref(), Some("8"), "{end:?}");
    still_served(&mut other, "other").await;
    assert_eq!(cuts(&s, "too_large"), 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_over_max_buckets_is_cut_and_others_are_not() {
    let s = start("[rlqs]\nmax_buckets_per_stream = 3\n");
    let mut other = good(&s, "other").await;
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let ids: Vec<_> = (0..4)
        .map(|i| bucket(&[("name", "wide"), ("tenant", &format!("t{i}"))]))
        .collect();
    for id in &ids[..3] {
        let a = c.one(id, 1, 0, 0).await;
        assert!(matches!(a.assigned, Assigned::Tokens { .. }), "{a:?}");
    }
    // The same three again are no new buckets.
    let r = c
        .exchange(&[(&ids[0], 1, 0, 5), (&ids[1], 0, 0, 5), (&ids[2], 0, 0, 5)])
        .await;
    assert_eq!(buckets_named(&r).len(), 3);
    // A fourth cuts the stream.
    c.report(&[(&ids[3], 1, 0, 0)]);
    refused(&c.ended().await, Code::ResourceExhausted, "bucket");
    still_served(&mut other, "other").await;
    // The other stream may have buckets of its own up to the cap.
    for t in ["o1", "o2"] {
        still_served(&mut other, t).await;
    }
    assert_eq!(cuts(&s, "too_many_buckets"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_max_streams_are_refused_until_one_closes() {
    let s = start("[rlqs]\nmax_streams = 2\n");
    let a = good(&s, "a").await;
    let mut b = good(&s, "b").await;
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    c.report(&[(&bucket(&[("name", "wide"), ("tenant", "c")]), 1, 0, 0)]);
    refused(&c.ended().await, Code::ResourceExhausted, "stream");
    still_served(&mut b, "b").await;
    assert_eq!(cuts(&s, "too_many_streams"), 1.0);
    // A closed stream frees its place (the server sees the close a little
    // after: poll).
    drop(a);
    let deadline = tokio::time::Instant::now() + CUT_WITHIN;
    loop {
        let mut d = RlqsClient::connect(s.grpc(), "web").await;
        let id = bucket(&[("name", "wide"), ("tenant", "d")]);
        d.report(&[(&id, 1, 0, 0)]);
        match d.next().await {
            Ok(r) => {
                assert!(matches!(
                    action_for(&r, &id).assigned,
                    Assigned::Tokens { .. }
                ));
                break;
            }
            Err(e) => refused(&e, Code::ResourceExhausted, "stream"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place never freed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_cut_and_others_are_not() {
    let s = start("[rlqs]\n");
    let mut other = good(&s, "other").await;
    let mut raw = RawRlqs::open(s.grpc()).await;
    // Big answers (200 buckets with long ids each), and the window never
    // given back: the server's sends stall within a few reports.
    let ids: Vec<_> = (0..200)
        .map(|i| bucket(&[("name", "wide"), ("tenant", &format!("{i:0>200}"))]))
        .collect();
    let usages: Vec<_> = ids.iter().map(|id| (id, 0, 1, 5)).collect();
    let message = reports("web", &usages);
    let deadline = tokio::time::Instant::now() + CUT_WITHIN;
    // Report on, as Envoy does every tick, until the server says it cut
    // the stream; the other stream is served all along.
    while cuts(&s, "not_reading") < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a client that never read was never cut"
        );
        // Once cut, the server reads no more: sends may fail then.
        let _ = raw.send_message(&message);
        still_served(&mut other, "other").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A client that reads at last finds why it was cut after its answers.
    let end = raw.end(true, CUT_WITHIN).await;
    assert!(
        end.status.as_deref() == Some("8") || end.reset.is_some(),
        "a client that never read was not ended RESOURCE_EXHAUSTED: {end:?}"
    );
    still_served(&mut other, "other").await;
    assert_eq!(cuts(&s, "not_reading"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_bucket_id_is_refused_naming_it() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    c.report(&[(&bucket(&[]), 1, 0, 0)]);
    refused(&c.ended().await, Code::InvalidArgument, "bucket");
    // A report of no bucket at all (Envoy never sends one).
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    c.report(&[]);
    refused(&c.ended().await, Code::InvalidArgument, "bucket");
    // An entry with an empty value is another matter: Envoy fills values
    // from request headers, and a client's empty header must not cut the
    // stream every bucket of that Envoy rides on. It is a bucket.
    let mut c = good(&s, "a").await;
    let empty = bucket(&[("name", "wide"), ("tenant", "")]);
    let a = c.one(&empty, 1, 0, 0).await;
    assert!(matches!(a.assigned, Assigned::Tokens { .. }), "{a:?}");
    still_served(&mut c, "a").await;
    good(&s, "after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_domain_is_refused_naming_it() {
    let s = start("[rlqs]\n");
    let mut c = RlqsClient::connect(s.grpc(), "").await;
    c.report(&[(&bucket(&[("name", "wide"), ("tenant", "a")]), 1, 0, 0)]);
    refused(&c.ended().await, Code::InvalidArgument, "domain");
    good(&s, "after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_changed_mid_stream_is_refused_naming_it() {
    let s = start("[rlqs]\n");
    let mut c = good(&s, "a").await;
    let id = bucket(&[("name", "wide"), ("tenant", "a")]);
    c.send(reports("elsewhere", &[(&id, 1, 0, 5)]));
    refused(&c.ended().await, Code::InvalidArgument, "domain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_entries_are_limited_like_any_bucket() {
    // Envoy fills entries from request headers (up to 60 KiB by default):
    // a long one must neither cut the stream nor escape the limit, as the
    // rate limit service counts a key past 4 KiB under its digest
    // (docs/envoy.md).
    let s = start("[rlqs]\n");
    let mut other = good(&s, "other").await;
    let mut c = RlqsClient::connect(s.grpc(), "web").await;
    let long = "v".repeat(8 * 1024);
    let id = bucket(&[("name", "per-tenant"), ("tenant", &long)]);
    let mut a = c.one(&id, 1, 0, 0).await;
    let mut used = 1;
    while a.assigned != Assigned::DenyAll {
        let Assigned::Tokens { max, .. } = a.assigned else {
            panic!("a bucket of a long entry is not limited: {a:?}");
        };
        used += u64::from(max);
        assert!(used <= 10, "admitted and leased {used} of 10");
        a = c.one(&id, u64::from(max), 100, 5).await;
    }
    still_served(&mut other, "other").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_counts_are_charged_and_the_server_serves_on() {
    // A report claiming u64::MAX requests, admitted and denied: charged
    // (the key deep in debt: DENY_ALL), no overflow, nothing cut.
    let s = start("[rlqs]\n");
    let mut other = good(&s, "other").await;
    let mut c = good(&s, "liar").await;
    let id = bucket(&[("name", "wide"), ("tenant", "liar")]);
    for _ in 0..3 {
        let a = c.one(&id, u64::MAX, u64::MAX, i64::MAX).await;
        assert_eq!(a.assigned, Assigned::DenyAll, "{a:?}");
    }
    let lost = bucket(&[("name", "no-such-rule")]);
    let a = c.one(&lost, u64::MAX, u64::MAX, -1).await;
    assert_eq!(a.assigned, Assigned::AllowAll, "{a:?}");
    still_served(&mut other, "other").await;
}
