use std::borrow::Cow;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::Map;
use tollgate::MultiDecision;
use tollgate::limits::MAX_KEY_LEN;

use super::json_read::{
    CheckRequest, MAX_CHECKS, Pair, parse_check, parse_check_json, parse_check_plain,
};
use crate::doors::json::is_json;
use value_reader::value_reader;

mod value_reader;
use super::json_write::{Decided, answer_body};
use super::*;

fn pair<'a>(rule: &'a str, key: &'a str, cost: u64) -> Pair<'a> {
    Pair {
        rule: rule.into(),
        key: key.into(),
        cost,
    }
}

#[test]
fn parses_single_and_multi() {
    assert_eq!(
        parse_check(br#"{"rule":"a","key":"k"}"#),
        Ok(CheckRequest {
            pairs: vec![pair("a", "k", 1)],
            multi: false
        })
    );
    assert_eq!(
        parse_check(br#"{"checks":[{"rule":"a","key":"k"},{"rule":"b","key":"j"}],"cost":0}"#),
        Ok(CheckRequest {
            pairs: vec![pair("a", "k", 0), pair("b", "j", 0)],
            multi: true
        })
    );
}

#[test]
fn names_every_problem() {
    for (body, want) in [
        (&b"{"[..], "malformed JSON"),
        (b"[1]", "expected a JSON object"),
        (br#"{"rule":"a"}"#, "key: missing"),
        (br#"{"rule":"a","key":""}"#, "key: must not be empty"),
        (
            br#"{"rule":"a","key":7}"#,
            "key: expected a string, found a number",
        ),
        (br#"{"key":"k"}"#, "rule: missing"),
        (
            br#"{"rule":"a","key":"k","cost":-1}"#,
            "cost: must not be negative",
        ),
        (
            br#"{"rule":"a","key":"k","cost":1.5}"#,
            "cost: expected a whole number",
        ),
        (
            br#"{"rule":"a","key":"k","cost":-0}"#,
            "cost: must not be negative or signed, got -0",
        ),
        (
            br#"{"rule":"a","key":"k","cost":1e2}"#,
            "without a fraction or exponent, read as 100",
        ),
        (
            br#"{"rule":"a","key":"k","cost":"1"}"#,
            "cost: expected a non-negative integer, found a string",
        ),
        (
            br#"{"rule":"a","key":"k","cost":18446744073709551616}"#,
            "cost: too large; at most 18446744073709551615",
        ),
        (
            br#"{"rule":"a","key":"k","colour":1}"#,
            "colour: unknown field",
        ),
        (br#"{"checks":[]}"#, "checks: must not be empty"),
        (br#"{"checks":{}}"#, "checks: expected an array"),
        (br#"{"checks":[{"rule":"a"}]}"#, "checks[0].key: missing"),
        (
            br#"{"checks":[{"rule":"a","key":"k","cost":-2}]}"#,
            "checks[0].cost: must not be negative, got -2",
        ),
        (
            br#"{"checks":[{"rule":"a","key":"k","cost":1.5}]}"#,
            "checks[0].cost: expected a whole number",
        ),
        (
            br#"{"checks":[{"rule":"a","key":"k","colour":2}]}"#,
            "checks[0].colour: unknown field; expected rule, key, cost",
        ),
        (
            br#"{"checks":[{"rule":"a","key":"k","checks":[]}]}"#,
            "checks[0].checks: unknown field",
        ),
        (br#"{"checks":[1]}"#, "checks[0]: expected an object"),
        (br#"{"rule":"a","key":"k","checks":[]}"#, "not both"),
        // A repeated field is refused whatever its copies hold (the
        // last one would otherwise win silently).
        (
            br#"{"rule":"a","key":"k","cost":-5,"cost":0}"#,
            r#"duplicate field "cost""#,
        ),
        (
            br#"{"rule":1,"rule":"a","key":"k"}"#,
            r#"duplicate field "rule""#,
        ),
        (
            br#"{"rule":"a","key":"","key":"x"}"#,
            r#"duplicate field "key""#,
        ),
        (
            br#"{"rule":"a","key":"k","key":"k"}"#,
            r#"duplicate field "key""#,
        ),
        (
            br#"{"rule" : "a", "key":"k","rule":"a"}"#,
            r#"duplicate field "rule""#,
        ),
        (
            br#"{"checks":[{"rule":"nope","rule":"a","key":"k"}]}"#,
            r#"duplicate field "rule""#,
        ),
        (
            br#"{"checks":[{"rule":"a","key":"k"}],"checks":[{"rule":"a","key":"k"}]}"#,
            r#"duplicate field "checks""#,
        ),
    ] {
        let got = parse_check(body).expect_err(&String::from_utf8_lossy(body));
        assert!(
            got.contains(want),
            "{}: {got}",
            String::from_utf8_lossy(body)
        );
    }
    let long = format!(r#"{{"rule":"a","key":"{}"}}"#, "k".repeat(MAX_KEY_LEN + 1));
    let got = parse_check(long.as_bytes()).expect_err("too long");
    assert!(got.contains("longer than the limit of 4096 bytes"), "{got}");
}

#[test]
fn json_content_types() {
    for ok in [
        "application/json",
        "Application/JSON; charset=utf-8",
        "application/problem+json",
    ] {
        assert!(is_json(&HeaderValue::from_static(ok)), "{ok}");
    }
    for bad in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "json",
        "+json",
    ] {
        assert!(!is_json(&HeaderValue::from_static(bad)), "{bad}");
    }
}

/// Every body reads the same, error text included, through the streaming
/// reader and the `Value` reader it replaced; every body the byte scan
/// takes reads the same through both; the usual bodies do take the byte
/// scan, and the streaming reader borrows their strings.
#[test]
fn the_reader_agrees_with_the_value_reader() {
    let long_ok = format!("\"{}\"", "k".repeat(MAX_KEY_LEN));
    let long_bad = format!("\"{}\"", "k".repeat(MAX_KEY_LEN + 1));
    let strings = [
        r#""per_user""#,
        r#""""#,
        r#""a\u0062c""#,
        r#""tab\there""#,
        r#""\u00e9t\u00e9""#,
        "\"été\"",
        "7",
        "null",
        "true",
        "[]",
        "{}",
        long_ok.as_str(),
        long_bad.as_str(),
    ];
    let costs = [
        "0",
        "1",
        "42",
        "-1",
        "-0",
        "1.0",
        "1.5",
        "1e2",
        "\"1\"",
        "null",
        "18446744073709551615",
        "18446744073709551616",
    ];
    let pair = |r: &str, k: &str| format!(r#"{{"rule":{r},"key":{k}}}"#);
    let many = |n: usize| {
        let items: Vec<String> = (0..n)
            .map(|i| pair("\"a\"", &format!("\"k{i}\"")))
            .collect();
        format!("[{}]", items.join(","))
    };
    let mut checks = vec![
        "[]".to_owned(),
        "{}".to_owned(),
        "\"x\"".to_owned(),
        "null".to_owned(),
        "[1]".to_owned(),
        r#"[["a","k"]]"#.to_owned(),
        r#"[{"rule":"a"}]"#.to_owned(),
        r#"[{"rule":"a","key":"k","cost":1}]"#.to_owned(),
        r#"[{"rule":"a","key":"k","rule":"b"}]"#.to_owned(),
        r#"[{"key":"k","rule":"a"}]"#.to_owned(),
        many(1),
        many(2),
        many(MAX_CHECKS),
        many(MAX_CHECKS + 1),
    ];
    for r in &strings {
        for k in &strings {
            checks.push(format!("[{}]", pair(r, k)));
        }
    }
    let mut bodies: Vec<String> = vec![
        String::new(),
        "{".to_owned(),
        "[]".to_owned(),
        r#"["a","k",1]"#.to_owned(),
        "null".to_owned(),
        "{}".to_owned(),
        r#"{"rule":"a","key":"k"} x"#.to_owned(),
        " \n{\"rule\" : \"a\" , \"key\":\"k\"}\n ".to_owned(),
        r#"{"rule":"a","key":"k","rule":"b"}"#.to_owned(),
        r#"{"rule":"a","key":"k","cost":1,"cost":2}"#.to_owned(),
        r#"{"r\u0075le":"a","key":"k"}"#.to_owned(),
        r#"{"rule":"a","key":"k","colour":1}"#.to_owned(),
        r#"{"rule":"a","key":"k","checks":[]}"#.to_owned(),
        r#"{"key":"k","checks":[{"rule":"a","key":"k"}]}"#.to_owned(),
    ];
    for r in &strings {
        for k in &strings {
            bodies.push(format!(r#"{{"rule":{r},"key":{k}}}"#));
            bodies.push(format!(r#"{{"key":{k},"rule":{r},"cost":1}}"#));
        }
        bodies.push(format!(r#"{{"rule":{r}}}"#));
        bodies.push(format!(r#"{{"key":{r}}}"#));
    }
    for c in &costs {
        bodies.push(format!(r#"{{"rule":"a","key":"k","cost":{c}}}"#));
        bodies.push(format!(
            r#"{{"cost":{c},"checks":[{{"rule":"a","key":"k"}}]}}"#
        ));
    }
    for c in &checks {
        bodies.push(format!(r#"{{"checks":{c}}}"#));
        bodies.push(format!(r#"{{"cost":3,"checks":{c}}}"#));
    }
    let (mut read, mut plain) = (0, 0);
    for body in &bodies {
        let slow = value_reader(body.as_bytes());
        let streamed = parse_check_json(body.as_bytes());
        assert_eq!(streamed, slow, "{body}");
        read += usize::from(streamed.is_ok());
        if let Some(parsed) = parse_check_plain(body.as_bytes()) {
            plain += 1;
            assert_eq!(Ok(&parsed), slow.as_ref(), "{body}");
        }
        assert_eq!(parse_check(body.as_bytes()), slow, "{body}");
    }
    assert!(
        read > 100,
        "only {read} of {} bodies read at all",
        bodies.len()
    );
    assert!(
        plain > 20,
        "only {plain} of {} bodies read plain",
        bodies.len()
    );
    for usual in [
        r#"{"rule":"open","key":"k17","cost":1}"#,
        r#"{"key":"k","rule":"per_user"}"#,
        "{\"cost\":18446744073709551615,\"rule\":\"r\",\"key\":\"\u{e9}t\u{e9}\"}",
    ] {
        assert!(parse_check_plain(usual.as_bytes()).is_some(), "{usual}");
    }
    for usual in [
        r#"{"rule":"open","key":"k17","cost":1}"#,
        r#"{"rule":"per_user","key":"alice"}"#,
        r#"{"checks":[{"rule":"a","key":"k"},{"rule":"b","key":"j"}],"cost":0}"#,
    ] {
        let parsed = parse_check_json(usual.as_bytes()).expect(usual);
        assert!(
            parsed
                .pairs
                .iter()
                .all(|p| matches!((&p.rule, &p.key), (Cow::Borrowed(_), Cow::Borrowed(_)))),
            "{usual}: copied"
        );
    }
}

/// A JSON value for a check body's field, from values a client might send
/// to values meant to trip the reader (nested duplicates, fields out of
/// place, escapes).
fn value_strategy() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("\"a\"".to_owned()),
        Just("\"\"".to_owned()),
        Just("\"k\\u0031\"".to_owned()),
        Just("0".to_owned()),
        Just("7".to_owned()),
        Just("-3".to_owned()),
        Just("-0".to_owned()),
        Just("2.5".to_owned()),
        Just("1e3".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("null".to_owned()),
        Just("true".to_owned()),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5)
                .prop_map(|v| format!("[{}]", v.join(","))),
            proptest::collection::vec((field_strategy(), inner), 0..5).prop_map(|fields| {
                let fields: Vec<String> = fields
                    .into_iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

/// A field name: the four a check body knows, spelled plainly or escaped,
/// and others.
fn field_strategy() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("\"rule\""),
        Just("\"key\""),
        Just("\"cost\""),
        Just("\"checks\""),
        Just("\"r\\u0075le\""),
        Just("\"colour\""),
        Just("\"ttl_ms\""),
        Just("\"lease\""),
        Just("\"size\""),
    ]
}

proptest! {
    /// Bodies built from any fields and values read the same through the
    /// streaming reader and the `Value` reader, error text included.
    #[test]
    fn any_body_reads_as_the_value_reader_reads_it(
        fields in proptest::collection::vec((field_strategy(), value_strategy()), 0..6),
        tail in prop_oneof![Just(""), Just(" "), Just(" x"), Just("}")],
    ) {
        let fields: Vec<String> = fields.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
        let body = format!("{{{}}}{tail}", fields.join(","));
        prop_assert_eq!(parse_check(body.as_bytes()), value_reader(body.as_bytes()), "{}", body);
    }
}

/// The answer as it was first written: a `serde_json` map.
fn decision_json(rule: &str, d: &Decision) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("allowed".into(), d.allowed.into());
    m.insert("rule".into(), rule.into());
    m.insert("limit".into(), d.limit.into());
    m.insert("remaining".into(), d.remaining.into());
    m.insert("reset_after_ms".into(), d.reset_after_ms().into());
    m.insert(
        "retry_after_ms".into(),
        if d.allowed {
            Value::Null
        } else {
            d.retry_after_ms().into()
        },
    );
    m
}

/// A charge per decision, with a debt of 7 times its place.
fn picked_debts(multi: &MultiDecision) -> Vec<tollgate::Charged> {
    multi
        .decisions
        .iter()
        .enumerate()
        .map(|(i, d)| tollgate::Charged {
            decision: *d,
            debt: 7 * i as u64,
            clamped: 0,
        })
        .collect()
}

fn answer_oracle(
    req: &CheckRequest<'_>,
    multi: &MultiDecision,
    degraded: bool,
    debts: Option<&[tollgate::Charged]>,
) -> Vec<u8> {
    let with_debt = |mut m: Map<String, Value>, i: usize| {
        if let Some(debts) = debts {
            m.insert("debt".into(), debts[i].debt.into());
        }
        m
    };
    let mut body = with_debt(
        decision_json(&req.pairs[multi.deciding].rule, multi.decision()),
        multi.deciding,
    );
    body.insert("allowed".into(), multi.allowed.into());
    if req.multi {
        let checks: Vec<Value> = req
            .pairs
            .iter()
            .zip(&multi.decisions)
            .enumerate()
            .map(|(i, (pair, d))| Value::Object(with_debt(decision_json(&pair.rule, d), i)))
            .collect();
        body.insert("checks".into(), checks.into());
    }
    if degraded {
        body.insert("degraded".into(), true.into());
    }
    let mut bytes = serde_json::to_vec(&Value::Object(body)).expect("json");
    bytes.push(b'\n');
    bytes
}

#[test]
fn answers_are_byte_identical_to_the_map_answers() {
    let ms = Duration::from_micros;
    let decisions: Vec<Decision> = [
        (true, 100, 99, ms(1), None),
        (true, 1_000_000, 999_999, ms(999), None),
        (true, u64::MAX, u64::MAX - 1, ms(u64::MAX / 4), None),
        (false, 100, 0, ms(950_001), Some(ms(10_000))),
        (false, 2, 0, Duration::from_secs(86_400 * 2), Some(ms(1))),
        (false, 5, 5, Duration::ZERO, None),
        (true, 3, 0, ms(0), Some(ms(5))),
        (false, 0, 0, ms(1_500), Some(Duration::ZERO)),
    ]
    .into_iter()
    .map(
        |(allowed, limit, remaining, reset_after, retry_after)| Decision {
            allowed,
            limit,
            remaining,
            reset_after,
            retry_after,
        },
    )
    .collect();
    let names = [
        "per_user",
        "a.b-c_9",
        "q\"uote",
        "back\\slash",
        "nl\n\u{1}",
        "été",
    ];
    let mut n = 0;
    for (i, first) in decisions.iter().enumerate() {
        for second in &decisions {
            for (multi_form, picked) in [
                (false, vec![*first]),
                (true, vec![*first]),
                (true, vec![*first, *second]),
                (true, vec![*second, *first, *second]),
            ] {
                let pairs: Vec<Pair<'_>> = (0..picked.len())
                    .map(|j| pair(names[(i + j) % names.len()], "k", 1))
                    .collect();
                let req = CheckRequest {
                    pairs,
                    multi: multi_form,
                };
                let multi = MultiDecision::from_decisions(picked);
                let debts: Vec<tollgate::Charged> = picked_debts(&multi);
                for (degraded, debts) in [
                    (false, None),
                    (true, None),
                    (false, Some(debts.as_slice())),
                    (true, Some(debts.as_slice())),
                ] {
                    let decided = match debts {
                        Some(d) => Decided::Charged(d),
                        None => Decided::Checked(&multi),
                    };
                    let got = answer_body(&req, decided, degraded, &[]);
                    let want = answer_oracle(&req, &multi, degraded, debts);
                    assert_eq!(
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(&want)
                    );
                    n += 1;
                }
            }
        }
    }
    assert!(n > 400);
}
