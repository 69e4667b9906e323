use std::time::Duration;

use super::*;
use crate::store_url::StoreUrl;
use tollgate::OnError;
use tollgate_http::cost::SHAPE_SPELLINGS;
use tollgate_http::extract::MissingKey;

fn errors(src: &str) -> Vec<String> {
    Config::parse(src, "t.toml")
        .expect_err("should be rejected")
        .errors
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn listen_addresses() {
    for (text, want) in [
        ("127.0.0.1:8080", "127.0.0.1:8080"),
        ("[::1]:0", "[::1]:0"),
        ("localhost:8080", "127.0.0.1:8080"),
        ("localhost:0", "127.0.0.1:0"),
    ] {
        assert_eq!(
            parse_listen(text).map(|a| a.to_string()),
            Ok(want.to_owned())
        );
    }
    for bad in [
        "localhost",
        "localhost:",
        "localhost:99999",
        "example.com:80",
        ":80",
    ] {
        let e = parse_listen(bad).expect_err(bad);
        assert!(e.contains("is not an IP:PORT"), "{bad}: {e}");
    }
}

#[test]
fn defaults() {
    let c = Config::parse(
        "[[rules]]\nname='a'\nalgorithm='fixed_window'\nlimit=1\nperiod='1s'\n",
        "t.toml",
    )
    .expect("valid");
    assert_eq!(c.store, StoreConfig::default());
    assert_eq!(c.store.timeout, Duration::from_millis(50));
    assert_eq!(c.store.prefix, "tollgate");
    assert_eq!(c.proxy, ProxyConfig::default());
    assert_eq!(c.rules[0].key, None);
    assert_eq!(c.rules[0].line, 1);
    assert_eq!(c.on_error_for(&c.rules[0]), OnError::Allow);
}

#[test]
fn full_config() {
    let c = Config::parse(
        r#"
[store]
url = "redis+sentinel://s1:26379,s2:26379/mymaster"
timeout = "20ms"
on_error = "deny"
prefix = "app:tg"
max_keys = 1000

[proxy]
trusted_proxies = ["10.0.0.0/8", "::1"]

[[rules]]
name = "per_user"
algorithm = "token_bucket"
limit = 10
period = "1m"
burst = 20
key = "header:X-User+method"
on_error = "local"
"#,
        "t.toml",
    )
    .expect("valid");
    assert!(matches!(c.store.url, StoreUrl::Sentinel { .. }));
    assert_eq!(c.store.timeout, Duration::from_millis(20));
    assert_eq!(c.store.on_error, OnError::Deny);
    assert_eq!(c.store.prefix, "app:tg");
    assert_eq!(c.store.max_keys, 1000);
    assert_eq!(c.proxy.trusted_proxies.len(), 2);
    let r = &c.rules[0];
    assert_eq!(r.line, 12);
    assert_eq!(r.rule.burst(), 20);
    assert_eq!(r.rule.period(), Duration::from_secs(60));
    assert_eq!(
        r.key.as_ref().map(ToString::to_string).as_deref(),
        Some("header:x-user+method")
    );
    assert_eq!(c.on_error_for(r), OnError::Local);
}

#[test]
fn every_problem_with_line_and_field() {
    let got = errors(
        r#"[store]
url = "redis://h:0"
timeout = "0ms"
on_error = "maybe"
prefix = "{x}"
colour = "red"

[[rules]]
name = "a b"
algorithm = "leaky"
limit = -3
period = "1.5s"
burst = "many"
key = "cookie"

[[rules]]
name = "b"
algorithm = "fixed_window"
limit = 5
period = "1s"
burst = 0

[[rules]]
name = "b"
algorithm = "gcra"
limit = 10
period = "0ms"
on_error = 1
"#,
    );
    let want = [
        "t.toml:2: store.url: store URL \"redis://h:0\": port \"0\" must be a number from 1 to 65535",
        "t.toml:3: store.timeout: timeout must be at least 1ms",
        "t.toml:4: store.on_error: unknown on_error \"maybe\"; expected allow, deny or local",
        "t.toml:5: store.prefix: prefix \"{x}\" contains '{'; only A-Z a-z 0-9 _ . : - are allowed",
        "t.toml:6: store.colour: unknown field; expected one of url, timeout, on_error, prefix, max_keys, replicas, heartbeat, hybrid, hybrid_batch, hybrid_lease, password_file, username, tls",
        "t.toml:9: rules[0].name: name \"a b\" contains ' '; only A-Z a-z 0-9 _ . - are allowed",
        "t.toml:10: rules[0].algorithm: unknown algorithm \"leaky\"; expected one of gcra, token_bucket, fixed_window, sliding_window, sliding_log, concurrency",
        "t.toml:11: rules[0].limit: limit must be at least 1, got -3",
        "t.toml:12: rules[0].period: duration \"1.5s\" has unknown unit \".5s\" (use ms, s, m, h or d)",
        "t.toml:13: rules[0].burst: expected an integer, found string",
        "t.toml:14: rules[0].key: unknown key part \"cookie\"; expected client_ip, header:NAME, path, method or host",
        "t.toml:21: rules[1].burst: burst must be at least 1",
        "t.toml:24: rules[2].name: rule name \"b\" is already used by rules[1] (line 16)",
        "t.toml:27: rules[2].period: period 0ns is shorter than the minimum 1ms",
        "t.toml:28: rules[2].on_error: expected a string, found integer",
    ];
    assert_eq!(got, want);
}

#[test]
fn http_and_proxy_sections() {
    let c = Config::parse(
        r#"
[store]
replicas = 3
heartbeat = "250ms"

[http]
listen = "127.0.0.1:9090"
legacy_headers = true

[proxy]
listen = "[::1]:8081"
upstream = "http://127.0.0.1:9000/app"
ipv6_prefix = 56
on_missing_key = "skip"
connect_timeout = "250ms"
response_timeout = "2m"
send_timeout = "45s"
append_forwarded_for = true

[[rules]]
name = "a"
algorithm = "gcra"
limit = 1
period = "1s"
"#,
        "t.toml",
    )
    .expect("valid");
    assert_eq!(c.store.replicas, 3);
    assert_eq!(c.store.heartbeat, Duration::from_millis(250));
    assert_eq!(c.http.listen, Some("127.0.0.1:9090".parse().expect("addr")));
    assert!(c.http.legacy_headers);
    let p = &c.proxy;
    assert_eq!(p.listen, Some("[::1]:8081".parse().expect("addr")));
    assert_eq!(
        p.upstream.as_ref().map(ToString::to_string).as_deref(),
        Some("http://127.0.0.1:9000/app")
    );
    assert_eq!(p.ipv6_prefix, 56);
    assert_eq!(p.on_missing_key, MissingKey::Skip);
    assert_eq!(p.connect_timeout, Duration::from_millis(250));
    assert_eq!(p.response_timeout, Duration::from_secs(120));
    assert_eq!(p.send_timeout, Duration::from_secs(45));
    assert!(p.append_forwarded_for);
    let d = Config::parse(
        "[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n",
        "t.toml",
    )
    .expect("valid");
    assert_eq!(d.http, HttpConfig::default());
    assert_eq!(d.proxy.ipv6_prefix, 64);
    assert_eq!(d.proxy.connect_timeout, Duration::from_secs(1));
    assert_eq!(d.proxy.send_timeout, Duration::from_secs(30));
}

#[test]
fn http_and_proxy_problems_have_lines() {
    let got = errors(
        r#"[store]
replicas = 0
heartbeat = "5ms"

[http]
listen = "example.com:80"
legacy_headers = "yes"
port = 1

[proxy]
listen = "127.0.0.1"
upstream = "ftp://x"
ipv6_prefix = 129
on_missing_key = "drop"
connect_timeout = "0ms"
response_timeout = "soon"
append_forwarded_for = 1

[[rules]]
name = "a"
algorithm = "gcra"
limit = 1
period = "1s"
"#,
    );
    let want = [
        "t.toml:2: store.replicas: replicas must be at least 1",
        "t.toml:3: store.heartbeat: heartbeat must be at least 10ms",
        "t.toml:6: http.listen: \"example.com:80\" is not an IP:PORT address (e.g. \"127.0.0.1:8080\" or \"[::1]:8080\")",
        "t.toml:7: http.legacy_headers: expected a boolean (true or false), found string",
        "t.toml:8: http.port: unknown field; expected one of listen, legacy_headers",
        "t.toml:11: proxy.listen: \"127.0.0.1\" is not an IP:PORT address (e.g. \"127.0.0.1:8080\" or \"[::1]:8080\")",
        "t.toml:12: proxy.upstream: upstream \"ftp://x\": scheme \"ftp\" is not http or https",
        "t.toml:13: proxy.ipv6_prefix: ipv6_prefix must be from 1 to 128, got 129",
        "t.toml:14: proxy.on_missing_key: unknown on_missing_key \"drop\"; expected empty, skip or reject",
        "t.toml:15: proxy.connect_timeout: connect_timeout must be at least 1ms",
        "t.toml:16: proxy.response_timeout: duration \"soon\" must start with a whole number, e.g. \"250ms\" or \"1s\"",
        "t.toml:17: proxy.append_forwarded_for: expected a boolean (true or false), found integer",
    ];
    assert_eq!(got, want);
}

#[test]
fn syntax_errors_have_lines() {
    let got = errors("[[rules]]\nname = \"a\nlimit = 1\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("t.toml:2: TOML syntax error: "),
        "{got:?}"
    );
}

#[test]
fn no_rules_and_wrong_shapes() {
    assert_eq!(
        errors(""),
        ["t.toml:1: rules: no rules; add at least one [[rules]] table"]
    );
    assert_eq!(
        errors("rules = []\n"),
        ["t.toml:1: rules: no rules; add at least one [[rules]] table"]
    );
    assert_eq!(
        errors("store = 1\nproxy = 'x'\nrules = [1]\n"),
        [
            "t.toml:1: store: expected a table ([store]), found integer",
            "t.toml:2: proxy: expected a table ([proxy]), found string",
            "t.toml:3: rules[0]: expected a table ([[rules]]), found integer",
        ]
    );
    assert_eq!(
        errors(
            "[proxy]\ntrusted_proxies = '10.0.0.0/8'\n[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n"
        ),
        ["t.toml:2: proxy.trusted_proxies: expected an array of CIDR strings, found string"]
    );
}

#[test]
fn burst_on_window_algorithm_and_gcra_rate() {
    assert_eq!(
        errors(
            "[[rules]]\nname='a'\nalgorithm='sliding_log'\nlimit=200000\nperiod='1s'\nburst=5\n"
        ),
        [
            "t.toml:4: rules[0].limit: sliding_log keeps one entry per admitted check; limit 200000 exceeds its maximum 100000 (use sliding_window for large limits)",
            "t.toml:6: rules[0].burst: burst applies to gcra and token_bucket only, not sliding_log",
        ]
    );
}

#[test]
fn format_durations() {
    assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    assert_eq!(format_duration(Duration::from_secs(1)), "1s");
    assert_eq!(format_duration(Duration::from_secs(90)), "90s");
    assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
    assert_eq!(format_duration(Duration::from_secs(86_400 * 2)), "2d");
    assert_eq!(format_duration(Duration::from_micros(1500)), "1500us");
    assert_eq!(format_duration(Duration::ZERO), "0ms");
}

#[test]
fn cost_from_the_response() {
    let config = Config::parse(
        r#"
        [[rules]]
        name = "tpm"
        algorithm = "gcra"
        limit = 10000
        period = "1m"
        cost = "response_header:X-Usage-Tokens"
        estimate = 500

        [[rules]]
        name = "inflight"
        algorithm = "concurrency"
        limit = 4
        "#,
        "ok.toml",
    )
    .expect("valid");
    let cost = config.rules[0].cost.as_ref().expect("a cost");
    assert_eq!(
        cost.source().header().map(http::HeaderName::as_str),
        Some("x-usage-tokens")
    );
    assert_eq!(cost.estimate(), 500);
    assert!(config.rules[1].cost.is_none());
}

#[test]
fn costs_read_from_the_body() {
    let mut src = String::new();
    let json = ["response_json:/usage/billed_units"];
    for (i, cost) in SHAPE_SPELLINGS.iter().chain(&json).enumerate() {
        src.push_str(&format!(
            "[[rules]]\nname = \"r{i}\"\nalgorithm = \"gcra\"\nlimit = 1000\nperiod = \"1m\"\n\
             cost = \"{cost}\"\nestimate = 100\n"
        ));
    }
    let config = Config::parse(&src, "ok.toml").expect("valid");
    let spelled: Vec<String> = config
        .rules
        .iter()
        .map(|r| r.cost.as_ref().expect("a cost").source().to_string())
        .collect();
    assert_eq!(spelled[0], "openai");
    assert_eq!(spelled[6], "response_json:/usage/billed_units");
    assert!(
        config
            .rules
            .iter()
            .all(|r| r.cost.as_ref().is_some_and(|c| c.source().reads_body()))
    );

    let e = errors(
        "[[rules]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 100\nperiod = \"1m\"\n\
         cost = \"openai:prompt\"\nestimate = 10\n\
         [[rules]]\nname = \"b\"\nalgorithm = \"gcra\"\nlimit = 100\nperiod = \"1m\"\n\
         cost = \"response_json:usage\"\nestimate = 10\n\
         [[rules]]\nname = \"c\"\nalgorithm = \"gcra\"\nlimit = 100\nperiod = \"1m\"\n\
         cost = \"anthropic\"\n",
    );
    let expect = [
        "t.toml:6: rules[0].cost: cost \"openai:prompt\": \"prompt\" is not a part of openai's usage",
        "t.toml:13: rules[1].cost: cost \"response_json:usage\": JSON pointer \"usage\" must start with '/'",
        "t.toml:15: rules[2].estimate: missing required field",
    ];
    assert_eq!(e.len(), expect.len(), "{e:#?}");
    for (got, want) in e.iter().zip(expect) {
        assert!(got.starts_with(want), "{got}\n  should start with\n{want}");
    }
}

#[test]
fn cost_problems_name_line_and_field() {
    let e = errors(
        r#"[[rules]]
name = "a"
algorithm = "gcra"
limit = 100
period = "1m"
cost = "header:x-usage"
estimate = 10
[[rules]]
name = "b"
algorithm = "gcra"
limit = 100
period = "1m"
cost = "response_header:x-usage"
[[rules]]
name = "c"
algorithm = "fixed_window"
limit = 100
period = "1m"
estimate = 5
[[rules]]
name = "d"
algorithm = "concurrency"
limit = 3
cost = "response_header:x-usage"
estimate = 1
[[rules]]
name = "e"
algorithm = "gcra"
limit = 100
period = "1m"
cost = "response_header:x-usage"
estimate = 101
[[rules]]
name = "f"
algorithm = "gcra"
limit = 100
period = "1m"
cost = "response_header:bad name"
estimate = -3
"#,
    );
    let expect = [
        "t.toml:6: rules[0].cost: cost \"header:x-usage\" is not a usage source",
        "t.toml:8: rules[1].estimate: missing required field",
        "t.toml:19: rules[2].estimate: estimate applies only with cost",
        "t.toml:24: rules[3].cost: a concurrency rule holds one slot",
        "t.toml:32: rules[4].estimate: estimate 101 is more than the rule admits at once (100)",
        "t.toml:38: rules[5].cost: cost \"response_header:bad name\": \"bad name\" is not a header field name",
        "t.toml:39: rules[5].estimate: estimate must be at least 1, got -3",
    ];
    assert_eq!(e.len(), expect.len(), "{e:#?}");
    for (got, want) in e.iter().zip(expect) {
        assert!(got.starts_with(want), "{got:?} should start with {want:?}");
    }
}

#[test]
fn metrics_near_limit_ratio() {
    let rule = "\n[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n";
    let parse = |table: &str| Config::parse(&format!("{table}{rule}"), "t.toml");
    assert_eq!(
        parse("").expect("valid").metrics.near_limit_ratio,
        tollgate::resilient::DEFAULT_NEAR_LIMIT_RATIO
    );
    for (text, want) in [("0.5", 0.5), ("1", 1.0), ("1.0", 1.0), ("0.95", 0.95)] {
        let c = parse(&format!("[metrics]\nnear_limit_ratio = {text}\n")).expect(text);
        assert!(
            (c.metrics.near_limit_ratio - want).abs() < f64::EPSILON,
            "{text}"
        );
    }
    let got = errors(&format!(
        "[metrics]\nnear_limit_ratio = 0\nratio = 1\n{rule}[envoy]\nnear_limit_ratio = 0.8\n"
    ));
    assert_eq!(
        got,
        [
            "t.toml:2: metrics.near_limit_ratio: near_limit_ratio must be above 0 and at most 1, got 0",
            "t.toml:3: metrics.ratio: unknown field; expected one of near_limit_ratio, \
             top_denied_capacity, top_denied_epoch, reference_names",
            "t.toml:11: envoy.near_limit_ratio: unknown field; expected one of merge_domains, \
             response_headers, limit_header, remaining_header, reset_header, quota_mode, \
             response_dynamic_metadata, count_own_cost, store_failure, shadow_mode",
        ]
    );
    for (bad, why) in [
        (
            "1.5",
            "near_limit_ratio must be above 0 and at most 1, got 1.5",
        ),
        (
            "-0.2",
            "near_limit_ratio must be above 0 and at most 1, got -0.2",
        ),
        (
            "nan",
            "near_limit_ratio must be above 0 and at most 1, got NaN",
        ),
        ("\"0.8\"", "expected a number, found string"),
    ] {
        let got = errors(&format!("[metrics]\nnear_limit_ratio = {bad}\n{rule}"));
        assert_eq!(
            got,
            [format!("t.toml:2: metrics.near_limit_ratio: {why}")],
            "{bad}"
        );
    }
    assert_eq!(
        errors(&format!("metrics = 1\n{rule}")),
        ["t.toml:1: metrics: expected a table ([metrics]), found integer"]
    );
}

#[test]
fn metrics_reference_names() {
    let rule = "\n[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n";
    let parse = |table: &str| Config::parse(&format!("{table}{rule}"), "t.toml");
    assert!(!parse("").expect("valid").metrics.reference_names);
    let on = parse("[metrics]\nreference_names = true\n").expect("valid");
    assert!(on.metrics.reference_names);
    let off = parse("[metrics]\nreference_names = false\n").expect("valid");
    assert!(!off.metrics.reference_names);
    let got = errors(&format!("[metrics]\nreference_names = \"yes\"\n{rule}"));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("t.toml:2: metrics.reference_names: "),
        "{got:?}"
    );
}

