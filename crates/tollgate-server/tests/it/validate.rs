//! `tollgate validate` end to end: the real binary on good and bad configs.
//! Every problem is reported as `file:line: field: why`.

use std::path::Path;
use std::process::{Command, Output};

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run_in(dir: &Path, args: &[&str]) -> Outcome {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run tollgate");
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

/// Writes `bytes` to `bad.toml` in a temp dir and validates it by that
/// relative name, so messages start with `bad.toml:`.
fn validate_bytes(bytes: &[u8]) -> Outcome {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bad.toml"), bytes).expect("write config");
    run_in(dir.path(), &["validate", "--config", "bad.toml"])
}

fn validate(text: &str) -> Outcome {
    validate_bytes(text.as_bytes())
}

/// Asserts that validation fails with exactly these problem lines, then the
/// count line.
fn assert_problems(text: &str, problems: &[&str]) {
    let out = validate(text);
    assert_eq!(out.code, Some(1), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "");
    let n = problems.len();
    let s = if n == 1 { "" } else { "s" };
    let want = format!(
        "{}\nbad.toml: invalid, {n} problem{s}\n",
        problems.join("\n")
    );
    assert_eq!(out.stderr, want);
}

const GOOD: &str = r#"[store]
url = "redis://cache.internal:6379/1"
timeout = "20ms"
on_error = "local"
prefix = "tg"
replicas = 4
heartbeat = "500ms"

[proxy]
trusted_proxies = ["10.0.0.0/8", "fd00::/8"]

[[rules]]
name = "per_user"
algorithm = "gcra"
limit = 100
period = "1s"
burst = 200
key = "header:X-Api-Key"

[[rules]]
name = "per_ip"
algorithm = "fixed_window"
limit = 1000
period = "1m"
key = "client_ip+path"
on_error = "deny"
cost = "response_header:X-Usage-Tokens"
estimate = 5
"#;

#[test]
fn good_config_exits_zero_with_a_summary() {
    let out = validate(GOOD);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.stderr, "");
    assert_eq!(
        out.stdout,
        "bad.toml: OK, 2 rules\n\
         store: redis://cache.internal:6379/1 (timeout 20ms, on_error local, prefix tg, max_keys 1000000)\n\
         store: replicas 4 until the first heartbeat, heartbeat every 500ms\n\
         proxy: trusted_proxies 10.0.0.0/8, fd00::/8\n\
         rule per_user: gcra 100 per 1s, burst 200, key header:x-api-key, on_error local\n\
         rule per_ip: fixed_window 1000 per 1m, key client_ip+path, cost response_header:x-usage-tokens (estimate 5), on_error deny\n"
    );
}

/// A one-rule config with `extra` lines appended to the rule (line 6 on).
fn rule_with(algorithm: &str, extra: &str) -> String {
    format!(
        "[[rules]]\nname = \"r\"\nalgorithm = \"{algorithm}\"\nlimit = 10\nperiod = \"1s\"\n{extra}"
    )
}

#[test]
fn duplicate_rule_names() {
    assert_problems(
        &format!(
            "{}\n{}",
            rule_with("gcra", ""),
            rule_with("fixed_window", "")
        ),
        &["bad.toml:8: rules[1].name: rule name \"r\" is already used by rules[0] (line 1)"],
    );
}

#[test]
fn missing_required_fields() {
    assert_problems(
        "[store]\nurl = \"memory\"\n\n[[rules]]\nburst = 5\n",
        &[
            "bad.toml:4: rules[0].name: missing required field",
            "bad.toml:4: rules[0].algorithm: missing required field",
            "bad.toml:4: rules[0].limit: missing required field",
            "bad.toml:4: rules[0].period: missing required field",
        ],
    );
    assert_problems(
        "[store]\nurl = \"memory\"\n",
        &["bad.toml:1: rules: no rules; add at least one [[rules]] table"],
    );
}

#[test]
fn wrong_types() {
    assert_problems(
        "[store]\ntimeout = 50\nmax_keys = \"lots\"\n\n[[rules]]\nname = 5\nalgorithm = \"gcra\"\n\
         limit = \"100\"\nperiod = 1\nburst = 1.5\nkey = [\"path\"]\n",
        &[
            "bad.toml:2: store.timeout: expected a string, found integer",
            "bad.toml:3: store.max_keys: expected an integer, found string",
            "bad.toml:6: rules[0].name: expected a string, found integer",
            "bad.toml:8: rules[0].limit: expected an integer, found string",
            "bad.toml:9: rules[0].period: expected a string, found integer",
            "bad.toml:10: rules[0].burst: expected an integer, found float",
            "bad.toml:11: rules[0].key: expected a string, found array",
        ],
    );
    assert_problems(
        "rules = \"per_user\"\n",
        &["bad.toml:1: rules: expected an array of tables ([[rules]]), found string"],
    );
}

