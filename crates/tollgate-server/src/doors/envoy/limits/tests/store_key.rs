//! The counter a descriptor names: readable, injective, bytes that are
//! not UTF-8 kept apart, long keys digested.

use std::collections::HashSet;

use super::*;

#[test]
fn a_long_store_key_is_its_digest_and_never_a_short_one() {
    let long = "v".repeat(tollgate::limits::MAX_KEY_LEN);
    let other = format!("{long}w");
    let a = store_key(&[("user", long.as_str())]);
    let b = store_key(&[("user", other.as_str())]);
    assert!(a.starts_with(";sha256=") && a.len() == 8 + 64, "{a}");
    assert_ne!(a, b);
    assert_eq!(a, store_key(&[("user", long.as_str())]));
    // Escaping can push a key over the limit: 3,000 `;` escape to 6,000.
    let semis = ";".repeat(3000);
    assert!(store_key(&[("user", semis.as_str())]).starts_with(";sha256="));
    // No short key starts with a bare `;`, an empty key included.
    for entries in [&[("", "")][..], &[(";sha256", "x")], &[("", ";sha256=")]] {
        assert!(!store_key(entries).starts_with(';'), "{entries:?}");
    }
    // Just at the limit: kept as it is.
    let fits = "v".repeat(tollgate::limits::MAX_KEY_LEN - "user=".len());
    assert_eq!(
        store_key(&[("user", fits.as_str())]).len(),
        tollgate::limits::MAX_KEY_LEN
    );
}

#[test]
fn a_byte_order_mark_is_skipped() {
    let yaml = "\u{feff}domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let limits = EnvoyLimits::parse(&[("bom.yaml".into(), yaml.into())], &[]).expect("parses");
    assert_eq!(limits.domains(), vec!["d"]);
}

#[test]
fn only_regular_files_of_bounded_size_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = EnvoyLimits::load(&[dir.path().to_path_buf()], &[]).expect_err("a directory");
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let big = dir.path().join("big.yaml");
    let f = std::fs::File::create(&big).expect("create");
    f.set_len(crate::config::file::MAX_FILE_BYTES + 1)
        .expect("grow");
    let err = EnvoyLimits::load(&[big], &[]).expect_err("too big");
    assert!(err.to_string().contains("larger than 16 MiB"), "{err}");
}

#[test]
fn store_key_is_readable_and_injective() {
    assert_eq!(store_key::<&str, &str>(&[]), "");
    assert_eq!(store_key(&[("database", "users")]), "database=users");
    assert_eq!(store_key(&[("a", "b"), ("c", "d")]), "a=b;c=d");
    let cases: &[&[(&str, &str)]] = &[
        &[],
        &[("", "")],
        &[("", ""), ("", "")],
        &[("a", "b;c")],
        &[("a", "b"), ("c", "")],
        &[("a", "b;c=")],
        &[("a", "b"), ("c=", "")],
        &[("a=b", "c")],
        &[("a", "b=c")],
        &[("a", "b\\"), ("c", "d")],
        &[("a", "b\\;c"), ("", "d")],
        &[("a", "b\\;c=d")],
        &[("a\\", "=b")],
        &[("a", "\\=b")],
    ];
    let keys: HashSet<String> = cases.iter().map(|c| store_key(c)).collect();
    assert_eq!(keys.len(), cases.len(), "{keys:?}");
}

/// Decodes a store key (the test's proof of injectivity).
fn decode(key: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut entries = Vec::new();
    if key.is_empty() {
        return entries;
    }
    let (mut k, mut v, mut in_value) = (Vec::new(), Vec::new(), false);
    let mut chars = key.chars();
    while let Some(c) = chars.next() {
        let target = if in_value { &mut v } else { &mut k };
        match c {
            '\\' => match chars.next() {
                Some('x') => {
                    let hex: String = chars.by_ref().take(2).collect();
                    target.push(u8::from_str_radix(&hex, 16).expect("hex"));
                }
                Some(c @ ('\\' | ';' | '=')) => target.push(c as u8),
                other => panic!("bad escape {other:?} in {key}"),
            },
            '=' => in_value = true,
            ';' => {
                entries.push((std::mem::take(&mut k), std::mem::take(&mut v)));
                in_value = false;
            }
            _ => target.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    entries.push((k, v));
    entries
}

#[test]
fn bytes_that_are_not_utf8_are_escaped_apart_from_any_string() {
    let key = |v: &[u8]| store_key(&[(&b"user"[..], v)]);
    assert_eq!(key(b"\xff\xfe"), r"user=\xff\xfe");
    assert_eq!(key(b"a\xc3"), r"user=a\xc3");
    let values: [&[u8]; 6] = [
        b"\xff\xfe",
        b"\xff\xfd",
        "\u{fffd}\u{fffd}".as_bytes(),
        "\u{ff}\u{fe}".as_bytes(),
        br"\xff\xfe",
        b"\xff\xfe\xff",
    ];
    let keys: HashSet<String> = values.iter().map(|v| key(v)).collect();
    assert_eq!(keys.len(), values.len(), "{keys:?}");
    // Long ones are hashed like any other long key.
    let long = [b'\xff'; tollgate::limits::MAX_KEY_LEN];
    assert!(key(&long).starts_with(";sha256="));
    // Matching compares bytes: a wildcard prefix or a key-only node
    // matches such a value, a value never does.
    let limits = ok(
        "domain: d\ndescriptors:\n  - key: a\n    value: x*\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
    );
    let rpu = |k: &[u8], v: &[u8]| limits.find("d", &[(k, v)]).map(|l| l.requests_per_unit);
    assert_eq!(rpu(b"a", b"x\xff"), Some(1));
    assert_eq!(rpu(b"a", b"\xff"), None);
    assert_eq!(rpu(b"b", b"\xff"), Some(2));
    assert_eq!(rpu(b"b\xff", b"v"), None);
}

proptest::proptest! {
    #[test]
    fn store_key_decodes_back(entries in proptest::collection::vec(("[a=;\\\\é]{0,4}", "[a=;\\\\é]{0,4}"), 0..4)) {
        let borrowed: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let bytes: Vec<(Vec<u8>, Vec<u8>)> = entries.iter().map(|(k, v)| (k.clone().into_bytes(), v.clone().into_bytes())).collect();
        proptest::prop_assert_eq!(decode(&store_key(&borrowed)), bytes);
    }

    #[test]
    fn store_key_of_any_bytes_decodes_back(entries in proptest::collection::vec((
        proptest::collection::vec(proptest::sample::select(vec![b'a', b'x', b'=', b';', b'\\', 0xc3, 0xa9, 0xff]), 0..5),
        proptest::collection::vec(proptest::sample::select(vec![b'a', b'x', b'=', b';', b'\\', 0xc3, 0xa9, 0xff]), 0..5),
    ), 0..4)) {
        proptest::prop_assert_eq!(decode(&store_key(&entries)), entries);
    }

    #[test]
    fn parse_never_panics(text in "[a-z:\\- \\n\\[\\]{}&*'\"#|>!%@`0-9,.?]{0,200}") {
        let _ = parse(&text);
    }

    #[test]
    fn find_never_panics(entries in proptest::collection::vec(("[a-z_]{0,6}", "[a-z_*/0-9]{0,6}"), 0..5)) {
        let limits = ok(MONGO);
        let borrowed: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let _ = limits.find("mongo_cps", &borrowed);
    }
}