#[test]
fn metrics_top_denied() {
    let rule = "\n[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n";
    let parse = |table: &str| Config::parse(&format!("{table}{rule}"), "t.toml");
    let defaults = parse("").expect("valid").metrics;
    assert_eq!(
        defaults.top_denied_capacity,
        tollgate::top::DEFAULT_TOP_DENIED_CAPACITY
    );
    assert_eq!(
        defaults.top_denied_epoch,
        tollgate::top::DEFAULT_TOP_DENIED_EPOCH
    );
    let c = parse("[metrics]\ntop_denied_capacity = 1_000\ntop_denied_epoch = \"30s\"\n")
        .expect("valid");
    assert_eq!(c.metrics.top_denied_capacity, 1_000);
    assert_eq!(c.metrics.top_denied_epoch, Duration::from_secs(30));
    let off = parse("[metrics]\ntop_denied_capacity = 0\n").expect("0 is off");
    assert_eq!(off.metrics.top_denied_capacity, 0);
    for (bad, why) in [
        (
            "top_denied_capacity = -1",
            "top_denied_capacity: top_denied_capacity must be from 0 (off) to 100000, got -1",
        ),
        (
            "top_denied_capacity = 100001",
            "top_denied_capacity: top_denied_capacity must be from 0 (off) to 100000, got 100001",
        ),
        (
            "top_denied_capacity = \"many\"",
            "top_denied_capacity: expected an integer, found string",
        ),
        (
            "top_denied_epoch = \"0s\"",
            "top_denied_epoch: top_denied_epoch must be at least 1ms",
        ),
    ] {
        let got = errors(&format!("[metrics]\n{bad}\n{rule}"));
        assert_eq!(got, [format!("t.toml:2: metrics.{why}")], "{bad}");
    }
}

