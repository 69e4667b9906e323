use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec, StoreError, StoreErrorKind};

use super::*;
use crate::headers::{RATELIMIT, RATELIMIT_POLICY};
use crate::response::STORE_UNAVAILABLE;

fn limiter() -> ResilientLimiter<MemoryStore> {
    let rules = [
        RuleSpec::new("per_key", Algorithm::Gcra, 1, Duration::from_secs(60))
            .build()
            .expect("rule"),
        RuleSpec::new("per_ip", Algorithm::Gcra, 10, Duration::from_secs(60))
            .build()
            .expect("rule"),
    ];
    let limiter = Limiter::new(MemoryStore::new(), rules).expect("limiter");
    ResilientLimiter::builder(limiter)
        .build()
        .expect("resilient")
}

fn rule_keys(limiter: &ResilientLimiter<MemoryStore>, missing: MissingKey) -> RuleKeys {
    RuleKeys::new(
        limiter.rules(),
        [
            ("per_key", "header:x-api-key".parse().expect("key")),
            ("per_ip", "client_ip".parse().expect("key")),
        ],
    )
    .expect("rules")
    .with_missing_key(missing)
}

fn keys_of(rules: &RuleKeys, req: &http::Request<()>) -> Result<Keys, Box<Response<String>>> {
    rules.keys(
        req.method(),
        req.uri(),
        req.headers(),
        Some("192.0.2.1".parse().expect("ip")),
    )
}

fn with_key() -> http::Request<()> {
    http::Request::get("/")
        .header("x-api-key", "k")
        .body(())
        .expect("request")
}

fn bare() -> http::Request<()> {
    http::Request::get("/").body(()).expect("request")
}

fn degraded(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(TOLLGATE_DEGRADED)
        .map(|v| v.to_str().expect("ascii"))
}

#[test]
fn names_are_checked() {
    let l = limiter();
    let unknown = RuleKeys::new(l.rules(), [("nope", "path".parse().expect("key"))]);
    assert_eq!(unknown.err(), Some(BuildError::UnknownRule("nope".into())));
    let twice = RuleKeys::new(
        l.rules(),
        [
            ("per_ip", "path".parse().expect("key")),
            ("per_ip", "host".parse().expect("key")),
        ],
    );
    assert_eq!(
        twice.err(),
        Some(BuildError::DuplicateRule("per_ip".into()))
    );
}

#[test]
fn a_present_key_is_the_same_under_every_policy() {
    let l = limiter();
    for missing in [MissingKey::Empty, MissingKey::Skip, MissingKey::Reject] {
        let rules = rule_keys(&l, missing);
        let keys = keys_of(&rules, &with_key()).expect("keys");
        let got: Vec<(usize, &[u8])> = keys.iter().collect();
        assert_eq!(got, [(0, &b"k"[..]), (1, &b"192.0.2.1"[..])], "{missing}");
        let names: Vec<&str> = rules.checks(&keys).iter().map(|c| c.rule).collect();
        assert_eq!(names, ["per_key", "per_ip"]);
    }
}

#[test]
fn empty_keys_a_missing_header_by_the_empty_value() {
    let l = limiter();
    let rules = rule_keys(&l, MissingKey::Empty);
    let keys = keys_of(&rules, &bare()).expect("keys");
    let got: Vec<(usize, &[u8])> = keys.iter().collect();
    assert_eq!(got, [(0, &b""[..]), (1, &b"192.0.2.1"[..])]);
}

#[test]
fn skip_leaves_the_rule_out() {
    let l = limiter();
    let rules = rule_keys(&l, MissingKey::Skip);
    let keys = keys_of(&rules, &bare()).expect("keys");
    let got: Vec<(usize, &[u8])> = keys.iter().collect();
    assert_eq!(got, [(1, &b"192.0.2.1"[..])]);
    let names: Vec<&str> = rules
        .rules_of(l.rules(), &keys)
        .iter()
        .map(|r| r.name())
        .collect();
    assert_eq!(names, ["per_ip"]);
    // Every rule skipped: nothing to check.
    let only = RuleKeys::new(
        l.rules(),
        [("per_key", "header:x-api-key".parse().expect("k"))],
    )
    .expect("rules")
    .with_missing_key(MissingKey::Skip);
    assert!(keys_of(&only, &bare()).expect("keys").is_empty());
}

