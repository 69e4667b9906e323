//! The xDS client when the ADS server is not there or not ready: killed
//! (the last good config keeps serving) and restarted on its port with
//! versions from "1" again (reconnect, the new snapshot applies); no
//! config yet, with `start_without_config` (the Envoy door answers
//! UNAVAILABLE until the first config) and without it (no door opens
//! before); a server that accepts the connection and never speaks (cut
//! after the preface deadline, then the real server is reached); and
//! 1,000 Envoy Gateway-shaped domains in one response.

use tollgate_server::rls_conf::RateLimitUnit::{Hour, Minute, Second};
use xds_harness::AdsServer;

use crate::support::Tollgate;
use crate::support::xds::{
    acked, ads, call, client, codes, config_version, eg_domain, eg_request, runtime, set, toml,
};

const ARGS: &[&str] = &["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"];

#[test]
fn a_killed_server_leaves_the_last_config_serving_and_a_restart_applies_anew() {
    let rt = runtime();
    let first = rt.block_on(ads(None));
    set(&first, "1", &[eg_domain("d", "route", &[(2, Hour)])]);
    let server = Tollgate::start(&toml(&first.addr().to_string(), ""), ARGS);
    rt.block_on(acked(&first, "1"));
    let mut c = client(&rt, &server);
    let req = eg_request("d", "route", 0);
    assert_eq!(codes(&rt, &mut c, &req, 1), ["OK"]);
    let addr = rt.block_on(first.stop());
    assert!(server.logs("reconnecting in"), "{}", server.log());
    assert_eq!(
        codes(&rt, &mut c, &req, 2),
        ["OK", "OVER_LIMIT"],
        "the last config serves"
    );
    assert_eq!(config_version(&server), "1");
    // Envoy Gateway restarted: versions from "1" again, other content.
    let again = rt.block_on(AdsServer::start_at(addr, None));
    set(
        &again,
        "1",
        &[
            eg_domain("d", "route", &[(2, Hour)]),
            eg_domain("e", "route", &[(1, Hour)]),
        ],
    );
    rt.block_on(acked(&again, "1"));
    let first_request = again
        .events()
        .iter()
        .find_map(|e| e.request().cloned())
        .expect("request");
    assert_eq!(first_request.version_info, "1", "the last accepted version");
    let e = eg_request("e", "route", 0);
    assert_eq!(
        codes(&rt, &mut c, &e, 2),
        ["OK", "OVER_LIMIT"],
        "the new snapshot applies"
    );
    assert_eq!(
        codes(&rt, &mut c, &req, 1),
        ["OVER_LIMIT"],
        "d's count kept"
    );
}

#[test]
fn start_without_config_answers_unavailable_until_the_first_config() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    let server = Tollgate::start(
        &toml(&ads.addr().to_string(), "start_without_config = true\n"),
        ARGS,
    );
    let mut c = client(&rt, &server);
    let req = eg_request("d", "route", 0);
    let status = call(&rt, &mut c, req.clone()).expect_err("no config yet");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(status.message(), "no rate limit configuration loaded");
    set(&ads, "1", &[eg_domain("d", "route", &[(1, Minute)])]);
    rt.block_on(acked(&ads, "1"));
    assert_eq!(codes(&rt, &mut c, &req, 2), ["OK", "OVER_LIMIT"]);
}

#[test]
fn without_start_without_config_no_door_opens_before_the_first_config() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    let ads = std::sync::Arc::new(ads);
    // Once the client has asked, and only then, the snapshot is set.
    let setter = std::sync::Arc::clone(&ads);
    rt.spawn(async move {
        setter
            .wait_for("the first request", |e| {
                e.iter().find_map(|e| e.request()).map(|_| ())
            })
            .await;
        set(&setter, "1", &[eg_domain("d", "route", &[(1, Second)])]);
    });
    let server = Tollgate::start(&toml(&ads.addr().to_string(), ""), ARGS);
    let log = server.log();
    let waiting = log.find("waiting for the first xDS config").expect(&log);
    let applied = log.find("xDS config version \"1\" applied").expect(&log);
    let listening = log
        .find("Envoy rate limit service (gRPC) listening")
        .expect(&log);
    assert!(waiting < applied && applied < listening, "{log}");
}