/// `[[admin.tokens]]`: a token is 16 visible ASCII characters or more (one
/// with a space could never match: a header value loses its outer
/// whitespace), and each name has its own (the audit log names the caller
/// by its token); each refusal names the field.
#[test]
fn admin_tokens_are_long_visible_and_distinct() {
    let rule = "[[rules]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n";
    let with = |tokens: &[(&str, &str)]| {
        let mut src = format!("{rule}[admin]\n");
        for (name, token) in tokens {
            src.push_str(&format!(
                "[[admin.tokens]]\nname = {name:?}\ntoken = {token:?}\n"
            ));
        }
        src
    };
    let good = with(&[("a", "0123456789abcdef"), ("b", "0123456789abcdeF")]);
    let config = Config::parse(&good, "t.toml").expect("two good tokens");
    assert_eq!(config.admin.tokens.len(), 2);
    for (token, want) in [
        ("0123456789abcde", "at least 16 characters"),
        (
            "0123456789abcdef ",
            "visible ASCII characters, without spaces",
        ),
        (
            "0123456789 abcdef",
            "visible ASCII characters, without spaces",
        ),
        (
            "0123456789abcdé00",
            "visible ASCII characters, without spaces",
        ),
    ] {
        let e = errors(&with(&[("a", token)]));
        assert!(
            e.iter()
                .any(|e| e.contains("admin.tokens[0].token") && e.contains(want)),
            "{token:?}: {e:?}"
        );
    }
    let e = errors(&with(&[
        ("a", "0123456789abcdef"),
        ("b", "0123456789abcdef"),
    ]));
    assert!(
        e.iter()
            .any(|e| e.contains("admin.tokens[1].token") && e.contains("the same token as \"a\"")),
        "{e:?}"
    );
}

