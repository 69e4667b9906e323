//! Answers equal to the reference service's (envoyproxy/ratelimit) for the
//! configs Envoy Gateway generates, loaded as files (the shapes of EG's
//! `internal/xds/translator/testdata/out/ratelimit-config/`, in
//! `tests/data/envoy_gateway/`): route-name descriptors, `rule-N-match-M`
//! keys, masked remote addresses and per-IP ones, shadow mode and all
//! seven units. Each call is the one Envoy sends for an EG route (the
//! actions of notes §3.3: the route's generic key, then the rule's
//! matches); the server runs under a fake clock ([`Parity`]), and every
//! answer — status, `current_limit`, `limit_remaining`,
//! `duration_until_reset` — is asserted equal to the reference's
//! arithmetic for the same calls at the same Unix second.
//!
//! Costs (`hits_addend` 0 peeks, stream-done charges, `requestCost`, limit
//! overrides) under `count_own_cost` are in `envoy_gateway_costs.rs`.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;

use crate::support::gateway::{
    Parity, T0, costing, entries, fixture, lim, request, seconds, seen, shadow,
};

const LISTENER: &str = "first-listener";

/// The descriptor of `header-and-cidr-matches.yaml`'s rule: the route,
/// three header matches, the masked address 0.0.0.0/0.
fn header_and_cidr() -> Vec<(&'static str, &'static str)> {
    vec![
        ("first-route", "first-route"),
        ("rule-0-match-0", "rule-0-match-0"),
        ("rule-0-match-1", "rule-0-match-1"),
        ("rule-0-match-2", "rule-0-match-2"),
        ("masked_remote_address", "0.0.0.0/0"),
    ]
}

#[test]
fn a_rule_chain_of_header_matches_and_a_cidr_counts_as_the_reference() {
    let mut p = Parity::start("", &[&fixture("header-and-cidr-matches.yaml")]);
    let five = lim(5, Unit::Second);
    for _ in 0..7 {
        p.call(
            request(LISTENER, vec![entries(&header_and_cidr())]),
            &[five],
        );
    }
    // Envoy sends no descriptor when a header does not match; a shorter
    // chain (or the route alone) ends on a node without a limit.
    for n in 1..header_and_cidr().len() {
        let (code, s) = p.call(
            request(LISTENER, vec![entries(&header_and_cidr()[..n])]),
            &[None],
        );
        assert_eq!((code, s[0].limit), (Code::Ok, None));
    }
    // The next second is a new window.
    p.at(T0 + 1);
    for _ in 0..6 {
        p.call(
            request(LISTENER, vec![entries(&header_and_cidr())]),
            &[five],
        );
    }
    let (code, _) = p.call(
        request(LISTENER, vec![entries(&header_and_cidr())]),
        &[five],
    );
    assert_eq!(code, Code::OverLimit);
}

#[test]
fn a_shadow_rule_counts_and_reports_but_never_limits() {
    let mut p = Parity::start("", &[&fixture("global-shadow-mode.yaml")]);
    let five = shadow(5, Unit::Second);
    for i in 0..8 {
        let (code, s) = p.call(
            request(LISTENER, vec![entries(&header_and_cidr())]),
            &[five],
        );
        assert_eq!(code, Code::Ok);
        assert_eq!(s[0].remaining, 4u32.saturating_sub(i));
    }
}

#[test]
fn a_distinct_header_counts_each_value_on_its_own() {
    let mut p = Parity::start("", &[&fixture("distinct-match.yaml")]);
    let five = lim(5, Unit::Second);
    let user = |u| entries(&[("first-route", "first-route"), ("rule-0-match-0", u)]);
    for _ in 0..6 {
        p.call(request(LISTENER, vec![user("alice")]), &[five]);
    }
    for _ in 0..3 {
        p.call(request(LISTENER, vec![user("bob")]), &[five]);
    }
    let (code, _) = p.call(request(LISTENER, vec![user("alice")]), &[five]);
    assert_eq!(code, Code::OverLimit);
}

