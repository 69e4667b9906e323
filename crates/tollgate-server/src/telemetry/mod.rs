//! OpenTelemetry tracing (docs/tracing.md): the doors' and the store's
//! `tracing` spans exported over OTLP, joined to the caller's trace.
//!
//! The shape: the process's log subscriber carries [`layer`] from its
//! start (`main` adds it), a tracing-opentelemetry layer over a tracer
//! provider whose sampler and batch processor are empty slots, behind a
//! filter that is shut. [`start`], on the server's one start path, fills
//! the slots from `[tracing]` and the `OTEL_*` variables ([`mod@env`]) and
//! opens the filter; [`Telemetry::shutdown`] flushes what is queued. A
//! slot rather than building the layer once the config is known: the
//! subscriber is set before the runtime exists, and the gRPC exporter
//! needs the runtime.
//!
//! Off (the default), nothing is built and the filter's interest is
//! `never` with a max level of OFF, so the doors' and the store's spans
//! (TRACE) cost the level check that every disabled `tracing` span costs.
//! On, each door samples a call before making its span; a
//! store span is made only inside a door's span (the filter asks).
//!
//! The folder: `env.rs` reads the `OTEL_*` variables; `propagate.rs`
//! reads the caller's context (W3C, B3); `export.rs` builds the OTLP
//! exporter, `tls.rs` its TLS; `slot.rs` holds the late-filled sampler
//! and processor and the filter; `spans.rs` makes the doors' spans.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SpanProcessor};
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::config::{OtlpProtocol, TracingConfig};

pub mod env;
mod export;
mod propagate;
mod slot;
pub(crate) mod spans;
mod tls;

/// How long [`Telemetry::shutdown`] waits for the last spans to go (the
/// reference's 5 s).
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether spans are being exported: the filter's switch.
static ON: AtomicBool = AtomicBool::new(false);

/// The sampler deciding each door's call before its spans are made
/// ([`keeps`]); the provider's own samples every span made.
static DECIDE: OnceLock<Sampler> = OnceLock::new();

/// The provider under [`layer`], once a subscriber carries it.
static SLOT: OnceLock<slot::Slot> = OnceLock::new();

/// The layer to add to the process's subscriber, once: it exports the
/// doors' and the store's spans once [`start`] turns it on, and costs a
/// level check until then.
pub fn layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let slot = SLOT.get_or_init(slot::Slot::new);
    tracing_opentelemetry::layer()
        .with_tracer(slot.provider.tracer("tollgate"))
        // None of these per span: the attributes the spans carry say it.
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(slot::Switch)
}

/// Started tracing, to shut down (flushing) when serving ends.
#[derive(Debug)]
#[must_use = "shut it down to flush the last spans"]
pub struct Telemetry {
    on: bool,
}

/// Starts exporting spans as `config` says (nothing when it is off).
/// Call inside the runtime: the gRPC exporter's channel lives on it.
///
/// # Errors
/// An exporter that cannot be built (a bad header value).
pub fn start(config: &TracingConfig) -> Result<Telemetry, String> {
    if !config.enabled {
        return Ok(Telemetry { on: false });
    }
    let Some(slot) = SLOT.get() else {
        tracing::warn!(
            "tracing is on, but this process's log subscriber has no telemetry layer: no spans"
        );
        return Ok(Telemetry { on: false });
    };
    let exporter = export::exporter(config)?;
    let mut processor = BatchSpanProcessor::builder(export::Logged::new(exporter)).build();
    processor.set_resource(&resource(config));
    if DECIDE.set(sampler(config)).is_err() || !slot.fill(Sampler::AlwaysOn, processor) {
        // A second server in one process: the first one's export goes on.
        tracing::warn!("tracing was started already in this process; keeping the first settings");
        return Ok(Telemetry { on: false });
    }
    ON.store(true, Ordering::Release);
    // The callsites met so far were told `never`: ask them again.
    tracing::callsite::rebuild_interest_cache();
    tracing::info!(
        "tracing: spans over OTLP/{} to {}, sampling {} of root traces{}",
        match config.protocol {
            OtlpProtocol::Grpc => "gRPC",
            OtlpProtocol::HttpProtobuf => "HTTP",
        },
        export::endpoint(config),
        config.sampling_ratio,
        if config.parent_based {
            ", following the caller's decision"
        } else {
            ""
        }
    );
    Ok(Telemetry { on: true })
}

impl Telemetry {
    /// Stops making spans and sends those queued, waiting at most
    /// [`SHUTDOWN_TIMEOUT`].
    pub async fn shutdown(self) {
        if !self.on {
            return;
        }
        ON.store(false, Ordering::Release);
        tracing::callsite::rebuild_interest_cache();
        let Some(slot) = SLOT.get() else { return };
        // The processor's thread sends while this one waits: off the
        // runtime's workers, which the exporter's I/O needs.
        let done = tokio::task::spawn_blocking(|| slot.shutdown(SHUTDOWN_TIMEOUT)).await;
        match done {
            Ok(Ok(())) => tracing::info!("tracing: the last spans sent"),
            Ok(Err(e)) => tracing::warn!("tracing: the last spans may be lost: {e}"),
            Err(e) => tracing::warn!("tracing: the last spans may be lost: {e}"),
        }
    }
}

/// Parent-based (a caller's sampled flag decides) over the ratio of
/// root traces, as the reference's sampler; or the ratio alone.
fn sampler(config: &TracingConfig) -> Sampler {
    let ratio = Sampler::TraceIdRatioBased(config.sampling_ratio);
    if config.parent_based {
        Sampler::ParentBased(Box::new(ratio))
    } else {
        ratio
    }
}

/// `service.name`, the configured attributes, and the SDK's own.
fn resource(config: &TracingConfig) -> Resource {
    Resource::builder_empty()
        .with_detector(Box::new(
            opentelemetry_sdk::resource::TelemetryResourceDetector,
        ))
        .with_attributes(
            config
                .resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_service_name(config.service_name.clone())
        .build()
}

/// Whether a call with the caller's context `parent` (if any) is traced:
/// the configured sampler's decision, made before any span is, so an
/// unsampled call makes none (a span made and then dropped costs about
/// as much as one sent: bench/tracing.sh). A root's trace id is drawn
/// here for the ratio; the span gets another, as random.
pub(crate) fn keeps(parent: Option<&opentelemetry::Context>) -> bool {
    use opentelemetry::trace::{SpanKind, TraceContextExt as _};
    use opentelemetry_sdk::trace::{
        IdGenerator as _, RandomIdGenerator, SamplingDecision, ShouldSample as _,
    };
    let Some(sampler) = DECIDE.get() else {
        return false;
    };
    let trace_id = match parent {
        Some(cx) => cx.span().span_context().trace_id(),
        None => RandomIdGenerator::default().new_trace_id(),
    };
    let decided = sampler.should_sample(parent, trace_id, "", &SpanKind::Server, &[], &[]);
    decided.decision == SamplingDecision::RecordAndSample
}

/// Whether spans are exported now (the doors skip reading the caller's
/// context when not).
pub(crate) fn on() -> bool {
    ON.load(Ordering::Acquire)
}
