//! The Grafana dashboard (deploy/grafana/tollgate.json) and the Prometheus
//! rules (deploy/prometheus/) against the server itself (docs/dashboards.md):
//! every PromQL expression in them parses (the `promql-parser` crate; promtool
//! 2.42 cannot parse a bare expression) and names only series a `tollgate
//! serve` with every door exports, with labels those series carry; the
//! dashboard has the shape Grafana imports; promtool checks the rules and
//! runs their unit tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use promql_parser::parser::{self, Expr, LabelModifier, VectorSelector};
use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::rls::{Rls, desc};
use crate::support::{get, post_json, request, start_upstream};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    let path = repo().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/grafana/tollgate.json")).expect("dashboard JSON")
}

fn yaml(path: &str) -> Yaml {
    YamlLoader::load_from_str(&read(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .remove(0)
}

/// The rules of every group of the rules file.
fn rules() -> Vec<Yaml> {
    let doc = yaml("deploy/prometheus/tollgate-rules.yaml");
    let groups = doc["groups"].as_vec().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_vec().expect("rules").clone())
        .collect()
}

/// Every panel, those inside collapsed rows included.
fn panels(dash: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner);
        }
    }
    out
}

/// Every PromQL expression of the dashboard and the rules, named by where
/// it is, with Grafana's interval variables given a value (the others sit
/// in label values, where PromQL takes them as text).
fn expressions() -> Vec<(String, String)> {
    let dash = dashboard();
    let mut out = Vec::new();
    for p in panels(&dash) {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().expect("a target's expr");
            out.push((format!("panel {:?}", p["title"]), expr.to_owned()));
        }
    }
    for a in dash["annotations"]["list"].as_array().expect("annotations") {
        if let Some(expr) = a["expr"].as_str() {
            out.push((format!("annotation {:?}", a["name"]), expr.to_owned()));
        }
    }
    for v in dash["templating"]["list"].as_array().expect("templating") {
        if v["type"] == "query" {
            let query = v["query"]["query"].as_str().expect("a variable's query");
            assert_eq!(v["definition"].as_str(), Some(query), "{v}");
            // label_values(SELECTOR, label): the selector is PromQL
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map(|(selector, _)| selector)
                .unwrap_or_else(|| panic!("not label_values(selector, label): {query}"));
            out.push((format!("variable {:?}", v["name"]), inner.to_owned()));
        }
    }
    for r in rules() {
        let name = r["record"].as_str().or(r["alert"].as_str()).expect("name");
        out.push((
            format!("rule {name}"),
            r["expr"].as_str().expect("expr").to_owned(),
        ));
    }
    for (_, expr) in &mut out {
        for var in ["$__rate_interval", "$__interval", "$__range"] {
            *expr = expr.replace(var, "5m");
        }
    }
    out
}

/// Sample names of `/metrics` with the label names their series carry,
/// and the families it lists (a histogram's `_bucket`, `_sum`, `_count`
/// among the names even before a sample).
fn exported(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            names.entry(name.to_owned()).or_default();
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.entry(format!("{name}{suffix}")).or_default();
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).expect("a sample");
            let labels = names.entry(line[..end].to_owned()).or_default();
            if line[end..].starts_with('{') {
                labels.extend(label_names(&line[end + 1..]));
            }
        }
    }
    names
}

/// The label names of `a="x",b="y\"z"} 1`.
fn label_names(mut rest: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some((name, after)) = rest.split_once("=\"") {
        out.push(name.trim_start_matches(',').to_owned());
        let mut escaped = false;
        let close = after
            .char_indices()
            .find(|&(_, c)| {
                let end = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                end
            })
            .expect("closing quote")
            .0;
        rest = &after[close + 1..];
        if rest.starts_with('}') {
            break;
        }
    }
    out
}

