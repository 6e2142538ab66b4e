//! The OpenTelemetry pipeline: a parent-based sampler over upstream's root
//! sampler, a batching span processor and the OTLP/gRPC exporter.

use std::time::Duration;

use anyhow::Context;
use opentelemetry::{trace::TracerProvider as _, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::{
    trace::{Sampler, SdkTracerProvider},
    Resource,
};
use tracing_subscriber::registry::LookupSpan;

use crate::config::{RootSampler, Tracing};

/// The spans' instrumentation scope.
const SCOPE: &str = "vfps";

/// The exporter and what makes its tracer; flushed and stopped on shutdown.
pub(super) struct Pipeline {
    /// Owns the batch processor and its exporter: the tracer comes from it, and
    /// shutting it down exports what is still queued.
    provider: SdkTracerProvider,
}

impl Pipeline {
    /// Builds the exporter (its channel connects lazily, so a collector that is
    /// not up yet is no start-up error). Must run inside the Tokio runtime.
    pub(super) fn new(settings: &Tracing) -> anyhow::Result<Self> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(settings.otlp_endpoint.clone())
            .build()
            .with_context(|| {
                format!(
                    "cannot set up the OTLP exporter to {}",
                    settings.otlp_endpoint
                )
            })?;
        let root = match settings.root_sampler {
            RootSampler::AlwaysOn => Sampler::AlwaysOn,
            RootSampler::AlwaysOff => Sampler::AlwaysOff,
            RootSampler::TraceIdRatioBased => {
                Sampler::TraceIdRatioBased(settings.sampling_probability)
            }
        };
        let mut resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        if let Some(host) = host_name() {
            resource = resource.with_attribute(KeyValue::new("service.instance.id", host));
        }
        let provider = SdkTracerProvider::builder()
            .with_sampler(Sampler::ParentBased(Box::new(root)))
            .with_resource(resource.build())
            .with_batch_exporter(exporter)
            .build();
        Ok(Self { provider })
    }

    /// The layer that turns [`SPANS_TARGET`](super::SPANS_TARGET) spans into
    /// OpenTelemetry spans. Events inside them become span events.
    pub(super) fn layer<S>(&self) -> impl tracing_subscriber::Layer<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer(SCOPE))
            .with_location(false)
            .with_threads(false)
            .with_level(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            // Parents come from tracing's own span tree; nothing here reads the
            // OpenTelemetry thread-local context, and attaching it on every poll
            // of an instrumented future was a tenth of the server's CPU.
            .with_context_activation(false)
    }

    pub(super) fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!(error = %e, "cannot export spans");
        }
    }

    /// Stops a pipeline that never got a span.
    pub(super) fn discard(self) {
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(1));
    }

    pub(super) fn shutdown(self, timeout: Duration) {
        match self.provider.shutdown_with_timeout(timeout) {
            Ok(()) => tracing::info!("tracing stopped"),
            Err(e) => tracing::warn!(
                error = %e,
                ?timeout,
                "not every span could be exported before the tracing shutdown timeout"
            ),
        }
    }
}

/// This machine's (pod's) name, as upstream's `service.instance.id`.
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}
