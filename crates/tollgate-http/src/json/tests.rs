use proptest::prelude::*;
use serde_json::Value;

use super::*;

fn ptrs(list: &[&str]) -> Vec<Pointer> {
    list.iter().map(|p| p.parse().expect("pointer")).collect()
}

/// Scans `doc` pushed one byte at a time and whole; both must agree.
fn scan(doc: &str, pointers: &[&str]) -> Scanner {
    let mut whole = Scanner::new(ptrs(pointers));
    whole.push(doc.as_bytes());
    whole.finish();
    let mut bytewise = Scanner::new(ptrs(pointers));
    for b in doc.as_bytes() {
        bytewise.push(std::slice::from_ref(b));
    }
    bytewise.finish();
    for (i, p) in pointers.iter().enumerate() {
        assert_eq!(whole.found(i), bytewise.found(i), "{doc} at {p}");
    }
    assert_eq!(whole.complete(), bytewise.complete(), "{doc}");
    assert_eq!(whole.malformed(), bytewise.malformed(), "{doc}");
    whole
}

fn num(n: &str) -> Found {
    Found::One(Scalar::Number(n.to_owned()))
}

fn text(s: &str) -> Found {
    Found::One(Scalar::String(s.to_owned()))
}

#[test]
fn pointers_parse_as_rfc_6901_says() {
    let p: Pointer = "/a~1b/m~0n/0".parse().expect("pointer");
    assert_eq!(p.tokens(), ["a/b", "m~n", "0"]);
    assert_eq!(p.to_string(), "/a~1b/m~0n/0");
    assert_eq!("/".parse::<Pointer>().expect("pointer").tokens(), [""]);
    for bad in ["", "usage", "/a~2", "/a~"] {
        let err = bad.parse::<Pointer>().expect_err(bad);
        assert!(err.contains("JSON pointer"), "{err}");
    }
}

#[test]
fn values_are_found_at_their_pointers() {
    let doc = r#" {"id":"x","usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21},
        "choices":[{"index":0,"message":{"content":"hi \"there\""}}], "ok": true, "n": null,
        "f": -1.5e3, "a/b": 7, "m~n": 8, "": 9} "#;
    let s = scan(
        doc,
        &[
            "/usage/total_tokens",
            "/usage/prompt_tokens",
            "/choices/0/message/content",
            "/choices/1/index",
            "/ok",
            "/n",
            "/f",
            "/a~1b",
            "/m~0n",
            "/",
            "/usage",
            "/missing/deeper",
        ],
    );
    assert!(s.complete());
    assert_eq!(s.found(0), &num("21"));
    assert_eq!(s.found(0).as_u64(), Some(21));
    assert_eq!(s.found(1), &num("9"));
    assert_eq!(s.found(2), &text("hi \"there\""));
    assert_eq!(s.found(3), &Found::Absent);
    assert_eq!(s.found(4), &Found::One(Scalar::Bool(true)));
    assert_eq!(s.found(5), &Found::One(Scalar::Null));
    assert_eq!(s.found(6), &num("-1.5e3"));
    assert_eq!(s.found(6).as_u64(), None);
    assert_eq!(s.found(7), &num("7"));
    assert_eq!(s.found(8), &num("8"));
    assert_eq!(s.found(9), &num("9"));
    assert_eq!(s.found(10), &Found::Unreadable, "an object is no scalar");
    assert_eq!(s.found(11), &Found::Absent);
}

#[test]
fn escapes_are_decoded_in_keys_and_values() {
    let s = scan(
        r#"{"\u0075sage":{"t\u006Fk":"\ud83d\ude00 \u00e9\n\/"},"x":"\ud800 lone"}"#,
        &["/usage/tok", "/x"],
    );
    assert_eq!(s.found(0), &text("😀 é\n/"));
    assert_eq!(s.found(1), &text("\u{fffd} lone"));
}

#[test]
fn a_key_given_twice_is_repeated() {
    let s = scan(
        r#"{"usage":{"total_tokens":5},"usage":{"total_tokens":6}}"#,
        &["/usage/total_tokens"],
    );
    assert_eq!(s.found(0), &Found::Repeated);
    assert!(s.complete());
}

