//! The entry refuses to start on a variable it cannot honour: exit 1, the
//! variable named on stderr; and `tollgate ratelimit` is the same entry as
//! the name `ratelimit`.

use std::process::Command;

use crate::support::compat::output;

/// Enough to start, but for the variable under test.
const BASE: &[(&str, &str)] = &[
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("REDIS_URL", "127.0.0.1:1"),
    ("USE_STATSD", "false"),
    ("RUNTIME_ROOT", "/nonexistent"),
];

#[test]
fn each_refused_variable_exits_non_zero_naming_it() {
    for (variable, value) in [
        ("BACKEND_TYPE", "memcache"),
        ("REDIS_PERSECOND", "true"),
        ("USE_STATSD", "true"),
        ("USE_DOG_STATSD", "true"),
        ("CONFIG_TYPE", "GRPC_XDS_DELTA"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ("GRPC_UDS", "/run/rl.sock"),
        ("REDIS_SOCKET_TYPE", "unix"),
        ("REDIS_TIMEOUT", "10"),
        ("LOG_LEVEL", "loud"),
        ("TRACING_EXPORTER_PROTOCOL", "zipkin"),
        ("PROMETHEUS_PATH", "/stats"),
        ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-token:abc"),
        ("GRPC_SERVER_TLS_CERT", "/nonexistent/tls.crt"),
    ] {
        let mut env: Vec<(&str, &str)> = BASE
            .iter()
            .filter(|(k, _)| *k != variable)
            .copied()
            .collect();
        env.push((variable, value));
        if variable == "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS" {
            env.push(("CONFIG_TYPE", "GRPC_XDS_SOTW"));
        }
        if variable == "PROMETHEUS_PATH" {
            // Read only for the Prometheus sink, as the reference.
            env.push(("USE_PROMETHEUS", "true"));
        }
        if variable == "GRPC_SERVER_TLS_CERT" {
            env.push(("GRPC_SERVER_USE_TLS", "true"));
            env.push(("GRPC_SERVER_TLS_KEY", "/nonexistent/tls.key"));
        }
        let out = output(&env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{variable}={value}: {stderr}");
        assert!(
            stderr.contains(&format!("{variable}: ")),
            "{variable}={value} not named: {stderr}"
        );
    }
}

#[test]
fn the_subcommand_is_the_same_entry() {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("ratelimit")
        .env_clear()
        .env("REDIS_SOCKET_TYPE", "unix")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("REDIS_SOCKET_TYPE: unix"), "{stderr}");
}

#[test]
fn a_missing_config_directory_is_an_error_naming_it() {
    let out = output(BASE);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/nonexistent/config"), "{stderr}");
}
