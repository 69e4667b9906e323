//! Serves one snapshot of `RateLimitConfig` resources, read from files,
//! to node NODE at version VERSION, until killed: the ADS server of
//! `bench/grpc.sh`'s `xds` target (the same limits the `grpc` target reads
//! from YAML files, delivered over ADS as Envoy Gateway delivers them).
//!
//! ```text
//! cargo run --release -p xds-harness --example xds_serve -- NODE VERSION FILE.json...
//! ```
//!
//! Each FILE is one resource in the reference's YAML field names, as JSON
//! (`bench/grpc.sh` converts its YAML files): `name` (default: the
//! domain), `domain`, `descriptors` of `key`, `value`, `rate_limit`
//! (`requests_per_unit`, `unit` by name, `unlimited`, `name`, `replaces`),
//! `descriptors`, `shadow_mode`, `detailed_metric`, `quota_mode`. Prints
//! `xds-harness listening on ADDR` once it serves.

use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitReplace, RateLimitUnit,
};
use prost::Message;
use serde_json::Value;
use xds_harness::AdsServer;

fn text(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn flag(v: &Value, field: &str) -> bool {
    v.get(field).and_then(Value::as_bool).unwrap_or(false)
}

fn policy(v: &Value) -> Result<RateLimitPolicy, String> {
    let unit = text(v, "unit").to_uppercase();
    let unit = RateLimitUnit::from_str_name(&unit).ok_or_else(|| format!("unit {unit:?}"))?;
    let requests = v
        .get("requests_per_unit")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let replaces = v
        .get("replaces")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |r| {
            r.iter()
                .map(|r| RateLimitReplace {
                    name: text(r, "name"),
                })
                .collect()
        });
    Ok(RateLimitPolicy {
        unit: unit as i32,
        requests_per_unit: u32::try_from(requests)
            .map_err(|_| format!("requests_per_unit {requests}"))?,
        unlimited: flag(v, "unlimited"),
        name: text(v, "name"),
        replaces,
    })
}

fn descriptors(v: &Value) -> Result<Vec<RateLimitDescriptor>, String> {
    let Some(list) = v.get("descriptors").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    list.iter()
        .map(|d| {
            Ok(RateLimitDescriptor {
                key: text(d, "key"),
                value: text(d, "value"),
                rate_limit: match d.get("rate_limit") {
                    None | Some(Value::Null) => None,
                    Some(p) => Some(policy(p)?),
                },
                descriptors: descriptors(d)?,
                shadow_mode: flag(d, "shadow_mode"),
                detailed_metric: flag(d, "detailed_metric"),
                quota_mode: flag(d, "quota_mode"),
                metadata: None,
            })
        })
        .collect()
}

#[allow(clippy::print_stdout)] // the address is how the script finds it
#[tokio::main]
async fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [node, version, files @ ..] = args.as_slice() else {
        return Err("usage: xds_serve NODE VERSION FILE.json...".to_owned());
    };
    let mut configs = Vec::new();
    for file in files {
        let json = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
        let v: Value = serde_json::from_str(&json).map_err(|e| format!("{file}: {e}"))?;
        let config = RateLimitConfig {
            name: text_or(&v, "name", "domain"),
            domain: text(&v, "domain"),
            descriptors: descriptors(&v).map_err(|e| format!("{file}: {e}"))?,
        };
        configs.push((config.name.clone(), config.encode_to_vec()));
    }
    let server = AdsServer::start(None).await;
    server.set_configs(node, version, configs);
    println!("xds-harness listening on {}", server.addr());
    std::future::pending::<()>().await;
    Ok(())
}

/// `field`, or `fallback` when it is absent or empty.
fn text_or(v: &Value, field: &str, fallback: &str) -> String {
    Some(text(v, field))
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| text(v, fallback))
}
