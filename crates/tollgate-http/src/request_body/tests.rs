use super::*;

fn plan(pointers: &[&str], prompt: bool) -> Arc<BodyPlan> {
    Arc::new(BodyPlan::new(pointers.iter().copied(), prompt).expect("plan"))
}

/// Scans `body` in pieces of `piece` bytes, as the proxy does: pushing
/// while the scan wants more, finishing at the body's end.
fn scan(plan: &Arc<BodyPlan>, body: &[u8], limit: usize, piece: usize) -> (BodyFacts, usize) {
    let mut s = plan.start(limit, Some(body.len() as u64));
    let mut pushed = 0;
    for chunk in body.chunks(piece.max(1)) {
        if !s.wants_more() {
            break;
        }
        s.push(chunk);
        pushed += chunk.len();
    }
    if pushed == body.len() {
        s.finish();
    }
    (s.facts(), pushed)
}

#[test]
fn fields_are_found_in_any_split() {
    let p = plan(
        &["/model", "/user", "/metadata/tenant", "/n", "/stream"],
        false,
    );
    let body = br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"user":"u+1","metadata":{"tenant":"acme"},"n":2,"stream":true}"#;
    for piece in [1, 2, 7, body.len()] {
        let (f, _) = scan(&p, body, 1 << 20, piece);
        assert_eq!(f.key_text("/model").as_deref(), Some("gpt-4o"), "{piece}");
        assert_eq!(f.key_text("/user").as_deref(), Some("u+1"));
        assert_eq!(f.key_text("/metadata/tenant").as_deref(), Some("acme"));
        assert_eq!(f.key_text("/n").as_deref(), Some("2"));
        assert_eq!(f.key_text("/stream").as_deref(), Some("true"));
        assert_eq!(f.key_text("/absent"), None, "not looked for");
        assert_eq!(f.length(), Some(body.len() as u64));
    }
}

#[test]
fn a_value_given_twice_or_not_a_scalar_is_missing() {
    let p = plan(&["/model", "/messages", "/user"], false);
    let (f, _) = scan(
        &p,
        br#"{"model":"cheap","messages":[],"user":null,"model":"dear"}"#,
        1 << 20,
        3,
    );
    assert_eq!(f.found("/model"), &Found::Repeated);
    assert_eq!(f.key_text("/model"), None);
    assert_eq!(f.key_text("/messages"), None, "an array");
    assert_eq!(f.key_text("/user"), None, "null");
}

#[test]
fn a_body_that_is_not_json_names_nothing() {
    let p = plan(&["/model"], false);
    for body in [
        &br#"{"model":"a","#[..], // ended before its document did
        br#"{"model":"a"]"#,      // malformed
        br#"model=a&user=b"#,     // a form
        b"",                      // no body
    ] {
        let (f, _) = scan(&p, body, 1 << 20, 4);
        assert_eq!(
            f.key_text("/model"),
            None,
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn only_the_prefix_is_read() {
    let p = plan(&["/model", "/user"], false);
    let mut body = br#"{"user":"u","messages":[{"content":""#.to_vec();
    body.extend(std::iter::repeat_n(b'x', 10_000));
    body.extend(br#""}],"model":"late"}"#);
    let (f, pushed) = scan(&p, &body, 4096, 1000);
    assert_eq!(
        f.key_text("/user").as_deref(),
        Some("u"),
        "within the limit"
    );
    assert_eq!(f.key_text("/model"), None, "past the limit");
    assert_eq!(
        pushed, 5000,
        "reading stopped at the piece that reached the limit"
    );
    assert_eq!(f.scanned(), 4096);
    assert_eq!(f.length(), Some(body.len() as u64), "the Content-Length");
    // Within a larger limit, found.
    let (f, _) = scan(&p, &body, 1 << 20, 1000);
    assert_eq!(f.key_text("/model").as_deref(), Some("late"));
}

#[test]
fn reading_stops_once_the_document_ends_unless_sizing_the_prompt() {
    let body = br#"{"model":"m"}                                        "#;
    let (_, pushed) = scan(&plan(&["/model"], false), body, 1 << 20, 13);
    assert_eq!(pushed, 13, "the document ended with the first piece");
    let (_, pushed) = scan(&plan(&["/model"], true), body, 1 << 20, 13);
    assert_eq!(pushed, body.len(), "sizing the prompt reads it all");
}

#[test]
fn text_counts_characters_not_bytes() {
    let mut t = TextCount::default();
    t.push("ab\\\"é漢\\u00e9\\\\u".as_bytes());
    // a b \ " (4) + \ \ u (3) ASCII; é 漢 \u00e9 (3) others.
    assert_eq!((t.ascii, t.other), (7, 3));
    // Split inside a UTF-8 sequence and inside an escape.
    let mut split = TextCount::default();
    let bytes = "ab\\\"é漢\\u00e9\\\\u".as_bytes();
    for b in bytes {
        split.push(std::slice::from_ref(b));
    }
    assert_eq!((split.ascii, split.other), (7, 3));
}

/// A body whose last read crosses the limit and also ends it: the prefix
/// is scanned as a prefix, as when the body goes on (before, the end made
/// the scanner judge the cut prefix a document cut short, and every field
/// in it was missing: a per-user limit skipped for a body one byte over).
#[test]
fn a_body_ending_in_the_read_that_crosses_the_limit_keeps_its_fields() {
    let p = plan(&["/user", "/max_tokens"], false);
    let body = format!(
        r#"{{"user":"alice","max_tokens":900,"prompt":"{}"}}"#,
        "x".repeat(100)
    );
    let limit = 64;
    for piece in [1, 7, limit, limit + 1, body.len()] {
        let mut s = p.start(limit, Some(body.len() as u64));
        for chunk in body.as_bytes().chunks(piece) {
            s.push(chunk);
        }
        s.finish();
        let f = s.facts();
        assert_eq!(f.key_text("/user").as_deref(), Some("alice"), "{piece}");
        assert_eq!(f.key_text("/max_tokens").as_deref(), Some("900"), "{piece}");
        assert_eq!(f.scanned(), limit as u64);
        assert_eq!(f.length(), Some(body.len() as u64));
    }
    // Within the limit, a document cut short still names nothing.
    let cut = br#"{"user":"alice","max_tokens":900"#;
    let mut s = p.start(limit, None);
    s.push(cut);
    s.finish();
    assert_eq!(s.facts().key_text("/user"), None);
}

/// A leading UTF-8 byte order mark is skipped, in any split, as Python's
/// `json.loads` of bytes skips it; a part of one is the body's bytes.
#[test]
fn a_leading_byte_order_mark_is_read_past() {
    let p = plan(&["/user"], false);
    let mut body = b"\xEF\xBB\xBF".to_vec();
    body.extend_from_slice(br#"{"user":"alice"}"#);
    for piece in [1, 2, 3, 4, body.len()] {
        let (f, _) = scan(&p, &body, 1 << 20, piece);
        assert_eq!(f.key_text("/user").as_deref(), Some("alice"), "{piece}");
    }
    for broken in [
        &b"\xEF\xBB{\"user\":\"a\"}"[..],
        b"\xEF",
        b"\xEF\xBB\xBF\xEF\xBB\xBF{}",
    ] {
        let (f, _) = scan(&p, broken, 1 << 20, 1);
        assert_eq!(f.key_text("/user"), None, "{broken:?}");
    }
}
