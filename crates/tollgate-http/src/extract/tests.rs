use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

#[test]
fn spellings_of_one_path_are_one_path() {
    for (path, want) in [
        ("/login", "/login"),
        ("/%6cogin", "/login"),
        ("/%6Cogin", "/login"),
        ("//login", "/login"),
        ("/./login", "/login"),
        ("/x/../login", "/login"),
        ("/../../login", "/login"),
        ("/a/%2e%2e/login", "/login"),
        ("/a/b/..", "/a/"),
        ("/a/./", "/a/"),
        ("/", "/"),
        ("/..", "/"),
        ("/a%2fb", "/a%2Fb"),
        ("/a%2Fb", "/a%2Fb"),
        ("/%zz", "/%zz"),
        ("/100%", "/100%"),
        ("/login/", "/login/"),
        ("/login;", "/login;"),
        ("/a.b/c..d", "/a.b/c..d"),
    ] {
        assert_eq!(
            String::from_utf8_lossy(&normalize_path(path.as_bytes())),
            want,
            "{path}"
        );
    }
    assert!(matches!(
        normalize_path(b"/api/v1/users"),
        std::borrow::Cow::Borrowed(_)
    ));
}

/// Normalizing a normal form changes nothing: a decoded hex digit never
/// completes an escape with a `%` that started none (the fuzzer's
/// `@...al:%3%34` was `@...al:%34` once and `@...al:4` twice).
#[test]
fn a_normal_path_is_its_own_normal_form() {
    for (path, want) in [
        ("@...al:%3%34", "@...al:%3%34"),
        ("/%%341", "/%%341"),
        ("/%3%34%35", "/%3%345"),
        ("/%%34%35", "/%%345"),
        ("/%2F%34", "/%2F4"),
        ("/%zz%34", "/%zz4"),
    ] {
        let once = normalize_path(path.as_bytes()).into_owned();
        assert_eq!(String::from_utf8_lossy(&once), want, "{path}");
        assert_eq!(normalize_path(&once), once, "{path}: twice");
    }
}

fn xff(lines: &[&str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for line in lines {
        h.append(X_FORWARDED_FOR, line.parse().expect("header value"));
    }
    h
}

fn trusting(blocks: &[&str]) -> ClientIpConfig {
    ClientIpConfig::new().with_trusted_proxies(blocks.iter().map(|b| b.parse().expect("block")))
}

#[test]
fn untrusted_peer_is_the_client_whatever_it_forwards() {
    let c = trusting(&["10.0.0.0/8"]);
    let h = xff(&["1.1.1.1, 2.2.2.2"]);
    assert_eq!(c.resolve(ip("203.0.113.1"), &h), ip("203.0.113.1"));
    assert_eq!(
        ClientIpConfig::new().resolve(ip("10.0.0.1"), &h),
        ip("10.0.0.1")
    );
}

#[test]
fn walks_from_the_right_skipping_trusted_hops() {
    let c = trusting(&["10.0.0.0/8", "fd00::/8"]);
    // client, then two trusted hops; peer is the last trusted hop
    let h = xff(&["198.51.100.1, 203.0.113.5", "10.1.1.1", "fd00::2"]);
    assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("203.0.113.5"));
    // every entry trusted: the leftmost
    let h = xff(&["10.9.9.9, 10.8.8.8"]);
    assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("10.9.9.9"));
    // no header: the peer
    assert_eq!(c.resolve(ip("10.0.0.1"), &HeaderMap::new()), ip("10.0.0.1"));
    // empty elements are skipped
    let h = xff(&["198.51.100.1,, ", ""]);
    assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("198.51.100.1"));
}

#[test]
fn a_malformed_entry_stops_the_walk_at_the_last_good_address() {
    let c = trusting(&["10.0.0.0/8"]);
    let h = xff(&["198.51.100.1, unknown, 10.2.2.2"]);
    assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("10.2.2.2"));
    let h = xff(&["198.51.100.1, garbage"]);
    assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    let h = xff(&["fe80::1%eth0"]);
    assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    let mut h = HeaderMap::new();
    h.append(
        X_FORWARDED_FOR,
        http::HeaderValue::from_bytes(b"198.51.100.1, \xff").expect("obs-text"),
    );
    assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("10.0.0.1"));
}

