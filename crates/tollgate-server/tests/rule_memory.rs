//! What one `[[rules]]` entry costs `tollgate serve` in heap bytes
//! (docs/operations.md, "What a rule costs"): a config of many rules is
//! loaded and served as `serve` does (config loaded and checked, gate,
//! HTTP API, Envoy service, reverse proxy, a first `/metrics` scrape), and
//! a counting global allocator measures the bytes held once serving and
//! the most held at once while loading, divided by the rules.
//!
//! One test in its own binary: a global allocator is per binary, and
//! nothing else may allocate while it counts. Bytes asked of the
//! allocator, not RSS: deterministic, whatever the allocator's slack.

use std::alloc::System;
use std::io::Write;
use std::sync::Arc;

use cap::Cap;
use http_body_util::{BodyExt, Full};
use tollgate::MemoryStore;
use tollgate_http::headers::HeaderOptions;
use tollgate_server::config::Config;
use tollgate_server::config::{ConfigInfo, ReloadStatus};
use tollgate_server::doors::api::Api;
use tollgate_server::doors::envoy::service::EnvoyService;
use tollgate_server::doors::proxy::Proxy;
use tollgate_server::gate::Gate;

/// Counts the bytes held, and the most ever held at once.
#[global_allocator]
static GLOBAL: Cap<System> = Cap::new(System, usize::MAX);

/// Bytes held now.
fn held() -> isize {
    isize::try_from(GLOBAL.allocated()).expect("fits")
}

/// The most bytes held at once so far.
fn peak() -> isize {
    isize::try_from(GLOBAL.max_allocated()).expect("fits")
}

const RULES: usize = 10_000;

/// The lead's shape of rule (issue 36): GCRA, 10 per second, keyed on a
/// header.
/// Written a rule at a time: the text is never held whole, so the most
/// held at once before loading stays small.
fn write_config(path: &std::path::Path, rules: usize) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    writeln!(out, "[store]\nmax_keys = 1000").expect("write");
    for i in 0..rules {
        writeln!(
            out,
            "\n[[rules]]\nname = \"r{i}\"\nalgorithm = \"gcra\"\nlimit = 10\n\
             period = \"1s\"\nkey = \"header:x-k\""
        )
        .expect("write");
    }
    out.flush().expect("flush");
}

fn per_rule(bytes: isize) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let per = bytes as f64 / RULES as f64;
    per
}

#[test]
fn a_rule_costs_under_640_bytes_held_and_1_kib_while_loading() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    write_config(&path, RULES);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // The recorder and everything made once per process, before counting.
    let metrics = tollgate_server::metrics::handle();
    let status = Arc::new(ReloadStatus::new());
    let upstream = "http://127.0.0.1:9".parse().expect("upstream");

    // Everything so far held less than a loaded config: the most held at
    // once from here on is the load's.
    let start = held();
    let mut steps = Vec::new();
    let config = Config::load(&path).expect("valid config");
    steps.push(("config", held() - start, peak() - start));
    let (api, proxy, envoy) = runtime.block_on(async {
        let mark = held();
        let gate = Arc::new(
            Gate::over(&config, &[], Arc::new(MemoryStore::new().into()), None).expect("gate"),
        );
        steps.push(("gate", held() - mark, peak() - start));
        let mark = held();
        let api = Api::new(Arc::clone(&gate), HeaderOptions::default(), metrics.clone())
            .with_config(
                Arc::new(ConfigInfo::now("v".to_owned())),
                Arc::clone(&status),
            );
        steps.push(("api", held() - mark, peak() - start));
        let mark = held();
        let envoy = EnvoyService::new(Arc::clone(&gate), Arc::default()).expect("envoy");
        steps.push(("envoy", held() - mark, peak() - start));
        let mark = held();
        let proxy = Proxy::new(Arc::clone(&gate), &config, upstream).expect("proxy");
        steps.push(("proxy", held() - mark, peak() - start));
        (api, proxy, envoy)
    });
    let mark = held();
    let answer = runtime.block_on(async {
        let req = http::Request::get("/metrics")
            .body(Full::new(bytes::Bytes::new()))
            .expect("request");
        let res = api.handle(req).await;
        res.into_body().collect().await.expect("body").to_bytes()
    });
    steps.push(("scrape", held() - mark, peak() - start));
    drop(answer);
    let steady = held() - start;
    let most = peak() - start;
    for (step, bytes, peak) in &steps {
        eprintln!(
            "{step:>8}: {:>7.0} bytes per rule held, peak so far {:>7.0}",
            per_rule(*bytes),
            per_rule(*peak)
        );
    }
    eprintln!(
        "a rule: {:.0} bytes held, {:.0} at the peak",
        per_rule(steady),
        per_rule(most)
    );
    // Before issue 36's fix: 1,577 held, 3,481 at the peak.
    assert!(
        per_rule(steady) <= 640.0,
        "{:.0} bytes per rule held",
        per_rule(steady)
    );
    assert!(
        per_rule(most) <= 1024.0,
        "{:.0} bytes per rule at the peak",
        per_rule(most)
    );
    drop((config, api, proxy, envoy));
}
