//! What a validated config is: the sections' types and their defaults.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tollgate::Rule;

use crate::cidr::Cidr;
use crate::config::secret::Secret;
use crate::config::upstream::Upstream;
use crate::key::KeyExtractor;
use crate::store_url::StoreUrl;

use tollgate::OnError;
use tollgate_http::cost::ResponseCost;
use tollgate_http::extract::MissingKey;

/// Default `[store] url`.
pub const DEFAULT_STORE_URL: &str = "memory";
/// Default `[store] timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// Default `[store] heartbeat`.
pub const DEFAULT_HEARTBEAT: Duration = tollgate::resilient::DEFAULT_HEARTBEAT;
/// Default `[store] prefix`.
pub const DEFAULT_PREFIX: &str = "tollgate";
/// The longest `[store] prefix` accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 64;
/// Where the HTTP API listens when no front door is named anywhere.
pub const DEFAULT_HTTP_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
/// Default `[proxy] ipv6_prefix`: an IPv6 client is one /64, the block a
/// single subscriber is usually given.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;
/// Default `[proxy] connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default `[proxy] response_timeout`.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `[proxy] send_timeout`.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// `[store]`: where state is kept and what happens when it fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// `url`, default `memory`.
    pub url: StoreUrl,
    /// `timeout`: the longest any check waits on the store (default 50ms).
    pub timeout: Duration,
    /// `on_error`: the failure policy for rules that set none (default allow).
    pub on_error: OnError,
    /// `prefix`: the Redis key prefix (default `tollgate`).
    pub prefix: String,
    /// `max_keys`: the memory store's cap on keys held (default
    /// [`tollgate::store::memory::DEFAULT_MAX_KEYS`]).
    pub max_keys: usize,
    /// `replicas`: how many replicas are assumed to share the store until
    /// the first heartbeat tells (default 1). With `on_error = "local"`
    /// each replica falls back to an in-process limiter with every rule's
    /// quota divided by the live replicas.
    pub replicas: u64,
    /// `heartbeat`: how often each replica tells Redis it is alive and
    /// learns how many are (default 1s; at least 10ms). A replica counts
    /// as live for three intervals after its last heartbeat.
    pub heartbeat: Duration,
    /// `hybrid = true`: the hybrid store over the Redis `url`, with
    /// `replicas`, `max_keys`, `hybrid_batch` and `hybrid_lease` (a
    /// batch's life, `HybridOptions::batch_life`); `None` when off. See
    /// `docs/hybrid.md`.
    pub hybrid: Option<tollgate::store::hybrid::HybridOptions>,
    /// `password_file`: the Redis password, read from the file at load
    /// (one trailing newline trimmed); `None` when not set. The URL then
    /// carries none, and `TOLLGATE_REDIS_PASSWORD` must not be set either
    /// (`crate::store::open_store` joins them).
    pub password: Option<Secret>,
    /// `username`: the Redis ACL user, when the URL names none.
    pub username: Option<String>,
    /// `[store.tls]`: how a `rediss://` store is secured.
    pub tls: Option<StoreTls>,
}

/// `[store.tls]`: the files as named (read at load) and the TLS settings
/// they make.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreTls {
    /// `ca_file`: the CA certificates to trust instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// `cert_file`: the client certificate (chain), PEM.
    pub cert_file: Option<PathBuf>,
    /// `key_file`: its private key, PEM.
    pub key_file: Option<PathBuf>,
    /// `server_name`: the name the server's certificate is verified
    /// against instead of the URL's host.
    pub server_name: Option<String>,
    /// What the store is opened with (its `Debug` shows no key).
    pub settings: tollgate::store::redis::RedisTls,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: StoreUrl::Memory,
            timeout: DEFAULT_TIMEOUT,
            on_error: OnError::Allow,
            prefix: DEFAULT_PREFIX.to_owned(),
            max_keys: tollgate::store::memory::DEFAULT_MAX_KEYS,
            replicas: 1,
            heartbeat: DEFAULT_HEARTBEAT,
            hybrid: None,
            password: None,
            username: None,
            tls: None,
        }
    }
}