#[test]
fn entries_with_ports_and_brackets() {
    let c = trusting(&["10.0.0.0/8"]);
    for (entry, want) in [
        ("198.51.100.1:4711", "198.51.100.1"),
        ("[2001:db8::1]:4711", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        (" 2001:db8::1 ", "2001:db8::1"),
        ("::ffff:198.51.100.1", "198.51.100.1"),
    ] {
        assert_eq!(
            c.resolve(ip("10.0.0.1"), &xff(&[entry])),
            ip(want),
            "{entry}"
        );
    }
}

#[test]
fn mapped_peers_are_ipv4_and_match_ipv4_blocks() {
    let c = trusting(&["10.0.0.0/8"])
        .with_ipv6_prefix(64)
        .expect("valid");
    let h = xff(&["198.51.100.1"]);
    assert_eq!(c.resolve(ip("::ffff:10.0.0.1"), &h), ip("198.51.100.1"));
    // never grouped into one ::ffff:0:0/64 bucket
    let a = c.client_ip(ip("::ffff:192.0.2.1"), &HeaderMap::new());
    assert_eq!(a.to_string(), "192.0.2.1");
}

#[test]
fn ipv6_grouping() {
    let c = ClientIpConfig::new().with_ipv6_prefix(64).expect("valid");
    let none = HeaderMap::new();
    let a = c.client_ip(ip("2001:db8:1:2::1"), &none);
    let b = c.client_ip(ip("2001:db8:1:2:ffff::9"), &none);
    let other = c.client_ip(ip("2001:db8:1:3::1"), &none);
    assert_eq!(a, b);
    assert_ne!(a, other);
    assert_eq!(a.to_string(), "2001:db8:1:2::/64");
    let full = ClientIpConfig::new().client_ip(ip("2001:db8::1"), &none);
    assert_eq!(full.to_string(), "2001:db8::1");
    assert_eq!(
        ClientIpConfig::new()
            .with_ipv6_prefix(0)
            .expect("valid")
            .client_ip(ip("2001:db8::1"), &none)
            .to_string(),
        "::/0"
    );
    assert!(ClientIpConfig::new().with_ipv6_prefix(129).is_err());
}

fn req(build: http::request::Builder) -> Request<()> {
    build.body(()).expect("request")
}

#[test]
fn every_part_and_the_joining() {
    let k: KeyExtractor = "client_ip+header:x-api-key+path+method+host"
        .parse()
        .expect("valid");
    let r = req(Request::post("/a%2F+b?q=1")
        .header("x-api-key", "k1")
        .header("x-api-key", "k2")
        .header("host", "API.Example.com.:8443"));
    let ip = ClientIp::new(ip("192.0.2.1"), 128);
    let key = k.extract(&r, Some(ip), MissingKey::Empty).expect("key");
    assert_eq!(
        String::from_utf8(key).expect("utf8"),
        "192.0.2.1+k1, k2+/a%252F%2Bb+POST+api.example.com"
    );
}

#[test]
fn escaping_makes_the_joining_unambiguous() {
    let k: KeyExtractor = "header:a+header:b".parse().expect("valid");
    let one = req(Request::get("/").header("a", "x+y").header("b", ""));
    let two = req(Request::get("/").header("a", "x").header("b", "y"));
    let k1 = k.extract(&one, None, MissingKey::Empty).expect("key");
    let k2 = k.extract(&two, None, MissingKey::Empty).expect("key");
    assert_ne!(k1, k2);
    assert_eq!(k1, b"x%2By+");
    assert_eq!(k2, b"x+y");
}

#[test]
fn a_long_key_is_its_digest_and_no_short_key_names_it() {
    let k: KeyExtractor = "header:x-api-key".parse().expect("valid");
    let key_of = |value: &str| {
        let r = req(Request::get("/").header("x-api-key", value));
        k.extract(&r, None, MissingKey::Empty).expect("key")
    };
    let fits = "k".repeat(tollgate::limits::MAX_KEY_LEN);
    assert_eq!(key_of(&fits), fits.as_bytes());
    let long = "k".repeat(tollgate::limits::MAX_KEY_LEN + 1);
    let digest = key_of(&long);
    assert_eq!(digest.len(), 8 + 64);
    assert!(digest.starts_with(b"%sha256="), "{digest:?}");
    assert_eq!(key_of(&long), digest, "the same value, the same counter");
    let other = format!("{}j", "k".repeat(tollgate::limits::MAX_KEY_LEN));
    assert_ne!(key_of(&other), digest, "each long value its own counter");
    // A short value spelling the digest is escaped: another counter.
    let spelled = String::from_utf8(digest.clone()).expect("ascii");
    assert_ne!(key_of(&spelled), digest);
    // Escaping that makes a key long is counted in the length.
    let grows = "%".repeat(tollgate::limits::MAX_KEY_LEN / 3 + 1);
    assert!(key_of(&grows).starts_with(b"%sha256="));
}

#[test]
fn host_from_uri_wins_and_v6_hosts_keep_brackets() {
    let k: KeyExtractor = "host".parse().expect("valid");
    let r = req(Request::get("http://Origin.example:80/p").header("host", "other"));
    assert_eq!(
        k.extract(&r, None, MissingKey::Empty).expect("key"),
        b"origin.example"
    );
    for dotted in ["EXAMPLE.com.", "example.com..:8080"] {
        let r = req(Request::get("/").header("host", dotted));
        assert_eq!(
            k.extract(&r, None, MissingKey::Empty).expect("key"),
            b"example.com",
            "{dotted}"
        );
    }
    let r = req(Request::get("/").header("host", "[2001:DB8::1]:8080"));
    assert_eq!(
        k.extract(&r, None, MissingKey::Empty).expect("key"),
        b"[2001:db8::1]"
    );
}

#[test]
fn missing_parts_follow_the_policy() {
    let k: KeyExtractor = "header:x-api-key+host".parse().expect("valid");
    let r = req(Request::get("/"));
    assert_eq!(k.extract(&r, None, MissingKey::Empty).expect("key"), b"+");
    assert_eq!(
        k.extract(&r, None, MissingKey::Reject),
        Err(KeyError::Missing(KeyPart::Header("x-api-key".into())))
    );
    let r = req(Request::get("/").header("x-api-key", ""));
    assert_eq!(
        k.extract(&r, None, MissingKey::Reject),
        Err(KeyError::Missing(KeyPart::Header("x-api-key".into())))
    );
    // Two empty lines are no key either (joined they would be ", ").
    let r = req(Request::get("/")
        .header("x-api-key", "")
        .header("x-api-key", ""));
    assert_eq!(
        k.extract(&r, None, MissingKey::Reject),
        Err(KeyError::Missing(KeyPart::Header("x-api-key".into())))
    );
    let r = req(Request::get("/").header("x-api-key", "k"));
    assert_eq!(
        k.extract(&r, None, MissingKey::Reject),
        Err(KeyError::Missing(KeyPart::Host))
    );
    let ipk: KeyExtractor = "client_ip".parse().expect("valid");
    assert!(ipk.uses_client_ip());
    assert!(!k.uses_client_ip());
    assert_eq!(
        ipk.extract(&r, None, MissingKey::Empty),
        Err(KeyError::NoClientIp)
    );
}
