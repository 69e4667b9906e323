//! The TLS tables of clients and listeners: `[envoy.xds.tls]` (the ADS
//! server), `[proxy.upstream_tls]` (an `https://` upstream) and
//! `[proxy.listen_tls]` (the proxy's own listener). The client tables
//! share their files' fields, spelling and errors; every file is read and
//! parsed now, so `validate` names a bad one with its field.

use std::path::{Path, PathBuf};

use tollgate::store::redis::RedisTls;
use toml::de::DeTable;

use super::checker::{Checker, join};
use super::model::{ListenTls, Roots, UpstreamTls, XdsTls};
use super::secret::read_pem_file;

/// The fields of a TLS client table (`[envoy.xds.tls]`).
const CLIENT_FIELDS: &[&str] = &["ca_file", "cert_file", "key_file", "server_name"];
/// `[proxy.upstream_tls]`: a client table's, and the proxy's own.
const UPSTREAM_FIELDS: &[&str] = &[
    "ca_file",
    "cert_file",
    "key_file",
    "server_name",
    "roots",
    "http2",
];
/// `[proxy.listen_tls]`.
const LISTEN_FIELDS: &[&str] = &["cert_file", "key_file"];

type Check = fn(RedisTls, &[u8]) -> Result<RedisTls, String>;

