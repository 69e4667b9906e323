//! `tollgate serve`'s command line: the config file with the flags laid
//! over it, and which doors to open where ([`Plan`]).
//! [`crate::server::run`] does the serving.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::cli::ServeArgs;
use crate::config::upstream::Upstream;
use crate::config::{Config, DEFAULT_HTTP_LISTEN, XdsSettings, check_xds_server, parse_listen};
use crate::doors::envoy::limits::EnvoyLimits;
use crate::doors::{ByDoor, Door, Plan};
use crate::store_url::StoreUrl;

/// Lays the flags over the config file. Each door is served at its flag's
/// address (`--http`, `--proxy`, `--grpc`, `--admin`; clap has already
/// put each unset flag's environment variable in its place), else at the
/// one the config file names for it (`[http] listen`, ...); when no front
/// door is named at all, the HTTP API at 127.0.0.1:8080. The ops listener
/// likewise (`--ops`, `[ops] listen`), off unless named. The Envoy rate
/// limit service takes the limits of every `--envoy-config` file; with
/// `--grpc`, `--config` is optional. Each door served must be ready
/// ([`Door::ready_in`]: the proxy needs an upstream).
///
/// # Errors
/// A message for the user: the config's problems, a bad flag, a front
/// Envoy config's problems, a door not ready.
pub fn plan(args: &ServeArgs) -> Result<Plan, String> {
    // First: whether the Envoy service is served says whether the TOML
    // must hold rules.
    let grpc = flag(args, Door::Envoy)?;
    if grpc.is_none() && !args.envoy_config.is_empty() {
        return Err(
            "--envoy-config is for the Envoy rate limit service: add --grpc ADDR".to_owned(),
        );
    }
    let mut config = match &args.config {
        // Envoy files (or xDS) bring limits of their own: the TOML may be
        // only `[store]`.
        Some(path) => Config::load_with(
            path,
            grpc.is_some() && (!args.envoy_config.is_empty() || args.xds_server.is_some()),
        )
        .map_err(|e| e.to_string())?,
        // The gRPC service takes its limits from --envoy-config alone.
        None if grpc.is_some() => Config::without_rules(),
        None => {
            return Err(
                "no rules: pass --config FILE (see examples/tollgate.toml), \
                 or --grpc ADDR with --envoy-config FILE.yaml"
                    .to_owned(),
            );
        }
    };
    xds_flags(args, &mut config)?;
    if config.envoy_settings.xds.is_some() {
        // The reference's CONFIG_TYPE picks FILE or GRPC_XDS_SOTW, never
        // both (docs/xds.md).
        if !args.envoy_config.is_empty() {
            return Err(crate::config::FILES_AND_XDS.to_owned());
        }
        if grpc.is_none() {
            return Err(
                "[envoy.xds] is for the Envoy rate limit service: add --grpc ADDR".to_owned(),
            );
        }
    }
    let envoy = if args.envoy_config.is_empty() {
        EnvoyLimits::default()
    } else {
        let taken: Vec<&str> = config.rules.iter().map(|r| r.rule.name()).collect();
        let merge = args.envoy_merge_domains || config.envoy_settings.merge_domains;
        EnvoyLimits::load_with(&args.envoy_config, &taken, merge).map_err(|e| e.to_string())?
    };
    if let Some(url) = &args.store {
        config.store.url = url
            .parse::<StoreUrl>()
            .map_err(|e| format!("--store: {e}"))?;
    }
    if let Some(url) = &args.upstream {
        config.proxy.upstream = Some(
            url.parse::<Upstream>()
                .map_err(|e| format!("--upstream: {e}"))?,
        );
    }
    let mut listen = ByDoor::default();
    for door in Door::ALL {
        let addr = match door {
            Door::Envoy => grpc,
            door => flag(args, door)?.or(door.listen_in(&config)),
        };
        listen.set(door, addr);
    }
    if args.upstream.is_some() && listen.get(Door::Proxy).is_none() {
        return Err("--upstream is for the reverse proxy: add --proxy ADDR".to_owned());
    }
    if !listen.doors().any(Door::is_front) {
        listen.set(Door::Api, Some(DEFAULT_HTTP_LISTEN));
    }
    crate::doors::check(&config, &listen)?;
    let ops = match &args.ops {
        Some(s) => Some(parse_listen(s).map_err(|e| format!("--ops: {e}"))?),
        None => config.ops.listen,
    };
    Ok(Plan {
        config,
        envoy: Arc::new(envoy),
        listen,
        ops,
    })
}

