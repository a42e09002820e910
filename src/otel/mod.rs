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
//!
//! Where spans go comes from `[otel]` or OpenTelemetry's standard variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, ..., see [`target`]); agentd's own keys win.

pub mod spans;
pub mod target;

use std::collections::BTreeMap;
use std::time::Duration;

pub use crate::config::OtelSettings;
use anyhow::Context as _;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
pub use spans::{StepSpans, TaskSpan};
pub use target::ExportTarget;

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

    /// Starts the exporter when `[otel]` or the standard variables name an endpoint.
    pub fn start(settings: &OtelSettings) -> anyhow::Result<(Self, Option<Exporter>)> {
        match target::resolve(settings, |name| std::env::var(name).ok()) {
            Some(target) => Self::start_to(settings, &target),
            None => Ok((Self::disabled(), None)),
        }
    }

    /// Starts exporting to `target` (batching and timeout from `settings`).
    pub fn start_to(
        settings: &OtelSettings,
        target: &ExportTarget,
    ) -> anyhow::Result<(Self, Option<Exporter>)> {
        for warning in &target.warnings {
            tracing::warn!("OpenTelemetry: {warning}");
        }
        let endpoint = target.endpoint.as_str();
        let timeout = Duration::from_millis(settings.timeout_ms);
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(HeadersFirst::new(timeout, &target.headers)?)
            .with_endpoint(endpoint)
            .with_timeout(timeout)
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
            .with_service_name(target.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("agentd");
        tracing::info!(endpoint, service_name = %target.service_name,
            "exporting one OpenTelemetry trace per task");
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

/// The exporter's HTTP client: the resolved headers are set on every request last, so that
/// they win over what the OTLP library adds from `OTEL_EXPORTER_OTLP_HEADERS` by itself.
#[derive(Debug)]
struct HeadersFirst {
    client: reqwest::blocking::Client,
    headers: reqwest::header::HeaderMap,
}

impl HeadersFirst {
    fn new(timeout: Duration, headers: &BTreeMap<String, String>) -> anyhow::Result<Self> {
        let mut map = reqwest::header::HeaderMap::new();
        for (name, value) in headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .with_context(|| format!("[otel] headers: {name:?} is not a header name"))?;
            let value = reqwest::header::HeaderValue::from_str(value)
                .with_context(|| format!("[otel] headers: the value of {name} is not valid"))?;
            map.insert(name, value);
        }
        // A blocking client owns a runtime of its own: it is built (and its exports run)
        // off the worker's runtime, as the OTLP library does with its default client.
        let client = std::thread::spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .build()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("building the OTLP HTTP client panicked"))?
        .context("building the OTLP HTTP client")?;
        Ok(Self {
            client,
            headers: map,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for HeadersFirst {
    async fn send_bytes(&self, mut request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        for (name, value) in &self.headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        self.client.send_bytes(request).await
    }
}
