//! The `[envoy.xds]` table (and `[envoy.xds.tls]`): the ADS server the
//! Envoy limits are subscribed from (docs/xds.md). Every field is checked
//! here, the TLS files read and parsed, so `validate` reports a bad file
//! with its field; the client builds its TLS from them at start.

use std::time::Duration;

use toml::de::{DeTable, DeValue};

use super::checker::{Checker, join};
use super::model::{XdsSettings, XdsTls};

const XDS_FIELDS: &[&str] = &[
    "server",
    "node_id",
    "node_metadata",
    "tls",
    "initial_backoff",
    "max_backoff",
    "max_message_bytes",
    "start_without_config",
];

/// Why `--envoy-config` files and `[envoy.xds]` are refused together
/// (`serve` and `validate` alike).
pub const FILES_AND_XDS: &str = "--envoy-config and [envoy.xds] both give the Envoy limits: keep \
     one (files or xDS, as the reference's CONFIG_TYPE picks one)";

/// The node id when none is given (the reference's
/// `CONFIG_GRPC_XDS_NODE_ID` default).
pub const DEFAULT_NODE_ID: &str = "default";
/// The first wait before reconnecting (the reference's
/// `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL` default).
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(10);
/// The longest wait before reconnecting (its
/// `XDS_CLIENT_BACKOFF_MAX_INTERVAL` default).
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(60);
/// The largest response taken: 64 MiB (grpc-go's 4 MiB default, the
/// reference's, is near what thousands of Envoy Gateway domains need).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;

impl XdsSettings {
    /// Settings for `server` with every default: node `default`, no
    /// metadata, plaintext unless the URL is `https://`, backoff 10 s to
    /// 60 s, 64 MiB responses, waiting for the first config.
    #[must_use]
    pub fn new(server: &str) -> Self {
        XdsSettings {
            server: server.to_owned(),
            node_id: DEFAULT_NODE_ID.to_owned(),
            node_metadata: Vec::new(),
            tls: server.starts_with("https://").then(XdsTls::default),
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            start_without_config: false,
        }
    }
}

/// The `host:port` of an ADS server address: without `http://` or
/// `https://`, nor the grpc-go target schemes the reference's client
/// (grpc-go) reads, `dns:///`, `dns:` and `passthrough:///` (tollgate
/// resolves the name itself either way).
#[must_use]
pub fn server_authority(server: &str) -> &str {
    for scheme in ["http://", "https://", "dns:///", "passthrough:///"] {
        if let Some(rest) = server.strip_prefix(scheme) {
            return rest;
        }
    }
    // `dns:host:port`; `dns:18000` stays a host named dns, and
    // `dns://resolver/host:port` (a chosen DNS server) is refused below.
    match server.strip_prefix("dns:") {
        Some(rest) if !rest.starts_with('/') && rest.contains(':') => rest,
        _ => server,
    }
}

/// Checks an ADS server address: `host:port`, after `http://`,
/// `https://`, `dns:///`, `dns:` or `passthrough:///`, no path.
///
/// # Errors
/// What is wrong, with an example.
pub fn check_server(server: &str) -> Result<(), String> {
    let rest = server_authority(server);
    let ok = !rest.is_empty()
        && !rest.contains('/')
        && format!("http://{rest}")
            .parse::<http::Uri>()
            .is_ok_and(|u| u.port_u16().is_some() && u.host().is_some_and(|h| !h.is_empty()));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{server:?} is not an ADS server address (e.g. \"envoy-gateway:18001\", \
             \"dns:///envoy-gateway:18001\" or \"https://envoy-gateway:18001\")"
        ))
    }
}

