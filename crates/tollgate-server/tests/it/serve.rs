//! `tollgate serve` as a process: one log line per front door, SIGTERM and
//! SIGINT drain in-flight requests and exit 0, SIGHUP reloads the config
//! (reload.rs has the rest), SIGUSR1 and SIGUSR2 are logged and
//! ignored, and a busy port, a bad
//! config or an unsupported flag exit non-zero with a clear message.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::support::{
    Tollgate, connect, post_json, read_response, request, serve_output, start_upstream,
};

const CONFIG: &str =
    "[[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 100\nperiod = \"1s\"\n";

#[test]
fn one_log_line_per_front_door() {
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let s = Tollgate::start(
        CONFIG,
        &[
            "--http",
            "127.0.0.1:0",
            "--proxy",
            "127.0.0.1:0",
            "--upstream",
            upstream.as_str(),
        ],
    );
    let log = s.log();
    let api_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("HTTP API listening on"))
        .collect();
    let proxy_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reverse proxy listening on"))
        .collect();
    assert_eq!(api_lines.len(), 1, "{log}");
    assert_eq!(proxy_lines.len(), 1, "{log}");
    assert!(
        api_lines[0].contains(&format!("http://{}", s.api())),
        "{log}"
    );
    assert!(
        proxy_lines[0].contains(&format!("forwarding to {upstream}")),
        "{log}"
    );
    assert!(api_lines[0].contains(" INFO "), "{log}");
}

#[test]
fn sigterm_drains_in_flight_requests_and_exits_zero() {
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let mut s = Tollgate::start(
        CONFIG,
        &[
            "--http",
            "127.0.0.1:0",
            "--proxy",
            "127.0.0.1:0",
            "--upstream",
            upstream.as_str(),
        ],
    );
    let (api, proxy) = (s.api(), s.proxy());

    // In flight through the proxy: an upstream that answers in 1.5 s.
    let slow = std::thread::spawn(move || request(proxy, "GET", "/slow?ms=1500", &[], b""));
    // In flight on the API: a body sent in two halves around the signal.
    let body = br#"{"rule":"r","key":"drain"}"#;
    let mut half = connect(api);
    half.write_all(
        format!(
            "POST /v1/check HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .expect("head");
    half.write_all(&body[..10]).expect("first half");
    // Both are in flight before the signal, made sure of rather than slept
    // on (a loaded machine may take its time): the slow request once the
    // proxy has connected upstream, the half body once a later connection
    // to the API was answered (connections are accepted in order).
    let deadline = Instant::now() + Duration::from_secs(30);
    while up.connections() == 0 {
        assert!(Instant::now() < deadline, "the slow request never left");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        post_json(api, "/v1/check", r#"{"rule":"r","key":"probe"}"#).status,
        200
    );

    s.signal("TERM");
    // New connections are refused once the listeners close.
    let deadline = Instant::now() + Duration::from_secs(3);
    while std::net::TcpStream::connect_timeout(&api, Duration::from_millis(200)).is_ok() {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Both in-flight requests still complete.
    half.write_all(&body[10..]).expect("second half");
    let r = read_response(&mut half);
    assert_eq!(r.status, 200, "{}", r.text());
    // The slow request's answer came whole through the proxy: the server
    // had not exited before the slow request finished.
    let r = slow.join().expect("slow request");
    assert_eq!(
        (r.status, r.text()),
        (200, "slow done".to_owned()),
        "exited before the slow request finished"
    );
    let status = s.wait_exit(Duration::from_secs(10)).expect("exited");
    assert_eq!(status.code(), Some(0), "log:\n{}", s.log());
    let log = s.log();
    assert!(log.contains("SIGTERM: shutting down"), "{log}");
    assert!(log.contains("draining"), "{log}");
}

#[test]
fn sigint_exits_zero_too() {
    let mut s = Tollgate::start(CONFIG, &["--http", "127.0.0.1:0"]);
    assert_eq!(
        post_json(s.api(), "/v1/check", r#"{"rule":"r","key":"k"}"#).status,
        200
    );
    s.signal("INT");
    let status = s.wait_exit(Duration::from_secs(10)).expect("exited");
    assert_eq!(status.code(), Some(0), "log:\n{}", s.log());
}

#[test]
fn hup_reloads_and_usr1_usr2_are_ignored_with_requests_in_flight() {
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let mut s = Tollgate::start(
        CONFIG,
        &[
            "--http",
            "127.0.0.1:0",
            "--proxy",
            "127.0.0.1:0",
            "--upstream",
            upstream.as_str(),
        ],
    );
    let proxy = s.proxy();
    // In flight through the proxy while the signals arrive.
    let slow = std::thread::spawn(move || request(proxy, "GET", "/slow?ms=1000", &[], b""));
    std::thread::sleep(Duration::from_millis(200));
    for signal in ["HUP", "USR1", "USR2", "HUP"] {
        s.signal(signal);
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = slow.join().expect("slow request");
    assert_eq!((r.status, r.text()), (200, "slow done".to_owned()));
    // Still serving, on a new connection too.
    assert_eq!(
        post_json(s.api(), "/v1/check", r#"{"rule":"r","key":"k"}"#).status,
        200
    );
    assert!(
        s.wait_exit(Duration::from_millis(100)).is_none(),
        "exited on a signal"
    );
    let log = s.log();
    for signal in ["SIGUSR1", "SIGUSR2"] {
        assert!(log.contains(&format!("{signal}: ignored")), "{log}");
    }
    assert_eq!(
        log.matches("SIGHUP: reloading the config").count(),
        2,
        "{log}"
    );
    assert_eq!(log.matches("config reloaded (SIGHUP)").count(), 2, "{log}");
    // SIGTERM still stops it.
    s.signal("TERM");
    let status = s.wait_exit(Duration::from_secs(10)).expect("exited");
    assert_eq!(status.code(), Some(0), "log:\n{}", s.log());
}

#[test]
fn a_port_in_use_is_a_clear_failure() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = serve_output(CONFIG, &["--http", &addr]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr} for the HTTP API")),
        "{stderr}"
    );
    assert!(stderr.to_lowercase().contains("in use"), "{stderr}");

    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let out = serve_output(CONFIG, &["--proxy", &addr, "--upstream", &upstream]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("for the reverse proxy"), "{stderr}");
}

#[test]
fn refusals_before_serving_are_clear() {
    // A bad config: every problem, with file and line.
    let out = serve_output(
        "[http]\nlisten = \"nowhere\"\n[[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 0\nperiod = \"1s\"\n",
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tollgate.toml:2: http.listen: \"nowhere\" is not an IP:PORT"),
        "{stderr}"
    );
    assert!(
        stderr.contains("tollgate.toml:6: rules[0].limit: limit must be at least 1"),
        "{stderr}"
    );

    for (args, want) in [
        (&["--envoy-config", "rls.yaml"][..], "add --grpc ADDR"),
        (&["--proxy", "127.0.0.1:0"], "needs an upstream"),
        (
            &["--http", "localhost"],
            "--http: \"localhost\" is not an IP:PORT",
        ),
        (
            &["--proxy", "127.0.0.1:0", "--upstream", "ftp://x"],
            "scheme \"ftp\" is not http or https",
        ),
    ] {
        let out = serve_output(CONFIG, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }

    // No --config at all.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("serve")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("pass --config FILE"), "{stderr}");
}
