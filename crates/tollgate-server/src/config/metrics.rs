//! The `[metrics]` table: how `/metrics` counts, for every rule and every
//! front door alike (docs/config.md, "[metrics]").

use toml::de::{DeTable, DeValue};

use super::checker::{Checker, join};
use super::model::MetricsConfig;

const METRICS_FIELDS: &[&str] = &["near_limit_ratio"];

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
        (self.errors.len() == before).then_some(metrics)
    }
}