/// `[ops]`: `listen` and `readiness` (default `serving`), each problem on
/// its line, unknown fields refused as in every table.
#[test]
fn ops_table_listen_and_readiness() {
    let rule = "[[rules]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n";
    let config = Config::parse(rule, "t.toml").expect("no [ops]");
    assert_eq!(config.ops, OpsConfig::default());
    assert_eq!(config.ops.readiness, Readiness::Serving);
    assert_eq!(config.ops.listen, None);
    let src = format!("[ops]\nlisten = \"127.0.0.1:9090\"\nreadiness = \"store\"\n{rule}");
    let config = Config::parse(&src, "t.toml").expect("good [ops]");
    assert_eq!(config.ops.readiness, Readiness::Store);
    assert_eq!(
        config.ops.listen,
        Some("127.0.0.1:9090".parse().expect("addr"))
    );
    for (bad, want) in [
        (
            "readiness = \"always\"",
            "ops.readiness: unknown readiness \"always\"; expected serving or store",
        ),
        (
            "readiness = true",
            "ops.readiness: expected a string, found boolean",
        ),
        (
            "listen = \"example.com:9090\"",
            "ops.listen: \"example.com:9090\" is not an IP:PORT",
        ),
        (
            "port = 9090",
            "ops.port: unknown field; expected one of listen, readiness",
        ),
    ] {
        let got = errors(&format!("{rule}\n[ops]\n{bad}\n"));
        assert_eq!(got.len(), 1, "{bad}: {got:?}");
        assert!(got[0].starts_with("t.toml:8: "), "{bad}: {got:?}");
        assert!(got[0].contains(want), "{bad}: {got:?}");
    }
    let got = errors(&format!("ops = 1\n{rule}"));
    assert_eq!(
        got,
        ["t.toml:1: ops: expected a table ([ops]), found integer"]
    );
}

