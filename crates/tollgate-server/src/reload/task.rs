//! The reload task of `serve` (docs/operations.md): on SIGHUP, and when
//! polling sees a file's content change, it loads every file again with
//! the loaders used at start, builds the next [`Generation`] of doors over
//! the same store and publishes it in one atomic swap. A config that does not load or build
//! changes nothing: the old doors keep serving, and the error is logged,
//! counted and shown (`/v1/rules`, `/readyz`). Settings read only at start
//! (listener addresses, the ops listener's included, how the store is
//! opened, the proxy's send timeout)
//! keep their running values; a change to them is reported the same way,
//! and the rest of the new config applies.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::Source;
use crate::config::{ConfigInfo, ReloadError, record_loaded, rfc3339};
use crate::doors::{Door, Generation, Plan, Shared};

/// Reloads `source` into `live` until `stop` turns true.
pub(crate) struct Reloader {
    /// The files' version loaded at start (under xDS, not the serving
    /// config's version, which is the xDS one).
    pub(crate) seen: String,
    pub(crate) source: Arc<Source>,
    pub(crate) live: Arc<ArcSwap<Generation>>,
    pub(crate) shared: Shared,
}

impl Reloader {
    /// Waits for SIGHUP or a changed file and reloads, until `stop`.
    pub(crate) async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut seen = self.seen.clone();
        // A change is loaded once two polls in a row read the same new
        // content: a file written in place (not renamed) is not caught
        // half-written (docs/operations.md).
        let mut pending: Option<String> = None;
        let poll = self.source.poll;
        let mut tick = tokio::time::interval(if poll.is_zero() {
            std::time::Duration::from_secs(3600)
        } else {
            poll
        });
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            let why = tokio::select! {
                () = self.source.hup.notified() => self.source.hup_means,
                _ = tick.tick(), if !poll.is_zero() => {
                    let source = Arc::clone(&self.source);
                    let now = tokio::task::spawn_blocking(move || source.version())
                        .await
                        .unwrap_or_default();
                    if now == seen || pending.as_ref() != Some(&now) {
                        pending = (now != seen).then_some(now);
                        continue;
                    }
                    "a config file changed"
                }
                // Only shutdown sends, and a gone sender is shutdown too.
                _ = stop.changed() => break,
            };
            pending = None;
            seen = self.reload(why).await;
        }
    }

    /// Loads the files and swaps the new doors in, or reports why not.
    /// Returns the version of the files read.
    async fn reload(&self, why: &str) -> String {
        let started = Instant::now();
        let source = Arc::clone(&self.source);
        let read = tokio::task::spawn_blocking(move || {
            // The version first: a file changed during the load is seen
            // as changed at the next poll, and loaded again.
            let version = source.version();
            (version, (source.load)())
        })
        .await;
        let (version, loaded) = match read {
            Ok(read) => read,
            Err(e) => (String::new(), Err(format!("the config loader failed: {e}"))),
        };
        // One swap at a time: an xDS update meanwhile would be undone.
        let swapping = self
            .shared
            .swap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.live.load_full();
        let built = loaded.and_then(|mut loaded| {
            let fixed = keep_fixed(&old.plan, &mut loaded);
            // Under xDS the Envoy limits, and the version shown, are the
            // last xDS config's: a file reload changes the rest.
            let info = if loaded.config.envoy_settings.xds.is_some() {
                loaded.envoy = Arc::clone(&old.plan.envoy);
                ConfigInfo::now(old.info.version.clone())
            } else {
                ConfigInfo::now(version.clone())
            };
            Generation::build(loaded, info, &self.shared, Some(&old)).map(|d| (d, fixed))
        });
        let status = &self.shared.status;
        match built {
            Err(message) => {
                tracing::error!(
                    "config reload ({why}) refused; still serving version {} loaded at {}: {message}",
                    old.info.version,
                    rfc3339(old.info.loaded_at),
                );
                status.record(
                    false,
                    Some(ReloadError {
                        message,
                        at: SystemTime::now(),
                        version: version.clone(),
                    }),
                );
            }
            Ok((doors, fixed)) => {
                let doors = Arc::new(doors);
                record_loaded(&doors.info);
                let rules = doors.gate.rules().len();
                let loaded_at = rfc3339(doors.info.loaded_at);
                self.live.store(doors);
                drop(swapping);
                drop(old);
                tracing::info!(
                    "config reloaded ({why}): version {version}, loaded at {loaded_at}, \
                     {rules} rules, swapped in {:?}",
                    started.elapsed()
                );
                let error = (!fixed.is_empty()).then(|| {
                    let message =
                        format!("applied except what needs a restart: {}", fixed.join("; "));
                    tracing::warn!("config reload ({why}): {message}");
                    ReloadError {
                        message,
                        at: SystemTime::now(),
                        version: version.clone(),
                    }
                });
                status.record(true, error);
            }
        }
        version
    }
}

