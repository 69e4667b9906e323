//! `tollgate`: parses flags, runs a subcommand, maps its outcome to an exit
//! code (0 success, 1 failure, 2 bad command line).

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Notify;
use tollgate_server::cli::{Cli, Command, ServeArgs};
use tollgate_server::cmd::{check, ratelimit, replay, serve, validate};
use tollgate_server::compat::http::ReferenceHttp;
use tollgate_server::compat::{Env, Reference};
use tollgate_server::config::version_of_files;
use tollgate_server::doors::Door;
use tollgate_server::reload::Source;
use tollgate_server::server::{self, Listeners, ReferencePorts};
use tracing_subscriber::EnvFilter;

/// mimalloc: a check allocates a few small buffers (the request, the
/// answer, header values) and glibc's malloc and free took a quarter of
/// the instructions of a check.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // The reference's image runs it as /bin/ratelimit, with no arguments.
    if invoked_as_ratelimit() {
        return run_ratelimit();
    }
    let cli = Cli::parse_args();
    match cli.command {
        Command::Ratelimit => run_ratelimit(),
        Command::Serve(args) => match run_serve(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tollgate serve: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Validate(args) => match validate::run(&args) {
            Ok((config, envoy)) => {
                let file = validate::files_named(&args);
                let shown = if args.config.is_some() {
                    validate::summary(&config, &envoy, &file)
                } else {
                    validate::envoy_summary(&envoy, &file)
                };
                let mut stdout = std::io::stdout().lock();
                if write!(stdout, "{shown}").is_err() {
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

/// Whether the program's name (the last component of `argv[0]`) is `ratelimit`.
fn invoked_as_ratelimit() -> bool {
    std::env::args_os()
        .next()
        .and_then(|arg0| {
            std::path::Path::new(&arg0)
                .file_name()
                .map(|n| n == "ratelimit")
        })
        .unwrap_or(false)
}

/// `tollgate ratelimit`: the reference's environment read, refused with
/// the variable's name and why when it cannot be honoured (exit 1), else
/// served until SIGTERM, SIGINT or SIGHUP.
fn run_ratelimit() -> ExitCode {
    let env = Env::from_process();
    let reference = match Reference::from_env(&env) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ratelimit: refusing to start: {e} (docs/ratelimit-env.md)");
            return ExitCode::FAILURE;
        }
    };
    init_logging(reference.logging.level, reference.logging.json);
    if let Some(line) = reference.ignored_line() {
        tracing::warn!("{line}");
    }
    for line in &reference.warnings {
        tracing::warn!("{line}");
    }
    match serve_reference(&reference) {
        Ok(()) => {
            tracing::info!("ratelimit: stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ratelimit: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Binds the reference's ports and serves through the one start path.
fn serve_reference(reference: &Reference) -> Result<(), String> {
    let tls = reference
        .grpc_tls
        .as_ref()
        .map(tollgate_server::compat::tls::acceptor)
        .transpose()?;
    let plan = ratelimit::plan(reference)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let shutdown = ratelimit::shutdown_signal()?;
        let listen = &reference.listen;
        let mut listeners = Listeners::default();
        listeners.set(Door::Envoy, Some(bind(listen.grpc, "gRPC port").await?));
        if let Some(addr) = listen.metrics {
            let bound = tollgate_server::compat::listen::bind_any(addr)
                .await
                .map_err(|e| format!("cannot listen on {addr} for the Prometheus port: {e}"))?;
            listeners.set_ops(Some(bound));
        }
        listeners.set_reference(ReferencePorts {
            http: bind(listen.http, "HTTP port").await?,
            debug: bind(listen.debug, "debug port").await?,
            state: Arc::new(ReferenceHttp::new(reference.health)),
        });
        if let Some(tls) = tls {
            listeners.set_grpc_tls(tls);
        }
        let (version, source) = ratelimit::source(reference);
        server::run_reloading(listeners, shutdown, plan, version, source).await
    })
}

/// Logs to stderr: `RUST_LOG` filters, else `level`; JSON lines with
/// `json`. Beside it, the telemetry layer, which exports spans once the
/// server starts tracing (docs/tracing.md); each has its own filter, so
/// `RUST_LOG` never turns spans on for export, nor does tracing fill the
/// log.
fn init_logging(level: &str, json: bool) {
    use tracing_subscriber::prelude::*;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let log = if json {
        log.json().with_filter(filter).boxed()
    } else {
        log.with_ansi(std::io::stderr().is_terminal())
            .with_filter(filter)
            .boxed()
    };
    tracing_subscriber::registry()
        .with(log)
        .with(tollgate_server::telemetry::layer())
        .init();
}

/// Logs as [`init_logging`] does, at `info` unless `RUST_LOG` says
/// otherwise, in plain lines.
fn init_tracing() {
    init_logging("info", false);
}

async fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener, String> {
    // `[::]` (an empty HOST) falls back to `0.0.0.0` where IPv6 is off.
    tollgate_server::compat::listen::bind_any(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} for the {what}: {e}"))
}

/// Resolves the flags, binds, and serves until SIGTERM or SIGINT,
/// reloading the config files on SIGHUP and when they change.
fn run_serve(args: &ServeArgs) -> Result<(), String> {
    let files: Vec<PathBuf> = args
        .config
        .iter()
        .chain(&args.envoy_config)
        .cloned()
        .collect();
    // Before the load: a file changed meanwhile is loaded again at the
    // first poll.
    let version = version_of_files(&files);
    let plan = serve::plan(args)?;
    init_tracing();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let hup = Arc::new(Notify::new());
        let shutdown = shutdown_signal(Arc::clone(&hup))?;
        let mut listeners = Listeners::default();
        for (door, &addr) in plan.listen.iter() {
            listeners.set(door, Some(bind(addr, door.name()).await?));
        }
        if let Some(addr) = plan.ops {
            listeners.set_ops(Some(bind(addr, "ops listener").await?));
        }
        let reload_args = args.clone();
        let source = Source {
            files,
            list: None,
            load: Box::new(move || serve::plan(&reload_args)),
            poll: args.reload_poll,
            hup,
            hup_means: "SIGHUP",
        };
        server::run_reloading(listeners, shutdown, plan, version, source).await
    })?;
    tracing::info!("tollgate serve: stopped");
    Ok(())
}

/// Installs the signal handlers now, and returns the future that resolves
/// on the first SIGTERM or SIGINT. Installed before the front doors open: a
/// handler installed only when its future is first polled (as
/// `tokio::signal::ctrl_c` is) leaves a window after startup in which a
/// signal takes its default action and kills the process undrained, with
/// no exit code.
///
/// SIGHUP notifies `hup` (the config is reloaded: docs/operations.md).
/// SIGUSR1 and SIGUSR2 are logged and ignored: their default action ends
/// the process, which would cut every request in flight.
#[cfg(unix)]
fn shutdown_signal(hup_seen: Arc<Notify>) -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|e| format!("cannot listen for {name}: {e}"))
    };
    let mut int = listen(SignalKind::interrupt(), "SIGINT")?;
    let mut term = listen(SignalKind::terminate(), "SIGTERM")?;
    let mut hup = listen(SignalKind::hangup(), "SIGHUP")?;
    let mut usr1 = listen(SignalKind::user_defined1(), "SIGUSR1")?;
    let mut usr2 = listen(SignalKind::user_defined2(), "SIGUSR2")?;
    Ok(async move {
        loop {
            let ignored = tokio::select! {
                _ = int.recv() => break tracing::info!("SIGINT: shutting down"),
                _ = term.recv() => break tracing::info!("SIGTERM: shutting down"),
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: reloading the config");
                    hup_seen.notify_one();
                    continue;
                }
                _ = usr1.recv() => "SIGUSR1",
                _ = usr2.recv() => "SIGUSR2",
            };
            tracing::warn!(
                "{ignored}: ignored; tollgate serve reloads its config on SIGHUP, and stops only on SIGTERM or SIGINT"
            );
        }
    })
}

/// Resolves on the first Ctrl-C (no SIGHUP: changed files still reload).
#[cfg(not(unix))]
fn shutdown_signal(_hup: Arc<Notify>) -> Result<impl std::future::Future<Output = ()>, String> {
    Ok(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::info!("SIGINT: shutting down");
        } else {
            std::future::pending::<()>().await;
        }
    })
}
