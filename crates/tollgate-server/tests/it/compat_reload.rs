//! `CONFIG_TYPE=FILE` under the `ratelimit` entry: a file added to the
//! directory is loaded, and the version shown (`tollgate_config_info` on
//! the Prometheus port) follows the directory's files, not the files
//! present at start.

use std::time::{Duration, Instant};

use redis_harness::RedisServer;

use crate::support::compat::{Ratelimit, path_str, write};
use crate::support::get;

const LIMITS: &str =
    "descriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";

fn version(metrics: &str) -> Option<String> {
    let line = metrics
        .lines()
        .find(|l| l.starts_with("tollgate_config_info{"))?;
    let rest = &line[line.find("version=\"")? + 9..];
    Some(rest[..rest.find('"')?].to_owned())
}

#[test]
fn a_file_added_in_file_mode_changes_the_version_shown() {
    let redis = RedisServer::start();
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("ratelimit/config");
    write(&dir, "a.yaml", &format!("domain: a\n{LIMITS}"));
    let root_s = path_str(root.path());
    let rl = Ratelimit::start(&[
        ("CONFIG_TYPE", "FILE"),
        ("LOG_LEVEL", "info"),
        ("RUNTIME_ROOT", root_s.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", redis.addr().as_str()),
        ("USE_STATSD", "false"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
    ]);
    let metrics = || get(rl.metrics.expect("PROMETHEUS_ADDR"), "/metrics").text();
    let first = version(&metrics()).unwrap_or_else(|| panic!("{}", metrics()));
    write(&dir, "b.yaml", &format!("domain: b\n{LIMITS}"));
    // Loaded once /rlconfig shows domain b.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !get(rl.debug, "/rlconfig").text().contains("b.k:") {
        assert!(Instant::now() < deadline, "b.yaml not loaded: {}", rl.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let now = version(&metrics()).expect("version");
    assert_ne!(now, first, "{}", rl.log());
    // The log line is written after the new config serves: wait for it.
    // It names what reloaded (no SIGHUP: under the reference's env a
    // SIGHUP stops the process).
    let line = format!("config reloaded (a RUNTIME_ROOT file changed): version {now}");
    while !rl.log().contains(&line) {
        assert!(
            Instant::now() < deadline,
            "no {line:?} logged: {}",
            rl.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
