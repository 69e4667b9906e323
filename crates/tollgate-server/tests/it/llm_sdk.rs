//! The proxy as an LLM gateway, end to end with real clients and servers
//! nobody here wrote: the official `openai` and `anthropic` Python SDKs
//! (`tests/python/llm_clients.py`: chat completions, the responses API,
//! Anthropic's messages; streamed and not; sync and async) call through
//! `tollgate serve --proxy`, to
//!
//! * the replay upstream (`support::llm_replay`), which answers with the
//!   providers' documented example responses byte for byte, over HTTP or
//!   over TLS with a test CA, and
//! * PyPI's `llmock`, an OpenAI- and Anthropic-compatible mock server
//!   that reports usage in its bodies and streams.
//!
//! Each SDK must get and parse every answer through the proxy, and the
//! tokens tollgate charged (peeked through the HTTP API, cost 0) must be
//! exactly the usage the upstream reported. The tests marked `ignore`
//! name the part of issue 40 they wait for (A: https upstreams and the
//! TLS listener; B: usage read from bodies; C: keys from the request
//! body); they are written against `INTERFACE40`'s names.

use std::time::{Duration, Instant};

use crate::support::Tollgate;
use crate::support::llm_clients::{Llmock, Target, Usage, all_cases, api_of};
use crate::support::llm_replay::{Replay, TestCa, USAGE_HEADER, shape_of_api};
use crate::support::remaining;

/// The counting rules' limit: never reached, so what a rule has charged
/// is `ACCOUNT - remaining`.
pub(crate) const ACCOUNT: u64 = 1_000_000_000;

/// The team every call is made for (`x-team`, the rules' key).
pub(crate) const TEAM: &str = "acme";

/// A rule that counts, per team, every token of its `cost` source, in an
/// hourly fixed window (kept whole through the test by
/// [`clear_of_the_hour`]).
pub(crate) fn counting_rule(name: &str, cost: Option<&str>) -> String {
    let cost = cost.map_or(String::new(), |c| format!("cost = \"{c}\"\nestimate = 1\n"));
    format!(
        "[[rules]]\nname = \"{name}\"\nalgorithm = \"fixed_window\"\nlimit = {ACCOUNT}\n\
         period = \"1h\"\nkey = \"header:x-team\"\n{cost}\n"
    )
}

/// Sleeps past the next hour when less than five minutes of it are left:
/// the counting rules' windows must not start over during a test.
pub(crate) fn clear_of_the_hour() {
    redis_harness::clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(300));
}

/// `tollgate serve --proxy` in front of `upstream`, with its HTTP API.
pub(crate) fn gateway(config: &str, upstream: &str) -> Tollgate {
    Tollgate::start(
        config,
        &[
            "--proxy",
            "127.0.0.1:0",
            "--upstream",
            upstream,
            "--http",
            "127.0.0.1:0",
        ],
    )
}

/// The proxy's URL for the SDKs.
pub(crate) fn base(s: &Tollgate) -> String {
    format!("http://{}", s.proxy())
}

/// Tokens `rule` has charged to [`TEAM`] (a peek through `s`'s HTTP API).
pub(crate) fn charged(s: &Tollgate, rule: &str) -> u64 {
    ACCOUNT - remaining(s, rule, TEAM)
}

