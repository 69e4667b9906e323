//! Keys and estimates read from the request body.

use std::time::Duration;

use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec};

use super::*;
use crate::cost::ResponseCost;
use crate::estimate::RequestEstimate;
use crate::request_body::BodyFacts;

fn all() -> Vec<Rule> {
    let rules = [
        RuleSpec::new(
            "per_model",
            Algorithm::FixedWindow,
            5,
            Duration::from_secs(60),
        ),
        RuleSpec::new("tpm", Algorithm::FixedWindow, 1000, Duration::from_secs(60)),
    ];
    let limiter =
        Limiter::new(MemoryStore::new(), rules.map(|r| r.build().expect("rule"))).expect("limiter");
    limiter.rules().to_vec()
}

fn rules(missing: MissingKey) -> RuleKeys {
    let all = all();
    RuleKeys::new(
        &all,
        [
            (
                "per_model",
                "request_json:/model+header:x-team".parse().expect("key"),
            ),
            ("tpm", "request_json:/metadata/tenant".parse().expect("key")),
        ],
    )
    .expect("rules")
    .with_missing_key(missing)
}

fn facts(rules: &RuleKeys, body: &[u8]) -> BodyFacts {
    let mut scan = rules
        .body_plan()
        .expect("reads the body")
        .start(1 << 20, None);
    scan.push(body);
    scan.finish();
    scan.facts()
}

fn keys(rules: &RuleKeys, body: Option<&BodyFacts>) -> Result<Keys, Box<Response<String>>> {
    let req = http::Request::post("/")
        .header("x-team", "t1")
        .body(())
        .expect("req");
    rules.keys_with_body(req.method(), req.uri(), req.headers(), None, body)
}

#[test]
fn a_body_field_keys_a_rule() {
    let r = rules(MissingKey::Reject);
    assert_eq!(
        r.body_plan().expect("plan").pointers(),
        ["/model", "/metadata/tenant"]
    );
    let f = facts(&r, br#"{"model":"gpt+4","metadata":{"tenant":"acme"}}"#);
    let k = keys(&r, Some(&f)).expect("keys");
    let got: Vec<(usize, &[u8])> = k.iter().collect();
    assert_eq!(got, [(0, &b"gpt%2B4+t1"[..]), (1, &b"acme"[..])]);
}

#[test]
fn a_missing_body_field_follows_the_policy() {
    let body = br#"{"model":"m"}"#;
    let empty = rules(MissingKey::Empty);
    let k = keys(&empty, Some(&facts(&empty, body))).expect("keys");
    assert_eq!(k.iter().nth(1), Some((1, &b""[..])));
    let k = keys(&empty, None).expect("no body read: empty keys");
    assert_eq!(k.iter().next(), Some((0, &b"+t1"[..])));

    let skip = rules(MissingKey::Skip);
    let k = keys(&skip, Some(&facts(&skip, body))).expect("keys");
    assert_eq!(k.iter().map(|(i, _)| i).collect::<Vec<_>>(), [0]);

    let reject = rules(MissingKey::Reject);
    let refused = keys(&reject, Some(&facts(&reject, br#"{"model":""}"#))).expect_err("empty");
    assert_eq!(refused.status(), 400);
    assert!(
        refused.body().contains("/model") && refused.body().contains("per_model"),
        "{}",
        refused.body()
    );
}

#[test]
fn a_door_without_bodies_refuses_rules_that_read_them() {
    let err = rules(MissingKey::Empty)
        .without_body()
        .expect_err("reads bodies");
    assert!(
        matches!(&err, BuildError::ReadsBody { rule, .. } if rule == "per_model"),
        "{err}"
    );
    assert!(err.to_string().contains("request_json:/model"), "{err}");

    let all = all();
    let plain =
        RuleKeys::new(&all, [("tpm", "header:x-team".parse().expect("key"))]).expect("rules");
    assert!(plain.body_plan().is_none());
    let cost =
        ResponseCost::new("response_header:x-usage".parse().expect("source"), 10).expect("cost");
    let fixed = plain
        .clone()
        .with_response_cost(&all, "tpm", cost.clone())
        .expect("cost");
    assert!(fixed.body_plan().is_none());
    assert!(fixed.without_body().is_ok());
    let read = plain
        .with_response_cost(
            &all,
            "tpm",
            cost.with_request_estimate(RequestEstimate::MaxTokens),
        )
        .expect("cost");
    assert_eq!(
        read.body_plan().expect("plan").pointers(),
        [
            "/max_tokens",
            "/max_completion_tokens",
            "/max_output_tokens"
        ]
    );
    let err = read.without_body().expect_err("estimate from the body");
    assert!(err.to_string().contains("estimate \"max_tokens\""), "{err}");
}

#[test]
fn an_estimate_from_the_request_is_the_rules_reservation() {
    let all = all();
    let cost = ResponseCost::new("response_header:x-usage".parse().expect("source"), 10)
        .expect("cost")
        .with_request_estimate(RequestEstimate::MaxTokens);
    let r = RuleKeys::new(&all, [("tpm", "header:x-team".parse().expect("key"))])
        .expect("rules")
        .with_response_cost(&all, "tpm", cost)
        .expect("cost");
    let k = keys(&r, Some(&facts(&r, br#"{"max_tokens":250}"#))).expect("keys");
    assert_eq!(k.estimate(0), Some(250));
    let k = keys(&r, Some(&facts(&r, br#"{"max_tokens":250000}"#))).expect("keys");
    // Not capped here: at admission, by the capacity of the limit that
    // decides the key (an override's may be larger than the rule's).
    assert_eq!(k.estimate(0), Some(250_000), "as asked");
    assert_eq!(
        keys(&r, None).expect("keys").estimate(0),
        Some(10),
        "the default"
    );
}