/// One `[[rules.overrides]]`: its `key` as written, the keys it names and
/// its rule.
pub type KeyOverride = (String, tollgate::KeyPattern, Rule);

/// One `[[rules]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleConfig {
    /// The validated rule (name, algorithm, limit, period, burst).
    pub rule: Rule,
    /// `key`: how the reverse proxy keys this rule; `None` when not set.
    pub key: Option<KeyExtractor>,
    /// `on_error` for this rule; `None` means the store's.
    pub on_error: Option<OnError>,
    /// `cost = "response_header:NAME"` and `estimate`: the reverse proxy
    /// charges the usage each response reports instead of 1 per request;
    /// `None` when not set.
    pub cost: Option<ResponseCost>,
    /// `[[rules.overrides]]`: keys or key prefixes decided under another
    /// limit, period or burst, as written (`key`), in file order.
    pub overrides: Vec<KeyOverride>,
    /// The line of the rule's `[[rules]]` header (1-based).
    pub line: usize,
}

/// `[http]`: settings of the HTTP API.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HttpConfig {
    /// `listen`: the API's address (`--http` overrides it).
    pub listen: Option<SocketAddr>,
    /// `legacy_headers`: also send `X-RateLimit-Limit/Remaining/Reset`
    /// (on the API's answers and the proxy's responses).
    pub legacy_headers: bool,
}

/// `[proxy]`: settings of the reverse proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// `listen`: the proxy's address (`--proxy` overrides it).
    pub listen: Option<SocketAddr>,
    /// `upstream`: where admitted requests go (`--upstream` overrides it).
    pub upstream: Option<Upstream>,
    /// `trusted_proxies`: peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<Cidr>,
    /// `ipv6_prefix`: IPv6 client addresses are keyed by their first this
    /// many bits (default 64), so one subscriber cannot rotate addresses
    /// inside its block to get fresh buckets.
    pub ipv6_prefix: u8,
    /// `on_missing_key`: a request lacking a header a rule keys on.
    pub on_missing_key: MissingKey,
    /// `connect_timeout`: the longest wait for a connection to the upstream
    /// before answering 502 (default 1s).
    pub connect_timeout: Duration,
    /// `response_timeout`: the longest wait for the upstream's response
    /// headers before answering 504 (default 60s).
    pub response_timeout: Duration,
    /// `send_timeout`: a client that takes nothing of a response being
    /// sent for a whole period of this length has its connection, and the
    /// upstream's, closed (checked four times a period, so within 1.25
    /// periods; default 30s).
    pub send_timeout: Duration,
    /// `append_forwarded_for`: append the peer's address to
    /// `X-Forwarded-For` on forwarded requests (default false: headers are
    /// forwarded unchanged).
    pub append_forwarded_for: bool,
    /// `request_body_limit`: the most bytes of a request body read before
    /// the check, when a rule keys on it (`request_json:POINTER`) or
    /// estimates from it (default 1 MiB); the rest streams on unread.
    pub request_body_limit: usize,
    /// `[proxy.upstream_tls]`: how an `https://` upstream is reached.
    pub upstream_tls: UpstreamTls,
    /// `[proxy.listen_tls]`: the proxy's listener over TLS; `None`: plain
    /// (HTTP/1.1 and HTTP/2 with prior knowledge).
    pub listen_tls: Option<ListenTls>,
}

/// `roots` of `[proxy.upstream_tls]`: the CAs an upstream's certificate
/// may chain to, besides `ca_file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Roots {
    /// `"system"` (the default): the system's CA certificates.
    #[default]
    System,
    /// `"bundled"`: Mozilla's roots built into the binary (webpki-roots),
    /// for a host or image without a CA bundle.
    Bundled,
    /// `"none"`: `ca_file` alone.
    None,
}

