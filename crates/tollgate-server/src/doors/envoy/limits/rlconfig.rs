//! [`EnvoyLimits::dump`]: the loaded limits in the reference's `/rlconfig`
//! text (its `rateLimitConfigImpl.Dump`), one line per node that has a
//! `rate_limit`, depth-first:
//!
//! ```text
//! foo.k1_v1: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false
//! ```
//!
//! The reference walks Go maps, so its order changes from call to call;
//! here domains come sorted and nodes in config order, one of the orders
//! it may print.

use std::fmt::Write as _;

use super::tree::{EnvoyLimits, Level};

impl EnvoyLimits {
    /// The reference's `/rlconfig` text: for each node with a
    /// `rate_limit`, its full key (`domain.key_value.key`), the unit's
    /// proto name (`UNKNOWN` and 0 for `unlimited`), `requests_per_unit`,
    /// `shadow_mode` and `quota_mode`. Empty when nothing is loaded.
    #[must_use]
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for level in self.domains.values() {
            self.dump_level(level, &mut out);
        }
        out
    }

    fn dump_level(&self, level: &Level, out: &mut String) {
        for node in &level.nodes {
            if let Some(limit) = node.limit.and_then(|i| self.limits.get(i)) {
                let (unit, requests) = match limit.unit {
                    Some(unit) if !limit.unlimited => {
                        (unit.as_str().to_ascii_uppercase(), limit.requests_per_unit)
                    }
                    _ => ("UNKNOWN".to_owned(), 0),
                };
                let _ = writeln!(
                    out,
                    "{}: unit={unit} requests_per_unit={requests}, shadow_mode: {}, quota_mode: {}",
                    limit.path, limit.shadow_mode, limit.quota_mode
                );
            }
            self.dump_level(&node.children, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(yaml: &[&str]) -> Vec<String> {
        let sources: Vec<(String, String)> = yaml
            .iter()
            .enumerate()
            .map(|(i, y)| (format!("{i}.yaml"), (*y).to_owned()))
            .collect();
        let limits = EnvoyLimits::parse(&sources, &[]).expect("loads");
        let mut lines: Vec<String> = limits.dump().lines().map(str::to_owned).collect();
        lines.sort();
        lines
    }

    /// The reference's own test (`test/provider/xds_grpc_sotw_provider_test.go`,
    /// `testMultiDomainXdsConfigUpdate`), as YAML: the same lines.
    #[test]
    fn the_references_golden() {
        let foo = "
domain: foo
descriptors:
  - key: k1
    value: v1
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: k2
        rate_limit: {unlimited: true}
      - key: k2
        value: v2
        rate_limit: {unit: hour, requests_per_unit: 15}
  - key: j1
    value: v2
    rate_limit: {unlimited: true}
    descriptors:
      - key: j2
        rate_limit: {unlimited: true}
      - key: j2
        value: v2
        rate_limit: {unit: day, requests_per_unit: 15}
        shadow_mode: true
        quota_mode: true
";
        let bar = "
domain: bar
descriptors:
  - key: k1
    value: v1
    rate_limit: {unit: minute, requests_per_unit: 100}
";
        let mut want = vec![
            "foo.k1_v1: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false",
            "foo.k1_v1.k2: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false",
            "foo.k1_v1.k2_v2: unit=HOUR requests_per_unit=15, shadow_mode: false, quota_mode: false",
            "foo.j1_v2: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false",
            "foo.j1_v2.j2: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false",
            "foo.j1_v2.j2_v2: unit=DAY requests_per_unit=15, shadow_mode: true, quota_mode: true",
            "bar.k1_v1: unit=MINUTE requests_per_unit=100, shadow_mode: false, quota_mode: false",
        ];
        want.sort_unstable();
        assert_eq!(dump(&[foo, bar]), want);
    }

    #[test]
    fn depth_first_in_config_order_and_nodes_without_a_limit_skipped() {
        let yaml = "
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: c
    rate_limit: {unit: week, requests_per_unit: 0}
";
        let limits =
            EnvoyLimits::parse(&[("d.yaml".to_owned(), yaml.to_owned())], &[]).expect("loads");
        assert_eq!(
            limits.dump(),
            "d.a.b: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false\n\
             d.c: unit=WEEK requests_per_unit=0, shadow_mode: false, quota_mode: false\n"
        );
        assert_eq!(EnvoyLimits::default().dump(), "");
    }
}