impl Checker<'_> {
    /// `[envoy.xds.tls]`.
    pub(super) fn xds_tls(&mut self, t: &DeTable<'_>) -> Option<XdsTls> {
        let path = "envoy.xds.tls";
        let before = self.errors.len();
        self.unknown_fields(t, path, CLIENT_FIELDS);
        let tls = self.client_files(t, path);
        (self.errors.len() == before).then_some(tls)
    }

    /// `[proxy.upstream_tls]`.
    pub(super) fn upstream_tls(&mut self, t: &DeTable<'_>) -> Option<UpstreamTls> {
        let path = "proxy.upstream_tls";
        let before = self.errors.len();
        self.unknown_fields(t, path, UPSTREAM_FIELDS);
        let files = self.client_files(t, path);
        let mut tls = UpstreamTls {
            ca_file: files.ca_file,
            cert_file: files.cert_file,
            key_file: files.key_file,
            server_name: files.server_name,
            ..UpstreamTls::default()
        };
        if let Some((roots, span)) = self.string(t, path, "roots") {
            match roots {
                "system" => tls.roots = Roots::System,
                "bundled" => tls.roots = Roots::Bundled,
                "none" => tls.roots = Roots::None,
                other => self.error(
                    &span,
                    join(path, "roots"),
                    format!("unknown roots {other:?}; expected system, bundled or none"),
                ),
            }
            if roots == "none" && !t.contains_key("ca_file") {
                self.error(
                    &span,
                    join(path, "ca_file"),
                    "roots = \"none\" needs ca_file (the CAs to trust)",
                );
            }
        }
        if let Some(b) = self.boolean(t, path, "http2") {
            tls.http2 = b;
        }
        (self.errors.len() == before).then_some(tls)
    }

    /// `[proxy.listen_tls]`: both files, read and parsed now.
    pub(super) fn listen_tls(&mut self, t: &DeTable<'_>) -> Option<ListenTls> {
        let path = "proxy.listen_tls";
        let before = self.errors.len();
        self.unknown_fields(t, path, LISTEN_FIELDS);
        let cert = self.pem_file(t, path, "cert_file", RedisTls::with_client_cert_pem);
        let key = self.pem_file(t, path, "key_file", RedisTls::with_client_key_pem);
        for key in LISTEN_FIELDS {
            if !t.contains_key(*key) {
                self.error(
                    &(0..0),
                    join(path, key),
                    "[proxy.listen_tls] needs cert_file and key_file",
                );
            }
        }
        match (cert, key) {
            (Some(cert_file), Some(key_file)) if self.errors.len() == before => Some(ListenTls {
                cert_file,
                key_file,
            }),
            _ => None,
        }
    }

    /// A PEM file field, read and parsed by `check`.
    fn pem_file(
        &mut self,
        t: &DeTable<'_>,
        path: &str,
        key: &str,
        check: Check,
    ) -> Option<PathBuf> {
        let (file, span) = self.string(t, path, key)?;
        let file = Path::new(file);
        match read_pem_file(file).and_then(|pem| check(RedisTls::default(), &pem)) {
            Ok(_) => Some(file.to_path_buf()),
            Err(e) => {
                self.error(&span, join(path, key), format!("{}: {e}", file.display()));
                None
            }
        }
    }

    /// The fields every TLS client table has: `ca_file`, `cert_file`,
    /// `key_file` (each read and parsed), `server_name`.
    fn client_files(&mut self, t: &DeTable<'_>, path: &str) -> XdsTls {
        let mut tls = XdsTls {
            ca_file: self.pem_file(t, path, "ca_file", RedisTls::with_ca_pem),
            cert_file: self.pem_file(t, path, "cert_file", RedisTls::with_client_cert_pem),
            key_file: self.pem_file(t, path, "key_file", RedisTls::with_client_key_pem),
            server_name: None,
        };
        if let Some((name, span)) = self.string(t, path, "server_name") {
            match RedisTls::default().with_server_name(name) {
                Ok(_) => tls.server_name = Some(name.to_owned()),
                Err(e) => self.error(&span, join(path, "server_name"), e),
            }
        }
        self.cert_with_key(t, path);
        tls
    }

    /// A client certificate goes with its key: either file without the
    /// other is an error on the one given. `[tracing]` checks it too.
    pub(super) fn cert_with_key(&mut self, t: &DeTable<'_>, path: &str) {
        let span = |k: &str| t.get(k).map(toml::Spanned::span).unwrap_or_default();
        match (t.contains_key("cert_file"), t.contains_key("key_file")) {
            (true, false) => self.error(
                &span("cert_file"),
                join(path, "key_file"),
                "cert_file needs key_file (its key)",
            ),
            (false, true) => self.error(
                &span("key_file"),
                join(path, "cert_file"),
                "key_file needs cert_file (its certificate)",
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Roots, UpstreamTls};

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, "t.toml").map_err(|e| e.to_string())
    }

    const RULE: &str = "[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n";

    #[test]
    fn upstream_tls_defaults_and_fields() {
        let c = parse(RULE).expect("valid");
        assert_eq!(c.proxy.upstream_tls, UpstreamTls::default());
        assert_eq!(c.proxy.upstream_tls.roots, Roots::System);
        assert!(c.proxy.upstream_tls.http2);
        assert!(c.proxy.listen_tls.is_none());
        let c = parse(&format!(
            "[proxy.upstream_tls]\nroots = 'bundled'\nhttp2 = false\nserver_name = 'api.example.com'\n{RULE}"
        ))
        .expect("valid");
        let tls = &c.proxy.upstream_tls;
        assert_eq!(tls.roots, Roots::Bundled);
        assert!(!tls.http2);
        assert_eq!(tls.server_name.as_deref(), Some("api.example.com"));
    }

    #[test]
    fn errors_name_the_field() {
        for (table, field) in [
            (
                "[proxy.upstream_tls]\nbogus = 1\n",
                "proxy.upstream_tls.bogus",
            ),
            (
                "[proxy.upstream_tls]\nroots = 'os'\n",
                "proxy.upstream_tls.roots",
            ),
            (
                "[proxy.upstream_tls]\nroots = 'none'\n",
                "proxy.upstream_tls.ca_file",
            ),
            (
                "[proxy.upstream_tls]\nhttp2 = 'yes'\n",
                "proxy.upstream_tls.http2",
            ),
            (
                "[proxy.upstream_tls]\nca_file = '/nonexistent'\n",
                "proxy.upstream_tls.ca_file",
            ),
            (
                "[proxy.upstream_tls]\ncert_file = '/nonexistent'\n",
                "proxy.upstream_tls.cert_file",
            ),
            (
                "[proxy.upstream_tls]\nserver_name = 'not a name!'\n",
                "proxy.upstream_tls.server_name",
            ),
            ("[proxy]\nupstream_tls = 1\n", "proxy.upstream_tls"),
            ("[proxy.listen_tls]\n", "proxy.listen_tls.cert_file"),
            (
                "[proxy.listen_tls]\ncert_file = '/nonexistent'\nkey_file = '/nonexistent'\n",
                "proxy.listen_tls.key_file",
            ),
        ] {
            let e = parse(&format!("{table}{RULE}")).expect_err(table);
            assert!(e.contains(&format!("{field}:")), "{table}: {e}");
        }
    }
}
