//! Command-line flags (docs/cli.md), parsed with clap.

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// `tollgate`: a rate limiter whose counters survive across replicas.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses the process's arguments as [`Parser::parse`] does (exiting
    /// with clap's message on a bad command line), except that an
    /// environment variable set to the empty string counts as unset: a
    /// container cannot unset a variable its image sets (`TOLLGATE_HTTP`
    /// in ours), only override it, and a templated value left empty
    /// should fall back to the config, not fail (docs/cli.md).
    #[must_use]
    pub fn parse_args() -> Self {
        let matches = Self::command_env_aware().get_matches();
        Self::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    /// The command line's definition with each empty environment
    /// variable dropped (see [`Cli::parse_args`]).
    #[must_use]
    pub fn command_env_aware() -> clap::Command {
        let drop_empty = |arg: clap::Arg| {
            let empty = arg
                .get_env()
                .and_then(std::env::var_os)
                .is_some_and(|v| v.is_empty());
            if empty { arg.env(None) } else { arg }
        };
        // validate reads serve's variables, so it judges what serve runs
        Self::command()
            .mut_subcommand("serve", |serve| serve.mut_args(drop_empty))
            .mut_subcommand("validate", |validate| validate.mut_args(drop_empty))
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API and/or the reverse proxy until SIGTERM/SIGINT.
    /// With only --config: the HTTP API on 127.0.0.1:8080.
    Serve(ServeArgs),
    /// Check a config file without serving: exit 0 if good, 1 with every
    /// problem (file:line: field: why) if not.
    Validate(ValidateArgs),
    /// Run a CSV trace of checks (or charges, reservations and leases)
    /// through the limiter and write one decision per row.
    Replay(ReplayArgs),
    /// Check one key against the configured store at the store's own time
    /// (an operator's probe; also what fleet tests run as separate
    /// processes). One CSV line per check on stdout, a tally on stderr.
    Check(CheckArgs),
    /// Start as envoyproxy/ratelimit does: configured by its environment
    /// variables, on its ports (docs/ratelimit-env.md). The same as
    /// running the binary under the name `ratelimit` (`/bin/ratelimit`).
    Ratelimit,
}

/// `tollgate serve [--config FILE] [--store URL] [--http ADDR] [--grpc ADDR]
/// [--proxy ADDR --upstream URL] [--admin ADDR] [--ops ADDR]
/// [--envoy-config FILE.yaml ... [--envoy-merge-domains]]`. Each address
/// flag, `--config` and `--store` fall back to an environment variable
/// (`TOLLGATE_HTTP`, ...): a flag wins over its variable, which wins over
/// the config file.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The TOML config file (rules, `[store]`, `[http]`, `[proxy]`);
    /// optional with `--grpc`.
    #[arg(long, value_name = "FILE", env = "TOLLGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The store; overrides `[store] url`. Its variable's value is not
    /// shown in `--help` (a Redis URL may hold a password).
    #[arg(
        long,
        value_name = "URL",
        env = "TOLLGATE_STORE",
        hide_env_values = true
    )]
    pub store: Option<String>,
    /// Serve the HTTP API on this IP:PORT; overrides `[http] listen`.
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_HTTP")]
    pub http: Option<String>,
    /// Serve the admin API (docs/admin.md) on this IP:PORT; overrides
    /// `[admin] listen`. Off unless given.
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_ADMIN")]
    pub admin: Option<String>,
    /// Serve the ops listener (`/healthz`, `/readyz`, `/metrics`;
    /// docs/operations.md) on this IP:PORT, whatever doors are served;
    /// overrides `[ops] listen`. Off unless given.
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_OPS")]
    pub ops: Option<String>,
    /// Serve the Envoy rate limit service (gRPC `ShouldRateLimit`) on this
    /// IP:PORT, with the limits of the `--envoy-config` files.
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_GRPC")]
    pub grpc: Option<String>,
    /// Serve the reverse proxy on this IP:PORT; overrides `[proxy] listen`.
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_PROXY")]
    pub proxy: Option<String>,
    /// Where the proxy forwards admitted requests (http://host:port[/base]);
    /// overrides `[proxy] upstream`.
    #[arg(
        long,
        value_name = "URL",
        env = "TOLLGATE_UPSTREAM",
        hide_env_values = true
    )]
    pub upstream: Option<String>,
    /// envoyproxy/ratelimit YAML files (one domain each) for `--grpc`.
    #[arg(long = "envoy-config", value_name = "FILE.yaml")]
    pub envoy_config: Vec<PathBuf>,
    /// Merge one domain spread over several `--envoy-config` files (the
    /// reference's `MERGE_DOMAIN_CONFIG`); without it a domain in two
    /// files is an error.
    #[arg(long = "envoy-merge-domains")]
    pub envoy_merge_domains: bool,
    /// Take the `--grpc` service's limits from this ADS server
    /// (host:port, http:// or https://; docs/xds.md) instead of files;
    /// overrides `[envoy.xds] server`, the rest of `[envoy.xds]` applying.
    #[arg(long = "xds-server", value_name = "URL", env = "TOLLGATE_XDS_SERVER")]
    pub xds_server: Option<String>,
    /// The node id sent to the ADS server; overrides `[envoy.xds]
    /// node_id` (default `default`).
    #[arg(long = "xds-node-id", value_name = "ID", env = "TOLLGATE_XDS_NODE_ID")]
    pub xds_node_id: Option<String>,
    /// How often the config files are read to notice a change (and reload
    /// it); `0s` turns the polling off (SIGHUP still reloads).
    #[arg(long = "reload-poll", value_name = "DURATION", default_value = "1s",
          value_parser = parse_poll)]
    pub reload_poll: std::time::Duration,
}

