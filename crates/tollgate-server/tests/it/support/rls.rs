//! A gRPC client of the real binary's Envoy rate limit service, calling
//! `ShouldRateLimit` as Envoy does, for the Envoy test files.

use std::net::SocketAddr;
use std::path::PathBuf;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

use super::Tollgate;

/// The TOML side: the store, and one HTTP rule (the TOML config needs one).
pub fn toml(store: &str) -> String {
    format!(
        "[store]\nurl = \"{store}\"\ntimeout = \"2s\"\n\n\
         [[rules]]\nname = \"http_rule\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n"
    )
}

/// A running service and a tokio runtime to call it from.
pub struct Rls {
    pub server: Tollgate,
    pub rt: tokio::runtime::Runtime,
    pub client: RateLimitServiceClient<Channel>,
    _dir: tempfile::TempDir,
}

/// Writes `text` as `rls.yaml` in a temp dir; returns the dir and the file.
pub fn yaml_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rls.yaml");
    std::fs::write(&path, text).expect("write yaml");
    (dir, path)
}

impl Rls {
    /// The binary with `--grpc` and `yaml` as its Envoy config, over `store`.
    pub fn start(store: &str, yaml: &str) -> Rls {
        Rls::start_with(&toml(store), yaml, &[])
    }

    /// With a TOML config of its own and more flags.
    pub fn start_with(config: &str, yaml: &str, more: &[&str]) -> Rls {
        Rls::start_files(config, &[yaml], more)
    }

    /// With several Envoy config files (`yamls`, a domain each), a TOML
    /// config of its own and more flags.
    pub fn start_files(config: &str, yamls: &[&str], more: &[&str]) -> Rls {
        Rls::start_files_env(config, yamls, more, &[])
    }

    /// As [`Rls::start_files`], with the environment variables `env` set.
    pub fn start_files_env(
        config: &str,
        yamls: &[&str],
        more: &[&str],
        env: &[(&str, &str)],
    ) -> Rls {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut paths = Vec::with_capacity(yamls.len());
        for (i, yaml) in yamls.iter().enumerate() {
            let name = match i {
                0 => "rls.yaml".to_owned(),
                _ => format!("rls-{i}.yaml"),
            };
            let path = dir.path().join(name);
            std::fs::write(&path, yaml).expect("write yaml");
            paths.push(path.to_str().expect("utf-8 path").to_owned());
        }
        let mut args = vec!["--grpc", "127.0.0.1:0"];
        for path in &paths {
            args.extend(["--envoy-config", path.as_str()]);
        }
        args.extend_from_slice(more);
        let server = Tollgate::start_with_env(Some(config), &args, env);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt.block_on(connect(server.grpc()));
        Rls {
            server,
            rt,
            client,
            _dir: dir,
        }
    }

    /// One `ShouldRateLimit` call.
    pub fn call(&mut self, req: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        let client = &mut self.client;
        self.rt
            .block_on(client.should_rate_limit(req))
            .map(tonic::Response::into_inner)
    }

    /// One call that must succeed.
    pub fn ok(&mut self, req: RateLimitRequest) -> RateLimitResponse {
        self.call(req).expect("ShouldRateLimit")
    }
}

/// A client of the gRPC port at `addr`.
pub async fn connect(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

/// A descriptor of `entries`.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// A status code as its enum.
pub fn code(c: i32) -> Code {
    Code::try_from(c).expect("a known code")
}