#[test]
fn bad_durations() {
    for (period, why) in [
        (
            "1.5s",
            "duration \"1.5s\" has unknown unit \".5s\" (use ms, s, m, h or d)",
        ),
        ("10", "duration \"10\" has no unit (use ms, s, m, h or d)"),
        (
            "fast",
            "duration \"fast\" must start with a whole number, e.g. \"250ms\" or \"1s\"",
        ),
        (
            "1w",
            "duration \"1w\" has unknown unit \"w\" (use ms, s, m, h or d)",
        ),
        ("0ms", "period 0ns is shorter than the minimum 1ms"),
        ("367d", "period 31708800s is longer than the maximum 366d"),
    ] {
        let text = format!(
            "[[rules]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 1\nperiod = \"{period}\"\n"
        );
        assert_problems(&text, &[&format!("bad.toml:5: rules[0].period: {why}")]);
    }
    assert_problems(
        &format!("[store]\ntimeout = \"soon\"\n\n{}", rule_with("gcra", "")),
        &[
            "bad.toml:2: store.timeout: duration \"soon\" must start with a whole number, e.g. \"250ms\" or \"1s\"",
        ],
    );
    assert_problems(
        &format!("[store]\ntimeout = \"0s\"\n\n{}", rule_with("gcra", "")),
        &["bad.toml:2: store.timeout: timeout must be at least 1ms"],
    );
}

#[test]
fn unknown_algorithm() {
    assert_problems(
        &rule_with("leaky_bucket", ""),
        &[
            "bad.toml:3: rules[0].algorithm: unknown algorithm \"leaky_bucket\"; expected one of \
           gcra, token_bucket, fixed_window, sliding_window, sliding_log, concurrency",
        ],
    );
}

#[test]
fn burst_on_a_window_algorithm() {
    for algorithm in ["fixed_window", "sliding_window", "sliding_log"] {
        assert_problems(
            &rule_with(algorithm, "burst = 20\n"),
            &[&format!(
                "bad.toml:6: rules[0].burst: burst applies to gcra and token_bucket only, not {algorithm}"
            )],
        );
    }
    // and a zero burst where burst applies
    assert_problems(
        &rule_with("token_bucket", "burst = 0\n"),
        &["bad.toml:6: rules[0].burst: burst must be at least 1"],
    );
}

#[test]
fn zero_or_negative_limit() {
    let text = "[[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 0\nperiod = \"1s\"\n";
    assert_problems(
        text,
        &["bad.toml:4: rules[0].limit: limit must be at least 1"],
    );
    assert_problems(
        &text.replace("limit = 0", "limit = -5"),
        &["bad.toml:4: rules[0].limit: limit must be at least 1, got -5"],
    );
    // the library's own bounds apply too
    assert_problems(
        &text
            .replace("limit = 0", "limit = 2000")
            .replace("1s", "1ms"),
        &[
            "bad.toml:4: rules[0].limit: limit 2000 per 1000 microseconds is more than one per \
           microsecond, the finest rate gcra can represent",
        ],
    );
}

#[test]
fn unknown_fields_everywhere() {
    assert_problems(
        "colour = \"red\"\n\n[store]\nurl = \"memory\"\nttl = \"1s\"\n\n[proxy]\ntrusted = []\n\n\
         [[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\nlimt = 2\n\n\
         [server]\nport = 80\n",
        &[
            "bad.toml:1: colour: unknown field; expected one of store, rules, http, proxy, envoy, metrics, admin, ops, tracing, rlqs",
            "bad.toml:5: store.ttl: unknown field; expected one of url, timeout, on_error, prefix, max_keys, \
             replicas, heartbeat, hybrid, hybrid_batch, hybrid_lease, password_file, username, tls",
            "bad.toml:8: proxy.trusted: unknown field; expected one of listen, upstream, trusted_proxies, \
             ipv6_prefix, on_missing_key, connect_timeout, response_timeout, send_timeout, append_forwarded_for, \
             upstream_tls, listen_tls, request_body_limit",
            "bad.toml:15: rules[0].limt: unknown field; expected one of name, algorithm, limit, \
             period, lease, burst, key, on_error, cost, estimate, estimate_default, overrides",
            "bad.toml:17: server: unknown field; expected one of store, rules, http, proxy, envoy, metrics, admin, ops, tracing, rlqs",
        ],
    );
}

