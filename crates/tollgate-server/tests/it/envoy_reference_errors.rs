//! The error-file cases of the reference service's
//! `test/config/config_test.go` (`expectConfigPanic`: TestEmptyDomain,
//! TestDuplicateDomain, TestEmptyKey, TestDuplicateKey,
//! TestDuplicateKeyDomainMerge, TestBadLimitUnit, TestReplacesSelf,
//! TestReplacesEmpty, TestBadYaml, TestMisspelledKey, TestNonStringKey,
//! TestNonMapList, TestUnlimitedWithRateLimitUnit), plus TestDomainMerge's
//! other half (the same two files without merging), against the real
//! binary: `tollgate validate --envoy-config F.yaml` and `tollgate serve
//! --grpc ... --envoy-config F.yaml` both exit 1 with a message naming the
//! file, the line and the field, and saying what the reference's panic
//! says. The files in `tests/data/envoy_reference/` are ours, in the shapes
//! of the reference's.

use std::process::Command;

use crate::support;
use crate::support::reference::data;
use crate::support::rls::toml;

/// One bad config: its files, flags, and the start of the first line of
/// the error (`FILE:LINE: FIELD: ` with FILE as given, then the reason)
/// up to a part the reference's message has too.
struct Bad {
    /// The reference test it translates.
    case: &'static str,
    files: &'static [&'static str],
    flags: &'static [&'static str],
    /// `FILE:LINE: FIELD: ` of the file at fault.
    at: &'static str,
    /// What the reason says (the reference's words).
    says: &'static str,
}

const BAD: &[Bad] = &[
    Bad {
        case: "TestEmptyDomain",
        files: &["empty_domain.yaml"],
        flags: &[],
        at: "empty_domain.yaml:2: domain: ",
        says: "config file cannot have empty domain",
    },
    Bad {
        case: "TestDuplicateDomain",
        files: &["basic.yaml", "duplicate_domain.yaml"],
        flags: &[],
        at: "duplicate_domain.yaml:2: domain: ",
        says: "duplicate domain 'shop'",
    },
    Bad {
        case: "TestDomainMerge, merging off",
        files: &["merge_one.yaml", "merge_two.yaml"],
        flags: &[],
        at: "merge_two.yaml:2: domain: ",
        says: "duplicate domain 'fleet'",
    },
    Bad {
        case: "TestEmptyKey",
        files: &["empty_key.yaml"],
        flags: &[],
        at: "empty_key.yaml:3: descriptors[0].key: ",
        says: "descriptor has empty key",
    },
    Bad {
        case: "TestDuplicateKey",
        files: &["duplicate_key.yaml"],
        flags: &[],
        at: "duplicate_key.yaml:6: descriptors[1]: ",
        says: "duplicate descriptor composite key 'shop.tier_gold'",
    },
    Bad {
        case: "TestDuplicateKeyDomainMerge",
        files: &["merge_one.yaml", "merge_one.yaml"],
        flags: &["--envoy-merge-domains"],
        at: "merge_one.yaml:4: descriptors[0]: ",
        says: "duplicate descriptor composite key 'fleet.truck_t1'",
    },
    Bad {
        case: "TestBadLimitUnit",
        files: &["bad_limit_unit.yaml"],
        flags: &[],
        at: "bad_limit_unit.yaml:6: descriptors[0].rate_limit.unit: ",
        says: "invalid rate limit unit 'fortnight'",
    },
    Bad {
        case: "TestReplacesSelf",
        files: &["replaces_self.yaml"],
        flags: &[],
        at: "replaces_self.yaml:10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: ",
        says: "replaces should not contain name of same descriptor",
    },
    Bad {
        case: "TestReplacesEmpty",
        files: &["replaces_empty.yaml"],
        flags: &[],
        at: "replaces_empty.yaml:10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: ",
        says: "should not have an empty replaces entry",
    },
    Bad {
        // The reference's yaml.v2 puts the end of stream on line 2 (after
        // the newline); tollgate names the line the quoted scalar opens.
        case: "TestBadYaml",
        files: &["bad_yaml.yaml"],
        flags: &[],
        at: "bad_yaml.yaml:1: YAML syntax error: ",
        says: "found unexpected end of stream",
    },
    Bad {
        case: "TestMisspelledKey",
        files: &["misspelled_key.yaml"],
        flags: &[],
        at: "misspelled_key.yaml:5: descriptors[0].ratelimit: ",
        says: "unknown field",
    },
    Bad {
        case: "TestMisspelledKey (misspelled_key2)",
        files: &["misspelled_key2.yaml"],
        flags: &[],
        at: "misspelled_key2.yaml:7: descriptors[0].rate_limit.requestsperunit: ",
        says: "unknown field",
    },
    Bad {
        // The reference says "key is not of type string: 0.25": its YAML
        // library reads 0.25 as a float. tollgate reads every scalar key
        // as its text, so 1.5 is an unknown field (and the domain is
        // missing): refused all the same, in other words.
        case: "TestNonStringKey",
        files: &["non_string_key.yaml"],
        flags: &[],
        at: "non_string_key.yaml:1: 1.5: ",
        says: "unknown field",
    },
    Bad {
        // A key that is a list is not a string in any reading.
        case: "TestNonStringKey (a list as the key)",
        files: &["non_string_key2.yaml"],
        flags: &[],
        at: "non_string_key2.yaml:3: descriptors[0].<key>: ",
        says: "expected a string key",
    },
    Bad {
        case: "TestNonMapList",
        files: &["non_map_list.yaml"],
        flags: &[],
        at: "non_map_list.yaml:3: descriptors[0]: ",
        says: "expected a descriptor mapping, found \"x\"",
    },
    Bad {
        case: "TestUnlimitedWithRateLimitUnit",
        files: &["unlimited_with_unit.yaml"],
        flags: &[],
        at: "unlimited_with_unit.yaml:6: descriptors[0].rate_limit.unit: ",
        says: "should not specify rate limit unit when unlimited",
    },
];

