//! One xDS response applied whole, through the reload path: every
//! resource decoded and loaded into new [`EnvoyLimits`] with the checks
//! of a file, the next [`Generation`] built over the running one (so the
//! counters of unchanged limits are kept) and swapped in atomically, as
//! version `version_info`. A response that does not load or build changes
//! nothing; its error, naming the domain and descriptor, is the NACK's.
//! Either way the reload status and the `tollgate_config_*` metrics
//! record it, as for a file reload.

use std::sync::{Arc, PoisonError};
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use prost::Message;

use crate::config::{ConfigInfo, ReloadError, record_loaded, rfc3339};
use crate::doors::envoy::limits::EnvoyLimits;
use crate::doors::{Generation, Plan, Shared};
use crate::rls_conf::{RateLimitConfig, TYPE_URL};

/// The most of a refusal's text sent in a NACK, logged and kept in the
/// reload status: every error of a large bad snapshot joined is megabytes,
/// and a NACK over 4 MiB (grpc-go's limit, Envoy Gateway's server's) ends
/// the stream, which then reconnects and fails again.
pub(crate) const MESSAGE_CAP: usize = 16 << 10;

/// `message` (one error a line) cut to the whole lines that fit in
/// [`MESSAGE_CAP`], then how many more there were.
pub(crate) fn capped(message: &str) -> String {
    if message.len() <= MESSAGE_CAP {
        return message.to_owned();
    }
    // Room kept for the tail line.
    let room = MESSAGE_CAP - 64;
    let lines: Vec<&str> = message.lines().collect();
    let mut out = String::new();
    let mut kept = 0;
    for line in &lines {
        let sep = usize::from(!out.is_empty());
        if out.len() + sep + line.len() > room {
            break;
        }
        if sep == 1 {
            out.push('\n');
        }
        out.push_str(line);
        kept += 1;
    }
    if kept == 0 {
        // One line longer than the cap: its start.
        out.push_str(crate::utf8::prefix(message, room));
        out.push_str(" …");
        kept = 1;
    }
    let more = lines.len() - kept;
    if more > 0 {
        out.push_str(&format!("\n… and {more} more errors"));
    }
    out
}

/// Applies responses to the live generation.
#[derive(Clone)]
pub(crate) struct Applier {
    pub(crate) live: Arc<ArcSwap<Generation>>,
    pub(crate) shared: Shared,
}

/// The resources of `response`, decoded.
///
/// # Errors
/// A response of another type (an ADS stream can carry several; this
/// client subscribes to one, and applying another as the rate limit
/// config would empty it), a resource of another type, or bytes that do
/// not decode; named by its position.
pub(crate) fn decode(response: &DiscoveryResponse) -> Result<Vec<RateLimitConfig>, String> {
    // An empty type URL is taken as ours: a server that does not set it
    // can mean nothing else on a stream with one subscription.
    if !response.type_url.is_empty() && response.type_url != TYPE_URL {
        return Err(format!(
            "the response has type {:?}, not the subscribed {TYPE_URL}; nothing applied",
            response.type_url
        ));
    }
    response
        .resources
        .iter()
        .enumerate()
        .map(|(i, any)| {
            if any.type_url != TYPE_URL {
                return Err(format!(
                    "resource #{i} has type {:?}, expected {TYPE_URL}",
                    any.type_url
                ));
            }
            RateLimitConfig::decode(any.value.as_slice())
                .map_err(|e| format!("resource #{i}: not a RateLimitConfig: {e}"))
        })
        .collect()
}