/// `[proxy.upstream_tls]`: the TLS client of an `https://` upstream; files
/// read and checked at load, built into the client when the proxy is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// `ca_file`: PEM CAs the upstream's certificate may chain to (added
    /// to `roots`).
    pub ca_file: Option<PathBuf>,
    /// `cert_file`: a client certificate for an upstream that asks for one
    /// (mTLS), with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// `key_file`: the client certificate's key.
    pub key_file: Option<PathBuf>,
    /// `server_name`: the name sent (SNI) and verified; default the
    /// upstream URL's host.
    pub server_name: Option<String>,
    /// `roots` (default `"system"`).
    pub roots: Roots,
    /// `http2` (default true): offer HTTP/2 by ALPN; the upstream's choice
    /// decides, HTTP/1.1 otherwise.
    pub http2: bool,
}

impl Default for UpstreamTls {
    fn default() -> Self {
        Self {
            ca_file: None,
            cert_file: None,
            key_file: None,
            server_name: None,
            roots: Roots::System,
            http2: true,
        }
    }
}

/// `[proxy.listen_tls]`: the proxy's server certificate (ALPN `h2` and
/// `http/1.1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenTls {
    /// `cert_file`: the certificate chain, PEM.
    pub cert_file: PathBuf,
    /// `key_file`: its private key, PEM.
    pub key_file: PathBuf,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            listen: None,
            upstream: None,
            trusted_proxies: Vec::new(),
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            on_missing_key: MissingKey::Empty,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            append_forwarded_for: false,
            upstream_tls: UpstreamTls::default(),
            listen_tls: None,
            request_body_limit: tollgate_http::request_body::DEFAULT_REQUEST_BODY_LIMIT,
        }
    }
}

/// `[metrics]`: how `/metrics` counts, for every rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricsConfig {
    /// `near_limit_ratio` (the Envoy reference's `NEAR_LIMIT_RATIO`):
    /// admitted units past this share of a rule's capacity count in
    /// `tollgate_near_limit_total` (default
    /// [`tollgate::resilient::DEFAULT_NEAR_LIMIT_RATIO`]; above 0, at most 1).
    pub near_limit_ratio: f64,
    /// `top_denied_capacity`: counters per rule and epoch of the most
    /// denied keys, the admin API's `GET /admin/v1/top/{rule}` (default
    /// [`tollgate::top::DEFAULT_TOP_DENIED_CAPACITY`]; 0 turns them off;
    /// at most [`tollgate::top::MAX_TOP_DENIED_CAPACITY`]).
    pub top_denied_capacity: usize,
    /// `top_denied_epoch`: the most denied keys cover the current and the
    /// previous epoch of this length (default
    /// [`tollgate::top::DEFAULT_TOP_DENIED_EPOCH`]; at least 1 ms).
    pub top_denied_epoch: Duration,
    /// `reference_names`: also export the Envoy reference service's
    /// Prometheus names (`ratelimit_service_*`, docs/metrics.md; on by
    /// default in the compatibility entry).
    pub reference_names: bool,
}

// Validated: never NaN, so equality is an equivalence.
impl Eq for MetricsConfig {}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            near_limit_ratio: tollgate::resilient::DEFAULT_NEAR_LIMIT_RATIO,
            top_denied_capacity: tollgate::top::DEFAULT_TOP_DENIED_CAPACITY,
            top_denied_epoch: tollgate::top::DEFAULT_TOP_DENIED_EPOCH,
            reference_names: false,
        }
    }
}

/// `[admin]`: off unless `listen` (or `--admin`) names an address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminConfig {
    /// `listen`: where the admin API is served.
    pub listen: Option<SocketAddr>,
    /// `[[admin.tokens]]`, in file order (names unique).
    pub tokens: Vec<AdminToken>,
}

/// One `[[admin.tokens]]` entry: the audit log names `name`.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken {
    /// Who holds it, as the audit log says.
    pub name: String,
    /// The secret a request sends as `Authorization: Bearer <token>`.
    pub token: String,
}

