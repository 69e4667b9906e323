//! The `[ops]` table: the ops listener's address and what readiness
//! means (docs/config.md, "[ops]"; docs/operations.md, "Probes").

use toml::de::DeTable;

use super::checker::Checker;
use super::model::OpsConfig;

const OPS_FIELDS: &[&str] = &["listen", "readiness"];

impl Checker<'_> {
    pub(super) fn ops(&mut self, t: &DeTable<'_>) -> Option<OpsConfig> {
        let path = "ops";
        let before = self.errors.len();
        self.unknown_fields(t, path, OPS_FIELDS);
        let mut ops = OpsConfig {
            listen: self.socket_addr(t, path, "listen"),
            ..OpsConfig::default()
        };
        if let Some((s, span)) = self.string(t, path, "readiness") {
            match s.parse() {
                Ok(r) => ops.readiness = r,
                Err(e) => self.error(&span, "ops.readiness", e),
            }
        }
        (self.errors.len() == before).then_some(ops)
    }
}
