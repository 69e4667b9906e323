//! Envoy bootstraps for the real-Envoy tests, made from the whole
//! bootstraps the repository ships (`examples/envoy/*.yaml`), so a test
//! that passes runs the example and the examples cannot rot:
//!
//! * [`Example::load`] parses one (YAML, read into JSON values);
//!   [`Example::for_test`] changes only what a test must: the listener and
//!   the admin API on `127.0.0.1:0`, the `upstream` cluster and the rate
//!   limit cluster (whatever the filter names, with its HTTP/2 option as
//!   the example has it) at the test's addresses, and the rate limit
//!   filter's `timeout` raised to 2 s and `failure_mode_deny: true` (a call
//!   the service fails, or one slowed by a busy machine, is then a 500 the
//!   test sees, never a silent admission);
//! * [`Bootstrap`] starts from the edge example (`examples/envoy/edge.yaml`)
//!   and replaces its routes with the test's: several routes, each with
//!   its own domain, rate limits in the filter's per-route config or in the
//!   route itself, filters before the rate limit filter (e.g. one setting
//!   dynamic metadata) and more fields of its config.
//!
//! The text handed to Envoy is JSON, which Envoy's YAML reader takes.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::{Map, Value, json};
use yaml_rust2::{Yaml, YamlLoader};

/// The cluster the examples' routes send requests to.
pub const UPSTREAM_CLUSTER: &str = "upstream";

/// The rate limit filter's name in `http_filters`.
const RATE_LIMIT_FILTER: &str = "envoy.filters.http.ratelimit";

/// `examples/envoy/NAME` in the repository.
pub fn example_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/envoy")
        .join(name)
}

/// YAML (one document, at any indentation) as JSON values.
pub fn yaml_to_json(yaml: &str) -> Value {
    let docs = YamlLoader::load_from_str(&reindent(yaml, 0))
        .unwrap_or_else(|e| panic!("bad YAML ({e}):\n{yaml}"));
    let [doc] = docs.as_slice() else {
        panic!("expected one YAML document:\n{yaml}");
    };
    to_json(doc)
}

fn to_json(y: &Yaml) -> Value {
    match y {
        Yaml::Real(r) => json!(r.parse::<f64>().expect("a YAML real")),
        Yaml::Integer(i) => json!(i),
        Yaml::String(s) => json!(s),
        Yaml::Boolean(b) => json!(b),
        Yaml::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| {
                    let Yaml::String(k) = k else {
                        panic!("a mapping key that is not a string: {k:?}");
                    };
                    (k.clone(), to_json(v))
                })
                .collect(),
        ),
        Yaml::Null => Value::Null,
        other => panic!("unexpected YAML node {other:?}"),
    }
}

/// An Envoy bootstrap read from `examples/envoy/`.
#[derive(Debug, Clone)]
pub struct Example {
    /// The file's name, for messages.
    name: String,
    /// The bootstrap.
    pub config: Value,
}