#[test]
fn a_silent_server_is_left_at_the_preface_deadline_and_a_real_one_reached() {
    let rt = runtime();
    // Accepts connections and holds them open without a byte, as a hung
    // process or a foreign listener does, until told to go.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    silent.set_nonblocking(true).expect("nonblocking");
    let addr = silent.local_addr().expect("addr");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let holder = {
        let (stop, accepted) = (stop.clone(), accepted.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                match silent.accept() {
                    Ok((conn, _)) => {
                        held.push(conn);
                        accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            }
        })
    };
    let extra = "start_without_config = true\n";
    let server = Tollgate::start(&toml(&addr.to_string(), extra), ARGS);
    assert!(
        server.logs("no HTTP/2 preface"),
        "the stream was not cut: {}",
        server.log()
    );
    assert!(
        server.logs("no config yet; reconnecting"),
        "{}",
        server.log()
    );
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    // The silent listener goes; a real ADS server takes its port.
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    holder.join().expect("holder");
    let ads = rt.block_on(AdsServer::start_at(addr, None));
    set(&ads, "1", &[eg_domain("d", "route", &[(1, Hour)])]);
    rt.block_on(acked(&ads, "1"));
    let mut c = client(&rt, &server);
    let req = eg_request("d", "route", 0);
    assert_eq!(codes(&rt, &mut c, &req, 2), ["OK", "OVER_LIMIT"]);
}

#[test]
fn a_response_over_max_message_bytes_fails_the_stream_and_is_not_applied() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    let domains: Vec<_> = (0..50)
        .map(|i| eg_domain(&format!("d{i}"), "route", &[(1, Hour)]))
        .collect();
    set(&ads, "1", &domains);
    let extra = "start_without_config = true\nmax_message_bytes = 1000\n";
    let server = Tollgate::start(&toml(&ads.addr().to_string(), extra), ARGS);
    assert!(server.logs("too large"), "{}", server.log());
    assert!(
        server.logs("no config yet; reconnecting"),
        "{}",
        server.log()
    );
    let mut c = client(&rt, &server);
    let status = call(&rt, &mut c, eg_request("d0", "route", 0)).expect_err("no config");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(ads.events().iter().all(|e| e.ack().is_none()));
}

#[test]
fn a_thousand_envoy_gateway_domains_apply_and_serve() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    let domains: Vec<_> = (0..1000)
        .map(|i| {
            eg_domain(
                &format!("ns-{i}/gateway-{i}/http"),
                &format!("httproute/ns-{i}/backend/rule/0/match/0/www_example_com"),
                &[(5, Second), (100, Minute), (i + 1, Hour)],
            )
        })
        .collect();
    set(&ads, "1", &domains);
    let server = Tollgate::start(&toml(&ads.addr().to_string(), ""), ARGS);
    rt.block_on(acked(&ads, "1"));
    let mut c = client(&rt, &server);
    for i in [0u32, 499, 999] {
        let req = eg_request(
            &format!("ns-{i}/gateway-{i}/http"),
            &format!("httproute/ns-{i}/backend/rule/0/match/0/www_example_com"),
            2,
        );
        let n = usize::try_from(i).expect("small") + 2;
        let got = codes(&rt, &mut c, &req, n);
        assert!(
            got[..n - 1].iter().all(|c| c == "OK"),
            "domain {i}: {got:?}"
        );
        assert_eq!(got[n - 1], "OVER_LIMIT", "domain {i}");
    }
    let rules = crate::support::get(server.api(), "/v1/rules").json();
    let count = rules["rules"].as_array().expect("rules").len();
    assert!(count >= 3000, "{count} rules");
}
