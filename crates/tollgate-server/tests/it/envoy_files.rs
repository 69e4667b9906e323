//! Operator flags for Envoy files, end to end with the real binary:
//! `tollgate validate --envoy-config F.yaml…` without a TOML `--config`,
//! and `--envoy-merge-domains` (the reference's `MERGE_DOMAIN_CONFIG`) on
//! `validate` and `serve`: one domain spread over several files is one
//! domain; without the flag it is an error; a descriptor key in two merged
//! files is an error naming both.

use std::path::Path;
use std::process::Command;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::rls::{Rls, code, desc, toml};

const ONE: &str = "domain: shared\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
const TWO: &str = "domain: shared\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n";
const CLASH: &str = "domain: shared\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 9}\n";

/// `tollgate ARGS` in `dir`: exit code, stdout, stderr.
fn tollgate(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run tollgate");
    (
        out.status.code(),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

fn files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in [("one.yaml", ONE), ("two.yaml", TWO), ("clash.yaml", CLASH)] {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    dir
}

#[test]
fn validate_checks_envoy_files_without_a_toml_config() {
    let dir = files();
    let (code, out, err) = tollgate(dir.path(), &["validate", "--envoy-config", "one.yaml"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "one.yaml: OK, 1 Envoy limit in 1 domain\nenvoy domain shared\n\
         envoy limit shared.a: 1 per hour (fixed_window envoy.shared.a)\n"
    );
    // a bad Envoy file alone is exit 1 naming file, line and field
    std::fs::write(dir.path().join("bad.yaml"), "domain: d\nbogus: 1\n").expect("write");
    let (code, _, err) = tollgate(dir.path(), &["validate", "--envoy-config", "bad.yaml"]);
    assert_eq!(code, Some(1));
    assert!(err.starts_with("bad.yaml:2: bogus: unknown field"), "{err}");
    // neither kind of file is a usage error
    let (code, _, err) = tollgate(dir.path(), &["validate"]);
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn a_domain_in_two_files_is_an_error_unless_merged() {
    let dir = files();
    let both = [
        "validate",
        "--envoy-config",
        "one.yaml",
        "--envoy-config",
        "two.yaml",
    ];
    let (code, _, err) = tollgate(dir.path(), &both);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with(
            "two.yaml:1: domain: duplicate domain 'shared': also in one.yaml \
             (--envoy-merge-domains, [envoy] merge_domains or MERGE_DOMAIN_CONFIG=true merges \
             one domain spread over several files or xDS resources)"
        ),
        "{err}"
    );
    let mut merged = both.to_vec();
    merged.push("--envoy-merge-domains");
    let (code, out, err) = tollgate(dir.path(), &merged);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("one.yaml, two.yaml: OK, 2 Envoy limits in 1 domain\n"),
        "{out}"
    );
    assert!(out.contains("envoy limit shared.b: 2 per hour"), "{out}");
    // a key defined in two merged files names both
    let (code, _, err) = tollgate(
        dir.path(),
        &[
            "validate",
            "--envoy-config",
            "two.yaml",
            "--envoy-config",
            "clash.yaml",
            "--envoy-merge-domains",
        ],
    );
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with(
            "clash.yaml:3: descriptors[0]: duplicate descriptor composite key 'shared.b': \
             also in two.yaml"
        ),
        "{err}"
    );
}

#[test]
fn serve_answers_from_every_file_of_a_merged_domain() {
    let dir = files();
    let two = dir.path().join("two.yaml");
    let mut rls = Rls::start_with(
        &toml("memory"),
        ONE,
        &[
            "--envoy-config",
            two.to_str().expect("utf-8 path"),
            "--envoy-merge-domains",
        ],
    );
    let mut call = |key: &str| {
        let r = rls.ok(RateLimitRequest {
            domain: "shared".to_owned(),
            descriptors: vec![desc(&[(key, "x")])],
            hits_addend: 0,
        });
        let s = &r.statuses[0];
        (
            code(s.code),
            s.current_limit.as_ref().map(|l| l.requests_per_unit),
        )
    };
    assert_eq!(call("a"), (Code::Ok, Some(1)));
    assert_eq!(call("a"), (Code::OverLimit, Some(1)));
    assert_eq!(call("b"), (Code::Ok, Some(2)));
    assert_eq!(call("b"), (Code::Ok, Some(2)));
    assert_eq!(call("b"), (Code::OverLimit, Some(2)));
}

#[test]
fn a_toml_of_only_a_store_serves_and_validates_with_envoy_files() {
    let dir = files();
    std::fs::write(dir.path().join("store.toml"), "[store]\nurl = \"memory\"\n").expect("write");
    let (exit, out, err) = tollgate(
        dir.path(),
        &[
            "validate",
            "--config",
            "store.toml",
            "--envoy-config",
            "one.yaml",
        ],
    );
    assert_eq!(exit, Some(0), "{err}");
    assert!(out.starts_with("store.toml: OK, 0 rules\n"), "{out}");
    // without Envoy files the TOML must have rules
    let (exit, _, err) = tollgate(dir.path(), &["validate", "--config", "store.toml"]);
    assert_eq!(exit, Some(1));
    assert!(err.starts_with("store.toml:1: rules: no rules"), "{err}");
    // and serve --grpc answers from the Envoy file over that store
    let mut rls = Rls::start_with("[store]\nurl = \"memory\"\n", ONE, &[]);
    let r = rls.ok(RateLimitRequest {
        domain: "shared".to_owned(),
        descriptors: vec![desc(&[("a", "x")])],
        hits_addend: 0,
    });
    assert_eq!(code(r.statuses[0].code), Code::Ok);
    let r = rls.ok(RateLimitRequest {
        domain: "shared".to_owned(),
        descriptors: vec![desc(&[("a", "x")])],
        hits_addend: 0,
    });
    assert_eq!(code(r.statuses[0].code), Code::OverLimit);
}
