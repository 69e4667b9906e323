//! The `[store]` table (docs/config.md, "[store]"): where state is kept,
//! how the store is reached (its password from a file, an ACL user,
//! `[store.tls]`), and the failure policy. Secret and certificate files are
//! read here, at load, so `validate` finds what `serve` would stop on; no
//! message quotes what they hold.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tollgate::store::redis::RedisTls;
use toml::de::{DeTable, DeValue};

use super::checker::{Checker, join};
use super::model::{MAX_PREFIX_LEN, StoreConfig, StoreTls};
use super::secret::{Secret, read_pem_file, read_secret_file};
use crate::store_url::StoreUrl;

const STORE_FIELDS: &[&str] = &[
    "url",
    "timeout",
    "on_error",
    "prefix",
    "max_keys",
    "replicas",
    "heartbeat",
    "hybrid",
    "hybrid_batch",
    "hybrid_lease",
    "password_file",
    "username",
    "tls",
];
const TLS_FIELDS: &[&str] = &["ca_file", "cert_file", "key_file", "server_name"];

impl Checker<'_> {
    pub(super) fn store(&mut self, t: &DeTable<'_>) -> Option<StoreConfig> {
        let path = "store";
        let before = self.errors.len();
        self.unknown_fields(t, path, STORE_FIELDS);
        let mut store = StoreConfig::default();
        if let Some((s, span)) = self.string(t, path, "url") {
            match s.parse() {
                Ok(url) => store.url = url,
                Err(e) => self.error(&span, "store.url", e),
            }
        }
        if let Some((s, span)) = self.string(t, path, "timeout") {
            match tollgate::time::parse_duration(s) {
                Ok(d) if d.is_zero() => {
                    self.error(&span, "store.timeout", "timeout must be at least 1ms");
                }
                Ok(d) => store.timeout = d,
                Err(e) => self.error(&span, "store.timeout", e),
            }
        }
        if let Some((s, span)) = self.string(t, path, "on_error") {
            match s.parse() {
                Ok(p) => store.on_error = p,
                Err(e) => self.error(&span, "store.on_error", e),
            }
        }
        if let Some((s, span)) = self.string(t, path, "prefix") {
            match check_prefix(s) {
                Ok(()) => s.clone_into(&mut store.prefix),
                Err(e) => self.error(&span, "store.prefix", e),
            }
        }
        if let Some((n, span)) = self.positive(t, path, "max_keys") {
            match usize::try_from(n) {
                Ok(n) => store.max_keys = n,
                Err(_) => self.error(&span, "store.max_keys", "max_keys is too large"),
            }
        }
        if let Some((n, _)) = self.positive(t, path, "replicas") {
            store.replicas = n;
        }
        if let Some((s, span)) = self.string(t, path, "heartbeat") {
            match tollgate::time::parse_duration(s) {
                Ok(d) if d < Duration::from_millis(10) => {
                    self.error(&span, "store.heartbeat", "heartbeat must be at least 10ms");
                }
                Ok(d) => store.heartbeat = d,
                Err(e) => self.error(&span, "store.heartbeat", e),
            }
        }
        self.credentials(t, &mut store);
        if let Some(value) = t.get("tls") {
            match value.get_ref() {
                DeValue::Table(tls) => store.tls = self.tls(tls, &value.span(), &store.url),
                _ => self.wrong_type(value, "store.tls", "a table ([store.tls])"),
            }
        }
        let hybrid = self.boolean(t, path, "hybrid");
        let batch = self.positive(t, path, "hybrid_batch").map(|(n, _)| n);
        // `hybrid_lease` is a batch's life (HybridOptions::batch_life): the
        // key keeps the name users already write.
        let batch_life = self.duration(t, path, "hybrid_lease");
        let span = |k: &str| t.get(k).map(toml::Spanned::span).unwrap_or_default();
        if hybrid == Some(true) {
            if store.url.is_memory() {
                let why = "hybrid = true needs a Redis url in [store] (the hybrid store takes batches from Redis)";
                self.error(&span("hybrid"), "store.hybrid", why);
            }
            store.hybrid = Some(tollgate::store::hybrid::HybridOptions {
                replicas: u32::try_from(store.replicas).unwrap_or(u32::MAX),
                batch,
                batch_life,
                max_keys: store.max_keys,
            });
        } else if let Some(k) = ["hybrid_batch", "hybrid_lease"]
            .into_iter()
            .find(|k| t.contains_key(*k))
        {
            self.error(&span(k), join(path, k), format!("{k} needs hybrid = true"));
        }
        (self.errors.len() == before).then_some(store)
    }

    /// `password_file` and `username`, each against what the URL carries.
    fn credentials(&mut self, t: &DeTable<'_>, store: &mut StoreConfig) {
        let from_url = store.url.credentials().cloned().unwrap_or_default();
        if let Some((file, span)) = self.string(t, "store", "password_file") {
            let path = PathBuf::from(file);
            if from_url.password.is_some() {
                self.error(
                    &span,
                    "store.password_file",
                    "the password is given twice: the store url carries one too; \
                     keep one (take it out of the url)",
                );
            } else {
                match read_secret_file(&path) {
                    Ok(value) => {
                        let source = format!("[store] password_file {}", path.display());
                        store.password = Some(Secret::new(value, source));
                    }
                    Err(e) => self.error(
                        &span,
                        "store.password_file",
                        format!("{}: {e}", path.display()),
                    ),
                }
            }
        }
        if let Some((user, span)) = self.string(t, "store", "username") {
            if user.is_empty() || user.chars().any(|c| c.is_whitespace() || c.is_control()) {
                self.error(
                    &span,
                    "store.username",
                    "a user name must be non-empty, without spaces",
                );
            } else if from_url.username.is_some() {
                self.error(
                    &span,
                    "store.username",
                    "the user is given twice: the store url names one too; keep one",
                );
            } else {
                store.username = Some(user.to_owned());
            }
        }
    }

    /// `[store.tls]`: each file read and parsed, the whole checked as the
    /// store will build it.
    fn tls(&mut self, t: &DeTable<'_>, header: &Range<usize>, url: &StoreUrl) -> Option<StoreTls> {
        let path = "store.tls";
        let before = self.errors.len();
        self.unknown_fields(t, path, TLS_FIELDS);
        if !url.is_memory() && !matches!(url, StoreUrl::Redis { tls: true, .. }) {
            self.error(
                header,
                path,
                "[store.tls] is for a rediss:// url (TLS); this one is not",
            );
        }
        let mut tls = StoreTls::default();
        let mut settings = RedisTls::default();
        type Add = fn(RedisTls, &[u8]) -> Result<RedisTls, String>;
        let files: [(&str, &mut Option<PathBuf>, Add); 3] = [
            ("ca_file", &mut tls.ca_file, RedisTls::with_ca_pem),
            (
                "cert_file",
                &mut tls.cert_file,
                RedisTls::with_client_cert_pem,
            ),
            ("key_file", &mut tls.key_file, RedisTls::with_client_key_pem),
        ];
        for (key, slot, add) in files {
            let Some((file, span)) = self.string(t, path, key) else {
                continue;
            };
            let file = Path::new(file);
            let added = read_pem_file(file).and_then(|pem| add(settings.clone(), &pem));
            match added {
                Ok(next) => {
                    settings = next;
                    *slot = Some(file.to_path_buf());
                }
                Err(e) => self.error(&span, join(path, key), format!("{}: {e}", file.display())),
            }
        }
        if let Some((name, span)) = self.string(t, path, "server_name") {
            match settings.clone().with_server_name(name) {
                Ok(next) => {
                    settings = next;
                    tls.server_name = Some(name.to_owned());
                }
                Err(e) => self.error(&span, "store.tls.server_name", e),
            }
        }
        let span = |k: &str| t.get(k).map(toml::Spanned::span).unwrap_or_default();
        match (t.contains_key("cert_file"), t.contains_key("key_file")) {
            (true, false) => {
                self.error(
                    &span("cert_file"),
                    "store.tls.key_file",
                    "cert_file needs key_file (its key)",
                );
            }
            (false, true) => {
                self.error(
                    &span("key_file"),
                    "store.tls.cert_file",
                    "key_file needs cert_file (its certificate)",
                );
            }
            _ => {}
        }
        if self.errors.len() != before {
            return None;
        }
        if let Err(e) = settings.check() {
            // A key that is not the certificate's, a CA rustls refuses.
            let files = [&tls.ca_file, &tls.cert_file, &tls.key_file]
                .into_iter()
                .flatten()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            self.error(header, path, format!("{e} (files: {files})"));
            return None;
        }
        tls.settings = settings;
        Some(tls)
    }
}

fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err("prefix must not be empty".to_owned());
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(format!(
            "prefix is {} bytes, longer than {MAX_PREFIX_LEN}",
            prefix.len()
        ));
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
    {
        return Err(format!(
            "prefix {prefix:?} contains {c:?}; only A-Z a-z 0-9 _ . : - are allowed"
        ));
    }
    Ok(())
}