/// The first line of stderr that names a file.
fn first_error(stderr: &str) -> &str {
    stderr.lines().next().unwrap_or("")
}

#[test]
fn validate_refuses_each_error_file_naming_file_line_and_field() {
    let dir = data("");
    for bad in BAD {
        let mut args = vec!["validate"];
        for f in bad.files {
            args.extend(["--envoy-config", f]);
        }
        args.extend_from_slice(bad.flags);
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .current_dir(&dir)
            .args(&args)
            .output()
            .expect("run tollgate");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", bad.case);
        let line = first_error(&stderr);
        assert!(
            line.starts_with(bad.at) && line[bad.at.len()..].contains(bad.says),
            "{}: want {}...{}, got\n{stderr}",
            bad.case,
            bad.at,
            bad.says
        );
        assert!(out.stdout.is_empty(), "{}: stdout on error", bad.case);
    }
}

#[test]
fn serve_refuses_each_error_file_naming_file_line_and_field() {
    for bad in BAD {
        let paths: Vec<String> = bad
            .files
            .iter()
            .map(|f| data(f).to_str().expect("utf-8 path").to_owned())
            .collect();
        let mut args = vec!["--grpc", "127.0.0.1:0"];
        for p in &paths {
            args.extend(["--envoy-config", p.as_str()]);
        }
        args.extend_from_slice(bad.flags);
        let out = support::serve_output(&toml("memory"), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", bad.case);
        // serve names the file by the path it was given
        let at = format!("{}{}", data("").display(), bad.at);
        let line = stderr
            .lines()
            .find(|l| l.contains(&at))
            .unwrap_or_else(|| panic!("{}: {at} not in\n{stderr}", bad.case));
        assert!(
            line[line.find(&at).expect("found") + at.len()..].contains(bad.says),
            "{}: want {at}...{}, got\n{stderr}",
            bad.case,
            bad.says
        );
    }
}

// Every file above is refused for the reason named, not for another: each
// is one step from a file that loads (the bad part mended).
#[test]
fn each_error_file_mended_loads() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, bad, good) in [
        ("empty_domain.yaml", "# No domain", "domain: shop\n#"),
        (
            "empty_key.yaml",
            "  - value: gold",
            "  - key: tier\n    value: gold",
        ),
        (
            "duplicate_key.yaml",
            "    value: gold\n\n",
            "    value: silver\n\n",
        ),
        ("bad_limit_unit.yaml", "fortnight", "week"),
        ("replaces_self.yaml", "- name: seats", "- name: chairs"),
        ("replaces_empty.yaml", "- name:\n", "- name: chairs\n"),
        ("bad_yaml.yaml", "'''", "domain: shop"),
        ("misspelled_key.yaml", "ratelimit:", "rate_limit:"),
        (
            "misspelled_key2.yaml",
            "requestsperunit",
            "requests_per_unit",
        ),
        ("non_string_key.yaml", "1.5: shop", "domain: shop"),
        (
            "non_string_key2.yaml",
            "? [tier, gold]\n    : x",
            "key: tier",
        ),
        (
            "non_map_list.yaml",
            "  - x\n  - y",
            "  - key: x\n  - key: y",
        ),
        ("unlimited_with_unit.yaml", "      unit: week\n", ""),
    ] {
        let text = support::reference::text(name);
        assert!(text.contains(bad), "{name} has {bad:?}");
        let mended = text.replacen(bad, good, 1);
        let path = dir.path().join(name);
        std::fs::write(&path, mended).expect("write");
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["validate", "--envoy-config"])
            .arg(&path)
            .output()
            .expect("run tollgate");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name} mended: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