/// The vector selectors of `expr`, and the grouping labels of each
/// aggregation with the selectors beneath it.
fn walk<'a>(expr: &'a Expr, out: &mut Vec<&'a VectorSelector>, by: &mut Vec<(String, usize)>) {
    match expr {
        Expr::VectorSelector(vs) => out.push(vs),
        Expr::MatrixSelector(ms) => out.push(&ms.vs),
        Expr::Aggregate(a) => {
            let start = out.len();
            walk(&a.expr, out, by);
            if let Some(param) = &a.param {
                walk(param, out, by);
            }
            if let Some(LabelModifier::Include(labels)) = &a.modifier {
                by.extend(labels.labels.iter().map(|l| (l.clone(), start)));
            }
        }
        Expr::Unary(u) => walk(&u.expr, out, by),
        Expr::Binary(b) => {
            walk(&b.lhs, out, by);
            walk(&b.rhs, out, by);
        }
        Expr::Paren(p) => walk(&p.expr, out, by),
        Expr::Subquery(s) => walk(&s.expr, out, by),
        Expr::Call(c) => {
            for arg in &c.args.args {
                walk(arg, out, by);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// Labels Prometheus adds at the scrape; and `node`, which only a Redis
/// Cluster store's breaker series carry (this serve's store is in memory).
const ADDED: &[&str] = &["job", "instance", "node"];

#[test]
fn every_expression_parses_and_names_what_tollgate_exports() {
    // every door up (API, proxy, Envoy, admin, ops), one request through
    // each of the deciding ones, so their labelled series exist
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let config = "[[rules]]\nname = \"per_user\"\nalgorithm = \"gcra\"\nlimit = 3\nperiod = \"1m\"\nkey = \"client_ip\"\n";
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n";
    let more = [
        "--http",
        "127.0.0.1:0",
        "--proxy",
        "127.0.0.1:0",
        "--upstream",
        &upstream,
        "--admin",
        "127.0.0.1:0",
        "--ops",
        "127.0.0.1:0",
    ];
    let mut rls = Rls::start_with(config, yaml, &more);
    post_json(
        rls.server.api(),
        "/v1/check",
        r#"{"rule":"per_user","key":"a"}"#,
    );
    assert_eq!(
        request(rls.server.proxy(), "GET", "/", &[], b"").status,
        200
    );
    rls.ok(RateLimitRequest {
        domain: "d".to_owned(),
        descriptors: vec![desc(&[("k", "v")])],
        ..RateLimitRequest::default()
    });
    let text = get(rls.server.ops(), "/metrics").text();
    let exported = exported(&text);
    assert!(
        exported.contains_key("tollgate_decision_latency_seconds_bucket"),
        "{text}"
    );

    let records: BTreeSet<String> = rules()
        .iter()
        .filter_map(|r| r["record"].as_str().map(str::to_owned))
        .collect();
    let expressions = expressions();
    assert!(
        expressions.len() > 60,
        "{} expressions found",
        expressions.len()
    );
    let mut named = BTreeSet::new();
    for (place, expr) in &expressions {
        let ast = parser::parse(expr).unwrap_or_else(|e| panic!("{place}: {expr}: {e}"));
        let (mut selectors, mut by) = (Vec::new(), Vec::new());
        walk(&ast, &mut selectors, &mut by);
        assert!(!selectors.is_empty(), "{place}: no series in {expr}");
        for vs in &selectors {
            let name = vs
                .name
                .as_deref()
                .unwrap_or_else(|| panic!("{place}: unnamed: {expr}"));
            assert!(
                !name.starts_with("ratelimit_service_"),
                "{place}: {name} is a reference name, not tollgate's own: {expr}"
            );
            named.insert(name.to_owned());
            // `up` is the one series Prometheus makes for each target
            if records.contains(name) || name == "up" {
                continue;
            }
            let labels = exported.get(name).unwrap_or_else(|| {
                panic!("{place}: {name} is not in tollgate's /metrics: {expr}\n{text}")
            });
            for m in &vs.matchers.matchers {
                let known = labels.contains(&m.name) || ADDED.contains(&m.name.as_str());
                // a family with no series yet shows no labels to check
                assert!(
                    known || labels.is_empty(),
                    "{place}: {name} has no label {}: {expr}\n{text}",
                    m.name
                );
            }
        }
        // a grouping label must be one of the grouped series' labels
        for (label, start) in &by {
            let below: Vec<&BTreeSet<String>> = selectors[*start..]
                .iter()
                .filter_map(|vs| exported.get(vs.name.as_deref()?))
                .collect();
            if below.is_empty() || below.iter().any(|l| l.is_empty()) {
                continue;
            }
            assert!(
                ADDED.contains(&label.as_str()) || below.iter().any(|l| l.contains(label)),
                "{place}: grouped by {label}, which its series lack: {expr}\n{text}"
            );
        }
    }
    // the dashboard reads the decision, store, config, build and process
    // families at least
    for name in [
        "tollgate_checks_total",
        "tollgate_decision_latency_seconds_bucket",
        "tollgate_store_up",
        "tollgate_config_reloads_total",
        "tollgate_build_info",
        "process_cpu_seconds_total",
    ] {
        assert!(named.contains(name), "{name} unused");
    }
}

/// `{"type": "prometheus", "uid": "${datasource}"}`: the dashboard's data
/// source variable, so an import asks for nothing and any Prometheus works.
fn is_variable_source(v: &Value) -> bool {
    v["type"] == "prometheus" && v["uid"] == "${datasource}"
}

#[test]
fn the_dashboard_has_the_shape_grafana_imports() {
    let dash = dashboard();
    for key in ["title", "uid"] {
        assert!(dash[key].as_str().is_some_and(|s| !s.is_empty()), "{key}");
    }
    assert!(dash["schemaVersion"].as_u64().is_some_and(|v| v >= 39));
    assert!(dash["id"].is_null(), "an exported dashboard carries no id");
    let vars = dash["templating"]["list"].as_array().expect("templating");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    for name in ["job", "instance"] {
        assert_eq!(var(name)["type"], "query", "{name}");
        assert!(is_variable_source(&var(name)["datasource"]), "{name}");
    }
    let mut ids = BTreeSet::new();
    let mut boxes: Vec<(u64, u64, u64, u64, String)> = Vec::new();
    for p in panels(&dash) {
        let title = p["title"].as_str().expect("title").to_owned();
        let id = p["id"].as_u64().unwrap_or_else(|| panic!("{title}: id"));
        assert!(ids.insert(id), "{title}: id {id} taken");
        let g = &p["gridPos"];
        let [h, w, x, y] = ["h", "w", "x", "y"].map(|k| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k}"))
        });
        assert!(h >= 1 && w >= 1 && x + w <= 24, "{title}: {g}");
        for (bx, by, bw, bh, other) in &boxes {
            let apart = x + w <= *bx || bx + bw <= x || y + h <= *by || by + bh <= y;
            assert!(apart, "{title} overlaps {other}");
        }
        boxes.push((x, y, w, h, title.clone()));
        let kind = p["type"].as_str().expect("type");
        assert!(
            ["row", "timeseries", "stat", "table", "heatmap"].contains(&kind),
            "{title}: {kind}"
        );
        if kind == "row" {
            continue;
        }
        assert!(is_variable_source(&p["datasource"]), "{title}");
        assert!(
            p["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{title}"
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(is_variable_source(&t["datasource"]), "{title}: {t}");
            assert!(
                refs.insert(t["refId"].as_str().expect("refId")),
                "{title}: {t}"
            );
        }
    }
    for a in dash["annotations"]["list"].as_array().expect("annotations") {
        if a["expr"].is_string() {
            assert!(is_variable_source(&a["datasource"]), "{a}");
        }
    }
}

fn promtool(args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repo().join("deploy/prometheus"))
        .output()
        .expect("promtool (Debian package prometheus; scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_checks_the_rules_and_runs_their_unit_tests() {
    promtool(&["check", "rules", "tollgate-rules.yaml"]);
    promtool(&["test", "rules", "tollgate-rules.test.yaml"]);
}

/// Each alert has its severity, summary, description and `for:`, and the
/// unit tests make it fire in one case and stay quiet in another.
#[test]
fn every_alert_is_described_and_tested_both_ways() {
    let tests = yaml("deploy/prometheus/tollgate-rules.test.yaml");
    let mut fired = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for case in tests["tests"].as_vec().expect("tests") {
        for t in case["alert_rule_test"].as_vec().expect("alert_rule_test") {
            let name = t["alertname"].as_str().expect("alertname").to_owned();
            match t["exp_alerts"].as_vec().expect("exp_alerts").is_empty() {
                true => quiet.insert(name),
                false => fired.insert(name),
            };
        }
    }
    let alerts: Vec<Yaml> = rules()
        .into_iter()
        .filter(|r| r["alert"].as_str().is_some())
        .collect();
    assert!(alerts.len() >= 10);
    for r in &alerts {
        let name = r["alert"].as_str().unwrap();
        assert!(r["for"].as_str().is_some(), "{name}: no for:");
        assert!(
            r["labels"]["severity"].as_str().is_some(),
            "{name}: no severity"
        );
        for key in ["summary", "description"] {
            assert!(r["annotations"][key].as_str().is_some(), "{name}: no {key}");
        }
        assert!(fired.contains(name), "{name}: no case makes it fire");
        assert!(quiet.contains(name), "{name}: no case where it stays quiet");
    }
}