#[test]
fn bad_key_extractor() {
    for (key, why) in [
        (
            "cookie",
            "unknown key part \"cookie\"; expected client_ip, header:NAME, path, method or host",
        ),
        (
            "client_ip+",
            "empty part; parts are joined with a single \"+\"",
        ),
        (
            "header:",
            "\"header:\" needs a header name, e.g. \"header:x-api-key\"",
        ),
        (
            "header:x api",
            "header name \"x api\" contains ' ', which is not allowed in an HTTP header name",
        ),
        ("path+path", "key part path appears twice"),
    ] {
        assert_problems(
            &rule_with("gcra", &format!("key = \"{key}\"\n")),
            &[&format!("bad.toml:6: rules[0].key: {why}")],
        );
    }
}

#[test]
fn bad_cidr() {
    assert_problems(
        &format!(
            "[proxy]\ntrusted_proxies = [\n  \"10.0.0.0/8\",\n  \"10.0.0.0/33\",\n  \"192.168.1.1/24\",\n  \
             \"proxy.internal\",\n  7,\n]\n\n{}",
            rule_with("gcra", "")
        ),
        &[
            "bad.toml:4: proxy.trusted_proxies[1]: \"10.0.0.0/33\" is not a CIDR block: prefix length \
             \"33\" must be a whole number from 0 to 32",
            "bad.toml:5: proxy.trusted_proxies[2]: \"192.168.1.1/24\" has host bits set after the /24 \
             prefix; did you mean \"192.168.1.0/24\"?",
            "bad.toml:6: proxy.trusted_proxies[3]: \"proxy.internal\" is not a CIDR block: \
             \"proxy.internal\" is not an IPv4 or IPv6 address",
            "bad.toml:7: proxy.trusted_proxies[4]: expected a CIDR string, found integer",
        ],
    );
}

#[test]
fn bad_store_url() {
    for (url, why) in [
        (
            "mem",
            "store URL \"mem\" is not valid; expected \"memory\", redis://[user:pass@]host:port[/db], \
                 rediss://…, redis+cluster://host:port[,host:port…] or \
                 redis+sentinel://host:port[,host:port…]/master-name",
        ),
        (
            "http://cache:6379",
            "store URL \"http://cache:6379\": unknown scheme \"http\"; expected \"memory\", \
                 redis://[user:pass@]host:port[/db], rediss://…, redis+cluster://host:port[,host:port…] or \
                 redis+sentinel://host:port[,host:port…]/master-name",
        ),
        (
            "redis://cache:99999",
            "store URL \"redis://cache:99999\": port \"99999\" must be a number from 1 to 65535",
        ),
        (
            "redis://u:secret@cache:6379/db1",
            "store URL \"redis://u:***@cache:6379/db1\": database \"db1\" must be a whole number, e.g. /0",
        ),
        (
            "redis+sentinel://s1:26379",
            "store URL \"redis+sentinel://s1:26379\": a sentinel URL must end with /master-name",
        ),
        (
            "redis+cluster://a:1/2",
            "store URL \"redis+cluster://a:1/2\": a cluster URL takes no path: Redis Cluster has only database 0",
        ),
    ] {
        let out = validate(&format!(
            "[store]\nurl = \"{url}\"\n\n{}",
            rule_with("gcra", "")
        ));
        assert_eq!(out.code, Some(1));
        assert!(
            !out.stderr.contains("secret"),
            "password leaked: {}",
            out.stderr
        );
        assert_eq!(
            out.stderr,
            format!("bad.toml:2: store.url: {why}\nbad.toml: invalid, 1 problem\n")
        );
    }
}

#[test]
fn bad_on_error() {
    assert_problems(
        &format!(
            "[store]\non_error = \"ignore\"\n\n{}",
            rule_with("gcra", "on_error = \"retry\"\n")
        ),
        &[
            "bad.toml:2: store.on_error: unknown on_error \"ignore\"; expected allow, deny or local",
            "bad.toml:9: rules[0].on_error: unknown on_error \"retry\"; expected allow, deny or local",
        ],
    );
}

#[test]
fn bad_rule_name_and_prefix() {
    assert_problems(
        "[store]\nprefix = \"{tg}\"\n\n[[rules]]\nname = \"per user\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n",
        &[
            "bad.toml:2: store.prefix: prefix \"{tg}\" contains '{'; only A-Z a-z 0-9 _ . : - are allowed",
            "bad.toml:5: rules[0].name: name \"per user\" contains ' '; only A-Z a-z 0-9 _ . - are allowed",
        ],
    );
}

