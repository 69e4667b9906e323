//! The `[metrics]` table: how `/metrics` counts, for every rule and every
//! front door alike (docs/config.md, "[metrics]").

use toml::de::{DeTable, DeValue};

use super::checker::{Checker, join};
use super::model::MetricsConfig;
use tollgate::top::MAX_TOP_DENIED_CAPACITY;

const METRICS_FIELDS: &[&str] = &[
    "near_limit_ratio",
    "top_denied_capacity",
    "top_denied_epoch",
    "reference_names",
];

impl Checker<'_> {
    pub(super) fn metrics(&mut self, t: &DeTable<'_>) -> Option<MetricsConfig> {
        let path = "metrics";
        let before = self.errors.len();
        self.unknown_fields(t, path, METRICS_FIELDS);
        let mut metrics = MetricsConfig::default();
        let key = "near_limit_ratio";
        if let Some(value) = t.get(key) {
            let field = join(path, key);
            // An integer is a number too: `near_limit_ratio = 1`.
            let ratio = match value.get_ref() {
                DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
                #[allow(clippy::cast_precision_loss)] // only 0 and 1 are in range
                DeValue::Integer(i) => {
                    i128::from_str_radix(&i.as_str().replace('_', ""), i.radix())
                        .ok()
                        .map(|n| n as f64)
                }
                _ => {
                    self.wrong_type(value, &field, "a number");
                    return None;
                }
            };
            match ratio.map(|r| (r, tollgate::resilient::check_near_limit_ratio(r))) {
                Some((r, Ok(()))) => metrics.near_limit_ratio = r,
                Some((_, Err(why))) => self.error(&value.span(), field, why),
                None => self.error(&value.span(), field, "not a number"),
            }
        }
        self.top_denied(t, path, &mut metrics);
        // The reference service's Prometheus names too (docs/metrics.md).
        if let Some(on) = self.boolean(t, path, "reference_names") {
            metrics.reference_names = on;
        }
        (self.errors.len() == before).then_some(metrics)
    }

    /// `top_denied_capacity` (0 turns the sketch off) and
    /// `top_denied_epoch`: the most denied keys per rule lately
    /// (docs/config.md, "[metrics]").
    fn top_denied(&mut self, t: &DeTable<'_>, path: &str, metrics: &mut MetricsConfig) {
        let key = "top_denied_capacity";
        if let Some(value) = t.get(key) {
            let field = join(path, key);
            let n = match value.get_ref() {
                DeValue::Integer(i) => {
                    i128::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok()
                }
                _ => {
                    self.wrong_type(value, &field, "an integer");
                    return;
                }
            };
            match n
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n <= MAX_TOP_DENIED_CAPACITY)
            {
                Some(c) => metrics.top_denied_capacity = c,
                None => {
                    let got = value.get_ref().as_integer().map_or("?", |i| i.as_str());
                    self.error(
                        &value.span(),
                        field,
                        format!(
                            "top_denied_capacity must be from 0 (off) to \
                             {MAX_TOP_DENIED_CAPACITY}, got {got}"
                        ),
                    );
                }
            }
        }
        if let Some(epoch) = self.duration(t, path, "top_denied_epoch") {
            metrics.top_denied_epoch = epoch;
        }
    }
}