impl std::fmt::Debug for AdminToken {
    /// The name only: a secret never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// `[ops] readiness`: what `/readyz` waits for (docs/operations.md,
/// "Probes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Readiness {
    /// `"serving"` (the default): ready while serving and not draining,
    /// whatever the store's state (the failure policy answers for it).
    #[default]
    Serving,
    /// `"store"`: also not ready while the store does not answer.
    Store,
}

impl Readiness {
    /// Its name in the config file.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Readiness::Serving => "serving",
            Readiness::Store => "store",
        }
    }
}

impl std::str::FromStr for Readiness {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "serving" => Ok(Readiness::Serving),
            "store" => Ok(Readiness::Store),
            _ => Err(format!(
                "unknown readiness {s:?}; expected serving or store"
            )),
        }
    }
}

/// `[ops]`: the ops listener (health, readiness, metrics) and what
/// readiness means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpsConfig {
    /// `listen`: where the ops listener is served (`--ops` overrides
    /// it); off unless one of the two names an address.
    pub listen: Option<SocketAddr>,
    /// `readiness`: what `/readyz` waits for, on the ops listener and the
    /// HTTP API alike (default `serving`).
    pub readiness: Readiness,
}

/// A validated config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `[store]`.
    pub store: StoreConfig,
    /// `[[rules]]`, in file order; at least one, names unique.
    pub rules: Vec<RuleConfig>,
    /// `[http]`.
    pub http: HttpConfig,
    /// `[proxy]`.
    pub proxy: ProxyConfig,
    /// `[envoy]`: the Envoy rate limit service's switches.
    pub envoy_settings: EnvoySettings,
    /// `[metrics]`.
    pub metrics: MetricsConfig,
    /// `[admin]`: the admin API (docs/admin.md).
    pub admin: AdminConfig,
    /// `[ops]`: the ops listener and readiness (docs/operations.md).
    pub ops: OpsConfig,
    /// `[tracing]`: OpenTelemetry spans over OTLP (docs/tracing.md).
    pub tracing: TracingConfig,
    /// `[rlqs]`: Envoy's rate limit quota service, served when present
    /// (docs/rlqs.md).
    pub rlqs: Option<RlqsConfig>,
}

/// `[envoy]`: what the reference service takes from its environment
/// (docs/envoy.md, "Settings").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoySettings {
    /// `merge_domains` (the reference's `MERGE_DOMAIN_CONFIG`), as
    /// `--envoy-merge-domains`.
    pub merge_domains: bool,
    /// `response_headers`: which headers, if any, Envoy adds to its
    /// response for the descriptor closest to its limit.
    pub response_headers: EnvoyHeaders,
    /// `limit_header` (its `LIMIT_LIMIT_HEADER`), default `RateLimit-Limit`.
    pub limit_header: String,
    /// `remaining_header` (its `LIMIT_REMAINING_HEADER`), default
    /// `RateLimit-Remaining`.
    pub remaining_header: String,
    /// `reset_header` (its `LIMIT_RESET_HEADER`), default `RateLimit-Reset`.
    pub reset_header: String,
    /// `quota_mode` (its `QUOTA_MODE`): every descriptor is a quota
    /// descriptor (docs/envoy.md, "Quota mode").
    pub quota_mode: bool,
    /// `response_dynamic_metadata` (its `RESPONSE_DYNAMIC_METADATA`):
    /// answers carry dynamic metadata (docs/envoy.md, "Metadata").
    pub response_dynamic_metadata: bool,
    /// `count_own_cost`: a descriptor's own `hits_addend` above 0 is
    /// counted in full even past the limit, answering `OVER_LIMIT` when it
    /// takes the count past it, as the reference counts (Envoy Gateway's
    /// request and response costs; docs/envoy.md). Default false: such a
    /// cost is a check, consuming only if it fits.
    pub count_own_cost: bool,
    /// `store_failure`: how a call whose store failed is answered
    /// (docs/envoy.md, "Cost and store failures").
    pub store_failure: StoreFailure,
    /// `shadow_mode` (the reference's `SHADOW_MODE`): every answer's
    /// `overall_code` is `OK`; limits are counted and their statuses
    /// reported as without it (docs/envoy.md, "Shadow mode").
    pub shadow_mode: bool,
    /// `[envoy.xds]`: the Envoy limits come from an ADS server instead of
    /// `--envoy-config` files (docs/xds.md); the two never combine.
    pub xds: Option<XdsSettings>,
}