/// Waits (at most 10 s) until `rule` has charged [`TEAM`] exactly `want`:
/// a settle lands when the proxy has seen a response end, which may be
/// just after the client has.
pub(crate) fn settles_to(s: &Tollgate, rule: &str, want: u64) {
    let start = Instant::now();
    loop {
        let got = charged(s, rule);
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "rule {rule} charged {got} tokens, the upstream reported {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Usage summed over calls.
pub(crate) fn sum(usages: impl IntoIterator<Item = Usage>) -> Usage {
    usages.into_iter().fold(Usage::default(), |a, u| Usage {
        input: a.input + u.input,
        output: a.output + u.output,
        total: a.total + u.total,
    })
}

#[test]
fn sdk_calls_through_the_proxy_parse_the_examples_and_are_charged_them() {
    clear_of_the_hour();
    let replay = Replay::start();
    let header = format!("response_header:{USAGE_HEADER}");
    let s = gateway(&counting_rule("tokens", Some(&header)), &replay.url());
    let cases = all_cases();
    let calls = Target::new(vec![base(&s)], TEAM).calls(&cases);
    assert_eq!(calls.len(), cases.len());
    let mut want = 0;
    for c in &calls {
        let shape = shape_of_api(api_of(&c.case));
        assert!(c.ok, "{}: {}", c.case, c.raw);
        let expected = Usage {
            input: shape.input,
            output: shape.output,
            total: shape.total,
        };
        assert_eq!(
            c.usage,
            Some(expected),
            "{}: usage as the SDK read it",
            c.case
        );
        assert_eq!(
            c.text, shape.text,
            "{}: text as the SDK put it together",
            c.case
        );
        want += shape.total;
    }
    assert_eq!(replay.served(), cases.len() as u64);
    settles_to(&s, "tokens", want);
}

/// Runs every case of `family` (`openai` or `anthropic`) through a proxy
/// whose rules charge `family`, `family:input` and `family:output`, and
/// checks each against the usage the SDKs read.
fn charged_from_the_body(upstream: &str, family: &str, anthropic_path: &str) {
    let config = format!(
        "{}{}{}",
        counting_rule("total", Some(family)),
        counting_rule("input", Some(&format!("{family}:input"))),
        counting_rule("output", Some(&format!("{family}:output")))
    );
    let s = gateway(&config, upstream);
    let cases: Vec<String> = all_cases()
        .into_iter()
        .filter(|c| c.starts_with(family))
        .collect();
    let mut target = Target::new(vec![base(&s)], TEAM);
    target.anthropic_path = anthropic_path.to_owned();
    let calls = target.calls(&cases);
    for c in &calls {
        assert!(c.ok, "{}: {}", c.case, c.raw);
        let u = c.usage.unwrap_or_else(|| panic!("{}: no usage", c.case));
        assert!(
            u.total > 0 && u.total == u.input + u.output,
            "{}: {u:?}",
            c.case
        );
    }
    let reported = sum(calls.iter().map(|c| c.usage.expect("usage")));
    settles_to(&s, "total", reported.total);
    settles_to(&s, "input", reported.input);
    settles_to(&s, "output", reported.output);
}

#[test]
fn sdk_calls_are_charged_the_usage_in_the_example_bodies() {
    clear_of_the_hour();
    let replay = Replay::start();
    charged_from_the_body(&replay.url(), "openai", "");
    charged_from_the_body(&replay.url(), "anthropic", "");
}

#[test]
fn sdk_calls_through_the_proxy_reach_llmock_and_parse_its_answers() {
    clear_of_the_hour();
    let llmock = Llmock::start();
    let s = gateway(&counting_rule("requests", None), &llmock.url);
    let cases = all_cases();
    let mut target = Target::new(vec![base(&s)], TEAM);
    target.anthropic_path = "/anthropic".to_owned();
    let calls = target.calls(&cases);
    for c in &calls {
        assert!(c.ok, "{}: {}", c.case, c.raw);
        let u = c.usage.unwrap_or_else(|| panic!("{}: no usage", c.case));
        assert!(
            u.total > 0 && u.total == u.input + u.output,
            "{}: {u:?}",
            c.case
        );
        assert!(!c.text.is_empty(), "{}: no text", c.case);
    }
    // Without a usage source a request costs 1: every call went through
    // the proxy, once.
    settles_to(&s, "requests", cases.len() as u64);
}

#[test]
fn sdk_calls_to_llmock_are_charged_what_it_reported() {
    clear_of_the_hour();
    let llmock = Llmock::start();
    charged_from_the_body(&llmock.url, "openai", "/anthropic");
    charged_from_the_body(&llmock.url, "anthropic", "/anthropic");
}

/// Every case through `target`, each answered with its example; returns
/// the usage reported in all.
fn every_case_gets_its_example(target: &Target) -> u64 {
    let cases = all_cases();
    let calls = target.calls(&cases);
    assert_eq!(calls.len(), cases.len());
    let mut want = 0;
    for c in &calls {
        let shape = shape_of_api(api_of(&c.case));
        assert!(c.ok, "{}: {}", c.case, c.raw);
        assert_eq!(c.usage.map(|u| u.total), Some(shape.total), "{}", c.case);
        assert_eq!(c.text, shape.text, "{}", c.case);
        want += shape.total;
    }
    want
}

#[test]
fn the_sdks_trust_the_tls_replay_of_the_test_ca() {
    // The rig itself, with no proxy between: the certificate, its names
    // and the SDKs' `--ca` work, so a failure of the HTTPS tests below is
    // the proxy's.
    let ca = TestCa::generate();
    let replay = Replay::start_tls(&ca);
    let mut target = Target::new(vec![replay.url()], TEAM);
    target.ca = Some(ca.ca());
    every_case_gets_its_example(&target);
    assert_eq!(replay.served(), all_cases().len() as u64);
    assert_eq!(replay.served_h2(), 0, "httpx speaks HTTP/1.1");
    // A client that offers h2 by ALPN gets it (curl, built with nghttp2).
    let out = std::process::Command::new("curl")
        .args(["-sS", "--http2", "--cacert"])
        .arg(ca.ca())
        .args(["-o", "/dev/null", "-w", "%{http_version}", "-d", "{}"])
        .arg(format!("{}/v1/chat/completions", replay.url()))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2", "{out:?}");
    assert_eq!(replay.served_h2(), 1);
}

#[test]
fn sdk_calls_reach_an_https_upstream_of_a_test_ca_over_h2_or_http1() {
    clear_of_the_hour();
    let ca = TestCa::generate();
    let replay = Replay::start_tls(&ca);
    let header = format!("response_header:{USAGE_HEADER}");
    let n = all_cases().len() as u64;
    // http2 = true (the default) offers h2 by ALPN, which the replay
    // takes; with http2 = false every answer comes over HTTP/1.1.
    for (http2, h2_answers) in [("true", n), ("false", 0)] {
        let config = format!(
            "[proxy.upstream_tls]\nca_file = \"{}\"\nhttp2 = {http2}\n\n{}",
            ca.ca().display(),
            counting_rule("tokens", Some(&header))
        );
        let s = gateway(&config, &replay.url());
        let before = (replay.served(), replay.served_h2());
        let want = every_case_gets_its_example(&Target::new(vec![base(&s)], TEAM));
        assert_eq!(replay.served() - before.0, n);
        assert_eq!(replay.served_h2() - before.1, h2_answers, "http2 = {http2}");
        settles_to(&s, "tokens", want);
    }
}

#[test]
fn an_https_upstream_of_an_unknown_ca_is_not_reached() {
    // Without the CA file the test CA is unknown to the system roots: the
    // proxy must refuse the upstream's certificate, never fall back to
    // plain text or skip the check, and give the reservation back.
    clear_of_the_hour();
    let ca = TestCa::generate();
    let replay = Replay::start_tls(&ca);
    let header = format!("response_header:{USAGE_HEADER}");
    let s = gateway(&counting_rule("tokens", Some(&header)), &replay.url());
    let calls = Target::new(vec![base(&s)], TEAM).calls(&["openai-chat:sync".to_owned()]);
    assert!(
        !calls[0].ok,
        "reached an upstream of an unknown CA: {}",
        calls[0].raw
    );
    assert!(
        matches!(calls[0].status, Some(502..=504)),
        "{}",
        calls[0].raw
    );
    assert_eq!(replay.served(), 0);
    settles_to(&s, "tokens", 0);
}

#[test]
fn sdk_calls_over_the_tls_listener_trust_a_custom_ca() {
    clear_of_the_hour();
    let ca = TestCa::generate();
    let replay = Replay::start();
    let header = format!("response_header:{USAGE_HEADER}");
    let config = format!(
        "[proxy.listen_tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\n{}",
        ca.cert().display(),
        ca.key().display(),
        counting_rule("tokens", Some(&header))
    );
    let s = gateway(&config, &replay.url());
    let mut target = Target::new(
        vec![format!("https://localhost:{}", s.proxy().port())],
        TEAM,
    );
    target.ca = Some(ca.ca());
    let want = every_case_gets_its_example(&target);
    settles_to(&s, "tokens", want);
}

#[test]
fn sdk_calls_are_counted_per_model_from_the_request_body() {
    clear_of_the_hour();
    let llmock = Llmock::start();
    let config = "[[rules]]\nname = \"per_model\"\nalgorithm = \"fixed_window\"\n\
                  limit = 1000000000\nperiod = \"1h\"\nkey = \"request_json:/model\"\n";
    let s = gateway(config, &llmock.url);
    let cases = all_cases();
    let mut target = Target::new(vec![base(&s)], TEAM);
    target.anthropic_path = "/anthropic".to_owned();
    for c in target.calls(&cases) {
        assert!(c.ok, "{}: {}", c.case, c.raw);
    }
    // llm_clients.py asks for gpt-4o-mini and claude-sonnet-4-5; the body
    // reached llmock unchanged (each call parsed), and each model's key
    // counted its own requests.
    let per_model = |model: &str| ACCOUNT - remaining(&s, "per_model", model);
    assert_eq!(per_model("gpt-4o-mini"), 8);
    assert_eq!(per_model("claude-sonnet-4-5"), 4);
}

#[test]
fn the_reservation_is_the_requests_max_tokens_clamped_to_the_limit() {
    clear_of_the_hour();
    let replay = Replay::start();
    let config = format!(
        "[[rules]]\nname = \"budget\"\nalgorithm = \"fixed_window\"\nlimit = 50\n\
         period = \"1h\"\nkey = \"header:x-team\"\ncost = \"response_header:{USAGE_HEADER}\"\n\
         estimate = \"max_tokens\"\nestimate_default = 1\n"
    );
    let s = gateway(&config, &replay.url());
    let mut session = Target::new(vec![base(&s)], TEAM).session();
    let mut one = |case: &str| session.call(case, 0);
    let left_settles_to = |want: u64| {
        let start = Instant::now();
        while remaining(&s, "budget", TEAM) != want {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "never {want} left"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // llm_clients.py's Anthropic calls ask for max_tokens 64, over the
    // limit of 50: reserved as 50, so admitted on an untouched budget.
    let c = one("anthropic-stream:sync");
    assert!(c.ok, "{}", c.raw);
    // The example used 40: 10 left.
    left_settles_to(10);
    // The same call reserves 50 again, more than is left: refused (with
    // an estimate of 1 it would pass).
    let c = one("anthropic-stream:sync");
    assert_eq!(c.status, Some(429), "{}", c.raw);
    // A request with no max_tokens reserves estimate_default, 1: admitted.
    let c = one("openai-chat:sync");
    assert!(c.ok, "{}", c.raw);
    assert_eq!(replay.served(), 2);
}