#[test]
fn masked_remote_addresses_share_a_counter_and_distinct_ones_count_per_ip() {
    let masked = fixture("masked-remote-address-match.yaml");
    let mut p = Parity::start("", &[&masked]);
    let five = lim(5, Unit::Second);
    // Every client inside 192.168.0.0/16 sends the CIDR as the value: one
    // counter for the range.
    let range = entries(&[
        ("first-route", "first-route"),
        ("masked_remote_address", "192.168.0.0/16"),
    ]);
    for _ in 0..7 {
        p.call(request(LISTENER, vec![range.clone()]), &[five]);
    }

    // `distinct`: the client's address below the range, its own counter.
    let mut p = Parity::start("", &[&fixture("distinct-remote-address-match.yaml")]);
    let ip = |a| {
        entries(&[
            ("first-route", "first-route"),
            ("masked_remote_address", "192.168.0.0/16"),
            ("remote_address", a),
        ])
    };
    for _ in 0..6 {
        p.call(request(LISTENER, vec![ip("192.168.1.7")]), &[five]);
    }
    for _ in 0..2 {
        p.call(request(LISTENER, vec![ip("192.168.200.1")]), &[five]);
    }
    // The range alone has no limit of its own there.
    p.call(
        request(
            LISTENER,
            vec![entries(&[
                ("first-route", "first-route"),
                ("masked_remote_address", "192.168.0.0/16"),
            ])],
        ),
        &[None],
    );
}

#[test]
fn an_inverted_cidr_is_a_value_like_any_other() {
    let mut p = Parity::start("", &[&fixture("ratelimit-sourceip-invert.yaml")]);
    let five = lim(5, Unit::Second);
    let outside = entries(&[
        ("first-route", "first-route"),
        ("masked_remote_address", "invert:192.168.0.0/24"),
    ]);
    for _ in 0..7 {
        p.call(request(LISTENER, vec![outside.clone()]), &[five]);
    }
    // A client inside the range sends no descriptor for the rule; the CIDR
    // without `invert:` is no configured value.
    p.call(
        request(
            LISTENER,
            vec![entries(&[
                ("first-route", "first-route"),
                ("masked_remote_address", "192.168.0.0/24"),
            ])],
        ),
        &[None],
    );
}

#[test]
fn month_and_year_rules_reset_where_the_reference_divides_time() {
    let mut p = Parity::start("", &[&fixture("month-year-rule.yaml")]);
    let rule = |route| entries(&[(route, route), ("rule-0-match-0", "rule-0-match-0")]);
    let month = lim(5, Unit::Month);
    let year = lim(1, Unit::Year);
    for _ in 0..6 {
        p.call(request(LISTENER, vec![rule("first-route")]), &[month]);
    }
    for _ in 0..2 {
        p.call(request(LISTENER, vec![rule("second-route")]), &[year]);
    }
    // A second before the 30-day window ends: still over; at its end, new.
    let month_end = (T0 / seconds(Unit::Month) + 1) * seconds(Unit::Month);
    p.at(month_end - 1);
    p.call(request(LISTENER, vec![rule("first-route")]), &[month]);
    p.at(month_end);
    for _ in 0..2 {
        p.call(request(LISTENER, vec![rule("first-route")]), &[month]);
    }
    p.call(request(LISTENER, vec![rule("second-route")]), &[year]);
    let year_end = (T0 / seconds(Unit::Year) + 1) * seconds(Unit::Year);
    p.at(year_end);
    p.call(request(LISTENER, vec![rule("second-route")]), &[year]);
}

#[test]
fn query_parameter_matches_chain_as_header_matches_do() {
    let mut p = Parity::start("", &[&fixture("query-parameters-match.yaml")]);
    let five = lim(5, Unit::Second);
    let both = entries(&[
        ("first-route", "first-route"),
        ("rule-0-match-0", "rule-0-match-0"),
        ("rule-0-match-1", "rule-0-match-1"),
    ]);
    for _ in 0..7 {
        p.call(request(LISTENER, vec![both.clone()]), &[five]);
    }
}

