//! Separate `tollgate` processes sharing one Redis hold one limit, and a
//! process whose own clock is hours off (run under libfaketime) changes no
//! decision: time comes from the Redis server.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use redis_harness::RedisServer;

const ALGORITHMS: [&str; 5] = [
    "gcra",
    "token_bucket",
    "fixed_window",
    "sliding_window",
    "sliding_log",
];

fn config(dir: &Path, url: &str) -> PathBuf {
    let mut text = format!("[store]\nurl = \"{url}\"\ntimeout = \"2s\"\n");
    for a in ALGORITHMS {
        // A long period: nothing refills while the test runs.
        text.push_str(&format!(
            "\n[[rules]]\nname = \"{a}\"\nalgorithm = \"{a}\"\nlimit = 37\nperiod = \"1h\"\n"
        ));
    }
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn check_cmd(config: &Path, rule: &str, key: &str, count: u32) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(["check", "--config"])
        .arg(config)
        .args(["--rule", rule, "--key", key, "--concurrency", "4"])
        .args(["--count", &count.to_string()]);
    cmd
}

/// The same command run under libfaketime with the clock shifted by
/// `offset` (`+5h`, `-1d`). Preloaded directly, not through the
/// `faketime` wrapper: the wrapper takes a named semaphore after its own
/// pid, and one left behind by an earlier process of the same pid (a long
/// CI run reuses pids) makes it refuse to start ("sem_open: File
/// exists").
fn skewed(cmd: &Command, offset: &str) -> Command {
    let mut f = Command::new(cmd.get_program());
    f.args(cmd.get_args())
        .env("LD_PRELOAD", crate::support::gateway::libfaketime())
        .env("FAKETIME", offset);
    f
}

fn admitted(out: &Output) -> u64 {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tollgate check failed: {stderr}");
    let tally = stderr
        .lines()
        .find(|l| l.starts_with("checks "))
        .unwrap_or_else(|| panic!("no tally in {stderr:?}"));
    tally
        .split_whitespace()
        .nth(3)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("bad tally {tally:?}"))
}

fn run_all(cmds: Vec<Command>) -> Vec<Output> {
    let children: Vec<_> = cmds
        .into_iter()
        .map(|mut c| {
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn tollgate")
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait for tollgate"))
        .collect()
}

#[test]
fn four_processes_on_one_redis_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &redis.url());
    for a in ALGORITHMS {
        let outs = run_all(
            (0..4)
                .map(|_| check_cmd(&config, a, "shared", 25))
                .collect(),
        );
        let total: u64 = outs.iter().map(admitted).sum();
        assert_eq!(
            total, 37,
            "{a}: 4 processes x 25 checks against a limit of 37"
        );
    }
    assert!(redis.keys_without_ttl().is_empty());
}

#[test]
fn the_same_processes_on_the_memory_store_each_admit_the_limit() {
    // The problem tollgate solves, shown: in-memory limiters multiply the
    // quota by the number of replicas.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "memory");
    let outs = run_all(
        (0..4)
            .map(|_| check_cmd(&config, "gcra", "shared", 50))
            .collect(),
    );
    let total: u64 = outs.iter().map(admitted).sum();
    assert_eq!(total, 4 * 37);
}

#[test]
fn processes_with_skewed_clocks_decide_as_one() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &redis.url());
    // The preload does shift a process's clock.
    let shifted = skewed(Command::new("date").arg("+%s"), "+5h")
        .output()
        .expect("run date");
    let shifted: u64 = String::from_utf8_lossy(&shifted.stdout)
        .trim()
        .parse()
        .expect("date prints seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    assert!(
        shifted >= now + 5 * 3600 - 60 && shifted <= now + 5 * 3600 + 3600,
        "libfaketime did not shift the clock: {shifted} at {now}"
    );
    for a in ALGORITHMS {
        // Concurrently: clocks 5 h ahead, 3 h behind, a day behind, right.
        let offsets = ["+5h", "-3h", "-1d", "+0"];
        let outs = run_all(
            offsets
                .iter()
                .map(|o| skewed(&check_cmd(&config, a, "skew", 20), o))
                .collect(),
        );
        let total: u64 = outs.iter().map(admitted).sum();
        assert_eq!(total, 37, "{a}: skewed processes admitted {total}");

        // Sequentially: each skewed process continues where the last left off.
        let key = format!("seq-{a}");
        let mut remaining = Vec::new();
        for o in ["+7h", "-7h", "+0"] {
            let out = skewed(&check_cmd(&config, a, &key, 2), o)
                .output()
                .expect("run tollgate");
            assert_eq!(admitted(&out), 2);
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            for line in stdout.lines().skip(1) {
                let r: u64 = line
                    .split(',')
                    .nth(1)
                    .expect("remaining column")
                    .parse()
                    .expect("a number");
                remaining.push(r);
            }
        }
        remaining.sort_unstable_by(|x, y| y.cmp(x));
        assert_eq!(remaining, vec![36, 35, 34, 33, 32, 31], "{a}");
    }
    assert!(redis.keys_without_ttl().is_empty());
}
