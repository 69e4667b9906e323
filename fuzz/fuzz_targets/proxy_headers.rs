//! The proxy's and the tower layer's reading of request and response
//! heads: hop-by-hop fields, `X-Forwarded-For`, `host[:port]`, key
//! extraction (headers, path, host, client IP), the usage a response
//! reports, and the config strings that name them.
//!
//! Input: the first line is a request target, the next lines
//! `name: value` header fields (the same map serves as the response's).
#![no_main]

use std::net::{IpAddr, SocketAddr};
use std::sync::LazyLock;

use http::uri::Authority;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use libfuzzer_sys::fuzz_target;
use tollgate_http::cidr::Cidr;
use tollgate_http::cost::{Reading, UsageSource};
use tollgate_http::extract::{ClientIpConfig, MissingKey, normalize_path};
use tollgate_http::key::KeyExtractor;
use tollgate_server::doors::proxy::fuzzing::{append_forwarded_for, is_host_port};
use tollgate_server::doors::proxy::strip_hop_by_hop;

static KEY: LazyLock<KeyExtractor> = LazyLock::new(|| {
    "header:x-api-key+client_ip+path+host+method"
        .parse()
        .expect("a key")
});
static CLIENTS: LazyLock<ClientIpConfig> = LazyLock::new(|| {
    ClientIpConfig::new()
        .with_trusted_proxies(["10.0.0.0/8".parse::<Cidr>().expect("a cidr")])
        .with_ipv6_prefix(64)
        .expect("a prefix")
});
static USAGE: LazyLock<UsageSource> =
    LazyLock::new(|| "response_header:x-usage-tokens".parse().expect("a source"));

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|&b| b == b'\n');
    let target = lines.next().unwrap_or_default();
    // The config strings these come from.
    if let Ok(text) = std::str::from_utf8(target) {
        let _ = text.parse::<KeyExtractor>();
        let _ = text.parse::<Cidr>();
        let _ = text.parse::<UsageSource>();
    }
    if let Ok(a) = Authority::try_from(target) {
        let _ = is_host_port(&a);
    }
    let normal = normalize_path(target);
    assert_eq!(
        normalize_path(&normal),
        normal,
        "normalizing twice changes the path"
    );

    let mut headers = HeaderMap::new();
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    let uri = Uri::try_from(target).unwrap_or_else(|_| Uri::from_static("/"));
    let peer: IpAddr = "10.1.2.3".parse().expect("an ip");
    let client = CLIENTS.client_ip(peer, &headers);
    for missing in [MissingKey::Empty, MissingKey::Skip, MissingKey::Reject] {
        if let Ok(key) = KEY.extract_from(&Method::GET, &uri, &headers, Some(client), missing) {
            assert!(key.len() <= tollgate::limits::MAX_KEY_LEN, "a key over the limit");
        }
    }
    let reading = USAGE.read(&headers);
    if let Reading::Found(n) = reading {
        let value = headers.get("x-usage-tokens").expect("a usage field");
        assert_eq!(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok()),
            Some(n)
        );
    }
    strip_hop_by_hop(&mut headers);
    assert!(!headers.contains_key("connection") && !headers.contains_key("transfer-encoding"));
    append_forwarded_for(&mut headers, SocketAddr::new(peer, 4000));
});
