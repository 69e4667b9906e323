//! What serves requests under one config ([`Generation`]): the gate over
//! the shared store, and over it the HTTP API, the reverse proxy and the
//! Envoy service. A reload builds the next generation from the new plan
//! and the previous one (carrying over what must outlive a config), and
//! the reload task ([`crate::reload`]) publishes it; each request takes
//! the generation current at its start and decides on that alone.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use tollgate_http::headers::HeaderOptions;

use super::api::Api;
use super::envoy::headers::ResponseHeaders;
use super::envoy::service::EnvoyService;
use super::ops::{Health, Probes};
use super::proxy::{Proxy, upstream_of};
use super::{ByDoor, Door, Plan};
use crate::config::{ConfigInfo, EnvoyHeaders, ReloadStatus};
use crate::gate::Gate;
use crate::metrics::reference::ReferenceMetrics;
use crate::store::AnyStore;

/// One config's doors, all over one [`Gate`]. The admin API is not
/// rebuilt: it takes the gate of the generation current at each request.
#[derive(Debug)]
pub(crate) struct Generation {
    /// The rules and policies.
    pub(crate) gate: Arc<Gate>,
    /// The HTTP API; its probes are the ops listener's too.
    pub(crate) api: Arc<Api>,
    /// The reverse proxy, when it is served.
    pub(crate) proxy: Option<Arc<Proxy>>,
    /// The Envoy rate limit service.
    pub(crate) envoy: Arc<EnvoyService>,
    /// The plan they were built from: the config, the Envoy limits and
    /// the addresses served.
    pub(crate) plan: Plan,
    /// Its version and load time.
    pub(crate) info: Arc<ConfigInfo>,
}

/// What every [`Generation`] shares.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    /// The store, opened once at start.
    pub(crate) store: Arc<AnyStore>,
    /// The doors served (their listeners are bound at start).
    pub(crate) served: ByDoor<()>,
    /// Renders `/metrics`.
    pub(crate) metrics: PrometheusHandle,
    /// The last reload's problem.
    pub(crate) status: Arc<ReloadStatus>,
    /// The reference service's series (`[metrics] reference_names`), kept
    /// across reloads; recorded and shown while a config turns them on.
    pub(crate) reference: Arc<ReferenceMetrics>,
    /// Draining, and the store probe (the probes of every generation).
    pub(crate) health: Arc<Health>,
    /// Held while a new generation is built and swapped in: the file
    /// reload and the xDS client each build on the one running, so one
    /// at a time, or one would undo the other's change.
    pub(crate) swap: Arc<std::sync::Mutex<()>>,
}

impl Generation {
    /// The doors of `plan` (loaded as `info`) over the shared store; with
    /// `previous`, carrying over its replica id, circuit breaker, idle
    /// upstream connections and runtime-value metric keys.
    ///
    /// # Errors
    /// A rule the library refuses, a proxy without an upstream, an Envoy
    /// config the gate does not end with.
    pub(crate) fn build(
        plan: Plan,
        info: ConfigInfo,
        shared: &Shared,
        previous: Option<&Generation>,
    ) -> Result<Self, String> {
        let config = &plan.config;
        // The config's rules, then the Envoy configs' (the Envoy service
        // finds them at the end).
        let gate = Arc::new(Gate::over(
            config,
            plan.envoy.all_rules(),
            Arc::clone(&shared.store),
            previous.map(|p| &*p.gate),
        )?);
        let info = Arc::new(info);
        // `[ops] readiness` is read per generation: a reload changes it.
        let probes = Probes::new(Arc::clone(&gate), shared.metrics.clone())
            .with_config(Arc::clone(&info), Arc::clone(&shared.status))
            .with_health(Arc::clone(&shared.health), config.ops.readiness)
            .with_reference((config.metrics.reference_names).then(|| Arc::clone(&shared.reference)))
            .awaiting_config(
                plan.envoy.awaiting()
                    && (config.envoy_settings.xds.as_ref())
                        .is_some_and(|x| !x.start_without_config),
            );
        let api = Api::new(
            Arc::clone(&gate),
            HeaderOptions {
                legacy: config.http.legacy_headers,
            },
            shared.metrics.clone(),
        )
        .with_probes(probes);
        let proxy = if shared.served.get(Door::Proxy).is_some() {
            let upstream = upstream_of(config)?.clone();
            let mut proxy = Proxy::new(Arc::clone(&gate), config, upstream)?;
            if let Some(old) = previous.and_then(|p| p.proxy.as_deref()) {
                proxy = proxy.keeping_connections_of(old);
            }
            Some(Arc::new(proxy))
        } else {
            None
        };
        let settings = &config.envoy_settings;
        let headers = match settings.response_headers {
            EnvoyHeaders::None => None,
            EnvoyHeaders::Reference => Some(ResponseHeaders::Reference {
                limit: settings.limit_header.clone(),
                remaining: settings.remaining_header.clone(),
                reset: settings.reset_header.clone(),
            }),
            EnvoyHeaders::Ietf => Some(ResponseHeaders::Ietf),
        };
        let mut envoy = EnvoyService::new(Arc::clone(&gate), Arc::clone(&plan.envoy))?
            .with_response_headers(headers)
            .with_quota_mode(settings.quota_mode)
            .with_count_own_cost(settings.count_own_cost)
            .with_store_failure(settings.store_failure)
            .with_shadow_mode(settings.shadow_mode)
            .with_dynamic_metadata(settings.response_dynamic_metadata);
        if let Some(previous) = previous {
            envoy = envoy.keeping_metrics_of(&previous.envoy);
        }
        // The reference's names, while the config turns them on.
        let reference = config.metrics.reference_names;
        envoy = envoy.with_reference_metrics(
            reference.then(|| Arc::clone(&shared.reference)),
            config.metrics.near_limit_ratio,
        );
        Ok(Self {
            gate,
            api: Arc::new(api),
            proxy,
            envoy: Arc::new(envoy),
            plan,
            info,
        })
    }
}
