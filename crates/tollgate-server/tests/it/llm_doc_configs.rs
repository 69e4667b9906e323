//! The configs of docs/llm-gateway.md, as the page shows them, run with
//! the official SDKs through the proxy: OpenAI's and Anthropic's against
//! the replay upstream over HTTPS (a test CA standing in for the public
//! one), the self-hosted one against PyPI's `llmock`. Each rule must charge
//! exactly the usage the SDKs read. Two things are changed, and only
//! those: the listen address and upstream (the test's own), and each
//! rule's one-minute sliding window becomes a fixed hour, so that what a
//! rule holds reads as an exact sum whenever the test runs.

use crate::llm_sdk::{TEAM, base, clear_of_the_hour, gateway, sum};
use crate::support::llm_clients::{Call, Llmock, Target, all_cases};
use crate::support::llm_replay::{Replay, TestCa};
use crate::support::remaining;

/// The TOML block of docs/llm-gateway.md whose first line is `# NAME`.
fn doc_config(name: &str) -> String {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/llm-gateway.md"
    ))
    .expect("docs/llm-gateway.md");
    let start = page
        .find(&format!("```toml\n# {name}\n"))
        .unwrap_or_else(|| panic!("no block {name} in docs/llm-gateway.md"));
    let block = &page[start + "```toml\n".len()..];
    let end = block.find("```").expect("the block ends");
    block[..end].to_owned()
}

/// `config` with its `[proxy]` address and upstream left to the command
/// line, and every window an hour long.
fn for_the_test(config: &str, extra_tls: &str) -> String {
    let mut out = String::new();
    for line in config.lines() {
        if line.starts_with("listen =") || line.starts_with("upstream =") {
            continue;
        }
        let line = match line {
            l if l.starts_with("algorithm = \"sliding_window\"") => {
                "algorithm = \"fixed_window\"".to_owned()
            }
            l if l.starts_with("period = \"1m\"") => "period = \"1h\"".to_owned(),
            l => l.to_owned(),
        };
        out.push_str(&line);
        out.push('\n');
        if line == "[proxy.upstream_tls]" && !extra_tls.is_empty() {
            out.push_str(extra_tls);
            out.push('\n');
        }
    }
    if !extra_tls.is_empty() && !config.contains("[proxy.upstream_tls]") {
        out.push_str(&format!("\n[proxy.upstream_tls]\n{extra_tls}\n"));
    }
    out
}

/// The calls of every SDK case whose name starts with `family`.
fn calls(target: &Target, family: &str) -> Vec<Call> {
    let cases: Vec<String> = all_cases()
        .into_iter()
        .filter(|c| c.starts_with(family))
        .collect();
    let calls = target.calls(&cases);
    for c in &calls {
        assert!(c.ok, "{}: {}", c.case, c.raw);
    }
    calls
}

/// Waits until `rule` holds exactly `want` for `key` (`limit` - remaining).
fn holds(s: &crate::support::Tollgate, rule: &str, key: &str, limit: u64, want: u64) {
    let start = std::time::Instant::now();
    loop {
        let got = limit - remaining(s, rule, key);
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{rule}[{key}] holds {got}, the upstream reported {want}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn the_openai_config_of_the_docs_charges_what_the_sdks_read() {
    clear_of_the_hour();
    let ca = TestCa::generate();
    let replay = Replay::start_tls(&ca);
    let config = for_the_test(
        &doc_config("openai.toml"),
        &format!("ca_file = {:?}", ca.ca()),
    );
    let s = gateway(&config, &replay.url());
    let calls = calls(&Target::new(vec![base(&s)], TEAM), "openai");
    let used = sum(calls.iter().map(|c| c.usage.expect("usage")));
    holds(&s, "team_tpm", TEAM, 200_000, used.total);
    holds(&s, "team_otpm", TEAM, 50_000, used.output);
    // Every slot came back when its answer ended.
    assert_eq!(remaining(&s, "team_inflight", TEAM), 20);
}

#[test]
fn the_anthropic_config_of_the_docs_charges_what_the_sdks_read() {
    clear_of_the_hour();
    let ca = TestCa::generate();
    let replay = Replay::start_tls(&ca);
    let config = for_the_test(
        &doc_config("anthropic.toml"),
        &format!("ca_file = {:?}", ca.ca()),
    );
    let s = gateway(&config, &replay.url());
    let calls = calls(&Target::new(vec![base(&s)], TEAM), "anthropic");
    let used = sum(calls.iter().map(|c| c.usage.expect("usage")));
    // The SDK client sends metadata.user_id = the team: the rules' key.
    holds(&s, "user_itpm", TEAM, 100_000, used.input);
    holds(&s, "user_otpm", TEAM, 20_000, used.output);
}

#[test]
fn the_self_hosted_config_of_the_docs_charges_per_model_and_tenant() {
    clear_of_the_hour();
    let llmock = Llmock::start();
    let s = gateway(&for_the_test(&doc_config("vllm.toml"), ""), &llmock.url);
    let mut target = Target::new(vec![base(&s)], TEAM);
    target
        .headers
        .push(("x-tenant".to_owned(), "t1".to_owned()));
    let calls = calls(&target, "openai");
    let used = sum(calls.iter().map(|c| c.usage.expect("usage")));
    // Every case asks for the same model, the key of both rules.
    holds(&s, "model_tpm", "gpt-4o-mini", 2_000_000, used.total);
    holds(
        &s,
        "tenant_model_tpm",
        "t1+gpt-4o-mini",
        200_000,
        used.total,
    );
}
