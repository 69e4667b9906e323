//! `[store] hybrid = true`: the config's fields and their errors, and
//! `tollgate serve` deciding through the hybrid store on a real Redis.

use redis_harness::RedisServer;
use tollgate_server::config::Config;

use crate::support::{Tollgate, post_json};

fn store(fields: &str) -> String {
    format!(
        r#"
[store]
{fields}

[[rules]]
name = "r"
algorithm = "gcra"
limit = 10
period = "1s"
"#
    )
}

#[test]
fn hybrid_fields_are_read_and_checked() {
    let config = Config::parse(
        &store(
            "url = \"redis://127.0.0.1:6379\"\nreplicas = 4\nhybrid = true\nhybrid_batch = 7\nhybrid_lease = \"250ms\"",
        ),
        "h.toml",
    )
    .expect("a good hybrid config");
    let h = config.store.hybrid.expect("hybrid on");
    assert_eq!((h.replicas, h.batch), (4, Some(7)));
    assert_eq!(h.batch_life, Some(std::time::Duration::from_millis(250)));
    let off = Config::parse(&store("url = \"redis://127.0.0.1:6379\""), "h.toml").unwrap();
    assert!(off.store.hybrid.is_none());

    for (fields, field, why) in [
        ("hybrid = true", "store.hybrid", "needs a Redis url"),
        (
            "url = \"memory\"\nhybrid = true",
            "store.hybrid",
            "needs a Redis url",
        ),
        (
            "url = \"redis://h\"\nhybrid = \"yes\"",
            "store.hybrid",
            "boolean",
        ),
        (
            "url = \"redis://h\"\nhybrid = true\nhybrid_batch = 0",
            "store.hybrid_batch",
            "at least 1",
        ),
        (
            "url = \"redis://h\"\nhybrid = true\nhybrid_lease = \"0ms\"",
            "store.hybrid_lease",
            "at least 1ms",
        ),
        (
            "url = \"redis://h\"\nhybrid = true\nhybrid_lease = \"soon\"",
            "store.hybrid_lease",
            "soon",
        ),
        (
            "url = \"redis://h\"\nhybrid_batch = 5",
            "store.hybrid_batch",
            "needs hybrid = true",
        ),
        (
            "url = \"redis://h\"\nhybrid = false\nhybrid_lease = \"1s\"",
            "store.hybrid_lease",
            "needs hybrid = true",
        ),
        (
            "url = \"redis://h\"\nhybrid = true\nhybrid_batches = 5",
            "store.hybrid_batches",
            "unknown",
        ),
    ] {
        let errors = Config::parse(&store(fields), "h.toml").expect_err(fields);
        let text = errors.to_string();
        assert!(
            errors
                .errors
                .iter()
                .any(|e| e.field.as_deref() == Some(field))
                && text.contains(why),
            "{fields}: {text}"
        );
    }
}

#[test]
fn serve_decides_through_the_hybrid_store() {
    let redis = RedisServer::start();
    let config = format!(
        r#"
[store]
url = "{}"
hybrid = true
hybrid_batch = 5

[[rules]]
name = "hourly"
algorithm = "fixed_window"
limit = 12
period = "1h"
"#,
        redis.url()
    );
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    let _ = redis.cli(&["CONFIG", "RESETSTAT"]);
    let statuses: Vec<u16> = (0..15)
        .map(|_| post_json(s.api(), "/v1/check", r#"{"rule":"hourly","key":"k"}"#).status)
        .collect();
    assert_eq!(statuses[..12], [200; 12]);
    assert_eq!(statuses[12..], [429; 3]);
    // 5 + 5 + 2 leased, then denied locally until the window ends
    let info = redis.cli(&["INFO", "commandstats"]);
    let calls: u64 = info
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(calls <= 5, "{calls} script calls for 15 checks:\n{info}");
    let bare = redis.keys_without_ttl();
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
}
