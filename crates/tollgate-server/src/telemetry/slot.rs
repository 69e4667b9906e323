//! The tracer provider made with the subscriber, before the config is
//! known: its sampler and processor are slots [`Slot::fill`] fills once,
//! and [`Switch`], the layer's filter, stays shut until then.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, Sampler, SamplingDecision, SamplingResult, SdkTracerProvider, ShouldSample,
    Span, SpanData, SpanProcessor,
};
use tracing::Metadata;
use tracing::subscriber::Interest;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context as LayerContext, Filter};
use tracing_subscriber::registry::LookupSpan;

/// The provider and its two slots.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) provider: SdkTracerProvider,
    sampler: Arc<OnceLock<Sampler>>,
    processor: Arc<OnceLock<BatchSpanProcessor>>,
}

impl Slot {
    pub(super) fn new() -> Self {
        let sampler = Arc::new(OnceLock::new());
        let processor = Arc::new(OnceLock::new());
        let provider = SdkTracerProvider::builder()
            .with_sampler(LateSampler(Arc::clone(&sampler)))
            .with_span_processor(LateProcessor(Arc::clone(&processor)))
            .build();
        Self {
            provider,
            sampler,
            processor,
        }
    }

    /// Fills both slots; false when they were filled already.
    pub(super) fn fill(&self, sampler: Sampler, processor: BatchSpanProcessor) -> bool {
        self.sampler.set(sampler).is_ok() && self.processor.set(processor).is_ok()
    }

    /// Flushes and stops the processor.
    pub(super) fn shutdown(&self, timeout: Duration) -> OTelSdkResult {
        match self.processor.get() {
            Some(p) => p.shutdown_with_timeout(timeout),
            None => Ok(()),
        }
    }
}

/// The sampler in the slot; drops everything while empty.
#[derive(Debug, Clone)]
struct LateSampler(Arc<OnceLock<Sampler>>);

impl ShouldSample for LateSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        match self.0.get() {
            Some(s) => {
                s.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
            }
            None => SamplingResult {
                decision: SamplingDecision::Drop,
                attributes: Vec::new(),
                trace_state: Default::default(),
            },
        }
    }
}

/// The processor in the slot; drops everything while empty.
#[derive(Debug)]
struct LateProcessor(Arc<OnceLock<BatchSpanProcessor>>);

impl SpanProcessor for LateProcessor {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        if let Some(p) = self.0.get() {
            p.on_start(span, cx);
        }
    }

    fn on_end(&self, span: SpanData) {
        if let Some(p) = self.0.get() {
            p.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.get().map_or(Ok(()), SpanProcessor::force_flush)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0
            .get()
            .map_or(Ok(()), |p| p.shutdown_with_timeout(timeout))
    }

    // The resource goes to the real processor when it is made.
    fn set_resource(&mut self, _resource: &Resource) {}
}

/// The layer's filter: tollgate's own spans (targets `tollgate...`),
/// while tracing is on; nothing, with a max level of OFF, while it is
/// off, so `tracing` rejects the spans at their level check. A store span
/// (`tollgate::store`) only inside a span this layer records (a door's
/// sampled call): outside one it would be a root nobody sampled.
#[derive(Debug, Clone, Copy)]
pub(super) struct Switch;

const STORE_TARGET: &str = "tollgate::store";

impl Switch {
    fn wants(meta: &Metadata<'_>) -> bool {
        super::on() && meta.is_span() && meta.target().starts_with("tollgate")
    }
}

impl<S> Filter<S> for Switch
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn enabled(&self, meta: &Metadata<'_>, cx: &LayerContext<'_, S>) -> bool {
        Self::wants(meta) && (meta.target() != STORE_TARGET || cx.lookup_current().is_some())
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if !Self::wants(meta) {
            Interest::never()
        } else if meta.target() == STORE_TARGET {
            // Asked at each span: whether a door's span is current.
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(if super::on() {
            LevelFilter::TRACE
        } else {
            LevelFilter::OFF
        })
    }
}