#[test]
fn reject_answers_400_naming_the_rule() {
    let l = limiter();
    let rules = rule_keys(&l, MissingKey::Reject);
    let refused = keys_of(&rules, &bare()).expect_err("refused");
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert!(refused.body().contains(MISSING_KEY), "{}", refused.body());
    assert!(
        refused.body().contains(
            r#"the request has no \"x-api-key\" header, or an empty one, which rule \"per_key\" keys on (header:x-api-key)."#
        ),
        "{}",
        refused.body()
    );
}

#[test]
fn a_client_ip_key_without_a_peer_is_500() {
    let l = limiter();
    let rules = rule_keys(&l, MissingKey::Empty);
    let req = with_key();
    let refused = rules
        .keys(req.method(), req.uri(), req.headers(), None)
        .expect_err("refused");
    assert_eq!(refused.status(), StatusCode::INTERNAL_SERVER_ERROR);
}

/// Checks `with_key()` twice (the second is denied by `per_key`) and
/// returns both outcomes.
async fn admitted_then_denied() -> (
    RuleKeys,
    ResilientLimiter<MemoryStore>,
    Keys,
    [resilient::Verdict; 2],
) {
    let l = limiter();
    let rules = rule_keys(&l, MissingKey::Empty);
    let keys = keys_of(&rules, &with_key()).expect("keys");
    let first = l.check_all(&rules.checks(&keys)).await.expect("checked");
    let second = l.check_all(&rules.checks(&keys)).await.expect("checked");
    assert!(first.multi.allowed && !second.multi.allowed);
    (rules, l, keys, [first, second])
}

#[tokio::test]
async fn admit_and_deny() {
    let (rules, l, keys, [first, second]) = admitted_then_denied().await;
    let o = HeaderOptions::default();
    let HttpVerdict::Admit { headers, decision } = rules.verdict(l.rules(), &keys, Ok(first), o)
    else {
        panic!("admitted")
    };
    assert!(headers.contains_key(RATELIMIT) && headers.contains_key(RATELIMIT_POLICY));
    assert_eq!(degraded(&headers), None);
    assert!(decision.is_some_and(|d| d.allowed));

    let HttpVerdict::Respond { response, decision } =
        rules.verdict(l.rules(), &keys, Ok(second), o)
    else {
        panic!("denied")
    };
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key(RATELIMIT));
    assert_eq!(degraded(response.headers()), None);
    assert!(decision.is_some_and(|d| !d.allowed));
}

#[tokio::test]
async fn degraded_allow_decides_nothing() {
    let (rules, l, keys, [mut first, _]) = admitted_then_denied().await;
    first.degraded = Some(OnError::Allow);
    let v = rules.verdict(l.rules(), &keys, Ok(first), HeaderOptions::default());
    let HttpVerdict::Admit { headers, decision } = v else {
        panic!("admitted")
    };
    assert!(headers.contains_key(RATELIMIT_POLICY));
    assert!(!headers.contains_key(RATELIMIT));
    assert_eq!(degraded(&headers), Some("store-unavailable"));
    assert!(decision.is_none());
}

#[tokio::test]
async fn degraded_local_marks_admissions_and_denials() {
    let (rules, l, keys, [mut first, mut second]) = admitted_then_denied().await;
    first.degraded = Some(OnError::Local);
    second.degraded = Some(OnError::Local);
    let o = HeaderOptions::default();
    let HttpVerdict::Admit { headers, decision } = rules.verdict(l.rules(), &keys, Ok(first), o)
    else {
        panic!("admitted")
    };
    assert!(headers.contains_key(RATELIMIT));
    assert_eq!(degraded(&headers), Some("local"));
    assert!(decision.is_some());
    let HttpVerdict::Respond { response, .. } = rules.verdict(l.rules(), &keys, Ok(second), o)
    else {
        panic!("denied")
    };
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key(RATELIMIT));
    assert_eq!(degraded(response.headers()), Some("local"));
}