/// Sets in `new` the running values of the settings read only at start,
/// and says which of them `new` changed.
fn keep_fixed(running: &Plan, new: &mut Plan) -> Vec<String> {
    let mut changed = Vec::new();
    let show = |a: Option<std::net::SocketAddr>| a.map_or("none".to_owned(), |a| a.to_string());
    // The admin API's address is part of `[admin]`, compared below.
    for door in Door::ALL.into_iter().filter(|d| d.is_front()) {
        let (before, after) = (running.at(door), new.at(door));
        if before != after {
            changed.push(format!(
                "{} changed from {} to {} (listener addresses are bound at start)",
                door.address(),
                show(before),
                show(after)
            ));
        }
    }
    if running.ops != new.ops {
        changed.push(format!(
            "the ops listener's address changed from {} to {} (listener addresses are bound \
             at start)",
            show(running.ops),
            show(new.ops)
        ));
    }
    let was = &running.config;
    let (store, s) = (&was.store, &mut new.config.store);
    if store.url != s.url {
        changed.push(format!(
            "[store] url changed from {} to {} (the store is opened at start)",
            store.url, s.url
        ));
    }
    for (field, differs) in [
        ("prefix", store.prefix != s.prefix),
        ("timeout", store.timeout != s.timeout),
        ("max_keys", store.max_keys != s.max_keys),
        ("hybrid", store.hybrid != s.hybrid),
        // what the file holds, compared: a rotated password needs a restart
        ("password_file", store.password != s.password),
        ("username", store.username != s.username),
        ("tls", store.tls != s.tls),
    ] {
        if differs {
            changed.push(format!(
                "[store] {field} changed (the store is opened with it at start)"
            ));
        }
    }
    s.url = store.url.clone();
    s.prefix = store.prefix.clone();
    s.timeout = store.timeout;
    s.max_keys = store.max_keys;
    s.hybrid = store.hybrid.clone();
    s.password = store.password.clone();
    s.username = store.username.clone();
    s.tls = store.tls.clone();
    if was.proxy.send_timeout != new.config.proxy.send_timeout {
        changed.push(
            "[proxy] send_timeout changed (the proxy's connections are set up with it at start)"
                .to_owned(),
        );
        new.config.proxy.send_timeout = was.proxy.send_timeout;
    }
    // The admin API's tokens are read when its listener opens: a
    // reload that drops a token must say the token still works, or an
    // operator revoking a leaked one believes it revoked (docs/operations.md).
    if was.admin != new.config.admin {
        changed.push(
            "[admin] changed (the admin API's listener and tokens are set up at start; \
             a removed token still works until the restart)"
                .to_owned(),
        );
        new.config.admin = was.admin.clone();
    }
    // The xDS client is started once, with the settings at start.
    if was.envoy_settings.xds != new.config.envoy_settings.xds {
        changed.push("[envoy.xds] changed (the xDS client is started with it at start)".to_owned());
        new.config.envoy_settings.xds = was.envoy_settings.xds.clone();
    }
    // Tracing is set up at start, the OTEL_* variables over [tracing]
    // (they do not change while the process runs).
    let mut tracing = new.config.tracing.clone();
    if crate::telemetry::env::apply(&mut tracing).is_err() || tracing != was.tracing {
        changed.push("[tracing] changed (tracing is set up at start)".to_owned());
    }
    new.config.tracing = was.tracing.clone();
    new.config.http.listen = was.http.listen;
    new.config.proxy.listen = was.proxy.listen;
    // `[ops] readiness` is not kept: it applies from the next `/readyz`.
    new.config.ops.listen = was.ops.listen;
    new.listen = running.listen.clone();
    new.ops = running.ops;
    changed
}
