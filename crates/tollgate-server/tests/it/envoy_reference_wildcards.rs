//! `TestWildcardConfig` and `TestShareThreshold` of the reference service's
//! `test/config/config_test.go`, translated into calls of the real binary
//! over gRPC (see `envoy_reference.rs` for how). The reference checks that
//! values match and which stats key they get; its cache key (tested in its
//! `base_limiter_test.go`) is the request's values, with a
//! `share_threshold` wildcard's pattern in place of the values it matched.
//! So here every "these share" is shown by hits of different values running
//! one counter down, and every "these do not" by a value whose counter is
//! still full after another's ran out.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use redis_harness::RedisServer;

use crate::support::reference::{
    Seen, away_from_an_hour_edge, hit, hour, no_limit, over, start, start_on,
};
use crate::support::rls::Rls;

const CATALOG: &str = "catalog";
const STORAGE: &str = "storage";

/// Each of `calls` in turn, in `domain`, runs one counter of `n` per hour
/// down from `n - 1` to 0; then one more call of the last is over.
fn one_counter(rls: &mut Rls, domain: &str, n: u32, calls: &[&[(&str, &str)]]) {
    assert_eq!(calls.len(), n as usize, "one call per unit");
    for (i, entries) in calls.iter().enumerate() {
        let left = n - 1 - u32::try_from(i).expect("small");
        assert_eq!(hit(rls, domain, entries), hour(n, left), "{entries:?}");
    }
    let last = calls[calls.len() - 1];
    assert_eq!(hit(rls, domain, last), over(n, Unit::Hour, ""), "{last:?}");
}

// TestWildcardConfig: which values match. A key-only node and a trailing
// wildcard match any value / any value with the prefix (noVal, wild); a
// nested wildcard matches below its exact parent (nestedWild=val1,
// wild=goo2); no match for another prefix (wild=bar) nor for an exact value
// that is the wildcard's prefix (noWild=foo1); `bar*b` matches `barab`,
// `bar123b` and, * matching the empty string, `barb`, but not `bara` nor
// `xbarb`; `foo*bar*baz` matches `foo123bar456baz` and `foobarbaz`, not
// `foo123baz` nor `bar456baz`.
#[test]
fn wildcard_config_which_values_match() {
    let mut rls = start(&["wildcard.yaml"], &[]);
    let matching: &[(&[(&str, &str)], Seen)] = &[
        (&[("anySku", "bk1")], hour(3, 2)),
        (&[("anySku", "bk2")], hour(3, 2)),
        (&[("sku", "bk1")], hour(3, 2)),
        (&[("sku", "bk2")], hour(3, 2)),
        (&[("shelf", "s1"), ("sku", "cd2")], hour(3, 2)),
        (&[("midSku", "abQyz")], hour(2, 1)),
        (&[("midSku", "ab123yz")], hour(2, 1)),
        (&[("midSku", "abyz")], hour(2, 1)),
        (&[("multiSku", "red1green2blue")], hour(4, 3)),
        (&[("multiSku", "redgreenblue")], hour(4, 3)),
    ];
    for (entries, want) in matching {
        assert_eq!(&hit(&mut rls, CATALOG, entries), want, "{entries:?}");
    }
    let not_matching: &[&[(&str, &str)]] = &[
        &[("sku", "zz1")],
        &[("plainSku", "bk1")],
        &[("midSku", "abyza")],
        &[("midSku", "xabyz")],
        &[("multiSku", "red1blue")],
        &[("multiSku", "green2blue")],
        // the top level's bk* is not a wildcard of the level below shelf
        &[("shelf", "s1"), ("sku", "bk1")],
        // nor is the level below's cd* one of the top level
        &[("sku", "cd1")],
    ];
    for entries in not_matching {
        assert_eq!(hit(&mut rls, CATALOG, entries), no_limit(), "{entries:?}");
    }
}

// TestWildcardConfig: "matches multiple wildcard values and results are
// equal": the same limit for each, but (without share_threshold) each
// value on its own counter, as with a key-only node, its baseline.
#[test]
fn wildcard_config_each_matching_value_counts_on_its_own() {
    let mut rls = start(&["wildcard.yaml"], &[]);
    away_from_an_hour_edge();
    for (key, first, second) in [
        ("anySku", "v1", "v2"),
        ("sku", "bk1", "bk2"),
        ("midSku", "abQyz", "abyz"),
        ("multiSku", "red1green2blue", "redgreenblue"),
    ] {
        let n = match key {
            "midSku" => 2,
            "multiSku" => 4,
            _ => 3,
        };
        let once = [(key, first)];
        let each: Vec<&[(&str, &str)]> = (0..n).map(|_| &once[..]).collect();
        one_counter(&mut rls, CATALOG, n, &each);
        assert_eq!(
            hit(&mut rls, CATALOG, &[(key, second)]),
            hour(n, n - 1),
            "{key}={second}"
        );
    }
    // and below an exact parent
    let nested = [("shelf", "s1"), ("sku", "cd1")];
    one_counter(&mut rls, CATALOG, 3, &[&nested, &nested, &nested]);
    assert_eq!(
        hit(&mut rls, CATALOG, &[("shelf", "s1"), ("sku", "cd2")]),
        hour(3, 2)
    );
}

