//! Rule names, and so counters, follow their limit whatever order an xDS
//! snapshot lists the domains in (Envoy Gateway builds its snapshot from
//! Go maps). Domains `d/` and `d?` both sanitize to `d_`: with load-order
//! `.2` names, a second snapshot listing them the other way round handed
//! each domain the other's counter.

use tollgate_server::rls_conf::RateLimitUnit::Hour;

use crate::support::Tollgate;
use crate::support::xds::{acked, ads, client, codes, eg_domain, eg_request, runtime, set, toml};

const ARGS: &[&str] = &["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"];

#[test]
fn each_limit_keeps_its_own_counter_when_a_snapshot_reorders_colliding_names() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    // Resources go out in name order: `1` then `2`.
    let named = |name: &str, domain: &str| {
        let mut config = eg_domain(domain, "route", &[(2, Hour)]);
        config.name = name.to_owned();
        config
    };
    set(&ads, "1", &[named("1", "d/"), named("2", "d?")]);
    let server = Tollgate::start(&toml(&ads.addr().to_string(), ""), ARGS);
    rt.block_on(acked(&ads, "1"));
    let mut c = client(&rt, &server);
    let slash = eg_request("d/", "route", 0);
    let question = eg_request("d?", "route", 0);
    // `d/` uses its whole limit; `d?` none of its own.
    assert_eq!(codes(&rt, &mut c, &slash, 2), ["OK", "OK"]);
    // The same limits, listed the other way round.
    set(&ads, "2", &[named("1", "d?"), named("2", "d/")]);
    rt.block_on(acked(&ads, "2"));
    assert_eq!(
        codes(&rt, &mut c, &question, 1),
        ["OK"],
        "d? must not have d/'s count"
    );
    assert_eq!(
        codes(&rt, &mut c, &slash, 1),
        ["OVER_LIMIT"],
        "d/ keeps its count"
    );
}