/// `[envoy] store_failure`: what the Envoy door answers when a store
/// call it made failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StoreFailure {
    /// `"policy"` (default): each rule's `on_error` answers (`allow`:
    /// `OK` with no numbers, `deny`: `OVER_LIMIT`, `local`: the
    /// in-process decision).
    #[default]
    Policy,
    /// `"error"`: the call fails with gRPC `UNKNOWN`, as the reference
    /// answers a Redis error, so Envoy's `failure_mode_deny` decides.
    Error,
}

/// `[envoy.xds]`: where and how the Envoy limits are subscribed to over
/// ADS state-of-the-world (the reference's `CONFIG_TYPE=GRPC_XDS_SOTW`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdsSettings {
    /// `server`: the ADS server, `host:port` or `http(s)://host:port`
    /// (the reference's `CONFIG_GRPC_XDS_SERVER_URL`).
    pub server: String,
    /// `node_id` (its `CONFIG_GRPC_XDS_NODE_ID`): the node the server
    /// keys its snapshot by.
    pub node_id: String,
    /// `node_metadata`: string pairs sent in the node's metadata (its
    /// `CONFIG_GRPC_XDS_NODE_METADATA`).
    pub node_metadata: Vec<(String, String)>,
    /// `[envoy.xds.tls]`: TLS to the server; `None`: plaintext.
    pub tls: Option<XdsTls>,
    /// `initial_backoff` (its `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`).
    pub initial_backoff: Duration,
    /// `max_backoff` (its `XDS_CLIENT_BACKOFF_MAX_INTERVAL`).
    pub max_backoff: Duration,
    /// `max_message_bytes` (its `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`): the
    /// largest response accepted.
    pub max_message_bytes: usize,
    /// `start_without_config` (its `FORCE_START_WITHOUT_INITIAL_CONFIG`):
    /// serve before the first config arrives, answering
    /// `ShouldRateLimit` with an error until then.
    pub start_without_config: bool,
}

/// `[envoy.xds.tls]`: files read at start (the reference's
/// `CONFIG_GRPC_XDS_SERVER_TLS_*`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct XdsTls {
    /// `ca_file`: PEM roots the server's certificate must chain to
    /// (added to the system's).
    pub ca_file: Option<PathBuf>,
    /// `cert_file`: the client certificate, for mTLS (with `key_file`).
    pub cert_file: Option<PathBuf>,
    /// `key_file`: the client certificate's key.
    pub key_file: Option<PathBuf>,
    /// `server_name`: the name the server's certificate must carry
    /// (default: the host of `server`; its `CONFIG_GRPC_XDS_SERVER_TLS_SAN`).
    pub server_name: Option<String>,
}