/// A `--reload-poll` value: a duration, `0s` included.
fn parse_poll(text: &str) -> Result<std::time::Duration, String> {
    if text
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        == "0"
    {
        return Ok(std::time::Duration::ZERO);
    }
    tollgate::time::parse_duration(text)
}

/// `tollgate validate [--config FILE] [--envoy-config FILE.yaml ...]
/// [--envoy-merge-domains]`: at least one of the two kinds of file.
#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// The TOML config file (needed unless Envoy files are given).
    #[arg(long, value_name = "FILE", required_unless_present = "envoy_config")]
    pub config: Option<PathBuf>,
    /// envoyproxy/ratelimit YAML files to check too (or alone).
    #[arg(long = "envoy-config", value_name = "FILE.yaml")]
    pub envoy_config: Vec<PathBuf>,
    /// Merge one domain spread over several `--envoy-config` files, as
    /// `serve --envoy-merge-domains` does.
    #[arg(long = "envoy-merge-domains")]
    pub envoy_merge_domains: bool,
    /// The store, as `serve --store URL` gives it (overrides `[store]
    /// url`): the store's access settings are checked against it.
    #[arg(
        long,
        value_name = "URL",
        env = "TOLLGATE_STORE",
        hide_env_values = true
    )]
    pub store: Option<String>,
    /// The reverse proxy's upstream, as `serve --upstream URL` gives it
    /// (overrides `[proxy] upstream`): a `[proxy] listen` needs one.
    #[arg(
        long,
        value_name = "URL",
        env = "TOLLGATE_UPSTREAM",
        hide_env_values = true
    )]
    pub upstream: Option<String>,
}

/// `tollgate replay --config FILE --trace FILE.csv [--store URL] [--out FILE.csv]
/// [--plot FILE.svg]`.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The TOML config file with the rules the trace names.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Input CSV with header `t_ms,rule,key[,cost]`, optionally followed by
    /// `op` (check, charge, reserve, settle, cancel, acquire, release,
    /// renew) and `ttl_ms` (for reserve); `-` reads stdin.
    #[arg(long, value_name = "FILE.csv")]
    pub trace: PathBuf,
    /// The store to replay through; defaults to the config's `[store] url`.
    /// A Redis store is used under a fresh key prefix, with the trace's time.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Where to write the decisions CSV; stdout when absent or `-`.
    #[arg(long, value_name = "FILE.csv")]
    pub out: Option<PathBuf>,
    /// Also draw, per rule, the units admitted and denied and the debt (or
    /// slots held) over the trace's time, as SVG into this file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// `tollgate check --config FILE [--store URL] --rule NAME --key KEY [--cost N] [--count N] [--concurrency N]`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The store; defaults to the config's `[store] url`.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// The rule to check.
    #[arg(long)]
    pub rule: String,
    /// The key to check.
    #[arg(long)]
    pub key: String,
    /// Units each check consumes (0 peeks).
    #[arg(long, default_value_t = 1)]
    pub cost: u64,
    /// How many checks to make.
    #[arg(long, default_value_t = 1)]
    pub count: u64,
    /// How many checks are in flight at once.
    #[arg(long, default_value_t = 1)]
    pub concurrency: u64,
}