impl Checker<'_> {
    /// `[envoy.xds]`.
    pub(super) fn xds(&mut self, t: &DeTable<'_>) -> Option<XdsSettings> {
        let path = "envoy.xds";
        let before = self.errors.len();
        self.unknown_fields(t, path, XDS_FIELDS);
        let server = self.string(t, path, "server");
        let Some((server, span)) = server else {
            if !t.contains_key("server") {
                self.error(
                    &(0..0),
                    join(path, "server"),
                    "[envoy.xds] needs server (the ADS server, host:port)",
                );
            }
            return None;
        };
        if let Err(e) = check_server(server) {
            self.error(&span, join(path, "server"), e);
        }
        let mut xds = XdsSettings::new(server);
        if let Some((id, span)) = self.string(t, path, "node_id") {
            if id.is_empty() {
                self.error(&span, join(path, "node_id"), "node_id must not be empty");
            }
            id.clone_into(&mut xds.node_id);
        }
        if let Some(value) = t.get("node_metadata") {
            let field = join(path, "node_metadata");
            match value.get_ref() {
                DeValue::Table(m) => {
                    for (k, v) in m {
                        match v.get_ref().as_str() {
                            Some(s) => xds
                                .node_metadata
                                .push((k.get_ref().to_string(), s.to_owned())),
                            None => self.wrong_type(v, &join(&field, k.get_ref()), "a string"),
                        }
                    }
                }
                _ => self.wrong_type(value, &field, "a table of strings ({ key = \"value\" })"),
            }
        }
        for (key, slot) in [
            ("initial_backoff", &mut xds.initial_backoff),
            ("max_backoff", &mut xds.max_backoff),
        ] {
            if let Some(d) = self.duration(t, path, key) {
                *slot = d;
            }
        }
        if xds.initial_backoff > xds.max_backoff {
            let span = t
                .get("max_backoff")
                .or_else(|| t.get("initial_backoff"))
                .map(toml::Spanned::span)
                .unwrap_or_default();
            self.error(
                &span,
                join(path, "max_backoff"),
                format!(
                    "max_backoff ({:?}) is shorter than initial_backoff ({:?})",
                    xds.max_backoff, xds.initial_backoff
                ),
            );
        }
        if let Some((n, span)) = self.positive(t, path, "max_message_bytes") {
            match usize::try_from(n) {
                Ok(n) => xds.max_message_bytes = n,
                Err(_) => self.error(&span, join(path, "max_message_bytes"), "too large"),
            }
        }
        if let Some(b) = self.boolean(t, path, "start_without_config") {
            xds.start_without_config = b;
        }
        if let Some(value) = t.get("tls") {
            match value.get_ref() {
                DeValue::Table(tls) => {
                    if server.starts_with("http://") {
                        self.error(
                            &value.span(),
                            join(path, "tls"),
                            "[envoy.xds.tls] is for TLS; server is http:// (plaintext): \
                             use https:// or host:port",
                        );
                    }
                    xds.tls = self.xds_tls(tls);
                }
                _ => self.wrong_type(value, &join(path, "tls"), "a table ([envoy.xds.tls])"),
            }
        }
        (self.errors.len() == before).then_some(xds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn parse(text: &str) -> Result<XdsSettings, String> {
        Config::parse(text, "t.toml")
            .map(|c| c.envoy_settings.xds.expect("xds"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn grpc_go_target_schemes_name_the_host() {
        for (server, authority) in [
            ("eg:18001", "eg:18001"),
            ("http://eg:18001", "eg:18001"),
            ("https://eg:18001", "eg:18001"),
            ("dns:///eg:18001", "eg:18001"),
            ("dns:eg:18001", "eg:18001"),
            ("passthrough:///eg:18001", "eg:18001"),
            ("dns:18001", "dns:18001"),
        ] {
            assert_eq!(server_authority(server), authority, "{server}");
            assert_eq!(check_server(server), Ok(()), "{server}");
        }
        for bad in ["dns://8.8.8.8/eg:18001", "dns:///eg", "eg", "unix:///s"] {
            assert!(check_server(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_and_every_field() {
        let x = parse("[envoy.xds]\nserver = 'eg:18001'\n").expect("valid");
        assert_eq!(x, XdsSettings::new("eg:18001"));
        assert_eq!(x.node_id, "default");
        assert!(x.tls.is_none());
        let x = parse(
            "[envoy.xds]\nserver = 'https://eg:18001'\nnode_id = 'envoy-ratelimit'\n\
             node_metadata = { a = '1', b = '2' }\ninitial_backoff = '100ms'\n\
             max_backoff = '2s'\nmax_message_bytes = 1000\nstart_without_config = true\n",
        )
        .expect("valid");
        assert_eq!(x.node_id, "envoy-ratelimit");
        assert_eq!(
            x.node_metadata,
            [("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        assert_eq!(x.initial_backoff, Duration::from_millis(100));
        assert_eq!(x.max_backoff, Duration::from_secs(2));
        assert_eq!(x.max_message_bytes, 1000);
        assert!(x.start_without_config);
        assert_eq!(x.tls, Some(XdsTls::default()), "https:// is TLS");
    }

    #[test]
    fn errors_name_the_field() {
        for (text, field) in [
            ("[envoy.xds]\nnode_id = 'x'\n", "envoy.xds.server"),
            ("[envoy.xds]\nserver = 'eg'\n", "envoy.xds.server"),
            ("[envoy.xds]\nserver = 'eg:1/path'\n", "envoy.xds.server"),
            (
                "[envoy.xds]\nserver = 'eg:1'\nbogus = 1\n",
                "envoy.xds.bogus",
            ),
            (
                "[envoy.xds]\nserver = 'eg:1'\nnode_id = ''\n",
                "envoy.xds.node_id",
            ),
            (
                "[envoy.xds]\nserver = 'eg:1'\nnode_metadata = { a = 1 }\n",
                "envoy.xds.node_metadata.a",
            ),
            (
                "[envoy.xds]\nserver = 'eg:1'\ninitial_backoff = '5s'\nmax_backoff = '1s'\n",
                "envoy.xds.max_backoff",
            ),
            (
                "[envoy.xds]\nserver = 'eg:1'\nmax_message_bytes = 0\n",
                "envoy.xds.max_message_bytes",
            ),
            (
                "[envoy.xds]\nserver = 'http://eg:1'\n[envoy.xds.tls]\n",
                "envoy.xds.tls",
            ),
            (
                "[envoy.xds]\nserver = 'eg:1'\n[envoy.xds.tls]\nca_file = '/nonexistent'\n",
                "envoy.xds.tls.ca_file",
            ),
            (
                "[envoy.xds]\nserver = 'eg:1'\n[envoy.xds.tls]\nserver_name = 'not a name!'\n",
                "envoy.xds.tls.server_name",
            ),
        ] {
            let e = parse(text).expect_err(text);
            assert!(e.contains(&format!("{field}:")), "{text}: {e}");
        }
    }

    #[test]
    fn rules_are_optional_with_xds() {
        let c = Config::parse("[envoy.xds]\nserver = 'eg:1'\n", "t.toml").expect("valid");
        assert!(c.rules.is_empty());
    }
}