/// `[tracing]`: OpenTelemetry spans exported over OTLP (docs/tracing.md).
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// `enabled` (default false; `OTEL_SDK_DISABLED`, the reference's
    /// `TRACING_ENABLED`): off, nothing is built and spans cost nothing.
    pub enabled: bool,
    /// `endpoint` (`OTEL_EXPORTER_OTLP_ENDPOINT` /
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); `None`: the protocol's
    /// default (`http://localhost:4317` for gRPC, `:4318` for HTTP).
    pub endpoint: Option<String>,
    /// `protocol`: `grpc` or `http/protobuf` (`OTEL_EXPORTER_OTLP_PROTOCOL`,
    /// the reference's `TRACING_EXPORTER_PROTOCOL`).
    pub protocol: OtlpProtocol,
    /// `headers` sent with each export (`OTEL_EXPORTER_OTLP_HEADERS`).
    pub headers: Vec<(String, String)>,
    /// `service_name` (`OTEL_SERVICE_NAME`, the reference's
    /// `TRACING_SERVICE_NAME`; default `tollgate`).
    pub service_name: String,
    /// Further resource attributes (`OTEL_RESOURCE_ATTRIBUTES`, the
    /// reference's `TRACING_SERVICE_NAMESPACE`, `..._INSTANCE_ID`).
    pub resource: Vec<(String, String)>,
    /// `sampling_ratio` in [0, 1] of root traces kept; a caller's sampled
    /// flag is followed (parent-based; `OTEL_TRACES_SAMPLER_ARG`, the
    /// reference's `TRACING_SAMPLING_RATE`; default 1).
    pub sampling_ratio: f64,
    /// `parent_based` (default true): a caller's sampled flag decides,
    /// the ratio applies to root traces only; false samples every trace
    /// by the ratio alone (`OTEL_TRACES_SAMPLER=always_on`, `always_off`,
    /// `traceidratio`).
    pub parent_based: bool,
    /// `timeout` of one export (`OTEL_EXPORTER_OTLP_TIMEOUT`, in ms;
    /// default 10s, the OTLP exporter specification's).
    pub timeout: Duration,
    /// `ca_file` (`OTEL_EXPORTER_OTLP_CERTIFICATE`): PEM roots an
    /// `https://` collector's certificate may chain to, besides the
    /// system's.
    pub ca_file: Option<PathBuf>,
    /// `cert_file` (`OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`): the client
    /// certificate shown to the collector (mTLS), with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// `key_file` (`OTEL_EXPORTER_OTLP_CLIENT_KEY`): its key.
    pub key_file: Option<PathBuf>,
    /// `insecure` (`OTEL_EXPORTER_OTLP_INSECURE`): a gRPC endpoint given
    /// without a scheme (`HOST:PORT`) is plaintext rather than TLS.
    pub insecure: bool,
}

// Validated: the ratio is never NaN, so equality is an equivalence.
impl Eq for TracingConfig {}

impl Default for TracingConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            endpoint: None,
            protocol: OtlpProtocol::Grpc,
            headers: Vec::new(),
            service_name: "tollgate".to_owned(),
            resource: Vec::new(),
            sampling_ratio: 1.0,
            parent_based: true,
            timeout: DEFAULT_OTLP_TIMEOUT,
            ca_file: None,
            cert_file: None,
            key_file: None,
            insecure: false,
        }
    }
}

/// `[tracing] timeout`'s default: the OTLP exporter specification's 10 s.
pub const DEFAULT_OTLP_TIMEOUT: Duration = Duration::from_secs(10);

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OtlpProtocol {
    /// OTLP over gRPC (port 4317).
    #[default]
    Grpc,
    /// OTLP as protobuf over HTTP (port 4318, `/v1/traces`).
    HttpProtobuf,
}