#[test]
fn two_method_rules_of_a_route_are_one_call_of_two_descriptors() {
    // `method-match.yaml`: a GET matches rule 0 (5 a second) and rule 1
    // (50 a second); Envoy sends both descriptors in one call.
    let mut p = Parity::start("", &[&fixture("method-match.yaml")]);
    let (five, fifty) = (lim(5, Unit::Second), lim(50, Unit::Second));
    let rule = |k| entries(&[("first-route", "first-route"), (k, k)]);
    let call = || request(LISTENER, vec![rule("rule-0-method"), rule("rule-1-method")]);
    for _ in 0..5 {
        p.call(call(), &[five, fifty]);
    }
    // Rule 0 is over: the request is denied and, in tollgate, its other
    // check consumes nothing (docs/envoy.md, "Deciding": the reference
    // counts it, and would say 44).
    let (code, s) = seen(&p.rls.ok(call()));
    assert_eq!(code, Code::OverLimit);
    assert_eq!((s[0].code, s[0].remaining), (Code::OverLimit, 0));
    assert_eq!((s[1].code, s[1].remaining), (Code::Ok, 45));
    // A new second: the reference's counts and tollgate's agree again.
    p.at(T0 + 1);
    for _ in 0..5 {
        p.call(call(), &[five, fifty]);
    }
    // Rule 1 alone (a request rule 0 does not match, e.g. another method).
    p.call(request(LISTENER, vec![rule("rule-1-method")]), &[fifty]);
}

#[test]
fn path_rules_count_apart() {
    let mut p = Parity::start("", &[&fixture("path-match.yaml")]);
    let five = lim(5, Unit::Second);
    let rule = |k| entries(&[("first-route", "first-route"), (k, k)]);
    for _ in 0..6 {
        p.call(request(LISTENER, vec![rule("rule-0-path")]), &[five]);
    }
    p.call(request(LISTENER, vec![rule("rule-1-path")]), &[five]);
}

const UNITS: [Unit; 7] = [
    Unit::Second,
    Unit::Minute,
    Unit::Hour,
    Unit::Day,
    Unit::Week,
    Unit::Month,
    Unit::Year,
];
const ROUTE: &str = "httproute/default/units/rule/0/match/0/www_example_com";
const GATEWAY: &str = "default/eg/http";

/// Rule `n` of `all-units.yaml`'s route (no match: `rule-N-match--1`).
fn unit_rule(
    n: usize,
) -> envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor {
    let key = format!("rule-{n}-match--1");
    entries(&[(ROUTE, ROUTE), (&key, &key)])
}

#[test]
fn every_unit_counts_to_its_limit_and_resets_at_its_window_end() {
    let mut p = Parity::start("", &[&fixture("all-units.yaml")]);
    // In order of their windows' ends, which only move forward.
    for (n, unit) in UNITS.iter().enumerate() {
        let l = lim(u32::try_from(n).expect("small") + 2, *unit);
        for _ in 0..n + 3 {
            p.call(request(GATEWAY, vec![unit_rule(n)]), &[l]);
        }
        let end = (p.time.now() / seconds(*unit) + 1) * seconds(*unit);
        p.at(end);
        let (code, s) = p.call(request(GATEWAY, vec![unit_rule(n)]), &[l]);
        assert_eq!(
            (code, s[0].remaining),
            (Code::Ok, u32::try_from(n).expect("small") + 1)
        );
    }
}

#[test]
fn a_route_with_a_rule_per_unit_is_one_call_of_seven_descriptors() {
    // Each descriptor with a cost of its own (EG's `requestCost: 1`) under
    // count_own_cost: every one counted, as the reference counts them, so
    // the call's answers match whichever is over.
    let mut p = Parity::start(
        "\n[envoy]\ncount_own_cost = true\n",
        &[&fixture("all-units.yaml")],
    );
    let limits: Vec<_> = UNITS
        .iter()
        .enumerate()
        .map(|(n, u)| lim(u32::try_from(n).expect("small") + 2, *u))
        .collect();
    let call = || {
        request(
            GATEWAY,
            (0..UNITS.len()).map(|n| costing(unit_rule(n), 1)).collect(),
        )
    };
    for _ in 0..4 {
        p.call(call(), &limits);
    }
    // The second's window ends: it counts again, the others stay over.
    p.at(T0 + 1);
    for _ in 0..3 {
        p.call(call(), &limits);
    }
    p.at(T0 + 60);
    let (code, s) = p.call(call(), &limits);
    assert_eq!(code, Code::OverLimit);
    assert_eq!((s[1].code, s[1].remaining), (Code::Ok, 2));
}
