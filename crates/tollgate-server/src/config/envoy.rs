//! The `[envoy]` table: switches of the Envoy rate limit service that the
//! reference service takes from its environment (docs/envoy.md,
//! "Settings").

use toml::de::DeTable;

use super::checker::{Checker, join};
use super::model::EnvoySettings;

const ENVOY_FIELDS: &[&str] = &[
    "merge_domains",
    "response_headers",
    "limit_header",
    "remaining_header",
    "reset_header",
    "quota_mode",
    "response_dynamic_metadata",
];

impl Checker<'_> {
    pub(super) fn envoy(&mut self, t: &DeTable<'_>) -> Option<EnvoySettings> {
        let path = "envoy";
        let before = self.errors.len();
        self.unknown_fields(t, path, ENVOY_FIELDS);
        let mut envoy = EnvoySettings::default();
        if let Some(b) = self.boolean(t, path, "merge_domains") {
            envoy.merge_domains = b;
        }
        if let Some(b) = self.boolean(t, path, "response_headers") {
            envoy.response_headers = b;
        }
        if let Some(b) = self.boolean(t, path, "quota_mode") {
            envoy.quota_mode = b;
        }
        if let Some(b) = self.boolean(t, path, "response_dynamic_metadata") {
            envoy.response_dynamic_metadata = b;
        }
        for (key, slot) in [
            ("limit_header", &mut envoy.limit_header),
            ("remaining_header", &mut envoy.remaining_header),
            ("reset_header", &mut envoy.reset_header),
        ] {
            if let Some((name, span)) = self.string(t, path, key) {
                match header_name(name) {
                    Ok(()) => *slot = name.to_owned(),
                    Err(why) => self.error(&span, join(path, key), why),
                }
            }
        }
        (self.errors.len() == before).then_some(envoy)
    }
}

/// Whether `name` can name an HTTP header Envoy adds to a response.
fn header_name(name: &str) -> Result<(), String> {
    http::HeaderName::from_bytes(name.as_bytes())
        .map(|_| ())
        .map_err(|_| format!("{name:?} is not an HTTP header name"))
}
