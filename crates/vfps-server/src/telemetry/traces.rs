//! The OpenTelemetry pipeline: a parent-based sampler over upstream's root
//! sampler, the SDK's batching span processor and the OTLP/gRPC exporter.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::{
    trace::{BatchSpanProcessor, SpanProcessor},
    Resource,
};
use vfps_store::trace::{RootSampler as Sampler, Tracer};

use super::{otlp, spans::Exporting};
use crate::config::{RootSampler, Tracing};

/// The spans' instrumentation scope.
const SCOPE: &str = "vfps";

/// The batch processor with its exporter, and the root sampler; flushed and
/// stopped on shutdown.
pub(super) struct Pipeline {
    /// Queues finished spans and exports them in batches (`OTEL_BSP_*`);
    /// shutting it down exports what is still queued.
    processor: Arc<BatchSpanProcessor>,
    sampler: Sampler,
}

impl Pipeline {
    /// Builds the exporter (its channel connects lazily, so a collector that is
    /// not up yet is no start-up error). Must run inside the Tokio runtime.
    pub(super) fn new(settings: &Tracing) -> anyhow::Result<Self> {
        let exporter = otlp::Exporter::new(settings).with_context(|| {
            format!(
                "cannot set up the OTLP exporter to {}",
                settings.otlp_endpoint
            )
        })?;
        let sampler = match settings.root_sampler {
            RootSampler::AlwaysOn => Sampler::AlwaysOn,
            RootSampler::AlwaysOff => Sampler::AlwaysOff,
            RootSampler::TraceIdRatioBased => Sampler::ratio(settings.sampling_probability),
        };
        let mut resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        if let Some(host) = host_name() {
            resource = resource.with_attribute(KeyValue::new("service.instance.id", host));
        }
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        processor.set_resource(&resource.build());
        Ok(Self {
            processor: Arc::new(processor),
            sampler,
        })
    }

    /// The tracer whose spans end in this pipeline, under a parent-based
    /// sampler: a call with the caller's context follows its decision, the
    /// root sampler decides for the others, and every span below a call
    /// follows the call's.
    pub(super) fn tracer(&self) -> Tracer {
        Tracer::new(
            self.sampler,
            Exporting::new(
                Arc::clone(&self.processor),
                InstrumentationScope::builder(SCOPE).build(),
            ),
        )
    }

    pub(super) fn flush(&self) {
        if let Err(e) = self.processor.force_flush() {
            tracing::warn!(error = %e, "cannot export spans");
        }
    }

    /// Stops a pipeline that never got a span.
    pub(super) fn discard(self) {
        let _ = self.processor.shutdown_with_timeout(Duration::from_secs(1));
    }

    pub(super) fn shutdown(self, timeout: Duration) {
        match self.processor.shutdown_with_timeout(timeout) {
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