fn share_threshold_cases(store: &str) {
    let mut rls = start_on(store, &["share_threshold.yaml"], &[]);
    away_from_an_hour_edge();
    let rls = &mut rls;

    // Case 1, "Basic share_threshold": every value files/* matches is one
    // counter.
    one_counter(
        rls,
        STORAGE,
        3,
        &[
            &[("blob", "img/a.pdf")],
            &[("blob", "img/b.csv")],
            &[("blob", "img/c.txt")],
        ],
    );
    assert_eq!(
        hit(rls, STORAGE, &[("blob", "img/d")]),
        over(3, Unit::Hour, "")
    );

    // Case 2, "share_threshold with metrics", its detailed_metric half
    // (service=svc/* sharing, endpoint detailed): the service's values share,
    // the endpoint's values do not.
    one_counter(
        rls,
        STORAGE,
        2,
        &[
            &[("svc", "svc/user"), ("op", "get")],
            &[("svc", "svc/order"), ("op", "get")],
        ],
    );
    assert_eq!(
        hit(rls, STORAGE, &[("svc", "svc/user"), ("op", "put")]),
        hour(2, 1)
    );

    // Case 3, "Nested wildcards": a sharing wildcard below an exact value ...
    one_counter(
        rls,
        STORAGE,
        4,
        &[
            &[("bucket", "main"), ("blob", "deep/1")],
            &[("bucket", "main"), ("blob", "deep/2")],
            &[("bucket", "main"), ("blob", "deep/3")],
            &[("bucket", "main"), ("blob", "deep/4")],
        ],
    );
    // ... the same key at two levels, both sharing: one counter for every
    // pair of values ...
    one_counter(
        rls,
        STORAGE,
        5,
        &[
            &[("blob", "up/a"), ("blob", "deep/a")],
            &[("blob", "up/b"), ("blob", "deep/b")],
            &[("blob", "up/a"), ("blob", "deep/b")],
            &[("blob", "up/c"), ("blob", "deep/")],
            &[("blob", "up/"), ("blob", "deep/z")],
        ],
    );
    // ... a sharing parent over a wildcard child that does not share: the
    // parent's values share, the child's (and the plain key's) do not ...
    one_counter(
        rls,
        STORAGE,
        2,
        &[
            &[("dir", "dir/a"), ("doc", "doc/1"), ("kind", "pdf")],
            &[("dir", "dir/b"), ("doc", "doc/1"), ("kind", "pdf")],
        ],
    );
    assert_eq!(
        hit(
            rls,
            STORAGE,
            &[("dir", "dir/a"), ("doc", "doc/2"), ("kind", "pdf")]
        ),
        hour(2, 1)
    );
    assert_eq!(
        hit(
            rls,
            STORAGE,
            &[("dir", "dir/a"), ("doc", "doc/1"), ("kind", "txt")]
        ),
        hour(2, 1)
    );
    // ... a sharing parent and a sharing child: both levels' values share,
    // the plain key's do not.
    one_counter(
        rls,
        STORAGE,
        3,
        &[
            &[("owner", "owner/alice"), ("obj", "obj/1"), ("verb", "read")],
            &[("owner", "owner/bob"), ("obj", "obj/2"), ("verb", "read")],
            &[("owner", "owner/eve"), ("obj", "obj/1"), ("verb", "read")],
        ],
    );
    assert_eq!(
        hit(
            rls,
            STORAGE,
            &[
                ("owner", "owner/alice"),
                ("obj", "obj/1"),
                ("verb", "write")
            ]
        ),
        hour(3, 2)
    );

    // Case 4, "Explicit value precedence over wildcard": the exact value has
    // its own limit and counter; the others the wildcard matches share.
    one_counter(
        rls,
        STORAGE,
        3,
        &[&[("page", "p2")], &[("page", "p23")], &[("page", "p123")]],
    );
    one_counter(rls, STORAGE, 2, &[&[("page", "p1")], &[("page", "p1")]]);
    assert_eq!(
        hit(rls, STORAGE, &[("page", "p9")]),
        over(3, Unit::Hour, "")
    );

    // Case 5, "share_threshold with middle wildcard".
    one_counter(
        rls,
        STORAGE,
        3,
        &[
            &[("mid", "/v1/a/x")],
            &[("mid", "/v1-beta-x")],
            &[("mid", "/v1QQx")],
        ],
    );
    assert_eq!(hit(rls, STORAGE, &[("mid", "/v1/a/y")]), no_limit());

    // Case 6, "share_threshold with multi-wildcard".
    one_counter(
        rls,
        STORAGE,
        3,
        &[
            &[("multi", "aXbYc")],
            &[("multi", "aXXXbYYYc")],
            &[("multi", "abc")],
        ],
    );
    assert_eq!(hit(rls, STORAGE, &[("multi", "aXc")]), no_limit());

    // Case 8, "share_threshold with nested middle wildcards".
    one_counter(
        rls,
        STORAGE,
        2,
        &[
            &[("zone", "z1east"), ("res", "rAv3")],
            &[("zone", "z99east"), ("res", "rBBBv3")],
        ],
    );
    assert_eq!(
        hit(rls, STORAGE, &[("zone", "zeast"), ("res", "rv3")]),
        over(2, Unit::Hour, "")
    );
    assert_eq!(
        hit(rls, STORAGE, &[("zone", "z1west"), ("res", "rAv3")]),
        no_limit()
    );
}

// TestShareThreshold, cases 1 to 6 and 8 (7 and case 2's value_to_metric
// half are in envoy_reference_features.rs), on the memory
// store ...
#[test]
fn share_threshold_counts_across_values_on_the_memory_store() {
    share_threshold_cases("memory");
}

// ... and on a real redis-server, where the counter key is the store's.
#[test]
fn share_threshold_counts_across_values_on_redis() {
    let redis = RedisServer::start();
    share_threshold_cases(&redis.url());
    assert!(redis.keys_without_ttl().is_empty());
}