#[test]
fn envoy_count_own_cost() {
    let rule = "[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n";
    let parse = |table: &str| Config::parse(&format!("{table}{rule}"), "t.toml");
    assert!(!parse("").expect("valid").envoy_settings.count_own_cost);
    let on = parse("[envoy]\ncount_own_cost = true\n").expect("valid");
    assert!(on.envoy_settings.count_own_cost);
    let got = errors(&format!("[envoy]\ncount_own_cost = \"yes\"\n{rule}"));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("t.toml:2: envoy.count_own_cost: "),
        "{got:?}"
    );
}

#[test]
fn envoy_store_failure_and_shadow_mode() {
    let rule = "[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n";
    let parse = |table: &str| Config::parse(&format!("{table}{rule}"), "t.toml");
    let default = parse("").expect("valid").envoy_settings;
    assert_eq!(default.store_failure, StoreFailure::Policy);
    assert!(!default.shadow_mode);
    let set = parse("[envoy]\nstore_failure = \"error\"\nshadow_mode = true\n")
        .expect("valid")
        .envoy_settings;
    assert_eq!(set.store_failure, StoreFailure::Error);
    assert!(set.shadow_mode);
    let got = errors(&format!("[envoy]\nstore_failure = \"deny\"\n{rule}"));
    assert_eq!(
        got,
        [
            "t.toml:2: envoy.store_failure: unknown store_failure \"deny\"; expected \"policy\" or \"error\""
        ]
    );
}
