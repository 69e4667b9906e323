//! The serving config's identity ([`ConfigInfo`]) and the last reload's
//! outcome ([`ReloadStatus`]), shown by `GET /v1/rules` and `/readyz`, and
//! the `tollgate_config_*` metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use serde_json::{Value, json};

use super::version::rfc3339;

/// The loaded config's identity: its version (a content hash of every file
/// read) and when it was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigInfo {
    /// 16 hex digits of the SHA-1 of the files (path and content, in
    /// order), so replicas serving the same files show the same version.
    pub version: String,
    /// When it was loaded (wall clock).
    pub loaded_at: SystemTime,
}

impl ConfigInfo {
    /// `version`, loaded now.
    #[must_use]
    pub fn now(version: String) -> Self {
        Self {
            version,
            loaded_at: SystemTime::now(),
        }
    }
}

/// Counter `tollgate_config_reloads_total{outcome}`: reloads by outcome
/// (`ok`: the new config serves; `error`: it was refused, the old one
/// still serves).
pub const RELOADS: &str = "tollgate_config_reloads_total";
/// Gauge `tollgate_config_info{version}`, always 1: the version serving.
/// Written into `/metrics` by hand, one series, not through the `metrics`
/// facade, whose series cannot be removed: every reload would leave one
/// behind.
pub const CONFIG_INFO: &str = "tollgate_config_info";
/// The help of [`CONFIG_INFO`].
pub const CONFIG_INFO_HELP: &str =
    "The config version serving (a content hash of its files), always 1.";
/// Gauge `tollgate_config_loaded_timestamp_seconds`: when the serving
/// config was loaded (Unix time).
pub const LOADED_AT: &str = "tollgate_config_loaded_timestamp_seconds";

/// What went wrong with the files on disk: a reload refused, or applied
/// without settings that need a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadError {
    /// The problem (file:line: field: why, or what needs a restart).
    pub message: String,
    /// When the reload was tried.
    pub at: SystemTime,
    /// The version of the files it read.
    pub version: String,
}

/// The last reload's problem, if any, shared by every generation of the
/// front doors. A reload that loads every setting clears it.
#[derive(Debug, Default)]
pub struct ReloadStatus {
    last_error: Mutex<Option<ReloadError>>,
    /// Loads that served (the first one included, [`ReloadStatus::first_load`])
    /// and loads refused: the reference's `config_load_success` and
    /// `config_load_error` (`[metrics] reference_names`).
    loads: [AtomicU64; 2],
}

impl ReloadStatus {
    /// No reload yet; registers the metrics' zero series.
    #[must_use]
    pub fn new() -> Self {
        for outcome in ["ok", "error"] {
            ::metrics::counter!(RELOADS, "outcome" => outcome).increment(0);
        }
        Self::default()
    }

    /// Records a reload's outcome: `error` is what remains wrong with the
    /// files on disk (`None`: all of them serve); `applied` whether the
    /// new config serves.
    pub fn record(&self, applied: bool, error: Option<ReloadError>) {
        let outcome = if applied { "ok" } else { "error" };
        ::metrics::counter!(RELOADS, "outcome" => outcome).increment(1);
        self.loads[usize::from(!applied)].fetch_add(1, Ordering::Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = error;
    }

    /// Counts the config loaded at start (not a reload: no
    /// `tollgate_config_reloads_total`).
    pub fn first_load(&self) {
        self.loads[0].fetch_add(1, Ordering::Relaxed);
    }

    /// Config loads that served (the first one included) and loads
    /// refused, so far.
    #[must_use]
    pub fn loads(&self) -> (u64, u64) {
        (
            self.loads[0].load(Ordering::Relaxed),
            self.loads[1].load(Ordering::Relaxed),
        )
    }

    /// The last reload's problem.
    #[must_use]
    pub fn last_error(&self) -> Option<ReloadError> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `config_version`, `loaded_at` and `reload_error` for `/v1/rules`
    /// and `/readyz`, into `into`.
    pub fn describe(&self, info: &ConfigInfo, into: &mut serde_json::Map<String, Value>) {
        into.insert("config_version".to_owned(), json!(info.version));
        into.insert("loaded_at".to_owned(), json!(rfc3339(info.loaded_at)));
        let error = self.last_error().map(|e| {
            json!({
                "message": e.message,
                "at": rfc3339(e.at),
                "config_version": e.version,
            })
        });
        into.insert("reload_error".to_owned(), error.unwrap_or(Value::Null));
    }
}

/// Sets the load-time gauge for `info` (at each load).
pub(crate) fn record_loaded(info: &ConfigInfo) {
    let secs = info
        .loaded_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    ::metrics::gauge!(LOADED_AT).set(secs);
}
