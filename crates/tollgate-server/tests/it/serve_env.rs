//! `serve`'s flags read environment variables when not given
//! (docs/cli.md, "Environment"): a flag wins over its variable, a
//! variable over the config file; an empty variable counts as unset; the
//! store's value is never shown in `--help`.

use std::process::Command;

use crate::support::{Tollgate, config_file, get, request, start_upstream};

const CONFIG: &str =
    "[[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 100\nperiod = \"1s\"\n";

/// `TOLLGATE_OPS` opens the ops listener; `--http` wins over a
/// `TOLLGATE_HTTP` that would not even parse.
#[test]
fn a_variable_names_a_door_and_its_flag_wins() {
    let s = Tollgate::start_with_env(
        Some(CONFIG),
        &["--http", "127.0.0.1:0"],
        &[
            ("TOLLGATE_HTTP", "not-an-address"),
            ("TOLLGATE_OPS", "127.0.0.1:0"),
        ],
    );
    assert_eq!(get(s.api(), "/healthz").status, 200);
    assert_eq!(get(s.ops(), "/readyz").status, 200);
}

/// `TOLLGATE_HTTP` wins over `[http] listen` (an address this machine
/// cannot bind: the start would fail on it); `TOLLGATE_PROXY` and
/// `TOLLGATE_UPSTREAM` serve the proxy with no `[proxy]` in the file.
#[test]
fn variables_win_over_the_config_file() {
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let config = format!("[http]\nlisten = \"192.0.2.1:8080\"\n\n{CONFIG}");
    let s = Tollgate::start_with_env(
        Some(&config),
        &[],
        &[
            ("TOLLGATE_HTTP", "127.0.0.1:0"),
            ("TOLLGATE_PROXY", "127.0.0.1:0"),
            ("TOLLGATE_UPSTREAM", &upstream),
        ],
    );
    assert_eq!(get(s.api(), "/healthz").status, 200);
    let r = request(s.proxy(), "GET", "/", &[], b"");
    assert_eq!((r.status, r.header("x-upstream")), (200, Some("yes")));
}

/// `TOLLGATE_CONFIG` names the file, `TOLLGATE_GRPC` the gRPC door.
#[test]
fn the_config_file_and_the_grpc_door_from_variables() {
    let (_dir, path) = config_file(CONFIG);
    let path = path.to_str().expect("utf-8 path");
    let s = Tollgate::start_with_env(
        None,
        &["--http", "127.0.0.1:0"],
        &[("TOLLGATE_CONFIG", path), ("TOLLGATE_GRPC", "127.0.0.1:0")],
    );
    let rules = get(s.api(), "/v1/rules").json();
    assert_eq!(rules["rules"][0]["name"], "r", "{rules}");
    assert!(s.grpc().port() != 0);
}

/// An empty variable is unset: an image's `TOLLGATE_HTTP` overridden with
/// `""` leaves a proxy-only replica with no HTTP API (and no error).
#[test]
fn an_empty_variable_counts_as_unset() {
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let s = Tollgate::start_with_env(
        Some(CONFIG),
        &["--proxy", "127.0.0.1:0", "--upstream", &upstream],
        &[
            ("TOLLGATE_HTTP", ""),
            ("TOLLGATE_OPS", ""),
            ("TOLLGATE_STORE", ""),
        ],
    );
    assert_eq!(request(s.proxy(), "GET", "/", &[], b"").status, 200);
    let log = s.log();
    assert!(!log.contains("HTTP API listening"), "{log}");
    assert!(!log.contains("ops listening"), "{log}");
    assert!(log.contains("store memory"), "{log}");
}

/// `serve --help` names every variable, shows an address's value and
/// hides the store's (a Redis URL may carry a password).
#[test]
fn help_names_the_variables_and_hides_the_stores_value() {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--help"])
        .env("TOLLGATE_STORE", "redis://:hunter2-secret@127.0.0.1:6379")
        .env("TOLLGATE_HTTP", "127.0.0.1:18080")
        .output()
        .expect("run tollgate");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    for var in [
        "TOLLGATE_CONFIG",
        "TOLLGATE_STORE",
        "TOLLGATE_HTTP",
        "TOLLGATE_ADMIN",
        "TOLLGATE_OPS",
        "TOLLGATE_GRPC",
        "TOLLGATE_PROXY",
        "TOLLGATE_UPSTREAM",
    ] {
        assert!(help.contains(&format!("[env: {var}")), "{var}:\n{help}");
    }
    assert!(
        help.contains("[env: TOLLGATE_HTTP=127.0.0.1:18080]"),
        "{help}"
    );
    assert!(!help.contains("hunter2"), "{help}");
}
