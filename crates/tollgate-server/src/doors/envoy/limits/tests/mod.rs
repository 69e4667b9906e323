//! The Envoy loader and descriptor lookup, tested through the public
//! API ([`EnvoyLimits::parse`], [`EnvoyLimits::find`], [`store_key`]):
//! `matching` (which limit a request's descriptor finds), `loading` (what
//! a valid file becomes), `errors` (what an invalid one reports) and
//! `store_key` (the counter a descriptor names). The helpers and the
//! reference service's example config are here.

use super::*;
use crate::config::file::ConfigErrors;

mod errors;
mod loading;
mod matching;
mod metric_key;
mod store_key;
mod wildcards;

fn parse(yaml: &str) -> Result<EnvoyLimits, ConfigErrors> {
    EnvoyLimits::parse(&[("test.yaml".to_owned(), yaml.to_owned())], &[])
}

fn ok(yaml: &str) -> EnvoyLimits {
    match parse(yaml) {
        Ok(limits) => limits,
        Err(e) => panic!("unexpected errors:\n{e}"),
    }
}

/// The errors as (line, field, message) triples.
fn errors(yaml: &str) -> Vec<(Option<usize>, Option<String>, String)> {
    parse(yaml)
        .expect_err("expected errors")
        .errors
        .into_iter()
        .map(|e| {
            assert_eq!(e.file, "test.yaml");
            (e.line, e.field, e.message)
        })
        .collect()
}

/// The single error, as (line, field, message).
fn error(yaml: &str) -> (usize, String, String) {
    let mut all = errors(yaml);
    assert_eq!(all.len(), 1, "{all:?}");
    let (line, field, message) = all.remove(0);
    (line.unwrap(), field.unwrap_or_default(), message)
}

fn path<'a>(limits: &'a EnvoyLimits, domain: &str, entries: &[(&str, &str)]) -> Option<&'a str> {
    limits.find(domain, entries).map(|l| l.path.as_str())
}

/// The reference service's README example, "Example 1" to "Example 4"
/// folded into one domain.
const MONGO: &str = "\
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    rate_limit:
      unit: second
      requests_per_unit: 100

  - key: remote_address
    descriptors:
      - key: path
        value: /foo
        rate_limit:
          unit: minute
          requests_per_unit: 10
      - key: path
        rate_limit:
          unit: hour
          requests_per_unit: 1000

  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bar
        rate_limit:
          unit: MINUTE
          requests_per_unit: 20
        shadow_mode: true
      - key: destination_cluster
        rate_limit:
          unlimited: true

  - key: foo
    value: foo1*
    rate_limit:
      unit: day
      requests_per_unit: 3
  - key: foo
    value: foo*
    rate_limit:
      unit: week
      requests_per_unit: 4
  - key: foo
    rate_limit:
      unit: year
      requests_per_unit: 5
";