#[test]
fn toml_syntax_error_reports_its_line() {
    let out = validate("[[rules]]\nname = \"r\"\nalgorithm = gcra\nlimit = 1\n");
    assert_eq!(out.code, Some(1));
    let first = out.stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("bad.toml:3: TOML syntax error: "),
        "{}",
        out.stderr
    );
    // every syntax error, not just the first
    let out = validate("[store\nurl = \"memory\"\n[[rules]]\nname = \"a\nlimit = 1\n");
    assert_eq!(out.code, Some(1));
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(
        lines[0].starts_with("bad.toml:1: TOML syntax error: "),
        "{}",
        out.stderr
    );
    assert!(
        lines[1].starts_with("bad.toml:4: TOML syntax error: "),
        "{}",
        out.stderr
    );
    assert_eq!(lines.last(), Some(&"bad.toml: invalid, 2 problems"));
    // a key given twice is a TOML error too
    let out = validate("[[rules]]\nname = \"a\"\nname = \"b\"\n");
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr
            .starts_with("bad.toml:3: TOML syntax error: duplicate key"),
        "{}",
        out.stderr
    );
}

#[test]
fn several_problems_are_all_reported() {
    assert_problems(
        r#"[store]
url = "redis://h:0"
on_error = "maybe"

[[rules]]
name = "a"
algorithm = "fixed_window"
limit = 0
period = "1s"
burst = 5

[[rules]]
name = "a"
algorithm = "sliding_log"
limit = 10
period = "forever"
key = "cookie"
"#,
        &[
            "bad.toml:2: store.url: store URL \"redis://h:0\": port \"0\" must be a number from 1 to 65535",
            "bad.toml:3: store.on_error: unknown on_error \"maybe\"; expected allow, deny or local",
            "bad.toml:8: rules[0].limit: limit must be at least 1",
            "bad.toml:10: rules[0].burst: burst applies to gcra and token_bucket only, not fixed_window",
            "bad.toml:13: rules[1].name: rule name \"a\" is already used by rules[0] (line 5)",
            "bad.toml:16: rules[1].period: duration \"forever\" must start with a whole number, e.g. \"250ms\" or \"1s\"",
            "bad.toml:17: rules[1].key: unknown key part \"cookie\"; expected client_ip, header:NAME, path, method or host",
        ],
    );
}

#[test]
fn the_example_config_validates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = run_in(&root, &["validate", "--config", "examples/tollgate.toml"]);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        out.stdout
            .starts_with("examples/tollgate.toml: OK, 5 rules\n"),
        "{}",
        out.stdout
    );
    for algorithm in [
        "gcra",
        "token_bucket",
        "fixed_window",
        "sliding_window",
        "sliding_log",
    ] {
        assert!(
            out.stdout.contains(&format!(": {algorithm} ")),
            "{algorithm} missing from the example: {}",
            out.stdout
        );
    }
}