#[test]
fn a_failed_store_under_deny_is_503() {
    let down = Refusal::Unavailable(StoreError::new(StoreErrorKind::Unavailable, "down"));
    let HttpVerdict::Respond { response, decision } = refusal(&down) else {
        panic!("refused")
    };
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()[http::header::RETRY_AFTER], "1");
    assert!(response.body().contains(STORE_UNAVAILABLE));
    assert!(decision.is_none());
    let long = Refusal::Invalid(Error::KeyTooLong { len: 9000 });
    let HttpVerdict::Respond { response, .. } = refusal(&long) else {
        panic!("refused")
    };
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.body().contains(KEY_TOO_LONG));
}

#[test]
fn basis_of_each_outcome() {
    assert_eq!(Basis::of(None), Basis::Store);
    assert_eq!(Basis::of(Some(OnError::Allow)), Basis::Unavailable);
    assert_eq!(Basis::of(Some(OnError::Local)), Basis::Local);
    assert!(Basis::Store.has_ratelimit() && Basis::Local.has_ratelimit());
    assert!(!Basis::Unavailable.has_ratelimit());
    let mut h = HeaderMap::new();
    Basis::Store.mark(&mut h);
    assert!(h.is_empty());
}

/// What a [`HookedClock`] runs once.
type Hook = Box<dyn FnOnce() + Send>;

/// A clock that runs its armed hook (once) the next time it is read: the
/// memory store reads its clock inside a check, after the limiter resolved
/// the check's rules and before it answers.
#[derive(Clone)]
struct HookedClock {
    time: tollgate::FakeClock,
    hook: Arc<Mutex<Option<Hook>>>,
}

impl tollgate::Clock for HookedClock {
    fn now(&self) -> tollgate::Micros {
        let hook = self.hook.lock().expect("hook").take();
        if let Some(hook) = hook {
            hook();
        }
        self.time.now()
    }
}

/// Decide once (issue 37): an admin override written while the store
/// decides (after the rules were resolved, before the answer) never makes
/// the answer's headers describe it. They used to: the headers looked the
/// rule up again after the check, found the new override, and wrote its
/// window (`w=1`) beside the base rule's quota and decision (`q=5`).
#[tokio::test]
async fn an_override_written_during_a_check_never_shows_in_its_headers() {
    let clock = HookedClock {
        time: tollgate::FakeClock::new(),
        hook: Arc::default(),
    };
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let rule = RuleSpec::new(
        "per_key",
        Algorithm::FixedWindow,
        5,
        Duration::from_secs(60),
    )
    .build()
    .expect("rule");
    let limiter = Limiter::new(store, [rule]).expect("limiter");
    let limiter = Arc::new(
        ResilientLimiter::builder(limiter)
            .build()
            .expect("resilient"),
    );
    let rules = RuleKeys::new(
        limiter.rules(),
        [("per_key", "header:x-api-key".parse().expect("key"))],
    )
    .expect("rules");
    let keys = keys_of(&rules, &with_key()).expect("keys");

    // The override lands while the store decides under the base rule.
    let weak = Arc::downgrade(&limiter);
    *clock.hook.lock().expect("hook") = Some(Box::new(move || {
        let limiter = weak.upgrade().expect("limiter");
        let write = limiter.set_override(tollgate::RuntimeOverride {
            rule: "per_key".into(),
            key: b"k".to_vec(),
            limit: 100,
            period: Some(Duration::from_secs(1)),
            burst: None,
            ends_ms: None,
        });
        // On the memory store the write never waits: done at its first poll.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let std::task::Poll::Ready(done) = std::pin::pin!(write).poll(&mut cx) else {
            panic!("the override write waited")
        };
        done.expect("override set");
    }));
    let o = HeaderOptions::default();
    let HttpVerdict::Admit { headers, decision } = rules.check(&limiter, &keys, None, o).await
    else {
        panic!("admitted")
    };
    assert!(clock.hook.lock().expect("hook").is_none(), "the hook ran");
    assert_eq!(decision.expect("decided").decisions[0].limit, 5);
    // The base rule decided: its quota and its window.
    assert_eq!(headers[RATELIMIT_POLICY], "\"per_key\";q=5;w=60");
    assert_eq!(headers[RATELIMIT], "\"per_key\";r=4;t=60");

    // The next check is decided under the override, and says so.
    let HttpVerdict::Admit { headers, .. } = rules.check(&limiter, &keys, None, o).await else {
        panic!("admitted")
    };
    assert_eq!(headers[RATELIMIT_POLICY], "\"per_key\";q=100;w=1");
}
