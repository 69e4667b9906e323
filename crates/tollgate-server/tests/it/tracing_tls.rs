//! The OTLP exporter over TLS (docs/tracing.md, "TLS"): spans reach an
//! `https://` receiver over gRPC and HTTP, with the CA from
//! `OTEL_EXPORTER_OTLP_CERTIFICATE` or `[tracing] ca_file`, and with a
//! client certificate when the receiver asks for one (mTLS); a receiver
//! whose certificate the CA did not sign gets nothing, and the server
//! says the export failed.

use otlp_harness::{Protocol, Receiver, ServerTls};
use redis_harness::TestPki;

use crate::support::{Tollgate, post_json};
use crate::tracing_envoy::otel_env;

const RULES: &str = "[[rules]]\nname = \"per_key\"\nalgorithm = \"fixed_window\"\nlimit = 5\n\
                     period = \"1h\"\nkey = \"header:x-api-key\"\n";

/// A receiver over TLS with `pki`'s server certificate for `localhost`,
/// asking for a client certificate when `mtls`.
fn receiver(pki: &TestPki, mtls: bool) -> Receiver {
    Receiver::start_tls(&ServerTls {
        cert: pki.server_cert(),
        key: pki.server_key(),
        client_ca: mtls.then(|| pki.ca_cert()),
        name: pki.server_name().to_owned(),
    })
}

/// The server, tracing to `otlp` over `protocol` with `more` variables
/// and `table` added to `[tracing]`.
fn server(otlp: &Receiver, protocol: Protocol, more: &[(&str, String)], table: &str) -> Tollgate {
    let mut env = otel_env(otlp, protocol);
    env.extend(more.iter().map(|(k, v)| (*k, v.clone())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let config = format!("[tracing]\n{table}\n{RULES}");
    Tollgate::start_with_env(Some(&config), &["--http", "127.0.0.1:0"], &env)
}

/// One decision, and its span received over `protocol`.
fn traced(s: &Tollgate, otlp: &Receiver, protocol: Protocol) {
    let r = post_json(s.api(), "/v1/check", r#"{"rule":"per_key","key":"k1"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let spans = otlp.wait_for(|s| s.iter().any(|s| s.name == "POST /v1/check"));
    assert!(spans.iter().all(|s| s.protocol == protocol), "{spans:#?}");
}

fn ca(pki: &TestPki) -> Vec<(&'static str, String)> {
    vec![(
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        pki.ca_cert().display().to_string(),
    )]
}

#[test]
fn grpc_over_tls() {
    let pki = TestPki::generate("localhost");
    let otlp = receiver(&pki, false);
    let s = server(&otlp, Protocol::Grpc, &ca(&pki), "");
    traced(&s, &otlp, Protocol::Grpc);
}

#[test]
fn http_over_tls() {
    let pki = TestPki::generate("localhost");
    let otlp = receiver(&pki, false);
    let s = server(&otlp, Protocol::Http, &ca(&pki), "");
    traced(&s, &otlp, Protocol::Http);
}

/// mTLS from the variables.
#[test]
fn grpc_over_mtls() {
    let pki = TestPki::generate("localhost");
    let otlp = receiver(&pki, true);
    let mut env = ca(&pki);
    env.push((
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
        pki.client_cert().display().to_string(),
    ));
    env.push((
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        pki.client_key().display().to_string(),
    ));
    let s = server(&otlp, Protocol::Grpc, &env, "");
    traced(&s, &otlp, Protocol::Grpc);
}

/// mTLS from the `[tracing]` table.
#[test]
fn http_over_mtls_from_the_table() {
    let pki = TestPki::generate("localhost");
    let otlp = receiver(&pki, true);
    let table = format!(
        "ca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        pki.ca_cert().display(),
        pki.client_cert().display(),
        pki.client_key().display()
    );
    let s = server(&otlp, Protocol::Http, &[], &table);
    traced(&s, &otlp, Protocol::Http);
}

/// A CA that did not sign the receiver's certificate: the export fails,
/// is logged, and nothing arrives; likewise without the client
/// certificate an mTLS receiver asks for.
#[test]
fn a_wrong_ca_or_no_client_certificate_exports_nothing() {
    let pki = TestPki::generate("localhost");
    for (protocol, mtls) in [
        (Protocol::Grpc, false),
        (Protocol::Http, false),
        (Protocol::Grpc, true),
        (Protocol::Http, true),
    ] {
        let otlp = receiver(&pki, mtls);
        let env = if mtls {
            ca(&pki)
        } else {
            vec![(
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                pki.other_ca_cert().display().to_string(),
            )]
        };
        let s = server(&otlp, protocol, &env, "");
        let r = post_json(s.api(), "/v1/check", r#"{"rule":"per_key","key":"k1"}"#);
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            s.logs("tracing: cannot export spans"),
            "{protocol:?}, mtls {mtls}: {}",
            s.log()
        );
        assert!(otlp.spans().is_empty(), "{:#?}", otlp.spans());
    }
}
