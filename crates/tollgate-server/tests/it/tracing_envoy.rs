//! Tracing of the Envoy door (docs/tracing.md), end to end: the binary
//! started with the standard `OTEL_*` variables sends its spans to a real
//! OTLP receiver (`otlp-harness`, on the published protos), over gRPC and
//! over HTTP; each `ShouldRateLimit` call's span joins the caller's trace
//! (W3C `traceparent`, B3 single and multi), named as the reference names
//! it, with its store call as a child; sampling follows the caller and
//! drops roots at ratio 0; shutdown sends what is queued.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use otlp_harness::{KIND_SERVER, Protocol, ReceivedSpan, Receiver};
use tonic::transport::Channel;

use crate::support::rls::{connect, desc, yaml_file};
use crate::support::{Tollgate, serve_output_with_env};

const YAML: &str = "domain: edge\ndescriptors:\n  - key: route\n    value: r1\n    \
                    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n";
pub(crate) const NAME: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const T: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const S: &str = "00f067aa0ba902b7";

/// A server with the Envoy door, tracing to `otlp` over `protocol`, with
/// `more` variables; a runtime and a client to call it.
pub(crate) struct Traced {
    server: Tollgate,
    rt: tokio::runtime::Runtime,
    client: RateLimitServiceClient<Channel>,
    _dir: tempfile::TempDir,
}

