//! The xDS client over TLS 1.3 with mTLS, as Envoy Gateway's server asks:
//! with its certificate the client gets its config; without one the
//! server refuses the handshake and the client keeps trying.

use redis_harness::TestPki;
use xds_harness::{Event, ServerTls};

use crate::support::Tollgate;
use crate::support::xds::{acked, ads, client, codes, eg_domain, eg_request, runtime, set, toml};

#[test]
fn mtls_gets_the_config_and_no_client_certificate_is_refused() {
    let pki = TestPki::generate("envoy-gateway");
    let rt = runtime();
    let ads = rt.block_on(ads(Some(ServerTls {
        cert: pki.server_cert(),
        key: pki.server_key(),
        client_ca: Some(pki.ca_cert()),
    })));
    set(
        &ads,
        "1",
        &[eg_domain(
            "d",
            "route",
            &[(1, tollgate_server::rls_conf::RateLimitUnit::Hour)],
        )],
    );
    let url = format!("https://{}", ads.addr());
    let tls = |client: bool| {
        let mut t = format!(
            "\n[envoy.xds.tls]\nca_file = \"{}\"\nserver_name = \"envoy-gateway\"\n",
            pki.ca_cert().display()
        );
        if client {
            t += &format!(
                "cert_file = \"{}\"\nkey_file = \"{}\"\n",
                pki.client_cert().display(),
                pki.client_key().display()
            );
        }
        t
    };
    let server = Tollgate::start(&(toml(&url, "") + &tls(true)), &["--grpc", "127.0.0.1:0"]);
    rt.block_on(acked(&ads, "1"));
    let mut c = client(&rt, &server);
    let req = eg_request("d", "route", 0);
    assert_eq!(codes(&rt, &mut c, &req, 2), ["OK", "OVER_LIMIT"]);
    drop(server);
    let without = toml(&url, "start_without_config = true\n") + &tls(false);
    let _server = Tollgate::start(&without, &["--grpc", "127.0.0.1:0"]);
    let error = rt.block_on(ads.wait_for("a refused handshake", |e| {
        e.iter().find_map(|e| match e {
            Event::HandshakeFailed { error } => Some(error.clone()),
            _ => None,
        })
    }));
    assert!(error.to_lowercase().contains("certificate"), "{error}");
}