impl Example {
    /// `examples/envoy/NAME`, as the repository has it.
    pub fn load(name: &str) -> Example {
        let path = example_path(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        Example {
            name: name.to_owned(),
            config: yaml_to_json(&text),
        }
    }

    /// The example with the test's addresses: listener and admin on free
    /// ports of 127.0.0.1, the `upstream` cluster at `upstream`, the rate
    /// limit service's cluster at `rls`; the filter's `timeout` 2 s and
    /// `failure_mode_deny: true`. Nothing else changes.
    pub fn for_test(mut self, upstream: SocketAddr, rls: SocketAddr) -> Example {
        let loopback = json!({"socket_address": {"address": "127.0.0.1", "port_value": 0}});
        self.config["admin"]["address"] = loopback.clone();
        let listeners = self.config["static_resources"]["listeners"]
            .as_array_mut()
            .expect("static_resources.listeners");
        assert_eq!(listeners.len(), 1, "{}: one listener", self.name);
        listeners[0]["address"] = loopback;
        let filter = self.rate_limit_filter();
        filter.insert("timeout".to_owned(), json!("2s"));
        filter.insert("failure_mode_deny".to_owned(), json!(true));
        let rls_cluster =
            filter["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"]
                .as_str()
                .expect("rate_limit_service.grpc_service.envoy_grpc.cluster_name")
                .to_owned();
        self.point(UPSTREAM_CLUSTER, upstream);
        self.point(&rls_cluster, rls);
        self
    }

    /// The cluster named `name`.
    pub fn cluster(&mut self, name: &str) -> &mut Value {
        let file = &self.name;
        self.config["static_resources"]["clusters"]
            .as_array_mut()
            .expect("static_resources.clusters")
            .iter_mut()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{file}: no cluster {name}"))
    }

    /// The cluster `name`'s one endpoint set to `addr` (a STATIC cluster).
    fn point(&mut self, name: &str, addr: SocketAddr) {
        let file = self.name.clone();
        let cluster = self.cluster(name);
        cluster["type"] = json!("STATIC");
        let endpoints = cluster["load_assignment"]["endpoints"]
            .as_array_mut()
            .unwrap_or_else(|| panic!("{file}: cluster {name} has no endpoints"));
        assert_eq!(endpoints.len(), 1, "{file}: cluster {name}: one locality");
        let lb = endpoints[0]["lb_endpoints"]
            .as_array_mut()
            .unwrap_or_else(|| panic!("{file}: cluster {name} has no lb_endpoints"));
        assert_eq!(lb.len(), 1, "{file}: cluster {name}: one endpoint");
        lb[0]["endpoint"]["address"] = json!({"socket_address": {
            "address": addr.ip().to_string(), "port_value": addr.port()
        }});
    }

    /// The HTTP connection manager's config.
    fn manager(&mut self) -> &mut Value {
        let file = &self.name;
        let chains = &mut self.config["static_resources"]["listeners"][0]["filter_chains"];
        let filters = chains[0]["filters"]
            .as_array_mut()
            .unwrap_or_else(|| panic!("{file}: no network filters"));
        let hcm = filters
            .iter_mut()
            .find(|f| f["name"] == "envoy.filters.network.http_connection_manager")
            .unwrap_or_else(|| panic!("{file}: no http_connection_manager"));
        &mut hcm["typed_config"]
    }

    /// The HTTP filters, in order.
    fn http_filters(&mut self) -> &mut Vec<Value> {
        self.manager()["http_filters"]
            .as_array_mut()
            .expect("http_filters")
    }

    /// The rate limit filter's config (`RateLimit`).
    pub fn rate_limit_filter(&mut self) -> &mut Map<String, Value> {
        let file = self.name.clone();
        self.http_filters()
            .iter_mut()
            .find(|f| f["name"] == RATE_LIMIT_FILTER)
            .and_then(|f| f["typed_config"].as_object_mut())
            .unwrap_or_else(|| panic!("{file}: no {RATE_LIMIT_FILTER} filter"))
    }

    /// The bootstrap's text for Envoy.
    pub fn text(&self) -> String {
        serde_json::to_string_pretty(&self.config).expect("JSON")
    }
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

/// A bootstrap built up from the edge example (`examples/envoy/edge.yaml`,
/// through [`Example::for_test`]): its routes replaced by the test's,
/// by path prefix (in the order given) to `upstream`, each with its rate
/// limits, and its rate limit filter calling the gRPC service at `rls` for
/// `domain`. YAML pieces are given at any indentation.
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

    /// The bootstrap's text for Envoy (JSON: Envoy reads it as YAML).
    pub fn yaml(&self) -> String {
        let mut example = Example::load("edge.yaml").for_test(self.upstream, self.rls);
        let filter = example.rate_limit_filter();
        filter.insert("domain".to_owned(), json!(self.domain));
        for fields in &self.filter_fields {
            let Value::Object(fields) = yaml_to_json(fields) else {
                panic!("filter fields must be a mapping: {fields}");
            };
            filter.extend(fields);
        }
        let filters = example.http_filters();
        let at = filters
            .iter()
            .position(|f| f["name"] == RATE_LIMIT_FILTER)
            .expect("the rate limit filter");
        for (i, before) in self.before.iter().enumerate() {
            let Value::Array(mut one) = yaml_to_json(before) else {
                panic!("a filter must be one list entry: {before}");
            };
            assert_eq!(one.len(), 1, "one filter: {before}");
            filters.insert(at + i, one.remove(0));
        }
        let routes: Vec<Value> = self.routes.iter().map(route_json).collect();
        let hosts = &mut example.manager()["route_config"]["virtual_hosts"];
        hosts[0]["routes"] = Value::Array(routes);
        example.text()
    }
}

/// One route, an entry of the virtual host's `routes`.
fn route_json(r: &Route) -> Value {
    let rate_limits = yaml_to_json(&r.rate_limits);
    let mut route = json!({
        "match": {"prefix": r.prefix},
        "route": {"cluster": UPSTREAM_CLUSTER},
    });
    if r.placement == Placement::Route {
        route["route"]["rate_limits"] = rate_limits.clone();
    }
    if r.placement == Placement::Filter || r.domain.is_some() {
        let mut per_route = json!({
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
        });
        if let Some(domain) = &r.domain {
            per_route["domain"] = json!(domain);
        }
        if r.placement == Placement::Filter {
            per_route["rate_limits"] = rate_limits;
        }
        route["typed_per_filter_config"] = json!({ RATE_LIMIT_FILTER: per_route });
    }
    route
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