#[test]
fn over_long_values_are_unreadable_and_memory_stays_bounded() {
    let long = "y".repeat(MAX_TEXT + 1);
    let doc = format!(
        r#"{{"model":"{long}","{long}":1,"n":{}}}"#,
        "1".repeat(MAX_TEXT + 1)
    );
    let s = scan(&doc, &["/model", &format!("/{}", &long[1..]), "/n"]);
    assert!(s.complete());
    assert_eq!(s.found(0), &Found::Unreadable);
    assert_eq!(
        s.found(1),
        &Found::Absent,
        "an over-long key matches nothing"
    );
    assert_eq!(s.found(2), &Found::Unreadable);

    // Ten megabytes of content: what the scanner holds does not grow.
    let mut scanner = Scanner::new(ptrs(&["/usage/total_tokens"]));
    scanner.push(br#"{"choices":[{"text":""#);
    let chunk = vec![b'z'; 64 * 1024];
    for _ in 0..160 {
        scanner.push(&chunk);
        assert!(scanner.text.as_ref().is_none_or(|t| t.len() <= MAX_TEXT));
        assert!(scanner.stack.len() <= 3);
    }
    scanner.push(br#""}],"usage":{"total_tokens":77}}"#);
    scanner.finish();
    assert_eq!(scanner.found(0), &num("77"));
}

#[test]
fn malformed_documents_are_said_to_be_and_keep_what_came_before() {
    for bad in [
        "{",
        "}",
        "[1,]",
        "{\"a\" 1}",
        "{\"a\":1,}",
        "01",
        "-",
        "1.",
        "1e",
        "tru",
        "nul",
        "{\"a\":1} x",
        "\"\u{1}\"",
        "\"\\x\"",
        "\"\\u12g4\"",
        "[}",
        "{]",
        "{1:2}",
        "[1 2]",
        "{\"a\":1 \"b\":2}",
    ] {
        let s = scan(bad, &["/a"]);
        assert!(!s.complete(), "{bad:?} is not a whole document");
    }
    let s = scan(r#"{"a":3,"b":}"#, &["/a"]);
    assert!(s.malformed());
    assert_eq!(s.found(0), &num("3"));
}

#[test]
fn nesting_past_the_limit_is_malformed() {
    let deep = "[".repeat(MAX_DEPTH + 1);
    let s = scan(&deep, &["/0"]);
    assert!(s.malformed());
    let fine = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    assert!(scan(&fine, &["/0"]).complete());
}

#[test]
fn a_bare_number_ends_with_the_input() {
    let mut s = Scanner::new(ptrs(&["/a"]));
    s.push(b"12");
    assert!(!s.complete(), "more digits may come");
    s.finish();
    assert!(s.complete());
}

#[test]
fn settled_once_no_pointer_can_match_again() {
    let mut s = Scanner::new(ptrs(&["/model"]));
    s.push(br#"{"model":"m","messages":[{"content":"#);
    assert!(!s.settled(), "a second model key may still come");
    s.push(br#""x"}]}"#);
    assert!(s.settled());
    let mut s = Scanner::new(ptrs(&["/a/b"]));
    s.push(br#"[1,"#);
    assert!(s.settled(), "an array has no key a");
}

#[test]
fn restart_reads_the_next_document() {
    let mut s = Scanner::new(ptrs(&["/usage/output_tokens"]));
    s.push(br#"{"usage":{"output_tokens":1}}"#);
    s.finish();
    assert_eq!(s.found(0), &num("1"));
    s.restart();
    assert_eq!(s.found(0), &Found::Absent);
    s.push(br#"{"type":"ping"}"#);
    s.finish();
    assert!(s.complete());
    assert_eq!(s.found(0), &Found::Absent);
}

/// Every pointer to every value of `v`, and what serde_json says is there.
fn paths(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let token = k.replace('~', "~0").replace('/', "~1");
                let p = format!("{at}/{token}");
                out.push(p.clone());
                paths(child, p, out);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                paths(child, p, out);
            }
        }
        _ => {}
    }
}

fn expected(v: &Value, pointer: &str) -> Found {
    match v.pointer(pointer) {
        None => Found::Absent,
        Some(Value::Object(_) | Value::Array(_)) => Found::Unreadable,
        Some(Value::Null) => Found::One(Scalar::Null),
        Some(Value::Bool(b)) => Found::One(Scalar::Bool(*b)),
        Some(Value::Number(n)) => num(&n.to_string()),
        Some(Value::String(s)) => text(s),
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-z~/\"\\\\é😀\u{1}]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z~/]{0,4}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Whatever the document and however it is cut into pieces, the
    /// scanner finds at each pointer what serde_json finds there.
    #[test]
    fn agrees_with_serde_json(
        v in json_value(),
        pretty in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        extra in "(/[a-z0-9]{0,3}){1,3}",
    ) {
        let doc = if pretty { serde_json::to_string_pretty(&v) } else { serde_json::to_string(&v) }
            .expect("serialize");
        let mut list = Vec::new();
        paths(&v, String::new(), &mut list);
        list.truncate(MAX_POINTERS - 1);
        list.push(extra);
        let pointers: Vec<Pointer> = list.iter().map(|p| p.parse().expect("pointer")).collect();
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(doc.len() + 1)).collect();
        at.push(0);
        at.push(doc.len());
        at.sort_unstable();
        let mut s = Scanner::new(pointers);
        for w in at.windows(2) {
            s.push(&doc.as_bytes()[w[0]..w[1]]);
        }
        s.finish();
        prop_assert!(s.complete(), "{doc}");
        for (i, p) in list.iter().enumerate() {
            prop_assert_eq!(s.found(i), &expected(&v, p), "{} in {}", p, doc);
        }
    }

    /// A document cut anywhere is whole exactly when serde_json reads the
    /// part as a document (a bare number cut short is still a number), and
    /// nothing panics.
    #[test]
    fn a_truncated_document_is_complete_only_if_it_is_json(
        v in json_value(),
        cut in any::<prop::sample::Index>(),
    ) {
        let doc = serde_json::to_string(&v).expect("serialize");
        let part = &doc.as_bytes()[..cut.index(doc.len() + 1)];
        let mut s = Scanner::new(ptrs(&["/a"]));
        s.push(part);
        s.finish();
        let whole = serde_json::from_slice::<Value>(part).is_ok();
        prop_assert_eq!(s.complete(), whole, "{}", String::from_utf8_lossy(part));
    }
}