impl Applier {
    /// Applies `response` whole (on a blocking thread: a snapshot of
    /// thousands of domains is a few milliseconds of work).
    ///
    /// # Errors
    /// Why it was refused; nothing changed.
    pub(crate) async fn apply(&self, response: DiscoveryResponse) -> Result<(), String> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.apply_now(&response))
            .await
            .unwrap_or_else(|e| Err(format!("the xDS loader failed: {e}")))
    }

    fn apply_now(&self, response: &DiscoveryResponse) -> Result<(), String> {
        let started = Instant::now();
        let version = response.version_info.clone();
        // One swap at a time: a file reload meanwhile would lose this one.
        let _swapping = self
            .shared
            .swap
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let old = self.live.load_full();
        let built = decode(response).and_then(|resources| {
            let config = &old.plan.config;
            let taken: Vec<&str> = config.rules.iter().map(|r| r.rule.name()).collect();
            let merge = config.envoy_settings.merge_domains;
            let limits =
                EnvoyLimits::from_xds(&resources, &taken, merge).map_err(|e| e.to_string())?;
            let plan = Plan {
                config: config.clone(),
                envoy: Arc::new(limits),
                listen: old.plan.listen.clone(),
                ops: old.plan.ops,
            };
            let info = ConfigInfo::now(version.clone());
            Generation::build(plan, info, &self.shared, Some(&old))
        });
        let status = &self.shared.status;
        match built {
            Err(message) => {
                let message = capped(&message);
                tracing::error!(
                    "xDS config version {version:?} refused; still serving version {} loaded at {}: \
                     {message}",
                    old.info.version,
                    rfc3339(old.info.loaded_at),
                );
                status.record(
                    false,
                    Some(ReloadError {
                        message: message.clone(),
                        at: SystemTime::now(),
                        version,
                    }),
                );
                Err(message)
            }
            Ok(doors) => {
                let doors = Arc::new(doors);
                record_loaded(&doors.info);
                let domains = doors.plan.envoy.domains().len();
                let rules = doors.gate.rules().len();
                self.live.store(doors);
                drop(old);
                tracing::info!(
                    "xDS config version {version:?} applied: {domains} domains, {rules} rules, \
                     swapped in {:?}",
                    started.elapsed()
                );
                status.record(true, None);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::Any;

    #[test]
    fn a_long_refusal_keeps_its_first_errors_and_counts_the_rest() {
        let lines: Vec<String> = (0..10_000)
            .map(|i| format!("domain d{i}: descriptor k: a bad limit, explained at length"))
            .collect();
        let all = lines.join("\n");
        let cut = capped(&all);
        assert!(cut.len() <= MESSAGE_CAP, "{}", cut.len());
        assert!(cut.starts_with(&lines[0]), "{cut}");
        let kept = cut.lines().count() - 1;
        assert!(
            cut.ends_with(&format!("… and {} more errors", 10_000 - kept)),
            "{cut}"
        );
        assert_eq!(capped("short"), "short");
        let one = "é".repeat(MESSAGE_CAP);
        let cut = capped(&one);
        assert!(
            cut.len() <= MESSAGE_CAP && cut.starts_with('é'),
            "{}",
            cut.len()
        );
    }

    #[test]
    fn resources_of_another_type_or_bad_bytes_are_named_by_position() {
        let good = RateLimitConfig {
            name: "d".into(),
            domain: "d".into(),
            descriptors: vec![],
        };
        let any = |type_url: &str, value: Vec<u8>| Any {
            type_url: type_url.into(),
            value,
        };
        let mut response = DiscoveryResponse {
            resources: vec![any(TYPE_URL, good.encode_to_vec())],
            ..DiscoveryResponse::default()
        };
        assert_eq!(decode(&response).expect("valid"), [good]);
        let other = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
        response.resources.push(any(other, vec![]));
        let e = decode(&response).expect_err("wrong type");
        assert!(
            e.starts_with("resource #1 has type") && e.contains(other),
            "{e}"
        );
        response.resources[1] = any(TYPE_URL, vec![0xff, 0xff]);
        let e = decode(&response).expect_err("bad bytes");
        assert!(e.starts_with("resource #1: not a RateLimitConfig"), "{e}");
    }

    #[test]
    fn a_response_of_another_type_is_refused_whole() {
        let other = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
        // Empty, it would otherwise load as a config without limits.
        let mut response = DiscoveryResponse {
            type_url: other.into(),
            ..DiscoveryResponse::default()
        };
        let e = decode(&response).expect_err("another type");
        assert!(e.contains(other) && e.contains("nothing applied"), "{e}");
        response.type_url = TYPE_URL.into();
        assert_eq!(decode(&response).expect("ours"), []);
        response.type_url.clear();
        assert_eq!(decode(&response).expect("unset is ours"), []);
    }
}
