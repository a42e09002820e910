//! OpenTelemetry export (`[otel] endpoint`, off by default): one trace per task over
//! OTLP/HTTP (protobuf), following the OpenTelemetry GenAI semantic conventions, built from
//! the rows each step commits ([`spans`]). Spans are made after a step's write committed,
//! from the recorded times, so a trace shows what the tables hold and nothing that was
//! rolled back.
//!
//! The trace id is the task id (both are 128 bits) and the task's span id is derived from it,
//! so every worker that runs a part of a task (a resume after a crash, a pause, an approval)
//! adds its recursions to the same trace under the same task span, which the worker that
//! ends the task exports last. A recursion's span id comes from its `trace_id` (recorded as
//! the attribute `agentd.trace_id`), so SQL rows and spans join both ways.

pub mod spans;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use serde::Deserialize;

pub use spans::{StepSpans, TaskSpan};

/// The `[otel]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct OtelSettings {
    /// OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:6006/v1/traces`; empty = off.
    pub endpoint: String,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Extra HTTP headers of every export (an API key of a hosted collector).
    pub headers: HashMap<String, String>,
    /// Spans are sent in batches at least this often, in milliseconds.
    pub export_interval_ms: u64,
    /// Time one export request may take, in milliseconds.
    pub timeout_ms: u64,
}

impl Default for OtelSettings {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            service_name: "agentd".into(),
            headers: HashMap::new(),
            export_interval_ms: 2000,
            timeout_ms: 10_000,
        }
    }
}

/// Where spans go: nowhere when export is off. Cheap to clone.
#[derive(Clone, Default)]
pub struct Telemetry {
    tracer: Option<SdkTracer>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("enabled", &self.tracer.is_some())
            .finish()
    }
}

/// The running exporter; [`Exporter::shutdown`] sends what is left.
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Off.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// Starts the exporter when `settings.endpoint` is set.
    pub fn start(settings: &OtelSettings) -> anyhow::Result<(Self, Option<Exporter>)> {
        let endpoint = settings.endpoint.trim();
        if endpoint.is_empty() {
            return Ok((Self::disabled(), None));
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_millis(settings.timeout_ms))
            .with_headers(settings.headers.clone())
            .build()
            .with_context(|| format!("the OTLP exporter for {endpoint}"))?;
        let batch = BatchConfigBuilder::default()
            .with_scheduled_delay(Duration::from_millis(settings.export_interval_ms.max(10)))
            .with_max_queue_size(65_536)
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build();
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("agentd");
        tracing::info!(endpoint, "exporting one OpenTelemetry trace per task");
        Ok((
            Self {
                tracer: Some(tracer),
            },
            Some(Exporter { provider }),
        ))
    }

    /// Whether spans are exported.
    pub fn enabled(&self) -> bool {
        self.tracer.is_some()
    }

    /// The spans of a step about to be written, to export once it committed; `None` when
    /// export is off.
    pub fn step(
        &self,
        task: &TaskSpan,
        write: &crate::store::step::StepWrite,
    ) -> Option<StepSpans> {
        let tracer = self.tracer.clone()?;
        Some(StepSpans::new(tracer, task, write))
    }
}

impl Exporter {
    /// Exports the spans still queued and stops (blocking; call it off the runtime).
    pub fn shutdown(self) {
        if let Err(err) = self.provider.shutdown() {
            tracing::warn!(error = %err, "the OpenTelemetry exporter did not shut down cleanly");
        }
    }
}
