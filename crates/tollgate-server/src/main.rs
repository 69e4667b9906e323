//! `tollgate`: parses flags, runs a subcommand, maps its outcome to an exit
//! code (0 success, 1 failure, 2 bad command line).

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use tokio::net::TcpListener;
use tollgate_server::cli::{Cli, Command, ServeArgs};
use tollgate_server::server::{self, Listeners};
use tollgate_server::{check, replay, serve, validate};
use tracing_subscriber::EnvFilter;

/// mimalloc: a check allocates a few small buffers (the request, the
/// answer, header values) and glibc's malloc and free took a quarter of
/// the instructions of a check.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => match run_serve(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tollgate serve: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Validate(args) => match validate::run(&args) {
            Ok(config) => {
                let file = args.config.display().to_string();
                let mut stdout = std::io::stdout().lock();
                if write!(stdout, "{}", validate::summary(&config, &file)).is_err() {
                    return ExitCode::FAILURE;
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Check(args) => match check::run(&args) {
            Ok(tally) => {
                eprint!("{tally}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tollgate check: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Replay(args) => match replay::run(&args) {
            Ok(summary) => {
                eprint!("{summary}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tollgate replay: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Logs to stderr; `RUST_LOG` filters (default `info`).
fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

async fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} for the {what}: {e}"))
}

/// Resolves the flags, binds, and serves until SIGTERM or SIGINT.
fn run_serve(args: &ServeArgs) -> Result<(), String> {
    let plan = serve::plan(args)?;
    init_tracing();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let mut listeners = Listeners::default();
        if let Some(addr) = plan.http {
            listeners.http = Some(bind(addr, "HTTP API").await?);
        }
        if let Some(addr) = plan.proxy {
            listeners.proxy = Some(bind(addr, "reverse proxy").await?);
        }
        server::run(listeners, shutdown_signal(), plan.config).await
    })?;
    tracing::info!("tollgate serve: stopped");
    Ok(())
}

/// Resolves on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT: shutting down"),
        () = term => tracing::info!("SIGTERM: shutting down"),
    }
}
