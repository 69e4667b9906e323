//! `tollgate check`: run checks of one key against the configured store
//! from the shell, at the store's own time — for operators poking at a live
//! limit, and for fleet and clock-skew tests that need separate processes.

use std::fmt;
use std::io::Write;
use std::sync::Arc;

use tollgate::Limiter;

use crate::cli::CheckArgs;
use crate::config::Config;
use crate::store::open_store;
use crate::store_url::StoreUrl;

/// What `tollgate check` counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Checks made.
    pub checks: u64,
    /// Checks admitted.
    pub admitted: u64,
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checks {} admitted {} denied {}",
            self.checks,
            self.admitted,
            self.checks - self.admitted
        )
    }
}

/// Runs `tollgate check`: `--count` checks (spread over `--concurrency`
/// tasks), one CSV line per check on stdout
/// (`allowed,remaining,retry_after_ms,reset_after_ms`).
///
/// # Errors
/// A bad config, an unreachable store, an unknown rule or a failed check.
pub fn run(args: &CheckArgs) -> Result<Tally, String> {
    let config = Config::load(&args.config).map_err(|e| e.to_string())?;
    let url = match &args.store {
        Some(text) => text
            .parse::<StoreUrl>()
            .map_err(|e| format!("--store: {e}"))?,
        None => config.store.url.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let store = open_store(&url, &config.store, false).await?;
        let limiter = Limiter::new(store, config.rules.iter().map(|r| r.rule.clone()))
            .map_err(|e| e.to_string())?;
        if limiter.rule(&args.rule).is_none() {
            return Err(format!(
                "unknown rule {:?}; it is not in the config",
                args.rule
            ));
        }
        let limiter = Arc::new(limiter);
        let tasks = args.concurrency.max(1);
        let per_task = args.count / tasks;
        let extra = args.count % tasks;
        let mut handles = Vec::new();
        for i in 0..tasks {
            let n = per_task + u64::from(i < extra);
            let (limiter, rule, key, cost) = (
                limiter.clone(),
                args.rule.clone(),
                args.key.clone(),
                args.cost,
            );
            handles.push(tokio::spawn(async move {
                let mut lines = Vec::new();
                for _ in 0..n {
                    let d = limiter
                        .check(&rule, key.as_bytes(), cost)
                        .await
                        .map_err(|e| e.to_string())?;
                    lines.push(d);
                }
                Ok::<_, String>(lines)
            }));
        }
        let mut out = std::io::stdout().lock();
        let mut tally = Tally {
            checks: 0,
            admitted: 0,
        };
        writeln!(out, "allowed,remaining,retry_after_ms,reset_after_ms")
            .map_err(|e| e.to_string())?;
        for h in handles {
            for d in h.await.map_err(|e| e.to_string())?? {
                tally.checks += 1;
                tally.admitted += u64::from(d.allowed);
                let retry = d.retry_after_ms().map_or(String::new(), |r| r.to_string());
                writeln!(
                    out,
                    "{},{},{retry},{}",
                    d.allowed,
                    d.remaining,
                    d.reset_after_ms()
                )
                .map_err(|e| e.to_string())?;
            }
        }
        Ok(tally)
    })
}
