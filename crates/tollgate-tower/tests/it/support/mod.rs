//! Helpers shared by the integration tests, defined once.

pub(crate) mod down;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{HeaderValue, Request, Response};
use sfv::{ListEntry, Parser};
use tollgate::{Algorithm, Decision, FakeClock, Limiter, MemoryStore, Rule, RuleSpec};
use tollgate_tower::PeerAddr;
use tollgate_tower::usage::UsageBody;
use tower::{Service, ServiceExt, service_fn};

/// A rule with a long period, so nothing refills during a test on the real
/// clock.
pub(crate) fn rule(name: &str, algorithm: Algorithm, limit: u64, period: Duration) -> Rule {
    RuleSpec::new(name, algorithm, limit, period)
        .build()
        .expect("valid rule")
}

/// The limiter of [`limiter`].
pub(crate) type TestLimiter = Limiter<MemoryStore<FakeClock>>;

/// A limiter over a memory store on a fake clock.
pub(crate) fn limiter(rules: impl IntoIterator<Item = Rule>) -> (Arc<TestLimiter>, FakeClock) {
    let clock = FakeClock::new();
    let store = MemoryStore::builder().clock(clock.clone()).build();
    (
        Arc::new(Limiter::new(store, rules).expect("limiter")),
        clock,
    )
}

/// An inner service answering 200 "ok", counting its calls.
pub(crate) fn ok_service(
    calls: Arc<AtomicUsize>,
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ Sync
+ 'static {
    service_fn(move |_req: Request<String>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(String::from("ok"))) }
    })
}

/// A response body these tests read as text: the inner service's
/// `String`, or the layer's [`UsageBody`] around one.
pub(crate) trait Text {
    /// The text.
    fn text(self) -> String;
}

impl Text for String {
    fn text(self) -> String {
        self
    }
}

impl<B: Text> Text for UsageBody<B> {
    fn text(self) -> String {
        self.into_inner().text()
    }
}

/// Sends `req` through a clone of `svc`.
pub(crate) async fn send<S, B>(svc: &S, req: Request<String>) -> Response<String>
where
    S: Service<Request<String>, Response = Response<B>, Error = Infallible> + Clone,
    B: Text,
{
    match svc.clone().oneshot(req).await {
        Ok(r) => r.map(Text::text),
        Err(never) => match never {},
    }
}

/// A GET of `path` from `peer`.
pub(crate) fn get(path: &str, peer: &str) -> http::request::Builder {
    let peer: SocketAddr = peer.parse().expect("peer address");
    Request::get(path).extension(PeerAddr(peer))
}

/// One member of a RateLimit / RateLimit-Policy list: its sf-string name and
/// its integer parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) params: BTreeMap<String, i64>,
}

/// Parses a header as an RFC 9651 structured-field List of sf-strings with
/// integer parameters, panicking on anything else.
pub(crate) fn members(value: &HeaderValue) -> Vec<Member> {
    let list: sfv::List = Parser::new(value.as_bytes())
        .parse()
        .unwrap_or_else(|e| panic!("{value:?} is not a structured-field list: {e}"));
    list.into_iter()
        .map(|entry| match entry {
            ListEntry::Item(item) => Member {
                name: item
                    .bare_item
                    .as_string()
                    .unwrap_or_else(|| panic!("{value:?}: member is not an sf-string"))
                    .as_str()
                    .to_owned(),
                params: item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        let n = v
                            .as_integer()
                            .unwrap_or_else(|| panic!("{value:?}: {k} is not an integer"));
                        (k.as_str().to_owned(), i64::from(n))
                    })
                    .collect(),
            },
            ListEntry::InnerList(_) => panic!("{value:?}: unexpected inner list"),
        })
        .collect()
}

/// A member with these parameters.
pub(crate) fn member(name: &str, params: &[(&str, i64)]) -> Member {
    Member {
        name: name.to_owned(),
        params: params.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    }
}

/// Peeks (cost 0) at `key` under `rule`: what remains, consuming nothing.
pub(crate) async fn peek<S: tollgate::Store>(
    limiter: &Limiter<S>,
    rule: &str,
    key: &str,
) -> Decision {
    limiter.check(rule, key, 0).await.expect("peek")
}

/// The JSON body of a problem response.
pub(crate) fn problem_body(response: &Response<String>) -> serde_json::Value {
    assert_eq!(
        response.headers()[http::header::CONTENT_TYPE],
        "application/problem+json"
    );
    serde_json::from_str(response.body()).expect("problem+json body")
}