/// The variables pointing the binary at `otlp` over `protocol`; a short
/// batch delay so spans go soon (tests wait on their arrival, not on it).
pub(crate) fn otel_env(otlp: &Receiver, protocol: Protocol) -> Vec<(&'static str, String)> {
    let (name, endpoint) = match protocol {
        Protocol::Grpc => ("grpc", otlp.grpc_endpoint()),
        Protocol::Http => ("http/protobuf", otlp.http_endpoint()),
    };
    vec![
        ("OTEL_TRACES_EXPORTER", "otlp".to_owned()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", name.to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_SERVICE_NAME", "tollgate-under-test".to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".to_owned()),
    ]
}

impl Traced {
    fn start(otlp: &Receiver, protocol: Protocol, more: &[(&'static str, &str)]) -> Traced {
        let (dir, yaml) = yaml_file(YAML);
        let yaml = yaml.to_str().expect("utf-8 path").to_owned();
        let mut env = otel_env(otlp, protocol);
        env.extend(more.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let server = Tollgate::start_with_env(
            None,
            &["--grpc", "127.0.0.1:0", "--envoy-config", &yaml],
            &env,
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt.block_on(connect(server.grpc()));
        Traced {
            server,
            rt,
            client,
            _dir: dir,
        }
    }

    /// One `ShouldRateLimit` call for route `route`, with `metadata`.
    fn call(&mut self, route: &str, metadata: &[(&'static str, &str)]) {
        let mut req = tonic::Request::new(RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![desc(&[("route", route)])],
            hits_addend: 1,
        });
        for (k, v) in metadata {
            req.metadata_mut()
                .insert(*k, v.parse().expect("metadata value"));
        }
        let client = &mut self.client;
        self.rt
            .block_on(client.should_rate_limit(req))
            .expect("ShouldRateLimit");
    }
}

fn in_trace<'a>(spans: &'a [ReceivedSpan], trace: &str, name: &str) -> Option<&'a ReceivedSpan> {
    spans.iter().find(|s| s.trace_id == trace && s.name == name)
}

/// The server span of a call in `trace` and its store span, once both
/// have arrived.
fn call_spans(otlp: &Receiver, trace: &str) -> (ReceivedSpan, ReceivedSpan) {
    let spans = otlp.wait_for(|s| {
        in_trace(s, trace, NAME).is_some() && in_trace(s, trace, "store.check").is_some()
    });
    let server = in_trace(&spans, trace, NAME).expect("server span").clone();
    let store = in_trace(&spans, trace, "store.check")
        .expect("store span")
        .clone();
    (server, store)
}

/// Over OTLP/gRPC: the call's span is the caller's child (W3C), a SERVER
/// span named and attributed as the reference's otelgrpc span, with the
/// domain and the answer; the store call is its child and says what
/// decided; the resource names the service.
#[test]
fn a_call_joins_the_callers_w3c_trace_over_grpc() {
    let otlp = Receiver::start();
    let mut s = Traced::start(&otlp, Protocol::Grpc, &[]);
    s.call("r1", &[("traceparent", &format!("00-{T}-{S}-01"))]);
    let (server, store) = call_spans(&otlp, T);
    assert_eq!(server.protocol, Protocol::Grpc);
    assert_eq!(server.parent_span_id, S, "{server:#?}");
    assert_eq!(server.kind, KIND_SERVER);
    for (k, v) in [
        ("rpc.system", "grpc"),
        ("rpc.service", "envoy.service.ratelimit.v3.RateLimitService"),
        ("rpc.method", "ShouldRateLimit"),
        ("rpc.grpc.status_code", "0"),
        ("domain", "edge"),
        ("tollgate.code", "OK"),
        ("tollgate.door", "envoy"),
    ] {
        assert_eq!(server.attr(k), Some(v), "{k}: {server:#?}");
    }
    assert_eq!(
        server.resource.get("service.name").map(String::as_str),
        Some("tollgate-under-test")
    );
    assert_eq!(store.parent_span_id, server.span_id, "{store:#?}");
    assert_eq!(store.attr("tollgate.store"), Some("memory"));
    assert_eq!(store.attr("tollgate.allowed"), Some("true"));
    let rule = store.attr("tollgate.rule").expect("the deciding rule");
    assert!(rule.starts_with("envoy.edge"), "{rule}");
}

/// Over OTLP/HTTP: B3, multi-header (a 64-bit trace id) and single, is
/// the parent.
#[test]
fn b3_single_and_multi_over_http() {
    let otlp = Receiver::start();
    let mut s = Traced::start(&otlp, Protocol::Http, &[]);
    s.call(
        "r1",
        &[
            ("x-b3-traceid", "a3ce929d0e0e4736"),
            ("x-b3-spanid", S),
            ("x-b3-sampled", "1"),
        ],
    );
    let padded = "0000000000000000a3ce929d0e0e4736";
    let (server, _) = call_spans(&otlp, padded);
    assert_eq!(server.protocol, Protocol::Http);
    assert_eq!(server.parent_span_id, S);
    let single_trace = "5b8efff798038103d269b633813fc60c";
    let single_parent = "eee19b7ec3c1b174";
    s.call(
        "r1",
        &[("b3", &format!("{single_trace}-{single_parent}-1"))],
    );
    let (server, store) = call_spans(&otlp, single_trace);
    assert_eq!(server.parent_span_id, single_parent);
    assert_eq!(store.parent_span_id, server.span_id);
}

/// At ratio 0, parent-based: a root call and a caller's unsampled call
/// are dropped, a caller's sampled one is kept. Spans go in the order
/// they end, so once the sampled call's arrive, a kept root's would
/// have arrived before them.
#[test]
fn ratio_0_drops_roots_and_a_sampled_parent_is_followed() {
    let otlp = Receiver::start();
    let mut s = Traced::start(
        &otlp,
        Protocol::Grpc,
        &[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0"),
        ],
    );
    s.call("r1", &[]);
    let unsampled = "11111111111111111111111111111111";
    s.call("r1", &[("traceparent", &format!("00-{unsampled}-{S}-00"))]);
    s.call("r1", &[("traceparent", &format!("00-{T}-{S}-01"))]);
    call_spans(&otlp, T);
    let others: Vec<_> = otlp
        .spans()
        .into_iter()
        .filter(|s| s.trace_id != T)
        .collect();
    assert!(
        others.is_empty(),
        "only the sampled call's spans: {others:#?}"
    );
}

/// At ratio 1, a root call is a root span; shutdown sends the spans still
/// queued (a batch delay longer than the test).
#[test]
fn roots_at_ratio_1_and_shutdown_flushes() {
    let otlp = Receiver::start();
    let mut s = Traced::start(
        &otlp,
        Protocol::Grpc,
        &[("OTEL_BSP_SCHEDULE_DELAY", "600000")],
    );
    s.call("r1", &[]);
    // The client's runtime gone, its connection closes at once (no
    // drain to wait for).
    let Traced {
        server, rt, client, ..
    } = s;
    drop(client);
    drop(rt);
    server.signal("TERM");
    let spans = otlp.wait_for(|s| s.iter().any(|s| s.name == NAME));
    let root = spans.iter().find(|s| s.name == NAME).expect("server span");
    assert_eq!(root.parent_span_id, "", "a root: {root:#?}");
    assert!(
        server.logs("tracing: the last spans sent"),
        "{}",
        server.log()
    );
}

/// Bad values stop the start, naming the variable.
#[test]
fn an_unparsable_variable_stops_the_start() {
    for (var, value, want) in [
        (
            "OTEL_TRACES_SAMPLER",
            "sometimes",
            "OTEL_TRACES_SAMPLER=\"sometimes\"",
        ),
        (
            // No scheme and no port (`collector:4317` is a TLS endpoint).
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "collector",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        ("OTEL_SDK_DISABLED", "maybe", "OTEL_SDK_DISABLED=\"maybe\""),
    ] {
        let out = serve_output_with_env(
            "[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n",
            &["--http", "127.0.0.1:0"],
            &[(var, value), ("OTEL_TRACES_EXPORTER", "otlp")],
        );
        assert!(!out.status.success(), "{var}={value} started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{var}: {err}");
    }
}
