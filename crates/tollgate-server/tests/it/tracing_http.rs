//! Tracing of the HTTP doors (docs/tracing.md): the HTTP API's deciding
//! endpoints, the reverse proxy and the admin API each make a SERVER span
//! per request, `{method} {route}`, joined to the caller's trace from its
//! headers, with the store call under it; and the `[tracing]` table alone
//! (no `OTEL_*` variables) turns tracing on.

use otlp_harness::{KIND_SERVER, Protocol, ReceivedSpan, Receiver};

use crate::support::{Tollgate, post_json, request, start_upstream};
use crate::tracing_envoy::otel_env;

const RULES: &str = "[[rules]]\nname = \"per_key\"\nalgorithm = \"fixed_window\"\nlimit = 5\n\
                     period = \"1h\"\nkey = \"header:x-api-key\"\n";
const TOKEN: &str = "s3cret-token-for-tracing";
const S: &str = "00f067aa0ba902b7";

fn named<'a>(spans: &'a [ReceivedSpan], trace: &str, name: &str) -> Option<&'a ReceivedSpan> {
    spans.iter().find(|s| s.trace_id == trace && s.name == name)
}

/// The door's span `name` in `trace`, and the store span `store` under
/// it, once both have arrived.
fn door_and_store(
    otlp: &Receiver,
    trace: &str,
    name: &str,
    store: &str,
) -> (ReceivedSpan, ReceivedSpan) {
    let spans =
        otlp.wait_for(|s| named(s, trace, name).is_some() && named(s, trace, store).is_some());
    let door = named(&spans, trace, name).expect("door span").clone();
    let st = named(&spans, trace, store).expect("store span").clone();
    assert_eq!(door.kind, KIND_SERVER, "{door:#?}");
    assert_eq!(door.parent_span_id, S, "the caller's span: {door:#?}");
    assert_eq!(st.parent_span_id, door.span_id, "under the door's: {st:#?}");
    (door, st)
}

/// The API's `POST /v1/check`, the proxy and the admin API, traced to
/// the OTLP/HTTP receiver.
#[test]
fn each_http_door_makes_a_span_per_decision() {
    let otlp = Receiver::start();
    let up = start_upstream();
    let config = format!(
        "[proxy]\nupstream = \"http://{}\"\n\n[admin]\n[[admin.tokens]]\nname = \"oncall\"\n\
         token = \"{TOKEN}\"\n\n{RULES}",
        up.addr
    );
    let env = otel_env(&otlp, Protocol::Http);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Tollgate::start_with_env(
        Some(&config),
        &[
            "--http",
            "127.0.0.1:0",
            "--proxy",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ],
        &env,
    );

    let api_trace = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1";
    let r = request(
        s.api(),
        "POST",
        "/v1/check",
        &[
            ("Content-Type", "application/json"),
            ("traceparent", &format!("00-{api_trace}-{S}-01")),
        ],
        br#"{"rule":"per_key","key":"k1"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (door, store) = door_and_store(&otlp, api_trace, "POST /v1/check", "store.check");
    for (k, v) in [
        ("http.request.method", "POST"),
        ("http.route", "/v1/check"),
        ("http.response.status_code", "200"),
        ("tollgate.door", "api"),
    ] {
        assert_eq!(door.attr(k), Some(v), "{k}: {door:#?}");
    }
    assert_eq!(store.attr("tollgate.rule"), Some("per_key"));
    assert_eq!(store.attr("tollgate.allowed"), Some("true"));

    let proxy_trace = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2";
    let r = request(
        s.proxy(),
        "GET",
        "/some/path",
        &[("x-api-key", "k2"), ("b3", &format!("{proxy_trace}-{S}-1"))],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (door, _) = door_and_store(&otlp, proxy_trace, "GET /*", "store.check");
    assert_eq!(door.attr("tollgate.door"), Some("proxy"));
    assert_eq!(door.attr("http.response.status_code"), Some("200"));

    let admin_trace = "ccccccccccccccccccccccccccccccc3";
    let auth = format!("Bearer {TOKEN}");
    let r = request(
        s.admin(),
        "POST",
        "/admin/v1/refunds",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &auth),
            ("traceparent", &format!("00-{admin_trace}-{S}-01")),
        ],
        br#"{"rule":"per_key","key":"k1","cost":1}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (door, _) = door_and_store(&otlp, admin_trace, "POST /admin/v1/refunds", "store.refund");
    assert_eq!(door.attr("tollgate.door"), Some("admin"));
}

/// `[tracing]` in the file, no variables: spans go to its endpoint over
/// its protocol (gRPC), a probe makes none (only deciding endpoints do),
/// and the caller's unsampled flag is followed.
#[test]
fn the_tracing_table_alone_turns_it_on() {
    let otlp = Receiver::start();
    let config = format!(
        "[tracing]\nenabled = true\nendpoint = \"{}\"\nprotocol = \"grpc\"\n\
         service_name = \"from-the-file\"\n\n{RULES}",
        otlp.grpc_endpoint()
    );
    let s = Tollgate::start_with_env(
        Some(&config),
        &["--http", "127.0.0.1:0"],
        &[("OTEL_BSP_SCHEDULE_DELAY", "50")],
    );
    assert_eq!(crate::support::get(s.api(), "/healthz").status, 200);
    let unsampled = "dddddddddddddddddddddddddddddd04";
    let r = request(
        s.api(),
        "POST",
        "/v1/check",
        &[
            ("Content-Type", "application/json"),
            ("traceparent", &format!("00-{unsampled}-{S}-00")),
        ],
        br#"{"rule":"per_key","key":"k1"}"#,
    );
    assert_eq!(r.status, 200);
    let r = post_json(s.api(), "/v1/check", r#"{"rule":"per_key","key":"k1"}"#);
    assert_eq!(r.status, 200);
    let spans = otlp.wait_for(|s| {
        s.iter().any(|s| s.name == "POST /v1/check") && s.iter().any(|s| s.name == "store.check")
    });
    assert!(
        spans.iter().all(|s| s.protocol == Protocol::Grpc
            && s.resource.get("service.name").map(String::as_str) == Some("from-the-file")
            && s.trace_id != unsampled
            && s.name != "GET /healthz"),
        "{spans:#?}"
    );
}

/// `[tracing]` is read at start: a reload that changes it applies the
/// rest and says tracing needs a restart.
#[test]
fn a_reload_reports_tracing_needs_a_restart() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    let path = s.config_path();
    let tmp = path.with_extension("new");
    let text = format!(
        "[tracing]\nenabled = true\n\n{}",
        RULES.replace("limit = 5", "limit = 7")
    );
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, &path).expect("rename");
    s.signal("HUP");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let rules = loop {
        let r = crate::support::get(s.api(), "/v1/rules").json();
        if !r["reload_error"].is_null() {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "no reload: {r}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let message = rules["reload_error"]["message"].as_str().expect("message");
    assert!(message.contains("[tracing] changed"), "{message}");
    assert!(
        rules.to_string().contains("\"limit\":7"),
        "the rest applied: {rules}"
    );
    assert!(!s.log().contains("tracing: spans over"), "{}", s.log());
}