/// `--xds-server` and `--xds-node-id` laid over `[envoy.xds]` (the server
/// flag makes one with the defaults when the file has none).
fn xds_flags(args: &ServeArgs, config: &mut Config) -> Result<(), String> {
    if let Some(server) = &args.xds_server {
        check_xds_server(server).map_err(|e| format!("--xds-server: {e}"))?;
        match &mut config.envoy_settings.xds {
            Some(xds) => server.clone_into(&mut xds.server),
            None => config.envoy_settings.xds = Some(XdsSettings::new(server)),
        }
    }
    if let Some(id) = &args.xds_node_id {
        let Some(xds) = &mut config.envoy_settings.xds else {
            return Err("--xds-node-id is for xDS: add --xds-server or [envoy.xds]".to_owned());
        };
        if id.is_empty() {
            return Err("--xds-node-id must not be empty".to_owned());
        }
        id.clone_into(&mut xds.node_id);
    }
    Ok(())
}

/// The address `door`'s flag gives, if given.
fn flag(args: &ServeArgs, door: Door) -> Result<Option<SocketAddr>, String> {
    let value = match door {
        Door::Admin => &args.admin,
        Door::Api => &args.http,
        Door::Proxy => &args.proxy,
        Door::Envoy => &args.grpc,
    };
    value
        .as_deref()
        .map(|s| parse_listen(s).map_err(|e| format!("--{}: {e}", door.flag())))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(config: &std::path::Path, extra: &[&str]) -> ServeArgs {
        use clap::Parser;
        let mut argv = vec!["tollgate", "serve", "--config"];
        let path = config.to_str().expect("utf-8 path");
        argv.push(path);
        argv.extend_from_slice(extra);
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Serve(a) => a,
            other => panic!("not serve: {other:?}"),
        }
    }

    fn config_file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(f.path(), text).expect("write");
        f
    }

    const RULE: &str = "[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n";

    #[test]
    fn only_config_serves_the_api_on_8080() {
        let f = config_file(RULE);
        let p = plan(&args(f.path(), &[])).expect("plan");
        assert_eq!(p.at(Door::Api), Some(DEFAULT_HTTP_LISTEN));
        assert_eq!(p.at(Door::Proxy), None);
    }

    #[test]
    fn flags_override_the_file() {
        let f = config_file(&format!(
            "[http]\nlisten = '127.0.0.1:1'\n[proxy]\nlisten = '127.0.0.1:2'\nupstream = 'http://a:1'\n{RULE}"
        ));
        let p = plan(&args(f.path(), &[])).expect("plan");
        assert_eq!(p.at(Door::Api), Some("127.0.0.1:1".parse().expect("addr")));
        assert_eq!(
            p.at(Door::Proxy),
            Some("127.0.0.1:2".parse().expect("addr"))
        );
        let p = plan(&args(
            f.path(),
            &[
                "--http",
                "127.0.0.1:3",
                "--proxy",
                "[::1]:4",
                "--upstream",
                "http://b:2",
                "--store",
                "redis://h:6379",
            ],
        ))
        .expect("plan");
        assert_eq!(p.at(Door::Api), Some("127.0.0.1:3".parse().expect("addr")));
        assert_eq!(p.at(Door::Proxy), Some("[::1]:4".parse().expect("addr")));
        assert_eq!(
            p.config.proxy.upstream.map(|u| u.to_string()).as_deref(),
            Some("http://b:2")
        );
        assert_eq!(p.config.store.url.to_string(), "redis://h:6379/0");
    }

    #[test]
    fn proxy_alone_opens_no_api() {
        let f = config_file(RULE);
        let p = plan(&args(
            f.path(),
            &["--proxy", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9"],
        ))
        .expect("plan");
        assert_eq!(p.at(Door::Api), None);
    }

    #[test]
    fn grpc_alone_opens_no_api_and_needs_no_config() {
        use clap::Parser;
        let argv = ["tollgate", "serve", "--grpc", "127.0.0.1:0"];
        let crate::cli::Command::Serve(a) = crate::cli::Cli::parse_from(argv).command else {
            panic!("not serve");
        };
        let p = plan(&a).expect("plan");
        assert_eq!(
            p.at(Door::Envoy),
            Some("127.0.0.1:0".parse().expect("addr"))
        );
        assert_eq!(p.at(Door::Api), None);
        assert!(p.config.rules.is_empty());
        let argv = ["tollgate", "serve"];
        let crate::cli::Command::Serve(a) = crate::cli::Cli::parse_from(argv).command else {
            panic!("not serve");
        };
        let err = plan(&a).expect_err("no rules");
        assert!(err.contains("--config FILE"), "{err}");
    }

    #[test]
    fn envoy_rules_come_after_the_config_and_avoid_its_names() {
        let f =
            config_file("[[rules]]\nname='envoy.d.k'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n");
        let y = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(
            y.path(),
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n",
        )
        .expect("write");
        let path = y.path().to_str().expect("utf-8 path");
        let p = plan(&args(
            f.path(),
            &["--grpc", "127.0.0.1:0", "--envoy-config", path],
        ))
        .expect("plan");
        let rules = p.envoy.rules();
        assert_eq!(rules.len(), 1);
        assert_ne!(rules[0].name(), "envoy.d.k");
        assert!(
            rules[0].name().starts_with("envoy.d.k"),
            "{}",
            rules[0].name()
        );
        assert_eq!(rules[0].limit(), 5);
        assert_eq!(rules[0].period(), std::time::Duration::from_secs(60));
    }

    #[test]
    fn xds_flags_make_or_override_envoy_xds() {
        use clap::Parser;
        let argv = [
            "tollgate",
            "serve",
            "--grpc",
            "127.0.0.1:0",
            "--xds-server",
            "eg:18001",
            "--xds-node-id",
            "envoy-ratelimit",
        ];
        let crate::cli::Command::Serve(a) = crate::cli::Cli::parse_from(argv).command else {
            panic!("not serve");
        };
        let p = plan(&a).expect("plan");
        let xds = p.config.envoy_settings.xds.expect("xds");
        assert_eq!(
            (xds.server.as_str(), xds.node_id.as_str()),
            ("eg:18001", "envoy-ratelimit")
        );
        let f = config_file("[envoy.xds]\nserver = 'a:1'\nmax_backoff = '90s'\n");
        let p = plan(&args(
            f.path(),
            &["--grpc", "127.0.0.1:0", "--xds-server", "b:2"],
        ))
        .expect("plan");
        let xds = p.config.envoy_settings.xds.expect("xds");
        assert_eq!(xds.server, "b:2");
        assert_eq!(
            xds.max_backoff,
            std::time::Duration::from_secs(90),
            "the file's rest"
        );
        let f = config_file(RULE);
        for (extra, why) in [
            (
                &["--grpc", "127.0.0.1:0", "--xds-server", "nope"][..],
                "--xds-server: ",
            ),
            (
                &["--grpc", "127.0.0.1:0", "--xds-node-id", "x"],
                "--xds-node-id is for xDS",
            ),
            (&["--xds-server", "eg:1"], "add --grpc ADDR"),
        ] {
            let err = plan(&args(f.path(), extra)).expect_err(why);
            assert!(err.contains(why), "{extra:?}: {err}");
        }
    }

    #[test]
    fn clear_refusals() {
        let f = config_file(RULE);
        for (extra, why) in [
            (&["--envoy-config", "x.yaml"][..], "add --grpc ADDR"),
            (&["--grpc", "example.com:1"], "--grpc: "),
            (
                &[
                    "--grpc",
                    "127.0.0.1:1",
                    "--envoy-config",
                    "/nonexistent/x.yaml",
                ],
                "/nonexistent/x.yaml: cannot read",
            ),
            (&["--proxy", "127.0.0.1:1"], "needs an upstream"),
            (&["--upstream", "http://a:1"], "add --proxy"),
            (
                &["--http", "example.com:80"],
                "--http: \"example.com:80\" is not an IP:PORT",
            ),
            (&["--store", "mysql://x"], "--store: "),
            (
                &["--proxy", "127.0.0.1:1", "--upstream", "ftp://a"],
                "--upstream: ",
            ),
        ] {
            let err = plan(&args(f.path(), extra)).expect_err(why);
            assert!(err.contains(why), "{extra:?}: {err}");
        }
    }
}
