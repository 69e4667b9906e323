//! The `[envoy]` table: switches of the Envoy rate limit service that the
//! reference service takes from its environment (docs/envoy.md,
//! "Settings").

use toml::de::{DeTable, DeValue};

use super::checker::{Checker, join};
use super::model::{EnvoyHeaders, EnvoySettings, StoreFailure};

const ENVOY_FIELDS: &[&str] = &[
    "merge_domains",
    "response_headers",
    "limit_header",
    "remaining_header",
    "reset_header",
    "quota_mode",
    "response_dynamic_metadata",
    "count_own_cost",
    "store_failure",
    "shadow_mode",
];

impl Checker<'_> {
    pub(super) fn envoy(&mut self, t: &DeTable<'_>) -> Option<EnvoySettings> {
        let path = "envoy";
        let before = self.errors.len();
        // `xds` is a table of its own (`xds.rs`), not one of the switches
        // an unknown field's message lists.
        let switches: DeTable<'_> = t
            .iter()
            .filter(|(k, _)| k.get_ref() != "xds")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.unknown_fields(&switches, path, ENVOY_FIELDS);
        let mut envoy = EnvoySettings::default();
        if let Some(b) = self.boolean(t, path, "merge_domains") {
            envoy.merge_domains = b;
        }
        if let Some(value) = t.get("response_headers") {
            let field = join(path, "response_headers");
            match value.get_ref() {
                DeValue::Boolean(true) => envoy.response_headers = EnvoyHeaders::Reference,
                DeValue::Boolean(false) => envoy.response_headers = EnvoyHeaders::None,
                DeValue::String(s) => match s.as_ref() {
                    "reference" => envoy.response_headers = EnvoyHeaders::Reference,
                    "ietf" => envoy.response_headers = EnvoyHeaders::Ietf,
                    other => self.error(
                        &value.span(),
                        field,
                        format!(
                            "unknown response_headers {other:?}; expected true, false, \"reference\" or \"ietf\""
                        ),
                    ),
                },
                _ => self.wrong_type(value, &field, "true, false, \"reference\" or \"ietf\""),
            }
        }
        if let Some(b) = self.boolean(t, path, "quota_mode") {
            envoy.quota_mode = b;
        }
        if let Some(b) = self.boolean(t, path, "response_dynamic_metadata") {
            envoy.response_dynamic_metadata = b;
        }
        if let Some(b) = self.boolean(t, path, "count_own_cost") {
            envoy.count_own_cost = b;
        }
        if let Some(b) = self.boolean(t, path, "shadow_mode") {
            envoy.shadow_mode = b;
        }
        if let Some((name, span)) = self.string(t, path, "store_failure") {
            match name {
                "policy" => envoy.store_failure = StoreFailure::Policy,
                "error" => envoy.store_failure = StoreFailure::Error,
                other => self.error(
                    &span,
                    join(path, "store_failure"),
                    format!("unknown store_failure {other:?}; expected \"policy\" or \"error\""),
                ),
            }
        }
        if let Some(value) = t.get("xds") {
            match value.get_ref() {
                DeValue::Table(x) => envoy.xds = self.xds(x),
                _ => self.wrong_type(value, "envoy.xds", "a table ([envoy.xds])"),
            }
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
        // The names are the reference fields'; the IETF pair has its own.
        if envoy.response_headers == EnvoyHeaders::Ietf {
            for key in ["limit_header", "remaining_header", "reset_header"] {
                if let Some(value) = t.get(key) {
                    self.error(
                        &value.span(),
                        join(path, key),
                        format!(
                            "{key} names a reference header; response_headers = \"ietf\" \
                             sends RateLimit and RateLimit-Policy"
                        ),
                    );
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
