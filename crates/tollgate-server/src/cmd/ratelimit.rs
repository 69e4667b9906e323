//! `tollgate ratelimit` (or the binary run as `ratelimit`, the name
//! envoyproxy/ratelimit's image gives it): the reference's environment
//! ([`crate::compat`]) turned into what `serve` serves ([`plan`]), where
//! its Envoy limits are read again ([`source`]), and its signals
//! ([`shutdown_signal`]: SIGHUP stops it, as it stops the reference).
//! `main.rs` binds and calls [`crate::server::run_reloading`], the one
//! start path `serve` takes too.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::compat::{LimitSource, Reference, RuntimeDir};
use crate::doors::envoy::limits::EnvoyLimits;
use crate::doors::{ByDoor, Door, Plan};
use crate::reload::Source;

/// How often the `CONFIG_TYPE=FILE` directory is looked at for a file
/// added, removed or changed (the reference watches it; this polls).
pub const DIRECTORY_POLL: Duration = Duration::from_secs(1);

/// What the entry serves: the reference's config, its Envoy limits (the
/// directory's files now; none yet under xDS), the gRPC door at
/// `GRPC_HOST:GRPC_PORT` and `/metrics` at `PROMETHEUS_ADDR`.
///
/// # Errors
/// A limits file that does not load (every problem, file by file).
pub fn plan(reference: &Reference) -> Result<Plan, String> {
    let config = reference.config.clone();
    let envoy = match &reference.source {
        LimitSource::Files(dir) => {
            let files = dir.files()?;
            EnvoyLimits::load_with(&files, &[], config.envoy_settings.merge_domains)
                .map_err(|e| e.to_string())?
        }
        LimitSource::Xds(_) => EnvoyLimits::default(),
    };
    let listen = ByDoor::default().with(Door::Envoy, reference.listen.grpc);
    crate::doors::check(&config, &listen)?;
    Ok(Plan {
        config,
        envoy: Arc::new(envoy),
        listen,
        ops: reference.listen.metrics,
    })
}

/// The first version and the reload source: under `CONFIG_TYPE=FILE` the
/// directory's files, listed again at each load and for each version (a
/// file added or removed changes it), and a task (spawned
/// here, on the current runtime) that notifies `hup` when a file is
/// added, removed or changed; under xDS nothing to read again (the xDS
/// client applies each snapshot).
#[must_use]
pub fn source(reference: &Reference) -> (String, Source) {
    let hup = Arc::new(Notify::new());
    match &reference.source {
        LimitSource::Files(dir) => {
            let for_load = reference.clone();
            let listed = dir.clone();
            tokio::spawn(watch_directory(dir.clone(), Arc::clone(&hup)));
            let source = Source {
                files: Vec::new(),
                list: Some(Box::new(move || listed.files())),
                load: Box::new(move || plan(&for_load)),
                poll: Duration::ZERO,
                hup,
                hup_means: "a RUNTIME_ROOT file changed",
            };
            (source.version(), source)
        }
        LimitSource::Xds(_) => {
            let source = Source {
                files: Vec::<PathBuf>::new(),
                list: None,
                load: Box::new(|| Err("the Envoy limits come from xDS".to_owned())),
                poll: Duration::ZERO,
                hup,
                hup_means: "SIGHUP",
            };
            (String::new(), source)
        }
    }
}

/// Notifies `hup` whenever the directory's fingerprint (its files' names,
/// sizes and times) changes.
async fn watch_directory(dir: RuntimeDir, hup: Arc<Notify>) {
    let mut seen = fingerprint(&dir).await;
    let mut every = tokio::time::interval(DIRECTORY_POLL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let now = fingerprint(&dir).await;
        if now != seen {
            seen = now;
            hup.notify_one();
        }
    }
}

async fn fingerprint(dir: &RuntimeDir) -> String {
    let dir = dir.clone();
    tokio::task::spawn_blocking(move || dir.fingerprint())
        .await
        .unwrap_or_default()
}

/// The future that resolves on the first SIGTERM, SIGINT or SIGHUP (the
/// reference stops on each of the three), installed now.
///
/// # Errors
/// A handler that cannot be installed.
#[cfg(unix)]
pub fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|e| format!("cannot listen for {name}: {e}"))
    };
    let mut int = listen(SignalKind::interrupt(), "SIGINT")?;
    let mut term = listen(SignalKind::terminate(), "SIGTERM")?;
    let mut hup = listen(SignalKind::hangup(), "SIGHUP")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = hup.recv() => tracing::info!("SIGHUP: shutting down, as the reference does"),
        }
    })
}

/// Resolves on the first Ctrl-C.
///
/// # Errors
/// Never.
#[cfg(not(unix))]
pub fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    Ok(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::info!("SIGINT: shutting down");
        } else {
            std::future::pending::<()>().await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::Env;

    #[test]
    fn file_mode_loads_the_directory() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("ratelimit/config");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join("a.yaml"),
            "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
        )
        .expect("write");
        std::fs::write(dir.join(".skip.yaml"), "not yaml: [").expect("write");
        let root_s = root.path().to_str().expect("utf-8");
        let reference = Reference::from_env(&Env::from_pairs(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "127.0.0.1:6379"),
            ("RUNTIME_ROOT", root_s),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("GRPC_PORT", "0"),
        ]))
        .expect("reference");
        let p = plan(&reference).expect("plan");
        assert_eq!(p.envoy.domains(), ["a"]);
        assert_eq!(p.at(Door::Envoy), Some("0.0.0.0:0".parse().expect("addr")));
        assert_eq!(p.ops, None);
        std::fs::write(dir.join("b.yaml"), "domain: [").expect("write");
        let err = plan(&reference).expect_err("bad file");
        assert!(err.contains("b.yaml"), "{err}");
    }

    /// A file added to the directory changes the version shown, as the
    /// limits it adds are loaded (the version once hashed only the files
    /// present at start).
    #[tokio::test]
    async fn file_mode_version_follows_the_directory() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("ratelimit/config");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let limits = |domain: &str| {
            format!(
                "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: 3}}\n"
            )
        };
        std::fs::write(dir.join("a.yaml"), limits("a")).expect("write");
        let root_s = root.path().to_str().expect("utf-8");
        let reference = Reference::from_env(&Env::from_pairs(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "127.0.0.1:6379"),
            ("RUNTIME_ROOT", root_s),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("GRPC_PORT", "0"),
        ]))
        .expect("reference");
        let (first, source) = super::source(&reference);
        assert_eq!(source.version(), first);
        std::fs::write(dir.join("b.yaml"), limits("b")).expect("write");
        let added = source.version();
        assert_ne!(added, first, "a new file, a new version");
        std::fs::remove_file(dir.join("b.yaml")).expect("remove");
        assert_eq!(source.version(), first, "the same files, the same version");
    }
}