/// `[envoy] response_headers`: the headers added to Envoy's responses
/// (docs/envoy.md, "Settings").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EnvoyHeaders {
    /// `false` (the default): none.
    #[default]
    None,
    /// `true` or `"reference"` (the reference's
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`): its limit, remaining and reset
    /// fields, named by `limit_header`, `remaining_header`, `reset_header`.
    Reference,
    /// `"ietf"`: the IETF draft's `RateLimit` and `RateLimit-Policy`, as
    /// the HTTP doors write them (docs/headers.md).
    Ietf,
}

impl Default for EnvoySettings {
    fn default() -> Self {
        Self {
            merge_domains: false,
            response_headers: EnvoyHeaders::None,
            limit_header: "RateLimit-Limit".to_owned(),
            remaining_header: "RateLimit-Remaining".to_owned(),
            reset_header: "RateLimit-Reset".to_owned(),
            quota_mode: false,
            response_dynamic_metadata: false,
            count_own_cost: false,
            store_failure: StoreFailure::Policy,
            shadow_mode: false,
            xds: None,
        }
    }
}

impl Config {
    /// The config of no file: every default, no rules (the Envoy service
    /// takes its limits from `--envoy-config` alone, which the Envoy door
    /// loads: the TOML config holds no Envoy limits).
    #[must_use]
    pub fn without_rules() -> Self {
        Config {
            store: StoreConfig::default(),
            rules: Vec::new(),
            http: HttpConfig::default(),
            proxy: ProxyConfig::default(),
            envoy_settings: EnvoySettings::default(),
            metrics: MetricsConfig::default(),
            admin: AdminConfig::default(),
            ops: OpsConfig::default(),
            tracing: TracingConfig::default(),
            rlqs: None,
        }
    }

    /// The rule named `name`.
    #[must_use]
    pub fn rule(&self, name: &str) -> Option<&RuleConfig> {
        self.rules.iter().find(|r| r.rule.name() == name)
    }

    /// The failure policy of `rule`: its own `on_error`, else the store's.
    #[must_use]
    pub fn on_error_for(&self, rule: &RuleConfig) -> OnError {
        rule.on_error.unwrap_or(self.store.on_error)
    }
}

/// Formats a duration in the largest config unit that divides it exactly
/// (`1s`, `250ms`, `90s`, `1m`, `1d`); sub-millisecond parts as `µs`.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    let us = tollgate::time::duration_to_micros(d);
    let (ms, sub_ms) = (us / 1_000, us % 1_000);
    if sub_ms != 0 {
        return format!("{us}us");
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        let (count, rest) = (ms / size, ms % size);
        if count != 0 && rest == 0 {
            return format!("{count}{unit}");
        }
    }
    format!("{ms}ms")
}

/// What a bucket whose rule is unknown is assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unmatched {
    /// `ALLOW_ALL` (the default).
    #[default]
    Allow,
    /// `DENY_ALL`.
    Deny,
}

impl std::fmt::Display for Unmatched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unmatched::Allow => "allow",
            Unmatched::Deny => "deny",
        })
    }
}

/// How one RLQS domain's buckets map to a rule: from an entry of the
/// bucket id, or one rule for all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlqsDomain {
    /// `rule`: every bucket of the domain is of this rule.
    pub rule: String,
    /// `key_entries`: the entries that make the key (`None`: all of them).
    pub key_entries: Option<Vec<String>>,
}

/// `[rlqs]` (docs/rlqs.md, "Config").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlqsConfig {
    /// `rule_entry`: the bucket id's entry that names the rule.
    pub rule_entry: String,
    /// `key_entries`: the entries that make the key (`None`: every entry
    /// but `rule_entry`).
    pub key_entries: Option<Vec<String>>,
    /// `unmatched`: what a bucket of no known rule is assigned.
    pub unmatched: Unmatched,
    /// `report_period`: how often Envoy reports (5 s in Envoy 1.40,
    /// whatever its filter config says).
    pub report_period: Duration,
    /// `assignment_ttl`: every assignment's time to live, whole seconds.
    pub assignment_ttl: Duration,
    /// `abandon_after`: a bucket reported idle this long is abandoned.
    pub abandon_after: Duration,
    /// `max_streams`: open streams at once; more are refused.
    pub max_streams: u64,
    /// `max_buckets_per_stream`: buckets one stream holds; more are
    /// denied, not held.
    pub max_buckets_per_stream: u64,
    /// `[rlqs.domains.NAME]`: a fixed rule per RLQS domain.
    pub domains: BTreeMap<String, RlqsDomain>,
}

impl Default for RlqsConfig {
    fn default() -> Self {
        Self {
            rule_entry: "name".to_owned(),
            key_entries: None,
            unmatched: Unmatched::Allow,
            report_period: Duration::from_secs(5),
            assignment_ttl: Duration::from_secs(15),
            abandon_after: Duration::from_secs(60),
            max_streams: 1024,
            max_buckets_per_stream: 10_000,
            domains: BTreeMap::new(),
        }
    }
}
