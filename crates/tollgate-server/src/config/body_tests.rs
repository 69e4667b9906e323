//! `request_json` keys, estimates read from the request and `[proxy]
//! request_body_limit`.

use super::*;
use tollgate_http::estimate::RequestEstimate;

fn errors(src: &str) -> Vec<String> {
    Config::parse(src, "t.toml")
        .expect_err("should be rejected")
        .errors
        .iter()
        .map(ToString::to_string)
        .collect()
}

const RULE: &str = r#"
[[rules]]
name = "otpm"
algorithm = "fixed_window"
limit = 1000
period = "1m"
cost = "response_header:x-output"
"#;

#[test]
fn an_estimate_read_from_the_request_has_its_default() {
    let c = Config::parse(
        &format!(
            "[proxy]\nrequest_body_limit = 4096\n{RULE}key = \"request_json:/model+header:x-team\"\n\
             estimate = \"prompt+max_tokens\"\nestimate_default = 1000\n"
        ),
        "t.toml",
    )
    .expect("valid");
    assert_eq!(c.proxy.request_body_limit, 4096);
    let rule = &c.rules[0];
    let cost = rule.cost.as_ref().expect("cost");
    assert_eq!(
        cost.request_estimate(),
        Some(RequestEstimate::PromptAndMaxTokens)
    );
    assert_eq!(cost.estimate(), 1000, "the default");
    assert_eq!(
        rule.key.as_ref().expect("key").to_string(),
        "request_json:/model+header:x-team"
    );
    let plain = Config::parse(&format!("{RULE}estimate = 10\n"), "t.toml").expect("valid");
    assert_eq!(
        plain.proxy.request_body_limit,
        tollgate_http::request_body::DEFAULT_REQUEST_BODY_LIMIT
    );
    assert_eq!(
        plain.rules[0]
            .cost
            .as_ref()
            .expect("cost")
            .request_estimate(),
        None
    );
}

#[test]
fn wrong_estimates_and_limits_name_their_field() {
    for (src, want) in [
        (
            format!("{RULE}estimate = \"max_tokens\"\n"),
            "t.toml:8: rules[0].estimate_default: missing required field: estimate = \"max_tokens\" \
             needs estimate_default, the units reserved when the request does not say (no such \
             field, no JSON body)",
        ),
        (
            format!("{RULE}estimate = 10\nestimate_default = 5\n"),
            "t.toml:9: rules[0].estimate_default: estimate_default applies only with an estimate \
             read from the request (estimate = \"max_tokens\", \"prompt\" or \"prompt+max_tokens\")",
        ),
        (
            format!("{RULE}estimate = \"tokens\"\nestimate_default = 5\n"),
            "t.toml:8: rules[0].estimate: estimate \"tokens\" is not read from the request; \
             expected a whole number, \"max_tokens\", \"prompt\" or \"prompt+max_tokens\"",
        ),
        (
            format!("{RULE}estimate = \"prompt\"\nestimate_default = 1001\n"),
            "t.toml:9: rules[0].estimate_default: estimate 1001 is more than the rule admits at \
             once (1000): no request could ever be admitted",
        ),
        (
            "[[rules]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n\
             estimate_default = 5\n"
                .to_owned(),
            "t.toml:6: rules[0].estimate_default: estimate_default applies only with an estimate \
             read from the request (estimate = \"max_tokens\", \"prompt\" or \"prompt+max_tokens\")",
        ),
        (
            format!("[proxy]\nrequest_body_limit = 67108865\n{RULE}estimate = 1\n"),
            "t.toml:2: proxy.request_body_limit: request_body_limit is at most 67108864 bytes \
             (64 MiB), got 67108865: each request in flight may hold this much",
        ),
        (
            format!("[proxy]\nrequest_body_limit = \"1MiB\"\n{RULE}estimate = 1\n"),
            "t.toml:2: proxy.request_body_limit: expected an integer, found string",
        ),
        (
            format!("{RULE}estimate = 1\nkey = \"request_json:model\"\n"),
            "t.toml:9: rules[0].key: request_json:model",
        ),
    ] {
        let got = errors(&src);
        assert!(
            got.iter().any(|e| e.starts_with(want)),
            "{src}\nwant {want}\ngot {got:#?}"
        );
    }
}
