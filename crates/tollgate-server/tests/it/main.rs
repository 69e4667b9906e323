//! The server's integration tests: one binary, a module per area (each
//! was its own binary once, and each linked the whole server again), and
//! one `support` module for what they share: `tollgate serve` on free
//! ports, raw HTTP, a real Envoy, upstreams. Run one area with its module
//! path: `cargo test -p tollgate-server --test it -- envoy_reference::`.
//!
//! `tests/rule_memory.rs` keeps a binary of its own: it counts heap bytes
//! with a global allocator, which is per binary, and nothing else may
//! allocate while it counts.

mod support;

mod admin;
mod compat_entry;
mod compat_refusals;
mod compat_reload;
mod compat_store_failure;
mod compat_xds_health;
mod dashboard;
mod eg_end_to_end;
mod envoy;
mod envoy_examples;
mod envoy_files;
mod envoy_gateway;
mod envoy_gateway_costs;
mod envoy_gateway_real;
mod envoy_h2;
mod envoy_metadata;
mod envoy_metric_keys;
mod envoy_overrides;
mod envoy_quota;
mod envoy_real;
mod envoy_real_limits;
mod envoy_real_override;
mod envoy_reference;
mod envoy_reference_errors;
mod envoy_reference_features;
mod envoy_reference_wildcards;
mod envoy_settings;
mod envoy_usage;
mod envoy_wildcards;
mod envoy_xds;
mod fleet_inflight;
mod fleet_processes;
mod fleet_proxy;
mod hostile_files;
mod http_api;
mod hybrid_serve;
mod llm_doc_configs;
mod llm_gateway;
mod llm_sdk;
mod llm_sdk_load;
mod metrics_families;
mod metrics_reference;
mod near_limit;
mod openapi;
mod ops;
mod overrides;
mod proxy;
mod proxy_body;
mod proxy_body_usage;
mod proxy_edges;
mod proxy_tls;
mod proxy_usage;
mod redis_serve;
mod reload;
mod replay;
mod replay_ops;
mod replay_plot;
mod replay_redis;
mod rlqs_envoy_quirks;
mod rlqs_hostile;
mod rlqs_protocol;
mod run_in_process;
mod secrets;
mod serve;
mod serve_env;
mod tracing_envoy;
mod tracing_http;
mod tracing_tls;
mod usage_http;
mod usage_metrics;
mod usage_overrides;
mod usage_stranded;
mod validate;
mod xds_naming;
mod xds_proto;
mod xds_ready;
mod xds_resilience;
mod xds_serve;
mod xds_tls;