/// The crate's README (its crates.io page) shows a config a newcomer
/// copies: it must validate as it is.
#[test]
fn the_config_in_the_crates_readme_validates() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("read README.md");
    let config = readme
        .split_once("```toml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .expect("a ```toml block in README.md");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("tollgate.toml"), config).expect("write config");
    let out = run_in(dir.path(), &["validate", "--config", "tollgate.toml"]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.starts_with("tollgate.toml: OK, 1 rule"),
        "{}",
        out.stdout
    );
}

#[test]
fn unreadable_and_garbage_files_fail_without_panicking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_in(dir.path(), &["validate", "--config", "missing.toml"]);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.starts_with("missing.toml: cannot read: "),
        "{}",
        out.stderr
    );

    let out = validate_bytes(b"[[rules]]\nname = \"a\"\n\xff\xfe\x00garbage\n");
    assert_eq!(out.code, Some(1));
    assert_eq!(
        out.stderr,
        "bad.toml:3: the file is not valid UTF-8\nbad.toml: invalid, 1 problem\n"
    );

    for junk in [
        &b"\x00\x01\x02"[..],
        b"[[[[[[[[[[[[[[[[[[[[",
        b"a = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]",
        b"rules = [{ name = { x = 1 } }]",
        b"[[rules]]\nlimit = 99999999999999999999\n",
        b"[[rules]]\n[[rules.x]]\n",
    ] {
        let out = validate_bytes(junk);
        assert_eq!(out.code, Some(1), "{junk:?}: {}", out.stderr);
        assert!(out.stderr.starts_with("bad.toml:"), "{junk:?}: {}", out.stderr);
    }
}

#[test]
fn envoy_configs_are_checked_with_the_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("ok.toml"), GOOD).expect("write");
    std::fs::write(
        dir.path().join("rls.yaml"),
        "domain: edge\ndescriptors:\n  - key: path\n    value: /login\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n  - key: free\n    rate_limit:\n      unlimited: true\n  - key: tokens\n    rate_limit:\n      unit: hour\n      requests_per_unit: 100\n      charge: true\n",
    )
    .expect("write");
    let out = run_in(
        dir.path(),
        &[
            "validate",
            "--config",
            "ok.toml",
            "--envoy-config",
            "rls.yaml",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("envoy domain edge\n"), "{}", out.stdout);
    assert!(
        out.stdout.contains(
            "envoy limit edge.path_/login: 5 per minute (fixed_window envoy.edge.path__login)\n"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("envoy limit edge.free: unlimited\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "envoy limit edge.tokens: 100 per hour (fixed_window envoy.edge.tokens), charge\n"
        ),
        "{}",
        out.stdout
    );

    std::fs::write(
        dir.path().join("bad.yaml"),
        "domain: edge\ndescriptors:\n  - key: path\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n  - key: path\n    bogus: 1\n",
    )
    .expect("write");
    let out = run_in(
        dir.path(),
        &[
            "validate",
            "--config",
            "ok.toml",
            "--envoy-config",
            "bad.yaml",
            "--envoy-config",
            "nope.yaml",
        ],
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("bad.yaml:5: ")
            && l.contains("unit")
            && l.contains("fortnight")),
        "{}",
        out.stderr
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("bad.yaml:8: ") && l.contains("bogus")),
        "{}",
        out.stderr
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("nope.yaml") && l.contains("cannot read")),
        "{}",
        out.stderr
    );
    // Only the YAML files are at fault: the summary names the first.
    assert!(
        out.stderr.ends_with("bad.yaml: invalid, 4 problems\n"),
        "{}",
        out.stderr
    );
}

#[test]
fn bad_command_line_exits_two() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_in(dir.path(), &["validate"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("--config"), "{}", out.stderr);
}

/// A `[proxy] listen` without an upstream is what `serve` and a reload
/// refuse; `validate` refuses it too, and accepts it with `--upstream`,
/// as `serve` does.
#[test]
fn a_proxy_without_an_upstream_is_refused_as_serve_refuses_it() {
    let text = "[proxy]\nlisten = \"127.0.0.1:0\"\n\n[[rules]]\nname = \"a\"\n\
                algorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n";
    assert_problems(
        text,
        &[
            "bad.toml: proxy.upstream: the reverse proxy needs an upstream: \
           add [proxy] upstream (or --upstream URL)",
        ],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("p.toml"), text).expect("write config");
    let with_flag = [
        "validate",
        "--config",
        "p.toml",
        "--upstream",
        "http://127.0.0.1:9",
    ];
    let out = run_in(dir.path(), &with_flag);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let bad_flag = ["validate", "--config", "p.toml", "--upstream", "ftp://x"];
    let out = run_in(dir.path(), &bad_flag);
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert!(
        out.stderr.starts_with("p.toml: --upstream: "),
        "{}",
        out.stderr
    );
}

/// `[rlqs]` is summarised (what maps a bucket, each domain's fixed
/// rule), and a domain's rule must be a `[[rules]]` entry.
#[test]
fn rlqs_is_summarised_and_a_domains_rule_must_exist() {
    let rules = "[[rules]]\nname = \"per-tenant\"\nalgorithm = \"fixed_window\"\nlimit = 10\nperiod = \"1m\"\n";
    let out = validate(&format!(
        "{rules}[rlqs]\nkey_entries = [\"tenant\"]\nunmatched = \"deny\"\n\
         [rlqs.domains.checkout]\nrule = \"per-tenant\"\n"
    ));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains(
            "rlqs: served on --grpc; rule from entry \"name\", key from tenant, unmatched deny"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("rlqs: domain \"checkout\" counts on rule per-tenant"),
        "{}",
        out.stdout
    );
    assert_problems(
        &format!("{rules}[rlqs.domains.checkout]\nrule = \"per-user\"\n"),
        &["bad.toml:7: rlqs.domains.checkout.rule: no [[rules]] entry is named \"per-user\""],
    );
}
